"""Kubernetes group-resources without a Kubernetes API: a built-in table of the common kinds.

prometheus-adapter normalises resource names with a REST mapper built from API discovery; this table stands
in for it. A name may be given as plural, singular, kind or short name (``pods``, ``pod``, ``Pod``, ``po``),
optionally qualified by its group (``deployments.apps``, ``deployment.apps``). A qualified name outside the
table is accepted as written (lowercased), so custom resources work when their group is given.
"""

from __future__ import annotations

import re
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
class _Kind:
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


_ROOT = False
_TABLE = (
    _Kind("pods", "pod", "Pod", "", "v1", short=("po",)),
    _Kind("services", "service", "Service", "", "v1", short=("svc",)),
    _Kind("namespaces", "namespace", "Namespace", "", "v1", _ROOT, ("ns",)),
    _Kind("nodes", "node", "Node", "", "v1", _ROOT, ("no",)),
    _Kind("persistentvolumes", "persistentvolume", "PersistentVolume", "", "v1", _ROOT, ("pv",)),
    _Kind("persistentvolumeclaims", "persistentvolumeclaim", "PersistentVolumeClaim", "", "v1", short=("pvc",)),
    _Kind("endpoints", "endpoints", "Endpoints", "", "v1", short=("ep",), aliases=("endpoint",)),
    _Kind("configmaps", "configmap", "ConfigMap", "", "v1", short=("cm",)),
    _Kind("secrets", "secret", "Secret", "", "v1"),
    _Kind("serviceaccounts", "serviceaccount", "ServiceAccount", "", "v1", short=("sa",)),
    _Kind("replicationcontrollers", "replicationcontroller", "ReplicationController", "", "v1", short=("rc",)),
    _Kind("resourcequotas", "resourcequota", "ResourceQuota", "", "v1", short=("quota",)),
    _Kind("limitranges", "limitrange", "LimitRange", "", "v1", short=("limits",)),
    _Kind("events", "event", "Event", "", "v1", short=("ev",)),
    _Kind("deployments", "deployment", "Deployment", "apps", "v1", short=("deploy",)),
    _Kind("statefulsets", "statefulset", "StatefulSet", "apps", "v1", short=("sts",)),
    _Kind("replicasets", "replicaset", "ReplicaSet", "apps", "v1", short=("rs",)),
    _Kind("daemonsets", "daemonset", "DaemonSet", "apps", "v1", short=("ds",)),
    _Kind("controllerrevisions", "controllerrevision", "ControllerRevision", "apps", "v1"),
    _Kind("jobs", "job", "Job", "batch", "v1"),
    _Kind("cronjobs", "cronjob", "CronJob", "batch", "v1", short=("cj",)),
    _Kind(
        "horizontalpodautoscalers",
        "horizontalpodautoscaler",
        "HorizontalPodAutoscaler",
        "autoscaling",
        "v2",
        short=("hpa",),
    ),
    _Kind("ingresses", "ingress", "Ingress", "networking.k8s.io", "v1", short=("ing",)),
    _Kind("ingressclasses", "ingressclass", "IngressClass", "networking.k8s.io", "v1", _ROOT),
    _Kind("networkpolicies", "networkpolicy", "NetworkPolicy", "networking.k8s.io", "v1", short=("netpol",)),
    _Kind("endpointslices", "endpointslice", "EndpointSlice", "discovery.k8s.io", "v1"),
    _Kind("poddisruptionbudgets", "poddisruptionbudget", "PodDisruptionBudget", "policy", "v1", short=("pdb",)),
    _Kind("leases", "lease", "Lease", "coordination.k8s.io", "v1"),
    _Kind("storageclasses", "storageclass", "StorageClass", "storage.k8s.io", "v1", _ROOT, ("sc",)),
    _Kind("volumeattachments", "volumeattachment", "VolumeAttachment", "storage.k8s.io", "v1", _ROOT),
    _Kind("priorityclasses", "priorityclass", "PriorityClass", "scheduling.k8s.io", "v1", _ROOT, ("pc",)),
    _Kind("runtimeclasses", "runtimeclass", "RuntimeClass", "node.k8s.io", "v1", _ROOT),
    _Kind("clusterroles", "clusterrole", "ClusterRole", "rbac.authorization.k8s.io", "v1", _ROOT),
    _Kind("clusterrolebindings", "clusterrolebinding", "ClusterRoleBinding", "rbac.authorization.k8s.io", "v1", _ROOT),
    _Kind("roles", "role", "Role", "rbac.authorization.k8s.io", "v1"),
    _Kind("rolebindings", "rolebinding", "RoleBinding", "rbac.authorization.k8s.io", "v1"),
    _Kind(
        "customresourcedefinitions",
        "customresourcedefinition",
        "CustomResourceDefinition",
        "apiextensions.k8s.io",
        "v1",
        _ROOT,
        ("crd", "crds"),
    ),
)

