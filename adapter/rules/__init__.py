"""The rules engine: prometheus-adapter's rules file, discovery from series, and PromQL for a request (pure)."""

from adapter.rules.catalogue import Binding, Catalogue, MetricInfo, build_catalogue
from adapter.rules.config import DiscoveryRule, MissingValue, RulesConfig
from adapter.rules.errors import QueryError, RulesError
from adapter.rules.query import result_object_name
from adapter.rules.resources import (
    GroupResource,
    ResourceError,
    api_version,
    is_namespaced,
    kind,
    normalise_resource,
)

__all__ = [
    "Binding",
    "Catalogue",
    "DiscoveryRule",
    "GroupResource",
    "MetricInfo",
    "MissingValue",
    "QueryError",
    "ResourceError",
    "RulesConfig",
    "RulesError",
    "api_version",
    "build_catalogue",
    "is_namespaced",
    "kind",
    "normalise_resource",
    "result_object_name",
]
