"""The adapter's Kubernetes credentials as they change: an exec plugin (tests/support/exec_plugin.py, standing in
for ``aws eks get-token``) run again when its ``expirationTimestamp`` passes or after a 401, one run for
concurrent callers, its client certificate rotated; kubeconfig certificate files and the service-account token
rotated; and a slow or failing plugin never stalling the real adapter's other requests.

Against the fake Kubernetes API on loopback (tests/support/fake_kube.py), which requires the current token or
client certificate. The rules are client-go's: plugin/pkg/client/auth/exec/exec.go (getCreds, maybeRefreshCreds,
refreshCredsLocked), transport/token_source.go (a token file re-read each minute), transport/cert_rotation.go
(new connections after a certificate changes); the Python client's config/exec_provider.py and kube_config.py run
the plugin on whichever thread asks for the token, which on the serving loop stalled every request.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from adapter.kube import execplugin
from adapter.kube.api import KubeApi, KubeApiError, KubeClient
from adapter.kube.asyncapi import AsyncKubeApi
from adapter.kube.config import kubeconfig_configuration, load_api_client
from adapter.kube.credentials import Credentials, ReloadedConfiguration
from adapter.kube.errors import KubeCredentialError
from tests.support.adapter_process import AdapterProcess
from tests.support.certs import Issued, issue, make_ca
from tests.support.exec_plugin import exec_user, runs
from tests.support.fake_kube import FakeKube, configmap
from tests.support.prometheus import free_port
from tests.support.waiting import LoopTicks, wait_until, wait_until_async

pytestmark = [pytest.mark.e2e, pytest.mark.lowest]

CA = make_ca("kubernetes-ca")
SERVING = issue(CA, "kube-apiserver", client=False, server_names=("127.0.0.1",))
PODS = "/api/v1/pods"
# How long a plugin's answer is valid where a test checks it is not run again before then: long enough for a few
# loopback requests on a loaded machine, short enough to wait for.
VALID_S = 2.5


def client_of(kube: FakeKube, tmp_path: Path, user: dict, ca: bool = False) -> KubeClient:
    client = load_api_client(kube.write_kubeconfig(tmp_path / "kubeconfig", user=user,
                                                   ca_pem=CA.cert_pem if ca else None))
    assert client is not None
    return client


def plugin_dir(tmp_path: Path, token: str | None = "t-1", valid: float | None = None) -> Path:
    state = tmp_path / "plugin"
    state.mkdir()
    if token is not None:
        (state / "token").write_text(token)
    if valid is not None:
        (state / "valid").write_text(str(valid))
    return state


def started(state: Path) -> int:
    return sum(1 for what, _, _ in runs(state) if what == "start")


def authorizations(kube: FakeKube) -> list[str]:
    return [r.headers.get("authorization", "") for r in kube.received]


def both_layers(client: KubeClient) -> tuple[KubeApi, AsyncKubeApi]:
    return KubeApi(client, request_timeout=20), AsyncKubeApi(client, 20)


def get_async(api: AsyncKubeApi, path: str = PODS) -> dict:
    async def go() -> dict:
        try:
            return await api.get_json(path)
        finally:
            await api.aclose()

    return asyncio.run(go())


@pytest.fixture
def tls_kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeKube]:
    """The fake API over HTTPS, asking for client certificates from ``CA`` (each request's CN is recorded)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*SERVING.write(tmp_path_factory.mktemp("serving"), "serving"))
    context.load_verify_locations(cadata=CA.cert_pem.decode())
    context.verify_mode = ssl.CERT_OPTIONAL
    kube = FakeKube(tls=context)
    kube.start()
    try:
        yield kube
    finally:
        kube.stop()


# -- exec plugin: when it runs -----------------------------------------------------------------------------------

def test_the_plugin_runs_again_once_its_expiration_passes_and_not_before(fake_kube: FakeKube, tmp_path: Path) -> None:
    """exec.go getCreds: the cached credential is used until now is after its expirationTimestamp."""
    state = plugin_dir(tmp_path, "t-1", valid=VALID_S)
    fake_kube.require_token = "t-1"
    client = client_of(fake_kube, tmp_path, exec_user(state))
    sync, on_loop = both_layers(client)
    try:
        sync.get_json(PODS)
        get_async(on_loop)
        sync.get_json(PODS)
        assert started(state) == 1
        first = client.credentials.get(1)
        (state / "token").write_text("t-2")
        fake_kube.require_token = "t-2"
        wait_until(lambda: time.time() > first.expires_at, what="the token's expiry")  # type: ignore[operator]
        get_async(on_loop)
        sync.get_json(PODS)
    finally:
        client.close()
    assert authorizations(fake_kube) == ["Bearer t-1"] * 3 + ["Bearer t-2"] * 2
    assert started(state) == 2
    info = json.loads((state / "info-1.json").read_text())
    assert info["exec_info"] == {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                                 "spec": {"interactive": False}}
    assert info["stdin_is_terminal"] is False


def test_a_401_runs_the_plugin_again_for_a_credential_without_expiry(fake_kube: FakeKube, tmp_path: Path) -> None:
    """exec.go roundTripper: a 401 refreshes the credentials it was sent with (maybeRefreshCreds); the refused
    request itself is not retried."""
    state = plugin_dir(tmp_path, "t-1")
    fake_kube.require_token = "t-1"
    client = client_of(fake_kube, tmp_path, exec_user(state, provideClusterInfo=True))
    sync, on_loop = both_layers(client)
    try:
        sync.get_json(PODS)
        (state / "token").write_text("t-2")
        fake_kube.require_token = "t-2"
        with pytest.raises(KubeApiError) as refused:
            get_async(on_loop)
        sync.get_json(PODS)
        get_async(on_loop)
    finally:
        client.close()
    assert refused.value.code == 401
    assert authorizations(fake_kube) == ["Bearer t-1", "Bearer t-1", "Bearer t-2", "Bearer t-2"]
    assert started(state) == 2
    cluster = json.loads((state / "info-2.json").read_text())["exec_info"]["spec"]["cluster"]
    assert cluster == {"server": fake_kube.url}


def test_concurrent_callers_on_threads_and_on_the_loop_share_one_plugin_run(fake_kube: FakeKube,
                                                                           tmp_path: Path) -> None:
    """exec.go: "The mutex also guards calling the plugin": the watch caches' threads and the reviews on the
    serving loop wait for one run, and the loop keeps running while they wait."""
    state = plugin_dir(tmp_path, "t-1")
    gate = tmp_path / "open"
    (state / "gate").write_text(str(gate))
    fake_kube.require_token = "t-1"
    client = client_of(fake_kube, tmp_path, exec_user(state))
    sync, on_loop = both_layers(client)

    async def go() -> list[dict]:
        async with LoopTicks() as ticks:
            with ThreadPoolExecutor(4) as pool:
                threaded = [asyncio.wrap_future(pool.submit(sync.get_json, PODS)) for _ in range(4)]
                looped = [asyncio.ensure_future(on_loop.get_json(PODS)) for _ in range(3)]
                await wait_until_async(lambda: started(state) == 1, what="the plugin started")
                await ticks.more(what="the loop running while the plugin runs")
                assert not any(runs_ended(state))
                gate.touch()
                answers = await asyncio.gather(*threaded, *looped)
        await on_loop.aclose()
        return answers

    try:
        answers = asyncio.run(go())
    finally:
        client.close()
    assert len(answers) == 7 and all(a["kind"] == "PodList" for a in answers)
    assert [what for what, _, _ in runs(state)] == ["start", "end"]
    assert authorizations(fake_kube) == ["Bearer t-1"] * 7


def runs_ended(state: Path) -> list[int]:
    return [number for what, number, _ in runs(state) if what == "end"]


# -- client certificates -----------------------------------------------------------------------------------------

def plugin_certificate(state: Path, issued: Issued) -> None:
    (state / "client.crt").write_bytes(issued.cert_pem)
    (state / "client.key").write_bytes(issued.key_pem)


def test_a_plugins_rotated_client_certificate_is_presented_on_new_connections(tls_kube: FakeKube,
                                                                             tmp_path: Path) -> None:
    """TestTLSCredentials (exec_test.go): the plugin's certificate authenticates; a new one after expiry is used
    (exec.go closes the old connections; here the TLS context is new, so both layers connect again)."""
    state = plugin_dir(tmp_path, token=None, valid=VALID_S)
    plugin_certificate(state, issue(CA, "adapter-1"))
    tls_kube.require_client_cn = "adapter-1"
    client = client_of(tls_kube, tmp_path, exec_user(state), ca=True)
    sync, on_loop = both_layers(client)
    try:
        sync.get_json(PODS)
        get_async(on_loop)
        first = client.credentials.get(1)
        plugin_certificate(state, issue(CA, "adapter-2"))
        tls_kube.require_client_cn = "adapter-2"
        wait_until(lambda: time.time() > first.expires_at, what="the certificate's credential expiring")  # type: ignore[operator]
        sync.get_json(PODS)
        get_async(on_loop)
    finally:
        client.close()
    assert [r.client_cn for r in tls_kube.received] == ["adapter-1", "adapter-1", "adapter-2", "adapter-2"]
    assert authorizations(tls_kube) == [""] * 4 and started(state) == 2


def test_a_plugin_certificate_that_does_not_parse_is_a_credential_error(tls_kube: FakeKube, tmp_path: Path) -> None:
    """TestRefreshCreds' beta-with-bad-TLS-credentials."""
    state = plugin_dir(tmp_path, token=None)
    (state / "client.crt").write_text("bar")
    (state / "client.key").write_text("foo")
    client = client_of(tls_kube, tmp_path, exec_user(state), ca=True)
    try:
        with pytest.raises(KubeCredentialError, match=r"^the exec plugin python.* of kubeconfig .*: TLS material "):
            KubeApi(client).get_json(PODS)
    finally:
        client.close()
    assert tls_kube.received == []


def cert_user(tmp_path: Path, issued: Issued) -> dict:
    cert, key = issued.write(tmp_path, "client")
    return {"client-certificate": cert, "client-key": key}


def test_rotated_kubeconfig_certificate_files_are_used_after_a_401(tls_kube: FakeKube, tmp_path: Path) -> None:
    """A kubeconfig's client-certificate and client-key files renewed in place (cert-manager, a mounted Secret):
    the server refusing the old one makes both layers read the files again and connect with the new one."""
    tls_kube.require_client_cn = "adapter-1"
    client = client_of(tls_kube, tmp_path, cert_user(tmp_path, issue(CA, "adapter-1")), ca=True)
    sync, on_loop = both_layers(client)
    try:
        sync.get_json(PODS)
        get_async(on_loop)
        issue(CA, "adapter-2").write(tmp_path, "client")
        tls_kube.require_client_cn = "adapter-2"
        with pytest.raises(KubeApiError):
            sync.get_json(PODS)  # the old certificate, on a kept-alive connection: 401
        get_async(on_loop)
        sync.get_json(PODS)
    finally:
        client.close()
    assert [r.client_cn for r in tls_kube.received] == ["adapter-1", "adapter-1", "adapter-1", "adapter-2",
                                                        "adapter-2"]


def test_rotated_certificate_files_are_picked_up_each_period_without_a_401(tls_kube: FakeKube,
                                                                          tmp_path: Path) -> None:
    """transport/cert_rotation.go reloads the files periodically; the old certificate still valid meanwhile."""
    path = tls_kube.write_kubeconfig(tmp_path / "kubeconfig", user=cert_user(tmp_path, issue(CA, "adapter-1")),
                                     ca_pem=CA.cert_pem)
    client = KubeClient(kubeconfig_configuration(path), Credentials(ReloadedConfiguration(
        lambda: kubeconfig_configuration(path), "the test kubeconfig", period_s=0.05)))
    sync, on_loop = both_layers(client)
    try:
        sync.get_json(PODS)
        issue(CA, "adapter-2").write(tmp_path, "client")
        wait_until(lambda: sync.get_json(PODS) and tls_kube.received[-1].client_cn == "adapter-2",
                   what="a request with the renewed certificate")
        get_async(on_loop)
    finally:
        client.close()
    cns = [r.client_cn for r in tls_kube.received]
    assert cns[0] == "adapter-1" and cns[-2:] == ["adapter-2", "adapter-2"]
    assert cns == sorted(cns)  # once renewed, never the old one again


def test_the_service_account_token_rotated_by_the_kubelet_is_sent_after_a_401(tls_kube: FakeKube,
                                                                             tmp_path: Path) -> None:
    """In a pod: the projected token is re-read each minute (client-go's InClusterConfig, NewCachedFileTokenSource)
    and at once when the API server refuses the old one."""
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text("sa-1")
    (account / "ca.crt").write_bytes(CA.cert_pem)
    tls_kube.require_token = "sa-1"
    environ = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(tls_kube.port)}
    client = load_api_client(None, environ=environ, service_account_dir=str(account))
    assert client is not None
    sync, on_loop = both_layers(client)
    try:
        get_async(on_loop)
        (account / "token").write_text("sa-2")
        tls_kube.require_token = "sa-2"
        with pytest.raises(KubeApiError):
            sync.get_json(PODS)
        sync.get_json(PODS)
        get_async(on_loop)
    finally:
        client.close()
    assert [a.lower() for a in authorizations(tls_kube)] == ["bearer sa-1", "bearer sa-1", "bearer sa-2",
                                                              "bearer sa-2"]


