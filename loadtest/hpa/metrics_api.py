"""Reading Pods, Object and External metrics the way the HPA controller's clients do.

Version choice (``kubernetes/metrics`` discovery): the group's ``preferredVersion`` when it is a known version,
else the first known entry of ``versions``; rediscovered every sync period, as the controller invalidates its
cache at that cadence. The requests (spec/k8s-metrics-api.md §5.2):

- Pods: ``GET /apis/custom.metrics.k8s.io/{v}/namespaces/{ns}/pods/%2A/{metric}?labelSelector={selector}``; an
  empty list is an error, as it is there.
- Object: ``GET /apis/custom.metrics.k8s.io/{v}/namespaces/{ns}/{resource}/{name}/{metric}``, or
  ``.../namespaces/{ns}/metrics/{metric}`` for the HPA's own Namespace; exactly one value is expected.
- External: ``GET /apis/external.metrics.k8s.io/v1beta1/namespaces/{ns}/{metric}?labelSelector={metric selector}``
  (always v1beta1); every item's value is returned, the controller sums them.

Errors read like the controller's (``unable to fetch metrics from custom metrics API: <Status message>``).
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import httpx

__all__ = ["EXTERNAL_GROUP_VERSION", "GROUP", "KNOWN_VERSIONS", "CustomMetricsClient", "MetricsApiError",
           "choose_version", "external_metric_path", "object_metric_path", "pods_metric_path"]

GROUP = "custom.metrics.k8s.io"
KNOWN_VERSIONS = ("v1beta2", "v1beta1")
EXTERNAL_GROUP_VERSION = "external.metrics.k8s.io/v1beta1"


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


def object_metric_path(version: str, namespace: str, resource: str, name: str, metric: str) -> str:
    """``resource`` is the described object's plural resource with its group (``services``,
    ``deployments.apps``), or ``namespaces`` for the HPA's own namespace (whose root-scoped path ignores ``name``)."""
    ns = quote(namespace, safe="")
    if resource == "namespaces":
        return f"/apis/{GROUP}/{version}/namespaces/{ns}/metrics/{quote(metric, safe='')}"
    return (f"/apis/{GROUP}/{version}/namespaces/{ns}/{quote(resource, safe='')}/{quote(name, safe='')}/"
            f"{quote(metric, safe='')}")


def external_metric_path(namespace: str, metric: str) -> str:
    return f"/apis/{EXTERNAL_GROUP_VERSION}/namespaces/{quote(namespace, safe='')}/{quote(metric, safe='')}"


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
    """HTTPS client for the metrics APIs behind one base URL (``verify``: a CA bundle path or an SSL context): the
    aggregator in a cluster, where both groups are, or the adapter itself, which serves both."""

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

    async def object_metric(self, version: str, namespace: str, resource: str, name: str, metric: str,
                            metric_selector: str = "") -> str:
        """The Quantity string of one object's metric."""
        params = {"metricLabelSelector": metric_selector} if metric_selector else None
        body = await self._get(object_metric_path(version, namespace, resource, name, metric), params,
                               "custom metrics API")
        items = body.get("items") or []
        if len(items) != 1:
            raise MetricsApiError(f"unable to fetch metrics from custom metrics API: expected exactly one value for "
                                  f"{resource}/{name}, got {len(items)}")
        return str(items[0]["value"])

    async def external_metric(self, namespace: str, metric: str, selector: str = "") -> list[str]:
        """The Quantity strings of every series the external metric's selector matched (possibly none)."""
        params = {"labelSelector": selector} if selector else None
        body = await self._get(external_metric_path(namespace, metric), params, "external metrics API")
        return [str(item["value"]) for item in body.get("items") or []]

    async def _get(self, path: str, params: dict[str, str] | None, api: str) -> dict[str, Any]:
        try:
            response = await self._client.get(path, params=params)
        except httpx.HTTPError as exc:
            raise MetricsApiError(f"unable to fetch metrics from {api}: {type(exc).__name__}: {exc}") from None
        if response.status_code != 200:
            raise MetricsApiError(f"unable to fetch metrics from {api}: {_status_message(response)}")
        body = response.json()
        return body if isinstance(body, dict) else {}
