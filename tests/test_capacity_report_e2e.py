"""``gpu-loadtest capacity`` end to end: the real command, through the official client, against the fake Kubernetes
API on loopback serving a recorded scale-up (``tests/support/cluster_records.py``: every object and event in its
upstream shape, events through both APIs as the API server serves them). Read-only; refused reads name the verb
and resource; a missing workload, an empty window, a cluster without Karpenter are one line each; ``--watch``
keeps what the cluster later forgets."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support import cluster_records as cr
from tests.support.cluster_records import Records, karpenter_scale_up
from tests.support.fake_kube import FakeKube, Received
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e

UNTIL = "2026-03-02T11:00:00Z"


def serve(fake: FakeKube, records: Records, *, karpenter: bool = True) -> None:
    """Register what a cluster with the HPA (and Karpenter) serves, and put the records in it; every event goes into
    both event APIs, as the API server serves one store through both."""
    fake.register("events.k8s.io", "v1", "events", "Event")
    fake.register("", "v1", "events", "Event")
    fake.register("autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler")
    if karpenter:
        fake.register("karpenter.sh", "v1", "nodeclaims", "NodeClaim", namespaced=False)
    put_all(fake, records, karpenter=karpenter)


def put_all(fake: FakeKube, records: Records, *, karpenter: bool = True) -> None:
    for group, version, resource, items in (("", "v1", "nodes", records.nodes), ("", "v1", "pods", records.pods),
                                            ("apps", "v1", "deployments", records.deployments),
                                            ("autoscaling", "v2", "horizontalpodautoscalers", records.hpas),
                                            ("karpenter.sh", "v1", "nodeclaims",
                                             records.nodeclaims if karpenter else [])):
        for item in items:
            fake.put(group, version, resource, item)
    for event in records.events:
        fake.put("events.k8s.io", "v1", "events", cr.as_events_v1(event))
        fake.put("", "v1", "events", cr.as_core_v1(event))


def rbac_asked(received: list[Received]) -> set[tuple[str, str, str]]:
    """``(verb, group, resource)`` of every request, as RBAC names them."""
    asked = set()
    for r in received:
        parts = r.path.strip("/").split("/")
        group, rest = ("", parts[2:]) if parts[0] == "api" else (parts[1], parts[3:])
        if rest[:1] == ["namespaces"] and len(rest) > 2:
            rest = rest[2:]
        verb = "get" if len(rest) > 1 else "watch" if r.watch else "list"
        asked.add((verb, group, rest[0]))
    return asked


def assert_within_the_charts_cluster_role(received: list[Received]) -> None:
    """Everything the report asked for is what the chart's opt-in ClusterRole grants (capacityReport.rbac)."""
    from tests.test_chart_capacity_report import READS

    asked = rbac_asked(received)
    assert {(group, resource) for _, group, resource in asked} <= READS
    assert {verb for verb, _, _ in asked} <= {"get", "list", "watch"}


def capacity(fake: FakeKube, tmp_path: Path, *args: str, until: str | None = UNTIL, check: bool = True,
             ) -> tuple[subprocess.CompletedProcess[str], dict[str, Any] | None]:
    kubeconfig = fake.write_kubeconfig(tmp_path / "kubeconfig")
    out = tmp_path / "report.json"
    out.unlink(missing_ok=True)
    result = subprocess.run([sys.executable, "-m", "loadtest", "capacity", "--kubeconfig", kubeconfig, "-n", "ml",
                             "--since", "1h", *(("--until", until) if until else ()), "--json", str(out), *args],
                            capture_output=True, text=True, timeout=120)
    if check:
        assert result.returncode == 0, result.stderr
    return result, json.loads(out.read_text()) if out.exists() else None


def test_the_report_of_a_recorded_scale_up_through_the_api(fake_kube: FakeKube, tmp_path: Path) -> None:
    records, truth = karpenter_scale_up()
    serve(fake_kube, records)
    result, doc = capacity(fake_kube, tmp_path, "--deployment", "vllm", "--csv", str(tmp_path / "r.csv"),
                           "--plot", str(tmp_path / "r.png"))
    assert doc is not None
    (surge,) = doc["capacity"]["surges"]
    assert surge["time_to_capacity_s"] == truth.time_to_capacity_s
    assert surge["phases_s"] == {k: round(v, 1) for k, v in truth.phases_s.items()}
    assert (surge["replicas_before"], surge["replicas_asked"], surge["nodes_launched"]) == (1, 3, 2)
    assert doc["sources"] == {"events": "events.k8s.io/v1", "karpenter": True} and doc["autoscaler"] == "karpenter"
    c = next(r for r in surge["replicas"] if r["pod"].endswith("ccccc"))
    assert c["sub_phases_s"] == {"autoscaler": 2.0, "launch": 8.0, "registration": 37.0, "node_ready": 20.0,
                                 "gpus": 115.0, "scheduling": 1.0, "image_pull": 333.6, "container_start": 3.4,
                                 "readiness": 48.0}
    assert "| cluster ml/vllm | 569 s" in result.stdout and "scale-up 1: time to capacity" in result.stdout
    assert (tmp_path / "r.png").read_bytes().startswith(b"\x89PNG") and (tmp_path / "r-replicas.csv").exists()
    assert {r.method for r in fake_kube.received} == {"GET"}  # read-only
    assert rbac_asked(fake_kube.received) == {
        ("get", "apps", "deployments"), ("list", "", "pods"), ("list", "events.k8s.io", "events"),
        ("list", "", "nodes"), ("list", "karpenter.sh", "nodeclaims"), ("list", "autoscaling",
                                                                         "horizontalpodautoscalers")}
    assert_within_the_charts_cluster_role(fake_kube.received)
    assert all(r.headers.get("authorization") == "Bearer fake-token" for r in fake_kube.received)


