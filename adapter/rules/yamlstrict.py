"""YAML loading as strict as Go's ``yaml.UnmarshalStrict``: a key given twice in one mapping is an error."""

from __future__ import annotations

from typing import Any

import yaml

_MERGE_TAG = "tag:yaml.org,2002:merge"


class _StrictLoader(yaml.SafeLoader):
    pass


def _mapping(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        if key_node.tag == _MERGE_TAG:
            continue  # keys merged in with `<<:` may be overridden
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        if not isinstance(key, str | int | float | bool | None):
            raise yaml.constructor.ConstructorError(None, None, f"line {line}: a mapping key must be a scalar")
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"line {line}: key {key!r} given twice")
        seen.add(key)
    return loader.construct_mapping(node, deep=True)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def load_strict(text: str) -> Any:
    """Parse one YAML document; ``yaml.YAMLError`` on syntax errors and duplicate keys."""
    return yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass: no arbitrary objects
