"""Loading a rules file and resolving its ``include`` list of built-in rule sets."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import partial
from pathlib import Path

from adapter.presets.capacity import CAPACITY_PRESET, capacity_preset
from adapter.presets.gateway import GATEWAY_PRESET, gateway_preset
from adapter.presets.gpu import GPU_PRESETS, gpu_presets
from adapter.presets.inference import INFERENCE_PRESETS, inference_preset
from adapter.rules.config import DiscoveryRule, RulesConfig, parse_document
from adapter.rules.errors import RulesError
from adapter.rules.resources import BUILTIN, ResourceTable

INCLUDES: Mapping[str, Callable[[ResourceTable], RulesConfig]] = {
    GPU_PRESETS: gpu_presets, GATEWAY_PRESET: gateway_preset, CAPACITY_PRESET: capacity_preset,
    **{name: partial(inference_preset, name) for name in INFERENCE_PRESETS}}
"""Built-in rule sets by name, each parsed with the resource table it is given."""


def load_rules(path: str | os.PathLike[str], table: ResourceTable = BUILTIN) -> RulesConfig:
    """Read and parse a rules file; every problem is a one-line ``RulesError`` naming the file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RulesError(f"cannot read the rules file: {exc}", source=str(path)) from None
    return parse_rules(text, str(path), table)


def parse_rules(text: str, source: str, table: ResourceTable = BUILTIN) -> RulesConfig:
    """Parse rules text, resource names resolved with ``table``; included rule sets are appended after the file's
    own rules, which therefore win."""
    config = parse_document(text, source, table)
    rules, external = list(config.rules), list(config.external_rules)
    for i, name in enumerate(config.include):
        if name not in INCLUDES:
            known = ", ".join(sorted(INCLUDES))
            raise RulesError(f"unknown include {name!r} (known: {known})", source=source, path=f"include[{i}]")
        if name in config.include[:i]:
            continue
        included = INCLUDES[name](table)
        rules.extend(included.rules)
        external.extend(included.external_rules)
    return replace(config, rules=tuple(rules), external_rules=tuple(external))


def rule_label(rule: DiscoveryRule) -> str:
    """A rule's name in logs and self-metrics: its position in the rules file (``rules[3]``, ``externalRules[0]``);
    rules from a built-in set say where they come from (``gpu-presets:rules[3]``)."""
    return f"{rule.source}:{rule.where}" if rule.source in INCLUDES else rule.where