def test_a_refused_read_names_the_verb_and_resource(fake_kube: FakeKube, tmp_path: Path) -> None:
    records, truth = karpenter_scale_up()
    serve(fake_kube, records)
    fake_kube.deny("list", "nodeclaims", "karpenter.sh")
    fake_kube.deny("list", "events", "events.k8s.io")
    result, doc = capacity(fake_kube, tmp_path, "--deployment", "vllm")
    assert doc is not None
    notes = doc["notes"]
    assert ('forbidden: list nodeclaims.karpenter.sh at the cluster scope (nodeclaims.karpenter.sh is forbidden: '
            'User "system:serviceaccount:ml:capacity-report" cannot list resource "nodeclaims" in API group '
            '"karpenter.sh" at the cluster scope): Karpenter\'s launch, registration and GPUs are unknown') in notes
    assert any(n.startswith("forbidden: list events.events.k8s.io in namespace ml") and
               n.endswith("reading core v1 events instead") for n in notes)
    assert doc["sources"]["events"] == "core/v1"  # the same events, through core v1
    (surge,) = doc["capacity"]["surges"]
    assert surge["time_to_capacity_s"] == truth.time_to_capacity_s
    c = next(r for r in surge["replicas"] if r["pod"].endswith("ccccc"))
    assert {"autoscaler", "launch", "registration", "gpus", "scheduling"} <= set(c["unknown"])
    assert c["sub_phases_s"]["node_ready"] == 20.0
    assert "note: forbidden: list nodeclaims.karpenter.sh" in result.stdout

    fake_kube.deny("list", "pods")
    result, doc = capacity(fake_kube, tmp_path, "--deployment", "vllm", check=False)
    assert result.returncode == 2 and doc is None
    assert result.stderr.strip() == (
        'gpu-loadtest: error: forbidden: list pods in namespace ml (pods is forbidden: User "system:serviceaccount:'
        'ml:capacity-report" cannot list resource "pods" in API group "" in the namespace "ml")')


def test_a_missing_workload_an_empty_window_and_no_autoscaler_are_one_line_each(fake_kube: FakeKube,
                                                                                tmp_path: Path) -> None:
    records, _ = karpenter_scale_up()
    serve(fake_kube, records, karpenter=False)
    result, doc = capacity(fake_kube, tmp_path, "--deployment", "nope")
    assert doc is not None and doc["capacity"]["surges"] == [] and "note: deployment ml/nope not found" in result.stdout
    assert doc["notes"][:3] == [
        "deployment ml/nope not found: its pods are those whose ReplicaSet is named nope-<hash>",
        "no pod of deployment ml/nope in the records",
        "no HorizontalPodAutoscaler in ml targets deployment nope: no scale-up decisions to measure from; the "
        "replicas created in the window are listed"]
    _, doc = capacity(fake_kube, tmp_path, "--deployment", "vllm", until="2026-03-02T13:00:00Z")
    assert doc is not None and doc["capacity"]["surges"] == []
    assert doc["notes"][0].startswith("no scale-up of ml/vllm between 2026-03-02T12:00:00Z and "
                                      "2026-03-02T13:00:00Z in the records; the records' oldest event is from")
    _, doc = capacity(fake_kube, tmp_path, "--deployment", "vllm")
    assert doc is not None and doc["sources"]["karpenter"] is False
    assert any(n.startswith("no Karpenter NodeClaims (karpenter.sh/v1 not served) and no Cluster Autoscaler")
               for n in doc["notes"])
    assert doc["capacity"]["surges"][0]["nodes_launched"] is None
    assert all(line.count("\n") == 0 for line in doc["notes"])


def test_usage_errors_are_one_line(tmp_path: Path) -> None:
    for args, message in ((["--deployment", "x", "--since", "soon"], "--since 'soon': expected a duration"),
                          (["--deployment", "x", "--until", "yesterday"], "--until 'yesterday': expected an RFC"),
                          (["--deployment", "x", "--watch-for", "1m"], "--watch-for goes with --watch"),
                          (["--journal", str(tmp_path / "none.jsonl")], "--journal"),
                          (["--deployment", "x", "--kubeconfig", "/nonexistent/kubeconfig"],
                           "kubeconfig /nonexistent/kubeconfig")):
        result = subprocess.run([sys.executable, "-m", "loadtest", "capacity", *args], capture_output=True,
                                text=True, timeout=60)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1, result.stderr
        assert lines[0].startswith("gpu-loadtest: error: ") and message in lines[0], lines[0]


