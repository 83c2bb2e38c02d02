"""The PromQL the adapter sends for a request, as its providers plan it (the production path, not a copy of it),
for the tests of query rendering: one rule's binding in a catalogue of its own, objects named by a resolver."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

from adapter.api.paths import MetricPath
from adapter.prometheus.client import PrometheusClient, PrometheusConfig
from adapter.provider.custom import CustomMetrics
from adapter.provider.engine import Engine
from adapter.provider.external import ExternalMetrics
from adapter.rules import Binding, Catalogue, GroupResource
from adapter.rules.selectors import Requirement

_NO_PROMETHEUS = PrometheusClient(PrometheusConfig("http://prometheus.invalid"))  # planning asks it nothing


class _Named:
    """A resolver that selects ``names`` (None: every object with series, as without a Kubernetes API)."""

    def __init__(self, names: Sequence[str] | None) -> None:
        self._names = names

    async def names(self, group_resource: GroupResource, namespace: str | None,
                    selector: tuple[Requirement, ...]) -> list[str] | None:
        return None if self._names is None else list(self._names)

    async def namespaced_names(self, group_resource: GroupResource,
                               selector: tuple[Requirement, ...]) -> list[tuple[str, str]] | None:
        return None

    async def labels(self, group_resource: GroupResource, namespace: str | None,
                     names: list[str]) -> Mapping[str, Mapping[str, str]]:
        return {}


def custom_promql(binding: Binding, *, namespace: str | None, names: Sequence[str] | None,
                  metric_selector: str = "") -> str:
    """What ``GET .../namespaces/<namespace>/<resource>/*/<metric>?metricLabelSelector=...`` sends when the label
    selector selects ``names``; an ``ApiError`` where the API refuses the request."""
    assert binding.group_resource is not None
    catalogue = Catalogue({}, {(binding.group_resource, binding.metric): (binding,)}, {})
    engine = Engine(_NO_PROMETHEUS, lambda: catalogue, _Named(names))
    path = MetricPath(namespace, str(binding.group_resource), "*", binding.metric)
    request = asyncio.run(CustomMetrics(engine).plan(path, "", metric_selector))
    [query] = request.plan.queries
    return query


def external_promql(binding: Binding, *, namespace: str, metric_selector: str = "") -> str:
    """What ``GET /apis/external.metrics.k8s.io/v1beta1/namespaces/<namespace>/<metric>?labelSelector=...`` sends."""
    catalogue = Catalogue({}, {}, {binding.metric: (binding,)})
    engine = Engine(_NO_PROMETHEUS, lambda: catalogue)
    [query] = ExternalMetrics(engine).plan(namespace, binding.metric, metric_selector).queries
    return query