# -- exec plugin failures ----------------------------------------------------------------------------------------

def script_settings(code: str) -> execplugin.ExecSettings:
    return execplugin.ExecSettings(sys.executable, ("-c", code), (), "client.authentication.k8s.io/v1")


def test_a_failing_plugin_is_one_line_with_its_exit_code_and_last_words() -> None:
    """TestRefreshCreds' binary-fails (exit code 73); the plugin's last stderr line, as ``aws`` prints its error."""
    settings = script_settings("import sys; sys.stderr.write('\\nAn error occurred (ExpiredTokenException) when "
                               "calling the\\n  GetCallerIdentity operation\\n\\n'); sys.exit(73)")
    with pytest.raises(KubeCredentialError) as caught:
        execplugin.run(settings)
    assert str(caught.value) == (f"exec: executable {sys.executable} failed with exit code 73: GetCallerIdentity "
                                 "operation")


def test_a_plugin_that_hangs_is_stopped() -> None:
    settings = script_settings("import time; time.sleep(30)")
    began = time.monotonic()
    with pytest.raises(KubeCredentialError, match=r"did not answer within 0\.5s and was stopped"):
        execplugin.run(settings, timeout_s=0.5)
    assert time.monotonic() - began < 20  # stopped, not waited for (a bound on the failure, not a timing goal)


