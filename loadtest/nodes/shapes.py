"""The shape of the GPU capacity: a Karpenter v1 NodePool, or Cluster Autoscaler node groups, read from the
manifests the project ships (``hpa-examples/karpenter/nodepool-gpu.yaml``, the chart's ``karpenter.nodePool``
values, ``hpa-examples/cluster-autoscaler/eksctl-gpu-nodegroups.yaml``).

What is read, and what is not:

* NodePool (karpenter.sh/v1): the instance types its ``spec.template.spec.requirements`` allow, each with its GPU
  count from the instance-type table. Karpenter ANDs the requirements, and so does this: a type must be of a
  ``karpenter.k8s.aws/instance-family`` ``In`` list, be in a ``node.kubernetes.io/instance-type`` ``In`` list, and
  pass a ``karpenter.k8s.aws/instance-gpu-count`` ``Gt`` bound, for each such requirement there is (at least one
  of the first two is needed). Also ``spec.limits["nvidia.com/gpu"]``; ``spec.disruption.consolidationPolicy`` and
  ``consolidateAfter`` (a duration or ``Never``); ``spec.disruption.budgets`` (:class:`Budget`: ``nodes`` a count
  or a percentage, ``reasons``; absent, the CRD's default, one budget of ``nodes: "10%"``; a budget with a
  ``schedule`` is active only in its cron window, and the demo's clock has no date, so the model leaves such
  budgets out). Other requirements (capacity type, architecture) narrow nothing here: every instance type of the
  table is amd64 and offered on demand.
* The chart's ``karpenter.nodePool`` values: ``instanceFamilies``, and ``instanceTypes`` when set (the chart renders
  both as requirements, and refuses a pinned type of none of the families, as this does), ``limits``,
  ``consolidationPolicy`` and ``consolidateAfter``; the chart renders no budgets, so Karpenter's default holds.
* eksctl managed node groups: ``instanceType``, ``minSize``, ``maxSize``, and whether the nodes carry the
  accelerator label Cluster Autoscaler's GPU handling looks for (``k8s.amazonaws.com/accelerator`` on AWS).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from clikit.durations import DurationError, parse_go_duration
from clikit.yaml_file import load_yaml, load_yaml_documents
from loadtest.nodes.instances import REPO, InstanceType, InstanceTypeError, load_instance_types, relative, resolve

__all__ = ["ACCELERATOR_LABEL", "CHART_VALUES", "CONSOLIDATION_POLICIES", "DEFAULT_BUDGETS", "DISRUPTION_REASONS",
           "EKSCTL_NODE_GROUPS", "KARPENTER_NODEPOOL", "Budget", "NodeGroup", "NodePool", "ShapeError",
           "load_node_groups", "load_nodepool", "nodepool_from_values"]

KARPENTER_NODEPOOL = REPO / "hpa-examples" / "karpenter" / "nodepool-gpu.yaml"
EKSCTL_NODE_GROUPS = REPO / "hpa-examples" / "cluster-autoscaler" / "eksctl-gpu-nodegroups.yaml"
CHART_VALUES = REPO / "charts" / "gpu-autoscaler" / "values.yaml"
ACCELERATOR_LABEL = "k8s.amazonaws.com/accelerator"
"""The label Cluster Autoscaler's AWS provider names as its GPU label (``GPULabel()``): a node carrying it whose
``nvidia.com/gpu`` is not allocatable yet is taken as still starting, not as a node without GPUs."""


class ShapeError(ValueError):
    """One line naming the file, the field and the value."""


DISRUPTION_REASONS = ("Underutilized", "Empty", "Drifted")
"""A budget's ``reasons`` (``pkg/apis/v1/nodepool.go`` ``DisruptionReason``)."""
_BUDGET_NODES = re.compile(r"^((100|[0-9]{1,2})%|[0-9]+)$")  # the CRD's pattern for Budget.nodes


@dataclass(frozen=True)
class Budget:
    """A NodePool disruption budget (karpenter.sh/v1 ``Budget``): at most ``nodes`` of the pool's nodes disrupted at
    once, for the ``reasons`` given (``None``: every reason)."""

    nodes: str = "10%"
    reasons: tuple[str, ...] | None = None

    def allowed(self, num_nodes: int) -> int:
        """``GetAllowedDisruptions``: a count as written, a percentage of ``num_nodes`` rounded up (``intstr``
        ``GetScaledValueFromIntOrPercent`` with roundUp, as a PDB's maxUnavailable), so 10 % of 1 to 10 nodes is 1."""
        if self.nodes.endswith("%"):
            return math.ceil(int(self.nodes[:-1]) * num_nodes / 100)
        return int(self.nodes)

    def applies(self, reason: str) -> bool:
        return self.reasons is None or reason in self.reasons