AS_FROM_A_TERMINAL = (
    "import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT}); "
    "runpy.run_module('loadtest', run_name='__main__', alter_sys=True)")
"""``python -m loadtest`` as a terminal starts it, Ctrl-C at its default (KeyboardInterrupt) and not blocked: a
child inherits an ignored or blocked SIGINT from the process that starts it, and Python then never raises
KeyboardInterrupt (the watch once ran past 60 s after its SIGINT in a full parallel run)."""


def signal_state(pid: int) -> str:
    """The process' signal masks as the kernel has them (for a failure's message)."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError as exc:
        return f"no /proc status ({exc})"
    return ", ".join(line.replace("\t", " ") for line in lines if line.startswith(("SigBlk", "SigIgn", "SigCgt")))


def test_watch_keeps_what_the_cluster_forgets(fake_kube: FakeKube, tmp_path: Path) -> None:
    """The scale-up happens while --watch follows the cluster; then its events expire (the API server deletes them
    after --event-ttl). The report at the end of the watch, and one made again from the journal, still have it;
    a plain report now cannot."""
    records, truth = karpenter_scale_up()
    before = Records(pods=[p for p in records.pods if p["metadata"]["name"].endswith("aaaaa")],
                     nodes=records.nodes[:1], nodeclaims=records.nodeclaims[:1], deployments=records.deployments,
                     hpas=records.hpas)
    serve(fake_kube, before)
    journal = tmp_path / "watch.jsonl"
    kubeconfig = fake_kube.write_kubeconfig(tmp_path / "kubeconfig")
    watcher = subprocess.Popen([sys.executable, "-c", AS_FROM_A_TERMINAL, "capacity", "--kubeconfig", kubeconfig,
                                "-n", "ml", "--deployment", "vllm", "--since", "1h", "--until", UNTIL, "--watch",
                                str(journal), "--json", str(tmp_path / "watched.json")],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: fake_kube.open_watches("pods") and fake_kube.open_watches("events")
                   and fake_kube.open_watches("nodeclaims"), timeout=60)
        put_all(fake_kube, records)  # the scale-up, as the watch sees it come
        wait_until(lambda: journal.read_text().count('"resource":"events"') >= len(records.events), timeout=30)
        for event in records.events:  # expired
            name = event["metadata"]["name"]
            fake_kube.delete("events.k8s.io", "v1", "events", "ml", name)
            fake_kube.delete("", "v1", "events", "ml", name)
        time.sleep(1.0)
        watcher.send_signal(signal.SIGINT)  # Ctrl-C ends the watch; the report follows
        try:
            _, err = watcher.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"no report 60 s after Ctrl-C; {signal_state(watcher.pid)}") from None
    finally:
        if watcher.poll() is None:
            watcher.kill()
    assert watcher.returncode == 0, err
    assert "watching ml/vllm into" in err
    assert ("watch", "", "pods") in rbac_asked(fake_kube.received)
    assert_within_the_charts_cluster_role(fake_kube.received)
    watched = json.loads((tmp_path / "watched.json").read_text())
    assert watched["capacity"]["surges"][0]["time_to_capacity_s"] == truth.time_to_capacity_s
    assert watched["sources"]["journal"] == str(journal)
    again = subprocess.run([sys.executable, "-m", "loadtest", "capacity", "--journal", str(journal), "--since", "1h",
                            "--until", UNTIL, "--json", str(tmp_path / "again.json")], capture_output=True,
                           text=True, timeout=60)
    assert again.returncode == 0, again.stderr
    assert json.loads((tmp_path / "again.json").read_text())["capacity"] == watched["capacity"]
    _, now = capacity(fake_kube, tmp_path, "--deployment", "vllm")
    assert now is not None and now["capacity"]["surges"] == []  # the cluster alone no longer has it


def test_the_report_needs_no_extra_but_for_its_plot(tmp_path: Path) -> None:
    """Without the [loadtest] extra (no matplotlib) the report is made, from a journal here; only --plot needs it."""
    from loadtest.measure.cluster.journal import Journal
    from tests.test_extras import _run

    records, truth = karpenter_scale_up()
    with Journal(tmp_path / "watch.jsonl") as journal:
        journal.header(namespace="ml", deployment="vllm", karpenter=True, events_api="events.k8s.io/v1")
        for resource, items in records.objects().items():
            for item in items:
                journal.record("LISTED", resource, item)
    done = _run("loadtest.cli.main", "gpu-loadtest", "capacity", "--journal", str(tmp_path / "watch.jsonl"),
                "--until", UNTIL, "--json", str(tmp_path / "r.json"), "--csv", str(tmp_path / "r.csv"))
    assert done.returncode == 0, done.stderr
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["capacity"]["surges"][0]["time_to_capacity_s"] == truth.time_to_capacity_s