# -- the real adapter --------------------------------------------------------------------------------------------

FRONT_PROXY_CA = make_ca("front-proxy-ca")
C2 = "/apis/custom.metrics.k8s.io/v1beta2"
AGGREGATOR = {"X-Remote-User": "system:kube-aggregator", "X-Remote-Group": "system:masters"}


class Serving:
    def __init__(self, tmp_path: Path, kube: FakeKube, state: Path) -> None:
        kube.put("", "v1", "configmaps", configmap("kube-system", "extension-apiserver-authentication", {
            "requestheader-client-ca-file": FRONT_PROXY_CA.cert_pem.decode(),
            "requestheader-allowed-names": '["front-proxy-client"]',
            "requestheader-username-headers": '["X-Remote-User"]',
            "requestheader-group-headers": '["X-Remote-Group"]'}))
        kube.tokens.update({f"user-{i}": {"username": "alice", "groups": ["devs"]} for i in range(20)})
        kube.authorize = lambda spec: (True, "")
        kubeconfig = kube.write_kubeconfig(tmp_path / "kubeconfig", user=exec_user(state))
        self.adapter = AdapterProcess(f"http://127.0.0.1:{free_port()}", str(tmp_path / "certs"),
                                      ["--kubeconfig", kubeconfig], disable_auth=False)
        proxy = ssl.create_default_context()
        proxy.check_hostname, proxy.verify_mode = False, ssl.CERT_NONE
        proxy.load_cert_chain(*issue(FRONT_PROXY_CA, "front-proxy-client").write(tmp_path, "proxy"))
        self.http = httpx.Client(base_url=self.adapter.url, verify=proxy, timeout=30)

    def as_user(self, number: int) -> httpx.Response:
        """A request with a bearer token never seen before: a TokenReview, which needs the adapter's credentials."""
        return self.http.get(C2, headers={"Authorization": f"Bearer user-{number}"})

    def close(self) -> str:
        self.http.close()
        return self.adapter.stop()