DEFAULT_BUDGETS = (Budget("10%"),)
"""``spec.disruption.budgets`` when absent: the CRD's default (``+kubebuilder:default:={{nodes: "10%"}}``)."""


@dataclass(frozen=True)
class NodePool:
    name: str
    instance_types: tuple[InstanceType, ...]
    gpu_limit: int | None = None
    consolidation_policy: str = "WhenEmptyOrUnderutilized"
    consolidate_after_s: float | None = 0.0  # None: Never
    budgets: tuple[Budget, ...] = field(default=DEFAULT_BUDGETS)

    def allowed_disruptions(self, num_nodes: int, reason: str) -> int:
        """``GetAllowedDisruptionsByReason``: the smallest of the budgets that apply to ``reason`` (no budget: no
        limit)."""
        return min((b.allowed(num_nodes) for b in self.budgets if b.applies(reason)), default=2**31 - 1)

    def cheapest(self, fitting: tuple[InstanceType, ...]) -> InstanceType:
        """The instance type launched for a NodeClaim whose options are ``fitting``. Karpenter launches the cheapest
        option (on-demand CreateFleet with the ``lowest-price`` strategy, aws/karpenter-provider-aws
        ``pkg/providers/instance/types.go``); the table has no prices, so this takes the fewest GPUs, then the
        NodePool's order of families and sizes (cheapest first within a family, as on AWS's price list)."""
        order = {t.name: i for i, t in enumerate(self.instance_types)}
        return min(fitting, key=lambda t: (t.gpus, order[t.name]))


@dataclass(frozen=True)
class NodeGroup:
    name: str
    instance: InstanceType
    min_size: int = 0
    max_size: int = 1
    gpu_label: bool = True


def _documents(path: Path) -> list[dict[str, Any]]:
    """The mapping documents of a multi-document manifest; every error one line naming the file."""
    return [d for d in load_yaml_documents(str(path), "the NodePool manifest", ShapeError) if isinstance(d, dict)]


def load_nodepool(path: Path = KARPENTER_NODEPOOL, table: Mapping[str, InstanceType] | None = None) -> NodePool:
    """The first ``karpenter.sh/v1`` NodePool of a manifest file."""
    where = relative(path)
    pool = next((d for d in _documents(path) if d.get("kind") == "NodePool"), None)
    if pool is None:
        raise ShapeError(f"{where}: no NodePool in it")
    spec = pool.get("spec") or {}
    template = (spec.get("template") or {}).get("spec") or {}
    families: list[str] | None = None
    types: list[str] | None = None
    min_gpus = 1
    for req in template.get("requirements") or ():
        key, op, values = req.get("key"), req.get("operator"), [str(v) for v in req.get("values") or ()]
        if key == "karpenter.k8s.aws/instance-family" and op == "In":
            families = values if families is None else [f for f in families if f in values]
        elif key == "node.kubernetes.io/instance-type" and op == "In":
            types = values if types is None else [t for t in types if t in values]
        elif key == "karpenter.k8s.aws/instance-gpu-count" and op == "Gt" and values:
            min_gpus = max(min_gpus, int(values[0]) + 1)
    field = "spec.template.spec.requirements"
    disruption = spec.get("disruption") or {}
    found = _pool(where, (pool.get("metadata") or {}).get("name", "gpu"), families, types, min_gpus,
                  (spec.get("limits") or {}).get("nvidia.com/gpu"), disruption.get("consolidationPolicy"),
                  disruption.get("consolidateAfter"), table, (field, field), pinned_in_families=False)
    if "budgets" not in disruption or disruption["budgets"] is None:
        return found
    return replace(found, budgets=_budgets(where, disruption["budgets"]))


def _budgets(where: str, items: Any) -> tuple[Budget, ...]:
    """``spec.disruption.budgets``, checked as the CRD checks them; those with a ``schedule`` left out (see the
    module docstring)."""
    if not isinstance(items, list):
        raise ShapeError(f"{where}: spec.disruption.budgets: expected a list, got {items!r}")
    budgets = []
    for i, item in enumerate(items):
        at = f"{where}: spec.disruption.budgets[{i}]"
        nodes = str((item or {}).get("nodes", "10%")) if isinstance(item, dict) else None
        if nodes is None or not _BUDGET_NODES.match(nodes):
            raise ShapeError(f"{at}.nodes: expected a count or a percentage such as \"10%\", got {nodes!r}")
        reasons = item.get("reasons")
        if reasons is not None and (not isinstance(reasons, list) or any(r not in DISRUPTION_REASONS
                                                                         for r in reasons)):
            raise ShapeError(f"{at}.reasons: expected a list of {', '.join(DISRUPTION_REASONS)}, got {reasons!r}")
        if item.get("schedule") is None:
            budgets.append(Budget(nodes, None if reasons is None else tuple(reasons)))
    return tuple(budgets)


