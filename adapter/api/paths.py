"""Parse custom.metrics.k8s.io request paths the way the Kubernetes apiserver's RequestInfo does (pure)."""

from __future__ import annotations

from dataclasses import dataclass, field

from adapter.api.status import ApiError, bad_request

VERSIONS = ("v1beta1", "v1beta2")


@dataclass(frozen=True)
class MetricPath:
    namespace: str | None  # None for root-scoped objects (including the Namespace object itself)
    resource: str  # lowercased group-resource as sent, e.g. "pods", "deployments.apps"
    name: str  # "*" for a selector (wildcard) request
    metric: str  # case kept
    namespace_metric: bool = field(default=False, compare=False)  # asked as namespaces/{ns}/metrics/{metric}

    @property
    def wildcard(self) -> bool:
        return self.name == "*"

    @property
    def route(self) -> str:
        """The request's route in the self-metrics (``adapter.server.selfmetrics.ROUTES``)."""
        if self.namespace_metric:
            return "custom_namespace"
        return "custom_selector" if self.wildcard else "custom_object"


def _segments(rest: str) -> list[str]:
    return [s for s in rest.split("/") if s != ""]


def parse_custom_path(rest: str) -> MetricPath | None:
    """``rest`` is what follows ``/apis/custom.metrics.k8s.io/<version>/``; None means the discovery list."""
    parts = [s.replace("%2A", "*").replace("%2a", "*") for s in _segments(rest)]
    if not parts:
        return None
    if parts[0] == "namespaces" and len(parts) > 2:
        namespace, rest_parts = parts[1], parts[2:]
        if len(rest_parts) == 2 and rest_parts[0] == "metrics":
            # namespaces/{ns}/metrics/{metric}: a metric describing the Namespace object itself
            return _checked(MetricPath(None, "namespaces", namespace, rest_parts[1], namespace_metric=True))
        if len(rest_parts) != 3:
            raise invalid_path()
        if namespace == "*":
            raise bad_request("cannot fetch metrics for multiple namespaces at once")
        return _checked(MetricPath(namespace, rest_parts[0].lower(), rest_parts[1], rest_parts[2]))
    if len(parts) != 3:
        raise invalid_path()
    return _checked(MetricPath(None, parts[0].lower(), parts[1], parts[2]))


def parse_external_path(rest: str) -> tuple[str, str] | None:
    """external.metrics.k8s.io: ``namespaces/{ns}/{metric}`` -> (namespace, metric); None for discovery."""
    parts = _segments(rest)
    if not parts:
        return None
    if len(parts) != 3 or parts[0] != "namespaces" or parts[1] in ("", "*"):
        raise invalid_path()
    return parts[1], parts[2]


def _checked(path: MetricPath) -> MetricPath:
    if path.metric == "*" or not path.resource or not path.name:
        raise invalid_path()
    return path


def invalid_path() -> ApiError:
    return bad_request("invalid request path")
