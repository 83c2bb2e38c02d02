"""Kubernetes group-resources: which names mean which resource, its kind, version and scope.

prometheus-adapter normalises resource names with a REST mapper built from the API's discovery documents. With
a Kubernetes API the adapter does the same (``adapter.kube.restmapper`` builds a :class:`ResourceTable` from
discovery, refreshed periodically, and the rules are parsed again with it, so a CRD installed later resolves);
without one, the built-in table of the common kinds (:data:`BUILTIN`) stands in. A parsed rules file carries the
table it was parsed with (``RulesConfig.table``), and everything that resolves a name for it asks that table.

A name may be given as plural, singular, kind or short name (``pods``, ``pod``, ``Pod``, ``po``), optionally
qualified by its group (``deployments.apps``, ``deployment.apps``). A qualified name outside the table is accepted
as written (lowercased), so custom resources work when their group is given. An unqualified name in several groups
means the first in the table's order (discovery order: the core group first), as client-go's discovery REST mapper
decides.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from adapter.rules.errors import RulesError

_RESOURCE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_GROUP = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


class ResourceError(RulesError):
    """A resource name that is empty or not a valid Kubernetes resource name."""


@dataclass(frozen=True, order=True)
class GroupResource:
    group: str
    resource: str

    def __str__(self) -> str:
        return f"{self.resource}.{self.group}" if self.group else self.resource


@dataclass(frozen=True)
class ResourceKind:
    plural: str
    singular: str
    kind: str
    group: str
    version: str
    namespaced: bool = True
    short: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()  # extra names a label may carry (prometheus-adapter's mapper accepts them)

    @property
    def group_resource(self) -> GroupResource:
        return GroupResource(self.group, self.plural)

    @property
    def names(self) -> tuple[str, ...]:
        """Every spelling that names this resource."""
        return (self.plural, self.singular, self.kind.lower(), *self.short, *self.aliases)


_ROOT = False
_TABLE = (
    ResourceKind("pods", "pod", "Pod", "", "v1", short=("po",)),
    ResourceKind("services", "service", "Service", "", "v1", short=("svc",)),
    ResourceKind("namespaces", "namespace", "Namespace", "", "v1", _ROOT, ("ns",)),
    ResourceKind("nodes", "node", "Node", "", "v1", _ROOT, ("no",)),
    ResourceKind("persistentvolumes", "persistentvolume", "PersistentVolume", "", "v1", _ROOT, ("pv",)),
    ResourceKind("persistentvolumeclaims", "persistentvolumeclaim", "PersistentVolumeClaim", "", "v1", short=("pvc",)),
    ResourceKind("endpoints", "endpoints", "Endpoints", "", "v1", short=("ep",), aliases=("endpoint",)),
    ResourceKind("configmaps", "configmap", "ConfigMap", "", "v1", short=("cm",)),
    ResourceKind("secrets", "secret", "Secret", "", "v1"),
    ResourceKind("serviceaccounts", "serviceaccount", "ServiceAccount", "", "v1", short=("sa",)),
    ResourceKind("replicationcontrollers", "replicationcontroller", "ReplicationController", "", "v1", short=("rc",)),
    ResourceKind("resourcequotas", "resourcequota", "ResourceQuota", "", "v1", short=("quota",)),
    ResourceKind("limitranges", "limitrange", "LimitRange", "", "v1", short=("limits",)),
    ResourceKind("events", "event", "Event", "", "v1", short=("ev",)),
    ResourceKind("deployments", "deployment", "Deployment", "apps", "v1", short=("deploy",)),
    ResourceKind("statefulsets", "statefulset", "StatefulSet", "apps", "v1", short=("sts",)),
    ResourceKind("replicasets", "replicaset", "ReplicaSet", "apps", "v1", short=("rs",)),
    ResourceKind("daemonsets", "daemonset", "DaemonSet", "apps", "v1", short=("ds",)),
    ResourceKind("controllerrevisions", "controllerrevision", "ControllerRevision", "apps", "v1"),
    ResourceKind("jobs", "job", "Job", "batch", "v1"),
    ResourceKind("cronjobs", "cronjob", "CronJob", "batch", "v1", short=("cj",)),
    ResourceKind(
        "horizontalpodautoscalers",
        "horizontalpodautoscaler",
        "HorizontalPodAutoscaler",
        "autoscaling",
        "v2",
        short=("hpa",),
    ),
    ResourceKind("ingresses", "ingress", "Ingress", "networking.k8s.io", "v1", short=("ing",)),
    ResourceKind("ingressclasses", "ingressclass", "IngressClass", "networking.k8s.io", "v1", _ROOT),
    ResourceKind("networkpolicies", "networkpolicy", "NetworkPolicy", "networking.k8s.io", "v1", short=("netpol",)),
    ResourceKind("endpointslices", "endpointslice", "EndpointSlice", "discovery.k8s.io", "v1"),
    ResourceKind("poddisruptionbudgets", "poddisruptionbudget", "PodDisruptionBudget", "policy", "v1", short=("pdb",)),
    ResourceKind("leases", "lease", "Lease", "coordination.k8s.io", "v1"),
    ResourceKind("storageclasses", "storageclass", "StorageClass", "storage.k8s.io", "v1", _ROOT, ("sc",)),
    ResourceKind("volumeattachments", "volumeattachment", "VolumeAttachment", "storage.k8s.io", "v1", _ROOT),
    ResourceKind("priorityclasses", "priorityclass", "PriorityClass", "scheduling.k8s.io", "v1", _ROOT, ("pc",)),
    ResourceKind("runtimeclasses", "runtimeclass", "RuntimeClass", "node.k8s.io", "v1", _ROOT),
    ResourceKind("clusterroles", "clusterrole", "ClusterRole", "rbac.authorization.k8s.io", "v1", _ROOT),
    ResourceKind("clusterrolebindings", "clusterrolebinding", "ClusterRoleBinding", "rbac.authorization.k8s.io", "v1",
                 _ROOT),
    ResourceKind("roles", "role", "Role", "rbac.authorization.k8s.io", "v1"),
    ResourceKind("rolebindings", "rolebinding", "RoleBinding", "rbac.authorization.k8s.io", "v1"),
    ResourceKind(
        "customresourcedefinitions",
        "customresourcedefinition",
        "CustomResourceDefinition",
        "apiextensions.k8s.io",
        "v1",
        _ROOT,
        ("crd", "crds"),
    ),
    # Gateway API Inference Extension's InferencePool (config/crd/bases of kubernetes-sigs/gateway-api-inference-
    # extension): v1 in inference.networking.k8s.io, and the v1alpha2 group it moved from. Custom resources: API
    # discovery describes them when the adapter has an API; these entries give their kind without one.
    ResourceKind("inferencepools", "inferencepool", "InferencePool", "inference.networking.k8s.io", "v1",
                 short=("infpool",)),
    ResourceKind("inferencepools", "inferencepool", "InferencePool", "inference.networking.x-k8s.io", "v1alpha2",
                 short=("xinfpool",)),
)



class ResourceTable:
    """The resources one source knows (built in, or the API's discovery), indexed every way a rule names them."""

    def __init__(self, kinds: Iterable[ResourceKind]) -> None:
        self.kinds = tuple(kinds)
        self.by_group_resource: dict[GroupResource, ResourceKind] = {}
        self.by_name: dict[tuple[str, str], ResourceKind] = {}
        self.by_bare_name: dict[str, ResourceKind] = {}
        # What a label can name through resources.template: resource names, not kinds or short names.
        self.by_label_name: dict[str, ResourceKind] = {}
        for k in self.kinds:  # the first of several (versions, groups) wins: callers list preferred ones first
            self.by_group_resource.setdefault(k.group_resource, k)
            for name in k.names:
                self.by_name.setdefault((name, k.group), k)
                self.by_bare_name.setdefault(name, k)
            for name in (k.plural, k.singular, *k.aliases):
                self.by_label_name.setdefault(name, k)

    def normalise(self, resource: str, group: str | None = None) -> GroupResource:
        """``pods``/``pod``/``Pod``/``po`` → ``pods``; ``deployment.apps`` → ``deployments.apps``.

        ``group`` qualifies ``resource`` when given separately (as in rule overrides); otherwise a qualified name
        is split at its first dot. Names outside the table are returned lowercased, as written.
        """
        text = resource.strip().lower()
        if group is None:
            text, dot, group_text = text.partition(".")
            if dot and not group_text:
                raise ResourceError(f"invalid resource name {resource!r}: empty API group")
        else:
            group_text = group.strip().lower()
        if not text:
            raise ResourceError("empty resource name")
        if not _RESOURCE.match(text):
            raise ResourceError(f"invalid resource name {resource!r}")
        if group_text and not _GROUP.match(group_text):
            raise ResourceError(f"invalid API group {group_text!r}")
        known = self.by_name.get((text, group_text)) if group_text else self.by_bare_name.get(text)
        return known.group_resource if known else GroupResource(group_text, text)

    def is_known(self, gr: GroupResource) -> bool:
        return gr in self.by_group_resource

    def resource_for_label(self, resource: str, sanitised_group: str | None) -> GroupResource | None:
        """The known resource a label names through ``resources.template``, or ``None``.

        ``sanitised_group`` is the text the template's ``.Group`` matched (dots and dashes written as ``_``);
        ``None`` when the template has no ``.Group``, in which case any group matches, as with an empty group in
        prometheus-adapter's REST mapper.
        """
        found = self.by_label_name.get(resource)
        if found is None or (sanitised_group is not None and sanitise_group(found.group) != sanitised_group):
            return None
        return found.group_resource

    def is_namespaced(self, gr: GroupResource) -> bool:
        """Known cluster-scoped kinds are root-scoped; everything else (custom resources included) is namespaced."""
        known = self.by_group_resource.get(gr)
        return known.namespaced if known else True

    def singular(self, gr: GroupResource) -> str:
        known = self.by_group_resource.get(gr)
        return known.singular if known else _singular_guess(gr.resource)

    def kind(self, gr: GroupResource) -> str:
        """The object kind for ``describedObject`` (``Pod``, ``Deployment``); a capitalised guess for others."""
        known = self.by_group_resource.get(gr)
        if known:
            return known.kind
        guess = _singular_guess(gr.resource)
        return guess[:1].upper() + guess[1:]

    def api_version(self, gr: GroupResource) -> str:
        """``describedObject.apiVersion``: ``/v1`` for the core group (as prometheus-adapter writes it),
        ``apps/v1``, ``autoscaling/v2``…; ``<group>/v1`` for groups outside the table."""
        known = self.by_group_resource.get(gr)
        version = known.version if known else next((k.version for k in self.kinds if k.group == gr.group), "v1")
        return f"{gr.group}/{version}"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ResourceTable) and set(self.kinds) == set(other.kinds)

    def __hash__(self) -> int:
        return hash(frozenset(self.kinds))


BUILTIN = ResourceTable(_TABLE)
"""The common kinds: what names resolve with when there is no Kubernetes API to ask."""

NAMESPACES = GroupResource("", "namespaces")
PODS = GroupResource("", "pods")


def sanitise_group(group: str) -> str:
    """How a group appears in a label name (prometheus-adapter: dots and dashes become underscores)."""
    return group.replace(".", "_").replace("-", "_")


# The built-in table's answers, for code and tests that never have an API's discovery to ask.
normalise_resource = BUILTIN.normalise
is_namespaced = BUILTIN.is_namespaced
kind = BUILTIN.kind
api_version = BUILTIN.api_version


def _singular_guess(plural: str) -> str:
    if plural.endswith("ies"):
        return plural[:-3] + "y"
    if plural.endswith(("sses", "xes", "ches", "shes", "zes")):
        return plural[:-2]
    if plural.endswith("s") and not plural.endswith("ss"):
        return plural[:-1]
    return plural
