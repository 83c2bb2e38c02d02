"""Reading a Pods metric from custom.metrics.k8s.io the way the HPA controller's client does.

Version choice (``kubernetes/metrics`` discovery): the group's ``preferredVersion`` when it is a known version,
else the first known entry of ``versions``; rediscovered every sync period, as the controller invalidates its
cache at that cadence. The request is ``GET /apis/custom.metrics.k8s.io/{v}/namespaces/{ns}/pods/%2A/{metric}
?labelSelector={selector}``; errors read like the controller's (``unable to fetch metrics from custom metrics
API: <Status message>``), and an empty list is an error, as it is there.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import httpx

__all__ = ["GROUP", "KNOWN_VERSIONS", "CustomMetricsClient", "MetricsApiError", "choose_version",
           "pods_metric_path"]

GROUP = "custom.metrics.k8s.io"
KNOWN_VERSIONS = ("v1beta2", "v1beta1")


class MetricsApiError(Exception):
    """A failed discovery or metrics request, worded as the HPA controller reports it."""


def choose_version(group_list: Mapping[str, Any]) -> str:
    """The version the controller uses, from an ``APIGroupList`` (``GET /apis``)."""
    group = next((g for g in group_list.get("groups") or () if g.get("name") == GROUP), None)
    if group is None:
        raise MetricsApiError(f"no custom metrics API ({GROUP}) registered")
    preferred = (group.get("preferredVersion") or {}).get("version")
    if preferred in KNOWN_VERSIONS:
        return str(preferred)
    for entry in group.get("versions") or ():
        if entry.get("version") in KNOWN_VERSIONS:
            return str(entry["version"])
    raise MetricsApiError("no known available metric versions found")


def pods_metric_path(version: str, namespace: str, metric: str) -> str:
    return (f"/apis/{GROUP}/{version}/namespaces/{quote(namespace, safe='')}/pods/%2A/"
            f"{quote(metric, safe='')}")


def _status_message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and body.get("kind") == "Status" and body.get("message"):
        return str(body["message"])
    text = " ".join(response.text.split())[:200]
    return f"the server responded with HTTP {response.status_code}: {text}"


class CustomMetricsClient:
    """HTTPS client for one custom-metrics API server (``verify``: a CA bundle path or an SSL context)."""

    def __init__(self, base_url: str, *, verify: str | ssl.SSLContext | bool = True, timeout_s: float = 5.0,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        if isinstance(verify, str):
            verify = ssl.create_default_context(cafile=verify)
        self._client = httpx.AsyncClient(base_url=base_url, verify=verify, timeout=timeout_s, trust_env=False,
                                         transport=transport)

    async def aclose(self) -> None:
        await self._client.aclose()

    async def preferred_version(self) -> str:
        try:
            response = await self._client.get("/apis")
        except httpx.HTTPError as exc:
            raise MetricsApiError(f"unable to discover {GROUP}: {type(exc).__name__}: {exc}") from None
        if response.status_code != 200:
            raise MetricsApiError(f"unable to discover {GROUP}: {_status_message(response)}")
        return choose_version(response.json())

    async def pods_metric(self, version: str, namespace: str, metric: str, selector: str) -> dict[str, str]:
        """Quantity strings by pod name for the pods matching ``selector``."""
        path = pods_metric_path(version, namespace, metric)
        try:
            response = await self._client.get(path, params={"labelSelector": selector})
        except httpx.HTTPError as exc:
            raise MetricsApiError(f"unable to fetch metrics from custom metrics API: {type(exc).__name__}: "
                                  f"{exc}") from None
        if response.status_code != 200:
            raise MetricsApiError(f"unable to fetch metrics from custom metrics API: {_status_message(response)}")
        items = response.json().get("items") or []
        values = {item["describedObject"]["name"]: str(item["value"]) for item in items
                  if (item.get("describedObject") or {}).get("kind", "Pod") == "Pod"}
        if not values:
            raise MetricsApiError("no metrics returned from custom metrics API")
        return values