_BY_GROUP_RESOURCE = {k.group_resource: k for k in _TABLE}
# Every spelling of a kind, qualified by its group: (name, group) -> kind.
_BY_NAME = {(name, k.group): k for k in _TABLE for name in (k.plural, k.singular, k.kind.lower(), *k.short, *k.aliases)}
# Unqualified spellings; the table has no name in two groups, so this is unambiguous.
_BY_BARE_NAME = {name: k for (name, _), k in _BY_NAME.items()}
# What a label can name through resources.template: resource names, not kinds or short names.
_BY_LABEL_NAME = {name: k for k in _TABLE for name in (k.plural, k.singular, *k.aliases)}

NAMESPACES = GroupResource("", "namespaces")
PODS = GroupResource("", "pods")


def normalise_resource(resource: str, group: str | None = None) -> GroupResource:
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
    known = _BY_NAME.get((text, group_text)) if group_text else _BY_BARE_NAME.get(text)
    return known.group_resource if known else GroupResource(group_text, text)


def is_known(gr: GroupResource) -> bool:
    return gr in _BY_GROUP_RESOURCE


def resource_for_label(resource: str, sanitised_group: str | None) -> GroupResource | None:
    """The known resource a label names through ``resources.template``, or ``None``.

    ``sanitised_group`` is the text the template's ``.Group`` matched (dots and dashes written as ``_``);
    ``None`` when the template has no ``.Group``, in which case any group matches, as with an empty group in
    prometheus-adapter's REST mapper.
    """
    found = _BY_LABEL_NAME.get(resource)
    if found is None or (sanitised_group is not None and sanitise_group(found.group) != sanitised_group):
        return None
    return found.group_resource


def sanitise_group(group: str) -> str:
    """How a group appears in a label name (prometheus-adapter: dots and dashes become underscores)."""
    return group.replace(".", "_").replace("-", "_")


def is_namespaced(gr: GroupResource) -> bool:
    """Known cluster-scoped kinds are root-scoped; everything else (custom resources included) is namespaced."""
    known = _BY_GROUP_RESOURCE.get(gr)
    return known.namespaced if known else True


def singular(gr: GroupResource) -> str:
    known = _BY_GROUP_RESOURCE.get(gr)
    return known.singular if known else _singular_guess(gr.resource)


def kind(gr: GroupResource) -> str:
    """The object kind for ``describedObject`` (``Pod``, ``Deployment``); a capitalised guess for others."""
    known = _BY_GROUP_RESOURCE.get(gr)
    if known:
        return known.kind
    guess = _singular_guess(gr.resource)
    return guess[:1].upper() + guess[1:]


def api_version(gr: GroupResource) -> str:
    """``describedObject.apiVersion``: ``/v1`` for the core group (as prometheus-adapter writes it),
    ``apps/v1``, ``autoscaling/v2``…; ``<group>/v1`` for groups outside the table."""
    known = _BY_GROUP_RESOURCE.get(gr)
    version = known.version if known else next((k.version for k in _TABLE if k.group == gr.group), "v1")
    return f"{gr.group}/{version}"


def _singular_guess(plural: str) -> str:
    if plural.endswith("ies"):
        return plural[:-3] + "y"
    if plural.endswith(("sses", "xes", "ches", "shes", "zes")):
        return plural[:-2]
    if plural.endswith("s") and not plural.endswith("ss"):
        return plural[:-1]
    return plural