def test_a_slow_plugin_never_stalls_the_other_requests_of_the_adapter(fake_kube: FakeKube, tmp_path: Path) -> None:
    """While the plugin runs (held here until released: ``aws eks get-token`` waiting on STS), health checks and
    the aggregator's probes are answered, and the requests that need the plugin's token share its one run."""
    state = plugin_dir(tmp_path, "adapter-1", valid=1.0)
    fake_kube.require_token = "adapter-1"
    serving = Serving(tmp_path, fake_kube, state)
    try:
        assert serving.as_user(0).status_code == 200
        gate = tmp_path / "open"
        (state / "gate").write_text(str(gate))
        (state / "token").write_text("adapter-2")
        fake_kube.require_token = "adapter-2"
        first_runs = started(state)
        wait_until(lambda: expired(state), what="the adapter's token expiring")
        with ThreadPoolExecutor(3) as pool:
            waiting = [pool.submit(serving.as_user, n) for n in (1, 2, 3)]
            wait_until(lambda: started(state) == first_runs + 1, what="the plugin running")
            for _ in range(5):
                assert serving.http.get("/healthz").text == "ok"
                assert serving.http.get(C2, headers=AGGREGATOR).status_code == 200
            assert not any(f.done() for f in waiting) and len(runs_ended(state)) == first_runs
            gate.touch()
            assert [f.result().status_code for f in waiting] == [200, 200, 200]
        assert started(state) == first_runs + 1
    finally:
        log = serving.close()
    assert "Traceback" not in log


