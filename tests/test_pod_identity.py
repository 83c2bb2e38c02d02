"""Process -> pod: cgroup paths, the kubelet's log directories, the Kubernetes API, the proc tree."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

from exporter.cgroups import CgroupPod, parse_cgroup_file, parse_cgroup_path
from exporter.kube_pod_directory import KubernetesApiDirectory, api_pod_lister, tables_from_pod_list
from exporter.pod_directory import KubeletLogDirectory, PodName, parse_container_log_link, parse_pod_log_dir
from exporter.pod_mapping import PodRef
from exporter.procfs import NoPod, ProcFs, Visibility
from tests.fake_node import FakeNode

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
    pods, containers = tables_from_pod_list(POD_LIST)
    assert pods == {UID: PodName("ml", "infer-0"), "0" * 32: PodName("ml", "pending-0")}
    assert containers == {CID: PodRef("infer-0", "ml", "server"), "a" * 64: PodRef("infer-0", "ml", "warmup")}
    assert tables_from_pod_list({"items": None}) == ({}, {})


class FakeApiServer:
    """Serves ``GET /api/v1/pods`` on loopback, recording the query; nothing else."""

    def __init__(self) -> None:
        self.queries: list[dict[str, list[str]]] = []
        self.status = 200
        self.pods = json.loads(json.dumps(POD_LIST))
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urlparse(self.path)
                owner.queries.append(parse_qs(url.query))
                ok = url.path == "/api/v1/pods" and owner.status == 200
                body = json.dumps(owner.pods if ok else {"kind": "Status", "code": owner.status}).encode()
                self.send_response(200 if ok else owner.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def api_server() -> Iterator[FakeApiServer]:
    server = FakeApiServer()
    yield server
    server.close()


def test_kubernetes_api_directory_lists_this_nodes_pods(api_server: FakeApiServer) -> None:
    from kubernetes import client

    config = client.Configuration()
    config.host = api_server.url
    directory = KubernetesApiDirectory("node-a", api_pod_lister(client.ApiClient(config), "node-a"))
    assert directory.pod(UID) is None  # nothing listed yet; the miss asks the thread for a refresh
    assert directory.refresh_once()
    assert api_server.queries[-1]["fieldSelector"] == ["spec.nodeName=node-a"]
    assert directory.pod(UID) == PodName("ml", "infer-0")
    assert directory.container(CID) == PodRef("infer-0", "ml", "server")
    api_server.status = 403
    assert not directory.refresh_once()
    assert directory.pod(UID) == PodName("ml", "infer-0")  # the last good list is kept


def test_kubernetes_api_directory_refreshes_on_its_thread_when_a_lookup_misses(api_server: FakeApiServer) -> None:
    import time

    from kubernetes import client

    config = client.Configuration()
    config.host = api_server.url
    directory = KubernetesApiDirectory("node-a", api_pod_lister(client.ApiClient(config), "node-a"),
                                       refresh_interval_s=3600, min_refresh_gap_s=0.01)
    directory.start()
    try:
        assert directory.pod(UID) == PodName("ml", "infer-0")  # listed once at start
        new_uid = "9" * 32
        api_server.pods["items"].append({"metadata": {"name": "late", "namespace": "ml", "uid": new_uid}})
        deadline = time.monotonic() + 10
        while directory.pod(new_uid) is None:  # each miss asks for a refresh; the hourly one is far away
            assert time.monotonic() < deadline, "no refresh after a miss"
            time.sleep(0.02)
        assert directory.pod(new_uid) == PodName("ml", "late")
    finally:
        directory.stop()
