"""Process -> pod: cgroup paths, the kubelet's log directories, the Kubernetes API, the proc tree."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.pods.cgroups import CgroupPod, parse_cgroup_file, parse_cgroup_path
from exporter.pods.directory import KubeletLogDirectory, PodName, parse_container_log_link, parse_pod_log_dir
from exporter.pods.kube_client import api_client
from exporter.pods.kube_directory import KubernetesApiDirectory, PodTables, pod_meta
from exporter.pods.mapping import PodRef
from exporter.pods.procfs import NoPod, ProcFs, Visibility
from tests.fake_node import FakeNode
from tests.support.fake_kube import FakeKube
from tests.support.fake_kube import pod as fake_pod
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.unit, pytest.mark.lowest]

UID = "3f1c2b7a-9d4e-4c1b-8a2f-0e6d5c4b3a21"
CID = "4b5c8f0e9a1d2c3b4a5f6e7d8c9b0a1f2e3d4c5b6a7f8e9d0c1b2a3f4e5d6c7b"


@pytest.mark.parametrize(("path", "expected"), [
    # cgroupfs driver, v1 or v2, every QoS class
    (f"/kubepods/burstable/pod{UID}/{CID}", CgroupPod(UID, CID)),
    (f"/kubepods/besteffort/pod{UID}/{CID}", CgroupPod(UID, CID)),
    (f"/kubepods/pod{UID}/{CID}", CgroupPod(UID, CID)),  # Guaranteed: no QoS level
    # systemd driver: UID with underscores, runtime-prefixed scopes
    (f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID.replace('-', '_')}.slice/"
     f"cri-containerd-{CID}.scope", CgroupPod(UID, CID)),
    (f"/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/crio-{CID}.scope", CgroupPod(UID, CID)),
    (f"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID.replace('-', '_')}.slice/"
     f"docker-{CID}.scope", CgroupPod(UID, CID)),
    # a reader in another cgroup namespace sees a relative path
    (f"/../../kubepods-burstable-pod{UID.replace('-', '_')}.slice/cri-containerd-{CID}.scope", CgroupPod(UID, CID)),
    # processes in sub-cgroups of their container, CRI-O's conmon, the pod cgroup itself
    (f"/kubepods/burstable/pod{UID}/{CID}/init.scope", CgroupPod(UID, CID)),
    (f"/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/crio-conmon-{CID}.scope", CgroupPod(UID, None)),
    (f"/kubepods/burstable/pod{UID}", CgroupPod(UID, None)),
    # static pods have a 32-hex-digit UID
    (f"/kubepods/burstable/pod0123456789abcdef0123456789abcdef/{CID}",
     CgroupPod("0123456789abcdef0123456789abcdef", CID)),
    # not in a pod
    ("/system.slice/nvidia-persistenced.service", None),
    ("/user.slice/user-1000.slice/session-3.scope", None),
    ("/", None),
    (f"/kubepods/burstable/podnot-a-uid/{CID}", None),
])
def test_cgroup_paths(path: str, expected: CgroupPod | None) -> None:
    assert parse_cgroup_path(path) == expected


def test_cgroup_v1_file_prefers_the_line_naming_the_container() -> None:
    text = (f"12:pids:/kubepods/burstable/pod{UID}\n"
            f"11:memory:/kubepods/burstable/pod{UID}/{CID}\n"
            "1:name=systemd:/system.slice/containerd.service\n")
    assert parse_cgroup_file(text) == CgroupPod(UID, CID)
    assert parse_cgroup_file(f"12:pids:/kubepods/burstable/pod{UID}\n") == CgroupPod(UID, None)
    assert parse_cgroup_file("0::/init.scope\n") is None
    assert parse_cgroup_file("garbage\n") is None


def test_pod_log_directory_and_container_link_names() -> None:
    assert parse_pod_log_dir(f"ml-serving_infer-7d9f-abcde_{UID}") == (UID, PodName("ml-serving", "infer-7d9f-abcde"))
    assert parse_pod_log_dir(UID) is None  # the pre-1.14 layout has no names
    assert parse_pod_log_dir("a_b_not-a-uid") is None
    assert parse_container_log_link(f"infer-7d9f-abcde_ml-serving_server-{CID}.log") == (
        CID, PodRef("infer-7d9f-abcde", "ml-serving", "server"))
    assert parse_container_log_link(f"infer_ml_server-{CID[:40]}.log") is None  # cut by the kubelet at 255 bytes
    assert parse_container_log_link("README") is None


def test_kubelet_log_directory_rescans_on_a_miss_at_most_every_interval(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    a = node.pod("a", "ns", "main")
    now = [0.0]
    directory = KubeletLogDirectory(str(node.logs), rescan_after_s=2.0, clock=lambda: now[0])
    assert directory.pod(a.uid) == PodName("ns", "a")
    assert directory.container(a.container_id("main")) == PodRef("a", "ns", "main")
    b = node.pod("b", "ns", "main")
    now[0] = 1.0
    assert directory.pod(b.uid) is None  # scanned 1 s ago: not yet
    now[0] = 2.5
    assert directory.pod(b.uid) == PodName("ns", "b")
    assert directory.container(b.container_id("main")) == PodRef("b", "ns", "main")


def test_kubelet_log_directory_missing_is_empty_not_an_error(tmp_path: Path) -> None:
    directory = KubeletLogDirectory(str(tmp_path / "absent"))
    assert directory.pod(UID) is None and directory.container(CID) is None


def test_proc_tree_visibility_and_cgroups(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    pod = node.pod("a", "ns", "main")
    proc = ProcFs(str(node.proc))
    assert proc.visibility() is Visibility.OK
    node.run(100, pod, "main")
    node.run(200, None)
    assert proc.pod_of(100) == CgroupPod(pod.uid, pod.container_id("main"))
    assert proc.pod_of(200) is NoPod.HOST
    assert proc.pod_of(300) is NoPod.GONE
    node.set_host_pid_namespace(False)
    assert proc.visibility() is Visibility.PIDS_NOT_VISIBLE
    assert ProcFs(str(tmp_path / "nothing")).visibility() is Visibility.PROC_UNREADABLE


POD_LIST = {
    "kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "1"},
    "items": [
        {"metadata": {"name": "infer-0", "namespace": "ml", "uid": UID},
         "spec": {"nodeName": "node-a", "containers": [{"name": "server", "image": "x"}]},
         "status": {"containerStatuses": [{"name": "server", "containerID": f"containerd://{CID}", "ready": True,
                                           "restartCount": 0, "image": "x", "imageID": ""}],
                    "initContainerStatuses": [{"name": "warmup", "containerID": "containerd://" + "a" * 64,
                                               "ready": False, "restartCount": 0, "image": "x", "imageID": ""}]}},
        {"metadata": {"name": "pending-0", "namespace": "ml", "uid": "0" * 32},
         "spec": {"nodeName": "node-a", "containers": [{"name": "c", "image": "x"}]}, "status": {}},
    ],
}


def test_pod_list_tables() -> None:
    tables = PodTables.of(filter(None, map(pod_meta, POD_LIST["items"])))
    assert {uid: (p.namespace, p.name) for uid, p in tables.by_uid.items()} == {
        UID: ("ml", "infer-0"), "0" * 32: ("ml", "pending-0")}
    assert tables.by_container == {CID: PodRef("infer-0", "ml", "server"),
                                   "a" * 64: PodRef("infer-0", "ml", "warmup")}
    assert tables.by_name[("ml", "infer-0")].uid == UID
    assert pod_meta({"metadata": {"name": "no-uid", "namespace": "ml"}}) is None


def _on_node(node_name: str, name: str, uid: str, container_id: str, labels: dict[str, str] | None = None) -> dict:
    obj = fake_pod("ml", name, labels, node_name=node_name, uid=uid)
    obj["status"]["containerStatuses"] = [{"name": "server", "containerID": f"containerd://{container_id}"}]
    return obj


@pytest.mark.e2e
def test_kubernetes_api_directory_lists_then_watches_this_nodes_pods(fake_kube: FakeKube, tmp_path: Path) -> None:
    fake_kube.put("", "v1", "pods", _on_node("node-a", "infer-0", UID, CID, {"app": "llm"}))
    fake_kube.put("", "v1", "pods", _on_node("node-b", "elsewhere", "1" * 32, "b" * 64))
    directory = KubernetesApiDirectory.from_api_client(
        api_client(fake_kube.write_kubeconfig(tmp_path / "kubeconfig")), "node-a")
    directory.start()
    try:
        assert directory.synced.is_set()
        assert directory.pod(UID) == PodName("ml", "infer-0")
        assert directory.container(CID) == PodRef("infer-0", "ml", "server")
        assert directory.pod("1" * 32) is None  # another node's pod is not even listed
        lists = [r for r in fake_kube.received if r.path == "/api/v1/pods"]
        assert {r.query["fieldSelector"] for r in lists} == {"spec.nodeName=node-a"}

        # a new pod, a label change and a deletion arrive through the watch, with no further list
        new_uid = "9" * 32
        fake_kube.put("", "v1", "pods", _on_node("node-a", "late", new_uid, "c" * 64))
        wait_until(lambda: directory.pod(new_uid) == PodName("ml", "late"))
        fake_kube.put("", "v1", "pods", _on_node("node-a", "infer-0", UID, CID, {"app": "llm", "tier": "gold"}))
        wait_until(lambda: directory.by_name("ml", "infer-0").labels.get("tier") == "gold")  # type: ignore[union-attr]
        fake_kube.delete("", "v1", "pods", "ml", "late")
        wait_until(lambda: directory.pod(new_uid) is None)
        assert fake_kube.count("GET", "/api/v1/pods", watch=False) == 1

        # the watch expires (410): the directory lists again and keeps up
        fake_kube.compact()
        fake_kube.expire_watches()
        fake_kube.put("", "v1", "pods", _on_node("node-a", "after-410", "8" * 32, "d" * 64))
        wait_until(lambda: directory.pod("8" * 32) is not None)
        wait_until(lambda: fake_kube.count("GET", "/api/v1/pods", watch=False) == 2)

        # the API server goes away: the last known pods stay, and changes made meanwhile arrive after it is back
        fake_kube.stop()
        assert directory.pod(UID) == PodName("ml", "infer-0")
        fake_kube.put("", "v1", "pods", _on_node("node-a", "while-down", "7" * 32, "e" * 64))
        fake_kube.start()
        wait_until(lambda: directory.pod("7" * 32) is not None, timeout=20)
    finally:
        directory.stop()