def expired(state: Path) -> bool:
    """Whether the plugin's last answer has expired (its expirationTimestamp was ``valid`` seconds after it began
    answering, before the run's end was written)."""
    ends = [at for what, _, at in runs(state) if what == "end"]
    return bool(ends) and time.time() > ends[-1] + float((state / "valid").read_text())


def test_a_failing_plugin_gives_a_status_and_one_log_line_then_recovers(fake_kube: FakeKube, tmp_path: Path) -> None:
    state = plugin_dir(tmp_path, "adapter-1", valid=1.0)
    fake_kube.require_token = "adapter-1"
    serving = Serving(tmp_path, fake_kube, state)
    try:
        assert serving.as_user(0).status_code == 200
        (state / "fail").write_text("Traceback (most recent call last):\n  ...\nbotocore.exceptions.NoCredentialsError:"
                                    " Unable to locate credentials\n")
        wait_until(lambda: expired(state), what="the adapter's token expiring")
        failed = serving.as_user(1)
        assert serving.http.get("/healthz").text == "ok"
        (state / "fail").unlink()
        recovered = serving.as_user(2)
    finally:
        log = serving.close()
    assert failed.status_code == 503 and failed.json()["kind"] == "Status"
    message = failed.json()["message"]
    assert "exec plugin python" in message and "failed with exit code 1: botocore.exceptions.NoCredentialsError: " \
        "Unable to locate credentials" in message
    assert recovered.status_code == 200
    lines = [line for line in log.splitlines() if "adapter.kube.credentials" in line]
    assert len(lines) == 1 and "WARNING" in lines[0] and "exit code 1" in lines[0], lines
    assert "Traceback" not in log  # the plugin's own traceback stays out: its last line says what went wrong
