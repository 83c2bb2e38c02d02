"""The keys a rules file may hold at each level: prometheus-adapter's config types (``pkg/config/config.go``:
``MetricsDiscoveryConfig``, ``DiscoveryRule``, ``ResourceMapping``, ``GroupResource``, ``NameMapping``,
``RegexFilter``, ``ResourceRules``, ``ResourceRule``) plus our two extensions, ``include`` and ``missingValue``.

prometheus-adapter reads the file with ``yaml.UnmarshalStrict`` (``pkg/config/loader.go``): a key is valid only at
the level whose type declares it, spelt exactly so.
"""

from __future__ import annotations

from collections.abc import Mapping

TOP = ("rules", "externalRules", "resourceRules", "include")
RULE = ("seriesQuery", "seriesFilters", "resources", "name", "metricsQuery", "missingValue")
RESOURCES = ("overrides", "template", "namespaced")
OVERRIDE = ("group", "resource")
NAME = ("matches", "as")
FILTER = ("is", "isNot")
RESOURCE_RULES = ("cpu", "memory", "window")
RESOURCE_RULE = ("containerQuery", "nodeQuery", "resources", "containerLabel")

LEVELS: Mapping[tuple[str, ...], str] = {
    TOP: "the top level",
    RULE: "a rule",
    RESOURCES: "resources",
    OVERRIDE: "an override",
    NAME: "name",
    FILTER: "a series filter",
    RESOURCE_RULES: "resourceRules",
    RESOURCE_RULE: "a resource rule",
}
"""Each level's keys, by what a message calls the level."""
