"""The GPU instance-type table (charts/gpu-autoscaler/files/gpu-instance-types.yaml) that the chart's templates and
loadtest read: every row parses, and every instance family or type our NodePool and node groups name has rows."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "charts" / "gpu-autoscaler"
TABLE = CHART / "files" / "gpu-instance-types.yaml"
# EC2 instance type names: <family>.<size>, sizes "metal" or "<n>xlarge" (plus "large" and friends elsewhere).
TYPE_NAME = re.compile(r"^(?P<family>[a-z][a-z0-9-]*)\.(?P<size>metal|\d*xlarge)$")
# The families the issue 39 contract asks for, every size.
CONTRACT_FAMILIES = ("g4dn", "g5", "g6", "g6e", "p3", "p4d", "p5")


def table() -> dict[str, dict[str, Any]]:
    return yaml.safe_load(TABLE.read_text())


def families() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name in table():
        match = TYPE_NAME.match(name)
        assert match, name
        out.setdefault(match["family"], []).append(name)
    return out


def test_every_row_parses() -> None:
    rows = table()
    assert isinstance(rows, dict) and rows
    for name, row in rows.items():
        assert TYPE_NAME.match(name), f"{name}: not an EC2 instance type name"
        assert set(row) == {"gpus", "gpu"}, f"{name}: {row}"
        assert isinstance(row["gpus"], int) and not isinstance(row["gpus"], bool) and row["gpus"] >= 1, name
        assert isinstance(row["gpu"], str) and row["gpu"].startswith("NVIDIA "), name


def test_header_names_its_source() -> None:
    header = TABLE.read_text().split("\n\n")[0]
    assert "https://docs.aws.amazon.com/ec2/latest/instancetypes/ac.html" in header
    assert "accelerated computing" in header


def test_every_family_the_chart_nodepool_names_has_rows() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
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
    rows = table()
    for group in config["managedNodeGroups"]:
        advertised = group["tags"]["k8s.io/cluster-autoscaler/node-template/resources/nvidia.com/gpu"]
        assert group["instanceType"] in rows, group["name"]
        assert int(advertised) == rows[group["instanceType"]]["gpus"], group["name"]


@pytest.mark.parametrize("family", CONTRACT_FAMILIES)
def test_contract_families_have_rows(family: str) -> None:
    assert families().get(family), family


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
    assert table()[name] == {"gpus": gpus, "gpu": gpu}