def nodepool_from_values(path: Path = CHART_VALUES, table: Mapping[str, InstanceType] | None = None) -> NodePool:
    """The NodePool the chart renders from its values (``karpenter.nodePool``)."""
    where = relative(path)
    values = load_yaml(str(path), "the chart's values", ShapeError)
    pool = ((values if isinstance(values, dict) else {}).get("karpenter") or {}).get("nodePool") or {}
    return _pool(where, pool.get("name", "gpu"), [str(f) for f in pool.get("instanceFamilies") or ()],
                 [str(t) for t in pool.get("instanceTypes") or ()] or None, 1,
                 (pool.get("limits") or {}).get("nvidia.com/gpu"), pool.get("consolidationPolicy"),
                 pool.get("consolidateAfter"), table,
                 ("karpenter.nodePool.instanceFamilies", "karpenter.nodePool.instanceTypes"), pinned_in_families=True)


CONSOLIDATION_POLICIES = ("WhenEmpty", "WhenEmptyOrUnderutilized", "Balanced")
"""``consolidationPolicy``'s values in Karpenter v1.14.0 (``pkg/apis/v1/nodepool.go``; the chart's values ask for
Karpenter 1.14+); :mod:`loadtest.nodes.karpenter` says how the model treats each."""


def _pool(where: str, name: str, families: list[str] | None, types: list[str] | None, min_gpus: int, limit: Any,
          policy: Any, after: Any, table: Mapping[str, InstanceType] | None, fields: tuple[str, str], *,
          pinned_in_families: bool) -> NodePool:
    """``pinned_in_families``: a pinned type of none of the families is an error (the chart's own check), not
    merely a type the NodePool never launches."""
    table = load_instance_types() if table is None else table
    try:
        by_family = None if families is None else resolve(families, table, families=True,
                                                          where=f"{where}: {fields[0]}")
        pinned = None if types is None else resolve(types, table, families=False, where=f"{where}: {fields[1]}")
    except InstanceTypeError as exc:
        raise ShapeError(str(exc)) from None
    if by_family is not None and pinned is not None:
        if pinned_in_families:
            stray = next((t for t in pinned if t not in by_family), None)
            if stray is not None:
                raise ShapeError(f"{where}: {fields[1]}: {stray.name!r} is of none of {fields[0]} "
                                 f"({', '.join(families or ())}), so the NodePool could never launch it")
        chosen = tuple(t for t in by_family if t in pinned)  # the requirements are ANDed
    else:
        chosen = by_family if by_family is not None else pinned or ()
    chosen = tuple(t for t in chosen if t.gpus >= min_gpus)
    if not chosen:
        field = fields[0] if fields[0] == fields[1] else f"{fields[0]} and {fields[1]}"
        raise ShapeError(f"{where}: {field}: selects no GPU instance type")
    gpu_limit = None
    if limit is not None:
        try:
            gpu_limit = int(str(limit))
        except ValueError:
            raise ShapeError(f"{where}: limits.nvidia.com/gpu: expected a whole number of GPUs, got {limit!r}"
                             ) from None
    if policy is not None and policy not in CONSOLIDATION_POLICIES:
        raise ShapeError(f"{where}: disruption.consolidationPolicy: {policy!r} is not one of "
                         f"{', '.join(CONSOLIDATION_POLICIES)}")
    consolidate_after: float | None = 0.0
    if after == "Never":
        consolidate_after = None
    elif after is not None:
        try:
            consolidate_after = parse_go_duration(str(after), f"{where}: disruption.consolidateAfter")
        except DurationError as exc:
            raise ShapeError(str(exc)) from None
    return NodePool(name, chosen, gpu_limit, policy or "WhenEmptyOrUnderutilized", consolidate_after)


def load_node_groups(path: Path = EKSCTL_NODE_GROUPS, table: Mapping[str, InstanceType] | None = None,
                     ) -> tuple[NodeGroup, ...]:
    """The managed node groups of an eksctl ClusterConfig."""
    where = relative(path)
    table = load_instance_types() if table is None else table
    groups = []
    doc = load_yaml(str(path), "the eksctl ClusterConfig", ShapeError)
    doc = doc if isinstance(doc, dict) else {}
    for i, group in enumerate(doc.get("managedNodeGroups") or doc.get("nodeGroups") or ()):
        instance = str(group.get("instanceType"))
        if instance not in table:
            raise ShapeError(f"{where}: managedNodeGroups[{i}].instanceType: {instance!r} has no known GPU count")
        labels = group.get("labels") or {}
        groups.append(NodeGroup(str(group.get("name", f"group-{i}")), table[instance],
                                int(group.get("minSize", 0)), int(group.get("maxSize", 1)),
                                ACCELERATOR_LABEL in labels))
    if not groups:
        raise ShapeError(f"{where}: no managedNodeGroups in it")
    return tuple(groups)


