"""A rule's ``resources`` section: which Prometheus label names which Kubernetes group-resource."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from adapter.rules.resources import BUILTIN, GroupResource, ResourceTable, sanitise_group
from adapter.rules.template import Field, FieldKind, Template, Text

RESOURCE_TEMPLATE_FIELDS: Mapping[str, FieldKind] = {"Group": "string", "Resource": "string"}
_CAPTURE = {"Group": "(?P<group>.+?)", "Resource": "(?P<resource>.+?)"}


@dataclass(frozen=True)
class ResourceMapping:
    """``overrides`` (label → resource, in file order) win over labels recognised by the inverted ``template``.

    ``namespaced`` is ``resources.namespaced``; only external rules honour it (as in prometheus-adapter). ``table``
    is the resource table the rules were parsed with (what the template's labels can name).
    """

    overrides: tuple[tuple[str, GroupResource], ...] = ()
    template: Template | None = None
    namespaced: bool = True
    table: ResourceTable = field(default=BUILTIN, compare=False, repr=False)
    _label_regex: re.Pattern[str] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.template is not None:
            object.__setattr__(self, "_label_regex", invert(self.template))

    def resource_for_label(self, label: str) -> GroupResource | None:
        for name, gr in self.overrides:
            if name == label:
                return gr
        found = self._label_regex.fullmatch(label) if self._label_regex else None
        if found is None:
            return None
        return self.table.resource_for_label(found["resource"], found.groupdict().get("group"))

    def label_for_resource(self, gr: GroupResource) -> str | None:
        """The label a query uses for ``gr`` when no series says otherwise: an override, else the template."""
        for name, target in self.overrides:
            if target == gr:
                return name
        if self.template is None:
            return None
        return self.template.render({"Group": sanitise_group(gr.group), "Resource": self.table.singular(gr)}) or None

    def resources_for_labels(self, labels: Iterable[str]) -> dict[GroupResource, str]:
        """Each resource the labels name, with the label chosen for it: overrides in file order, then the
        template's matches in label order (prometheus-adapter leaves this choice to Go map order)."""
        present = frozenset(labels) - {"__name__"}
        chosen: dict[GroupResource, str] = {}
        overridden = {name for name, _ in self.overrides}
        for name, gr in self.overrides:
            if name in present:
                chosen.setdefault(gr, name)
        if self._label_regex is not None:
            for label in sorted(present - overridden):
                named = self.resource_for_label(label)
                if named is not None:
                    chosen.setdefault(named, label)
        return chosen


def invert(template: Template) -> re.Pattern[str]:
    """The template turned into a regex over label names, ``.Group``/``.Resource`` becoming named groups."""
    if "Resource" not in template.fields:
        raise ValueError("the template must use .Resource")
    parts = []
    for node in template.nodes:
        if isinstance(node, Text):
            parts.append(re.escape(node.text))
        elif isinstance(node, Field) and len(node.path) == 1:
            parts.append(_CAPTURE[node.path[0]])
        else:
            raise ValueError("the template may only use .Group and .Resource")
    try:
        return re.compile("".join(parts))
    except re.error as exc:
        raise ValueError(f"cannot turn the template into a label matcher: {exc.msg}") from None
