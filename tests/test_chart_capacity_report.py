"""The capacity report's read-only RBAC (values capacityReport.rbac, issue 48 item 5): off by default; on, a
ClusterRole that grants get/list/watch on exactly what the report reads, and a binding for the subjects given."""

from __future__ import annotations

import pytest

from tests.support.k8s_validation import find, one, validate_all
from tests.test_chart import RELEASE, render, template

NAME = f"{RELEASE}-gpu-autoscaler-capacity-report"

pytestmark = pytest.mark.tools

READS = {("", "pods"), ("", "events"), ("", "nodes"), ("events.k8s.io", "events"), ("apps", "replicasets"),
         ("apps", "deployments"), ("autoscaling", "horizontalpodautoscalers"), ("karpenter.sh", "nodeclaims"),
         ("karpenter.sh", "nodepools")}


def _report_objects(docs):
    return [d for d in docs if d["kind"] in ("ClusterRole", "ClusterRoleBinding")
            and d["metadata"]["name"].endswith("-capacity-report")]


def test_off_by_default():
    assert _report_objects(render(None)) == []


def test_the_cluster_role_reads_what_the_report_reads_and_writes_nothing():
    docs = render(None, "capacityReport.rbac.create=true")
    [role] = _report_objects(docs)
    assert role["kind"] == "ClusterRole"
    granted = {(group, resource) for rule in role["rules"] for group in rule["apiGroups"]
               for resource in rule["resources"]}
    assert granted == READS
    assert all(rule["verbs"] == ["get", "list", "watch"] for rule in role["rules"])
    assert not any("resourceNames" in rule or "nonResourceURLs" in rule for rule in role["rules"])
    assert validate_all([role]) == []


def test_a_binding_for_the_subjects_given():
    docs = render(None, "capacityReport.rbac.create=true", "capacityReport.rbac.subjects[0].kind=Group",
                  "capacityReport.rbac.subjects[0].name=platform-oncall",
                  "capacityReport.rbac.subjects[1].kind=ServiceAccount",
                  "capacityReport.rbac.subjects[1].name=capacity-report")
    binding = one(docs, "ClusterRoleBinding", NAME)
    role = one(docs, "ClusterRole", NAME)
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": role["metadata"]["name"]}
    namespace = one(docs, "Deployment", f"{RELEASE}-gpu-autoscaler-adapter")["metadata"]["namespace"]
    assert binding["subjects"] == [
        {"kind": "Group", "name": "platform-oncall", "apiGroup": "rbac.authorization.k8s.io"},
        {"kind": "ServiceAccount", "name": "capacity-report", "namespace": namespace}]
    assert validate_all(_report_objects(docs)) == []
    assert not find(render(None, "capacityReport.rbac.create=true"), "ClusterRoleBinding", NAME)


def test_a_subject_of_an_unknown_kind_is_refused():
    proc = template(None, "capacityReport.rbac.create=true", "capacityReport.rbac.subjects[0].kind=Robot",
                    "capacityReport.rbac.subjects[0].name=x", check=False)
    assert proc.returncode != 0 and "values don't meet the specifications of the schema" in proc.stderr
