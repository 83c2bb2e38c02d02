"""Kubernetes access: the watch-backed metadata cache, the resolver and the credentials loader, through the official
client against the fake API server (tests/support/fake_kube.py)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes.client
import kubernetes.watch
import pytest
from kubernetes.client import ApiClient

from adapter.api.status import ApiError
from adapter.kube.api import METADATA_LIST_ACCEPT, KubeApi, KubeApiError, KubeClient
from adapter.kube.cache import MetadataCache
from adapter.kube.config import KubeConfigError, kubeconfig_configuration, load_api_client
from adapter.kube.resolver import KubeResolver
from adapter.rules.resources import GroupResource
from adapter.rules.selectors import parse_selector
from tests.support.fake_kube import FakeKube, configmap, deployment, namespace_object, node, pod
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.lowest]

PODS = GroupResource("", "pods")
NODES = GroupResource("", "nodes")
NAMESPACES = GroupResource("", "namespaces")
DEPLOYMENTS = GroupResource("apps", "deployments")
FAST = {"backoff_initial": 0.02, "backoff_cap": 0.2}


def put_pod(fake: FakeKube, ns: str, name: str, **labels: str) -> None:
    fake.put("", "v1", "pods", pod(ns, name, labels))


def cache_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("kube-cache-")]


@pytest.fixture
def api_client(fake_kube: FakeKube, tmp_path: Path) -> Iterator[KubeClient]:
    client = load_api_client(fake_kube.write_kubeconfig(tmp_path / "kubeconfig"))
    assert client is not None
    yield client
    client.close()


@pytest.fixture
def make_cache(api_client: KubeClient) -> Iterator[Callable[..., MetadataCache]]:
    caches: list[MetadataCache] = []

    def make(group_resource: GroupResource = PODS, **options: Any) -> MetadataCache:
        cache = MetadataCache(api_client, group_resource, **(FAST | options))
        caches.append(cache)
        return cache

    yield make
    for cache in caches:
        cache.stop()


def synced(cache: MetadataCache) -> MetadataCache:
    assert cache.wait_synced(10), cache.last_error
    return cache


# -- selector resolution -----------------------------------------------------------------------------------------

def test_selectors_select_pods_of_one_namespace(fake_kube: FakeKube, make_cache: Callable[..., MetadataCache]) -> None:
    put_pod(fake_kube, "ml", "llm-0", app="llm", gpu="h100")
    put_pod(fake_kube, "ml", "llm-1", app="llm")
    put_pod(fake_kube, "ml", "embed-0", app="embed", gpu="a10")
    put_pod(fake_kube, "ml", "batch-0", tier="batch")
    put_pod(fake_kube, "other", "llm-9", app="llm", gpu="h100")
    cache = synced(make_cache())

    def names(selector: str) -> list[str]:
        return cache.names("ml", parse_selector(selector))

    assert names("app=llm") == ["llm-0", "llm-1"]
    assert names("app==llm,gpu=h100") == ["llm-0"]
    assert names("app!=llm") == ["batch-0", "embed-0"]
    assert names("app in (llm,embed)") == ["embed-0", "llm-0", "llm-1"]
    assert names("app notin (llm)") == ["batch-0", "embed-0"]
    assert names("gpu") == ["embed-0", "llm-0"]
    assert names("!gpu") == ["batch-0", "llm-1"]
    assert names("app=nothing") == []
    assert names("") == ["batch-0", "embed-0", "llm-0", "llm-1"]
    assert cache.names("other", parse_selector("app=llm")) == ["llm-9"]
    assert cache.names("absent", ()) == []
    assert cache.objects == 5


def test_cluster_scoped_nodes_and_namespaces(fake_kube: FakeKube, make_cache: Callable[..., MetadataCache]) -> None:
    fake_kube.put("", "v1", "nodes", node("gpu-1", {"nvidia.com/gpu.present": "true", "pool": "gpu"}))
    fake_kube.put("", "v1", "nodes", node("gpu-2", {"nvidia.com/gpu.present": "true", "pool": "gpu"}))
    fake_kube.put("", "v1", "nodes", node("cpu-1", {"pool": "cpu"}))
    fake_kube.put("", "v1", "namespaces", namespace_object("ml", {"team": "ml"}))
    fake_kube.put("", "v1", "namespaces", namespace_object("web", {"team": "web"}))
    nodes = synced(make_cache(NODES))
    namespaces = synced(make_cache(NAMESPACES))

    assert nodes.names(None, parse_selector("nvidia.com/gpu.present=true")) == ["gpu-1", "gpu-2"]
    assert nodes.names(None, parse_selector("pool notin (gpu)")) == ["cpu-1"]
    assert nodes.names(None, ()) == ["cpu-1", "gpu-1", "gpu-2"]
    assert namespaces.names(None, parse_selector("team=ml")) == ["ml"]
    assert fake_kube.count("GET", "/api/v1/nodes", watch=False) == 1
    assert fake_kube.count("GET", "/api/v1/namespaces", watch=False) == 1


def test_added_relabelled_and_deleted_pods_follow_the_watch(
        fake_kube: FakeKube, make_cache: Callable[..., MetadataCache]) -> None:
    put_pod(fake_kube, "ml", "llm-0", app="llm")
    cache = synced(make_cache())
    llm = parse_selector("app=llm")

    put_pod(fake_kube, "ml", "llm-1", app="llm")
    wait_until(lambda: cache.names("ml", llm) == ["llm-0", "llm-1"], what="added pod")
    put_pod(fake_kube, "ml", "llm-0", app="retired")
    wait_until(lambda: cache.names("ml", llm) == ["llm-1"], what="relabelled pod")
    assert cache.names("ml", parse_selector("app=retired")) == ["llm-0"]
    fake_kube.delete("", "v1", "pods", "ml", "llm-0")
    wait_until(lambda: cache.names("ml", ()) == ["llm-1"], what="deleted pod")
    assert cache.objects == 1
    assert cache.lists_total == 1  # all of it came through the watch


# -- no LIST per request -----------------------------------------------------------------------------------------

def test_requests_are_answered_from_the_cache_without_listing(fake_kube: FakeKube, api_client: KubeClient) -> None:
    for i in range(20):
        put_pod(fake_kube, "ml", f"llm-{i:02}", app="llm" if i % 2 else "other")
    resolver = KubeResolver(api_client, cache_factory=lambda c, gr: MetadataCache(c, gr, **FAST))
    selector = parse_selector("app=llm")

    async def many() -> list[list[str]]:
        return await asyncio.gather(*(resolver.names(PODS, "ml", selector) for _ in range(200)))

    try:
        answers = asyncio.run(many())
        answers += asyncio.run(many())
    finally:
        resolver.close()
    assert all(answer == [f"llm-{i:02}" for i in range(1, 20, 2)] for answer in answers)
    assert fake_kube.count("GET", "/api/v1/pods", watch=False) == 1
    assert list(resolver.caches) == []  # closed


# -- watch expiry, outages, truncated streams --------------------------------------------------------------------

def test_error_event_410_makes_the_cache_list_again(
        fake_kube: FakeKube, make_cache: Callable[..., MetadataCache]) -> None:
    put_pod(fake_kube, "ml", "llm-0", app="llm")
    cache = synced(make_cache())
    wait_until(lambda: fake_kube.open_watches("pods") == 1, what="watch open")

    assert fake_kube.expire_watches() == 1
    wait_until(lambda: cache.lists_total == 2, what="relist after the 410 ERROR event")
    wait_until(lambda: fake_kube.open_watches("pods") == 1, what="watch reopened")
    put_pod(fake_kube, "ml", "llm-1", app="llm")
    wait_until(lambda: cache.names("ml", ()) == ["llm-0", "llm-1"], what="changes after the relist")
    assert cache.watch_restarts_total >= 1


@pytest.mark.parametrize("as_http_status", [False, True], ids=["error-event", "http-410"])
def test_watch_from_a_compacted_version_relists(fake_kube: FakeKube, make_cache: Callable[..., MetadataCache],
                                                as_http_status: bool) -> None:
    fake_kube.bookmark_interval = None  # no bookmarks: the cache's version falls behind other resources' changes
    fake_kube.expire_with_http_status = as_http_status
    put_pod(fake_kube, "ml", "llm-0", app="llm")
    put_pod(fake_kube, "ml", "gone", app="llm")
    cache = synced(make_cache())
    wait_until(lambda: fake_kube.open_watches("pods") == 1, what="watch open")
    listed_at = cache.resource_version

    fake_kube.put("", "v1", "nodes", node("gpu-1"))  # history moves on without the pods watch seeing it
    fake_kube.delete("", "v1", "pods", "ml", "gone")
    stale = str(fake_kube.resource_version)
    wait_until(lambda: cache.resource_version == stale, what="delete seen")
    assert cache.names("ml", ()) == ["llm-0"]
    fake_kube.put("", "v1", "nodes", node("gpu-2"))
    fake_kube.compact()
    fake_kube.end_watches()  # as timeoutSeconds running out: the cache re-watches from its last version

    wait_until(lambda: cache.lists_total == 2, what="relist after 410")
    rewatched = [r.query.get("resourceVersion") for r in fake_kube.received if r.watch]
    assert rewatched[:2] == [listed_at, stale]
    wait_until(lambda: fake_kube.open_watches("pods") == 1, what="watch reopened")
    put_pod(fake_kube, "ml", "llm-1", app="llm")
    wait_until(lambda: cache.names("ml", ()) == ["llm-0", "llm-1"], what="changes after the relist")


def test_bookmarks_keep_the_version_fresh_so_no_relist_is_needed(
        fake_kube: FakeKube, make_cache: Callable[..., MetadataCache]) -> None:
    fake_kube.bookmark_interval = 0.02
    put_pod(fake_kube, "ml", "llm-0", app="llm")
    cache = synced(make_cache())
    fake_kube.put("", "v1", "nodes", node("gpu-1"))
    wait_until(lambda: cache.resource_version == str(fake_kube.resource_version), what="bookmark")
    fake_kube.compact()
    fake_kube.end_watches()

    wait_until(lambda: fake_kube.count("GET", "/api/v1/pods", watch=True) == 2 and fake_kube.open_watches() == 1,
               what="watch reopened")
    assert cache.lists_total == 1
    assert [r.query.get("resourceVersion") for r in fake_kube.received if r.watch][1] == \
        str(fake_kube.resource_version)
    assert cache.watch_restarts_total == 1


def test_a_stream_cut_mid_event_is_not_applied_and_the_cache_relists(
        fake_kube: FakeKube, make_cache: Callable[..., MetadataCache]) -> None:
    put_pod(fake_kube, "ml", "llm-0", app="llm")
    cache = synced(make_cache())
    wait_until(lambda: fake_kube.open_watches("pods") == 1, what="watch open")

    fake_kube.drop_watches()  # sends half an event ("truncated-...") and cuts the connection
    wait_until(lambda: cache.lists_total == 2, what="relist after the cut")
    assert cache.names("ml", ()) == ["llm-0"]
    assert cache.last_error is not None and "WATCH /api/v1/pods" in cache.last_error


def test_apiserver_restart_with_changes_while_down_converges(
        fake_kube: FakeKube, make_cache: Callable[..., MetadataCache]) -> None:
    for name in ("llm-0", "llm-1", "llm-2"):
        put_pod(fake_kube, "ml", name, app="llm")
    cache = synced(make_cache())
    llm = parse_selector("app=llm")

    fake_kube.stop()
    wait_until(lambda: "refused" in (cache.last_error or "").lower(), what="connection refused")
    assert cache.synced and cache.names("ml", llm) == ["llm-0", "llm-1", "llm-2"]  # last known state meanwhile
    fake_kube.delete("", "v1", "pods", "ml", "llm-0")
    put_pod(fake_kube, "ml", "llm-1", app="moved")
    put_pod(fake_kube, "ml", "llm-3", app="llm")
    lists_before = cache.lists_total
    fake_kube.start()

    wait_until(lambda: cache.names("ml", llm) == ["llm-2", "llm-3"], what="converged after the restart")
    assert cache.names("ml", ()) == ["llm-1", "llm-2", "llm-3"]
    assert cache.lists_total == lists_before + 1


def test_paged_lists_are_followed_to_the_end(fake_kube: FakeKube, make_cache: Callable[..., MetadataCache]) -> None:
    for i in range(7):
        put_pod(fake_kube, "ml", f"p{i}", app="llm")
    cache = synced(make_cache(page_size=3))
    assert cache.names("ml", ()) == [f"p{i}" for i in range(7)]
    pages = [r for r in fake_kube.received if not r.watch and r.path == "/api/v1/pods"]
    assert [r.query.get("limit") for r in pages] == ["3", "3", "3"]
    assert [bool(r.query.get("continue")) for r in pages] == [False, True, True]
    assert cache.lists_total == 1


# -- what goes on the wire ---------------------------------------------------------------------------------------

def test_metadata_only_accept_header_and_kubeconfig_token_are_sent(
        fake_kube: FakeKube, tmp_path: Path) -> None:
    fake_kube.require_token = "s3cret"
    put_pod(fake_kube, "ml", "llm-0", app="llm")
    client = load_api_client(fake_kube.write_kubeconfig(tmp_path / "kubeconfig", token="s3cret"))
    assert client is not None
    cache = MetadataCache(client, PODS, **FAST)
    try:
        assert cache.wait_synced(10), cache.last_error
        wait_until(lambda: fake_kube.open_watches("pods") == 1, what="watch open")
    finally:
        cache.stop()
        client.close()
    lists = [r for r in fake_kube.received if r.path == "/api/v1/pods" and not r.watch]
    watches = [r for r in fake_kube.received if r.path == "/api/v1/pods" and r.watch]
    assert lists[0].headers["accept"] == METADATA_LIST_ACCEPT
    assert "as=PartialObjectMetadata;" in watches[0].headers["accept"]
    assert watches[0].query["allowWatchBookmarks"] == "true" and int(watches[0].query["timeoutSeconds"]) > 0
    assert {r.headers["authorization"] for r in fake_kube.received} == {"Bearer s3cret"}


def test_a_configurations_refresh_hook_runs_in_a_worker_thread_and_again_after_a_401(
        fake_kube: FakeKube, tmp_path: Path) -> None:
    """The loaders keep a token fresh through ``refresh_api_key_hook`` (the in-cluster loader re-reads the rotated
    service-account token): it runs in the credentials' worker thread, never on the caller's (the serving loop's),
    once a minute and at once after the API server answered 401, and each request carries the token it left."""
    client = KubeClient(kubeconfig_configuration(fake_kube.write_kubeconfig(tmp_path / "kubeconfig", token="first")))
    tokens = iter(["second", "third"])
    threads: list[str] = []

    def rotate(configuration: Any) -> None:  # where the client's loaders keep it (incluster_config.py)
        threads.append(threading.current_thread().name)
        configuration.api_key["BearerToken"] = f"Bearer {next(tokens)}"

    client.configuration.refresh_api_key_hook = rotate
    api = KubeApi(client)
    try:
        api.get_json("/api/v1/pods")
        fake_kube.require_token = "third"
        with pytest.raises(KubeApiError) as refused:  # not retried, as client-go's exec round tripper
            api.post_json("/apis/authentication.k8s.io/v1/tokenreviews",
                          {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": "t"}})
        api.post_json("/apis/authentication.k8s.io/v1/tokenreviews",
                      {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": "t"}})
    finally:
        client.close()
    assert refused.value.code == 401
    assert [r.headers["authorization"] for r in fake_kube.received] == ["Bearer second", "Bearer second",
                                                                        "Bearer third"]
    assert threads == ["kube-credentials", "kube-credentials"]


def test_a_server_that_ignores_the_metadata_accept_header_still_works(
        fake_kube: FakeKube, make_cache: Callable[..., MetadataCache]) -> None:
    fake_kube.honour_metadata_accept = False  # full Pod objects in lists and events
    put_pod(fake_kube, "ml", "llm-0", app="llm")
    cache = synced(make_cache())
    put_pod(fake_kube, "ml", "llm-1", app="llm")
    wait_until(lambda: cache.names("ml", parse_selector("app=llm")) == ["llm-0", "llm-1"], what="event applied")


def test_a_wrong_token_leaves_the_cache_unsynced_with_the_reason(fake_kube: FakeKube, tmp_path: Path) -> None:
    fake_kube.require_token = "right"
    client = load_api_client(fake_kube.write_kubeconfig(tmp_path / "kubeconfig", token="wrong"))
    resolver = KubeResolver(client, sync_timeout=0.5, cache_factory=lambda c, gr: MetadataCache(c, gr, **FAST))
    try:
        with pytest.raises(ApiError) as caught:
            asyncio.run(resolver.names(PODS, "ml", ()))
    finally:
        resolver.close()
        client.close()
    assert caught.value.code == 503
    assert "pods" in caught.value.message and "401 Unauthorized" in caught.value.message


# -- KubeResolver ------------------------------------------------------------------------------------------------

def test_resolver_empty_selector_returns_every_object_of_the_namespace(
        fake_kube: FakeKube, api_client: KubeClient) -> None:
    put_pod(fake_kube, "ml", "b", app="x")
    put_pod(fake_kube, "ml", "a")
    put_pod(fake_kube, "web", "c")
    resolver = KubeResolver(api_client)
    try:
        assert asyncio.run(resolver.names(PODS, "ml", ())) == ["a", "b"]
        assert set(resolver.caches) == {PODS} and resolver.caches[PODS].objects == 3
    finally:
        resolver.close()


def test_resolver_non_core_resource_discovers_the_preferred_version(
        fake_kube: FakeKube, api_client: KubeClient) -> None:
    fake_kube.put("apps", "v1", "deployments", deployment("ml", "llm", {"app": "llm", "tier": "gpu"}))
    fake_kube.put("apps", "v1", "deployments", deployment("ml", "web", {"app": "web"}))
    fake_kube.register("example.com", "v1alpha1", "widgets", "Widget")
    fake_kube.register("example.com", "v1", "widgets", "Widget")
    fake_kube.preferred_versions["example.com"] = "v1"
    fake_kube.put("example.com", "v1", "widgets", {"kind": "Widget", "metadata": {"name": "w", "namespace": "ml"}})
    resolver = KubeResolver(api_client)
    try:
        assert asyncio.run(resolver.names(DEPLOYMENTS, "ml", parse_selector("tier=gpu"))) == ["llm"]
        assert asyncio.run(resolver.names(GroupResource("example.com", "widgets"), "ml", ())) == ["w"]
    finally:
        resolver.close()
    assert fake_kube.count("GET", "/apis/apps") == 1
    assert fake_kube.count("GET", "/apis/apps/v1/deployments", watch=False) == 1
    assert fake_kube.count("GET", "/apis/example.com/v1/widgets", watch=False) == 1
    assert fake_kube.count("GET", "/apis/example.com/v1alpha1/widgets") == 0


@pytest.mark.parametrize("group_resource", [GroupResource("example.com", "widgets"), GroupResource("", "widgets")],
                         ids=["unknown-group", "unknown-core-resource"])
def test_resolver_unserved_resource_is_404(fake_kube: FakeKube, api_client: KubeClient,
                                           group_resource: GroupResource) -> None:
    resolver = KubeResolver(api_client, sync_timeout=10)
    try:
        with pytest.raises(ApiError) as caught:
            asyncio.run(resolver.names(group_resource, "ml", ()))
    finally:
        resolver.close()
    assert caught.value.code == 404
    assert str(group_resource) in caught.value.message and "does not serve" in caught.value.message


def test_resolver_unsynced_cache_is_503_naming_the_resource_and_the_error(
        fake_kube: FakeKube, api_client: KubeClient) -> None:
    fake_kube.stop()
    resolver = KubeResolver(api_client, sync_timeout=1.0, cache_factory=lambda c, gr: MetadataCache(c, gr, **FAST))
    try:
        with pytest.raises(ApiError) as caught:
            asyncio.run(resolver.names(PODS, "ml", parse_selector("app=llm")))
        fake_kube.start()
        put_pod(fake_kube, "ml", "llm-0", app="llm")
        assert asyncio.run(resolver.names(PODS, "ml", parse_selector("app=llm"))) == ["llm-0"]
    finally:
        resolver.close()
    assert caught.value.code == 503
    assert "cache of pods has not synced" in caught.value.message
    assert "refused" in caught.value.message.lower()
    assert "\n" not in caught.value.message


# -- threads -----------------------------------------------------------------------------------------------------

def test_stop_ends_the_threads_whatever_they_are_doing(fake_kube: FakeKube, api_client: KubeClient,
                                                       tmp_path: Path) -> None:
    assert cache_threads() == []
    watching = MetadataCache(api_client, PODS, **FAST)
    assert watching.wait_synced(10)
    wait_until(lambda: fake_kube.open_watches("pods") == 1, what="watch open")
    nowhere = FakeKube()  # never started: every attempt is refused and the cache sits in its backoff
    nowhere.start()
    nowhere.stop()
    refused_client = load_api_client(nowhere.write_kubeconfig(tmp_path / "nowhere"))
    backing_off = MetadataCache(refused_client, PODS, backoff_initial=5, backoff_cap=5)
    wait_until(lambda: backing_off.last_error is not None, what="first failure")
    resolver = KubeResolver(api_client)
    asyncio.run(resolver.names(NODES, None, ()))
    assert len(cache_threads()) == 3

    watching.stop()
    backing_off.stop()
    resolver.close()
    refused_client.close()
    assert cache_threads() == []


# -- credentials -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("content", "expected"), [
    (None, "no such file"),
    ("clusters: [unclosed\n  - : :", "unreadable"),
    ("- just\n- a list\n", "not a kubeconfig"),
    ("apiVersion: v1\nkind: Config\n", "current-context"),
    ("\x00\x01\x02 binary", "unreadable"),
], ids=["missing", "bad-yaml", "not-a-mapping", "no-context", "binary"])
def test_unusable_kubeconfig_is_a_one_line_error_naming_the_file(tmp_path: Path, content: str | None,
                                                                  expected: str) -> None:
    path = tmp_path / "kubeconfig"
    if content is not None:
        path.write_text(content)
    with pytest.raises(KubeConfigError) as caught:
        load_api_client(str(path))
    message = str(caught.value)
    assert message.startswith(f"kubeconfig {path}: ")
    assert expected in message
    assert "\n" not in message


def test_without_kubeconfig_or_service_account_there_is_no_client(
        fake_kube: FakeKube, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    fake_kube.write_kubeconfig(home / ".kube" / "config")  # a developer's credentials must not be picked up
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("KUBECONFIG", str(home / ".kube" / "config"))
    assert load_api_client(None, environ={}, service_account_dir=str(tmp_path / "no-sa")) is None
    assert load_api_client(None, environ={"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"},
                           service_account_dir=str(tmp_path / "no-sa")) is None
    assert fake_kube.requests == []


def test_in_cluster_service_account_is_used_in_a_pod(tmp_path: Path) -> None:
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text("pod-token")
    (account / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    environ = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    client = load_api_client(None, environ=environ, service_account_dir=str(account))
    assert client is not None
    try:
        configuration = client.configuration
        assert configuration.host == "https://10.96.0.1:443"
        assert configuration.ssl_ca_cert == str(account / "ca.crt")
        assert configuration.auth_settings()["BearerToken"]["value"].split() == ["bearer", "pod-token"]
    finally:
        client.close()
    (account / "ca.crt").unlink()
    with pytest.raises(KubeConfigError, match=r"^in-cluster configuration \(.*\): .*cert"):
        load_api_client(None, environ=environ, service_account_dir=str(account))


# -- the fake API server speaks what the official typed client expects -------------------------------------------

@pytest.fixture
def typed_client(api_client: KubeClient) -> Iterator[ApiClient]:
    """The official typed client on the same configuration (the fake must satisfy it, not only our raw JSON)."""
    client = ApiClient(api_client.configuration)
    yield client
    client.close()


def test_fake_serves_objects_and_reviews_to_the_typed_client(fake_kube: FakeKube, typed_client: ApiClient) -> None:
    fake_kube.put("", "v1", "configmaps", configmap("kube-system", "extension-apiserver-authentication",
                                                    {"requestheader-allowed-names": '["front-proxy-client"]'}))
    put_pod(fake_kube, "ml", "llm-0", app="llm")
    fake_kube.tokens["t0k"] = {"username": "alice", "uid": "1", "groups": ["devs"], "extra": {"scope": ["x"]}}
    fake_kube.authorize = lambda spec: (spec.get("user") == "alice", "alice may")
    core = kubernetes.client.CoreV1Api(typed_client)

    found = core.read_namespaced_config_map("extension-apiserver-authentication", "kube-system")
    assert found.data == {"requestheader-allowed-names": '["front-proxy-client"]'}
    with pytest.raises(kubernetes.client.ApiException) as missing:
        core.read_namespaced_config_map("absent", "kube-system")
    assert missing.value.status == 404
    assert [p.metadata.name for p in core.list_namespaced_pod("ml", label_selector="app=llm").items] == ["llm-0"]

    authn = kubernetes.client.AuthenticationV1Api(typed_client)
    good = authn.create_token_review(kubernetes.client.V1TokenReview(spec=kubernetes.client.V1TokenReviewSpec(
        token="t0k")))
    bad = authn.create_token_review(kubernetes.client.V1TokenReview(spec=kubernetes.client.V1TokenReviewSpec(
        token="nope")))
    assert good.status.authenticated and good.status.user.username == "alice" and good.status.user.groups == ["devs"]
    assert not bad.status.authenticated and bad.status.error
    assert [r["spec"]["token"] for r in fake_kube.token_reviews] == ["t0k", "nope"]

    authz = kubernetes.client.AuthorizationV1Api(typed_client)
    attributes = kubernetes.client.V1ResourceAttributes(verb="get", group="custom.metrics.k8s.io", resource="pods")
    for user in ("alice", "mallory"):
        review = authz.create_subject_access_review(kubernetes.client.V1SubjectAccessReview(
            spec=kubernetes.client.V1SubjectAccessReviewSpec(user=user, resource_attributes=attributes)))
        assert review.status.allowed == (user == "alice")
    assert [s["user"] for s in fake_kube.access_reviews] == ["alice", "mallory"]
    assert fake_kube.access_reviews[0]["resourceAttributes"]["group"] == "custom.metrics.k8s.io"


def test_fake_filtered_namespaced_watch_speaks_the_official_watch_protocol(
        fake_kube: FakeKube, typed_client: ApiClient) -> None:
    fake_kube.bookmark_interval = None
    put_pod(fake_kube, "ml", "before", app="llm")
    since = str(fake_kube.resource_version)
    put_pod(fake_kube, "ml", "a", app="llm")
    put_pod(fake_kube, "ml", "a", app="other")  # leaves the selection: DELETED for this watch
    put_pod(fake_kube, "web", "b", app="llm")  # another namespace
    put_pod(fake_kube, "ml", "c", app="llm")
    core = kubernetes.client.CoreV1Api(typed_client)

    events = [(e["type"], e["object"].metadata.name) for e in kubernetes.watch.Watch().stream(
        core.list_namespaced_pod, "ml", label_selector="app=llm", resource_version=since, timeout_seconds=1)]
    assert events == [("ADDED", "a"), ("DELETED", "a"), ("ADDED", "c")]
    fake_kube.compact()
    with pytest.raises(kubernetes.client.ApiException) as expired:
        list(kubernetes.watch.Watch().stream(core.list_namespaced_pod, "ml", resource_version=since,
                                             timeout_seconds=1))
    assert expired.value.status == 410
