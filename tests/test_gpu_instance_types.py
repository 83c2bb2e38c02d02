"""The GPU instance-type table (charts/gpu-autoscaler/files/gpu-instance-types.yaml) that the chart's templates and
loadtest read: every row loads, and every instance family or type our NodePool, the chart's karpenter.nodePool, the
contract and the eksctl node groups name has rows."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from loadtest.nodes import INSTANCE_TYPES_FILE, InstanceType, load_instance_types

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[1]
# EC2 instance type names: <family>.<size>, sizes "metal" or "<n>xlarge" (plus "large" and friends elsewhere).
TYPE_NAME = re.compile(r"^(?P<family>[a-z][a-z0-9-]*)\.(?P<size>metal|\d*xlarge)$")
# The families the issue 39 contract asks for, every size.
CONTRACT_FAMILIES = ("g4dn", "g5", "g6", "g6e", "p3", "p4d", "p5")
TABLE = load_instance_types()


def test_every_row_parses() -> None:
    assert TABLE
    for name, row in TABLE.items():
        assert TYPE_NAME.match(name), f"{name}: not an EC2 instance type name"
        assert row.gpu.startswith("NVIDIA "), name  # load_instance_types checks gpus (a whole number, 1 or more)
    # The chart's templates read these two keys of each row and nothing else.
    raw = yaml.safe_load(INSTANCE_TYPES_FILE.read_text())
    assert all(set(row) == {"gpus", "gpu"} for row in raw.values()), raw


def test_header_names_its_source() -> None:
    header = INSTANCE_TYPES_FILE.read_text().split("\n\n")[0]
    assert "https://docs.aws.amazon.com/ec2/latest/instancetypes/ac.html" in header
    assert "accelerated computing" in header


def families() -> set[str]:
    return {t.family for t in TABLE.values()}


def test_every_family_the_chart_nodepool_names_has_rows() -> None:
    values = yaml.safe_load((REPO / "charts" / "gpu-autoscaler" / "values.yaml").read_text())
    named = values["karpenter"]["nodePool"]["instanceFamilies"]
    missing = [family for family in named if family not in families()]
    assert named and not missing, f"karpenter.nodePool.instanceFamilies names {missing}, the table has no rows"


def test_every_family_the_karpenter_example_names_has_rows() -> None:
    [pool] = [d for d in yaml.safe_load_all((REPO / "hpa-examples" / "karpenter" / "nodepool-gpu.yaml").read_text())
              if d["kind"] == "NodePool"]
    [req] = [r for r in pool["spec"]["template"]["spec"]["requirements"]
             if r["key"] == "karpenter.k8s.aws/instance-family"]
    assert [f for f in req["values"] if f not in families()] == []


def test_cluster_autoscaler_node_groups_agree_with_the_table() -> None:
    # Each eksctl node group's scale-from-zero template tag must advertise the GPUs its instance type has.
    config = yaml.safe_load((REPO / "hpa-examples" / "cluster-autoscaler" / "eksctl-gpu-nodegroups.yaml").read_text())
    for group in config["managedNodeGroups"]:
        advertised = group["tags"]["k8s.io/cluster-autoscaler/node-template/resources/nvidia.com/gpu"]
        assert group["instanceType"] in TABLE, group["name"]
        assert int(advertised) == TABLE[group["instanceType"]].gpus, group["name"]


@pytest.mark.parametrize("family", CONTRACT_FAMILIES)
def test_contract_families_have_rows(family: str) -> None:
    assert family in families(), family


# Facts read from AWS's accelerated computing page (and the same figures in Cluster Autoscaler's
# cloudprovider/aws/ec2_instance_types.go): one row per GPU layout a size can have.
@pytest.mark.parametrize(("name", "gpus", "gpu"), [
    ("g4dn.xlarge", 1, "NVIDIA T4"), ("g4dn.12xlarge", 4, "NVIDIA T4"), ("g4dn.16xlarge", 1, "NVIDIA T4"),
    ("g4dn.metal", 8, "NVIDIA T4"),
    ("g5.xlarge", 1, "NVIDIA A10G"), ("g5.16xlarge", 1, "NVIDIA A10G"), ("g5.24xlarge", 4, "NVIDIA A10G"),
    ("g5.48xlarge", 8, "NVIDIA A10G"),
    ("g6.12xlarge", 4, "NVIDIA L4"), ("g6.48xlarge", 8, "NVIDIA L4"),
    ("g6e.xlarge", 1, "NVIDIA L40S"), ("g6e.24xlarge", 4, "NVIDIA L40S"), ("g6e.48xlarge", 8, "NVIDIA L40S"),
    ("p3.2xlarge", 1, "NVIDIA V100"), ("p3.8xlarge", 4, "NVIDIA V100"), ("p3.16xlarge", 8, "NVIDIA V100"),
    ("p4d.24xlarge", 8, "NVIDIA A100"), ("p5.4xlarge", 1, "NVIDIA H100"), ("p5.48xlarge", 8, "NVIDIA H100"),
])
def test_known_rows(name: str, gpus: int, gpu: str) -> None:
    assert TABLE[name] == InstanceType(name, gpus, gpu)
