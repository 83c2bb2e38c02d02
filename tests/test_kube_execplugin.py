"""The exec credential plugin protocol and the credentials' refresh rules, without servers or plugin processes.

The plugin cases are client-go's plugin/pkg/client/auth/exec/exec_test.go TestRefreshCreds table (its names), read
through ``adapter.kube.execplugin``; when credentials are loaded again (expiry, a 401, the minute's re-read, one
load for concurrent callers) follows the same file's getCreds/maybeRefreshCreds and transport/token_source.go.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import os
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import Configuration

from adapter.kube import execplugin
from adapter.kube.credentials import Credential, Credentials, PrivateFiles, credential_for
from adapter.kube.errors import KubeConfigError, KubeCredentialError
from tests.support.certs import issue, make_ca
from tests.support.waiting import LoopTicks, wait_until

pytestmark = pytest.mark.unit

V1 = "client.authentication.k8s.io/v1"
BETA = "client.authentication.k8s.io/v1beta1"
CA = make_ca("kubernetes-ca")
CERT = issue(CA, "adapter")


def answer(api_version: str | None = BETA, **status: str) -> bytes:
    document: dict[str, Any] = {"kind": "ExecCredential", "status": status}
    if api_version is not None:
        document["apiVersion"] = api_version
    return json.dumps(document).encode()


# -- TestRefreshCreds (exec_test.go): the answer read, the input given -------------------------------------------

# (client-go case name, exec section, plugin output, expected ExecResult fields or the error's substring)
REFRESH_CREDS = [
    ("beta-with-TLS-credentials", {"apiVersion": BETA, "interactiveMode": "IfAvailable"},
     answer(clientKeyData=CERT.key_pem.decode(), clientCertificateData=CERT.cert_pem.decode()),
     {"token": "", "cert_pem": CERT.cert_pem, "key_pem": CERT.key_pem, "expires_at": None}),
    ("beta-cert-but-no-key", {"apiVersion": BETA, "interactiveMode": "IfAvailable"},
     answer(clientCertificateData=CERT.cert_pem.decode()), "returned only certificate or key, not both"),
    ("beta-basic-request", {"apiVersion": BETA, "interactiveMode": "IfAvailable"}, answer(token="foo-bar"),
     {"token": "foo-bar"}),
    ("beta-basic-request-with-never-interactive-mode", {"apiVersion": BETA, "interactiveMode": "Never"},
     answer(token="foo-bar"), {"token": "foo-bar"}),
    ("beta-basic-request-with-if-available-interactive-mode", {"apiVersion": BETA, "interactiveMode": "IfAvailable"},
     answer(token="foo-bar"), {"token": "foo-bar"}),
    ("beta-basic-request-with-always-interactive-mode", {"apiVersion": BETA, "interactiveMode": "Always"},
     answer(token="foo-bar"), "exec plugin cannot support interactive mode: standard input is not a terminal"),
    ("beta-expiry", {"apiVersion": BETA, "interactiveMode": "IfAvailable"},
     answer(token="foo-bar", expirationTimestamp="2006-01-02T15:04:05Z"),
     {"token": "foo-bar", "expires_at": dt.datetime(2006, 1, 2, 15, 4, 5, tzinfo=dt.UTC).timestamp()}),
    ("beta-no-group-version", {"apiVersion": BETA, "interactiveMode": "IfAvailable"},
     answer(None, token="foo-bar"), "plugin returned version (none)"),
    ("beta-no-status", {"apiVersion": BETA, "interactiveMode": "IfAvailable"},
     json.dumps({"kind": "ExecCredential", "apiVersion": BETA}).encode(), "didn't return a status field"),
    ("beta-no-token", {"apiVersion": BETA, "interactiveMode": "IfAvailable"}, answer(),
     "didn't return a token or cert/key pair"),
    ("v1-basic-request", {"apiVersion": V1, "interactiveMode": "IfAvailable"}, answer(V1, token="foo-bar"),
     {"token": "foo-bar"}),
    ("v1-with-missing-interactive-mode", {"apiVersion": V1}, answer(V1, token="foo-bar"),
     'exec plugin cannot support interactive mode: unknown interactiveMode: ""'),
    # not in the table: a v1beta1 section without interactiveMode defaults to IfAvailable (SetDefaults_ExecConfig)
    ("beta-missing-interactive-mode-defaults", {"apiVersion": BETA}, answer(token="foo-bar"), {"token": "foo-bar"}),
    ("invalid apiVersion (newAuthenticator)", {"apiVersion": "client.authentication.k8s.io/v1alpha1"},
     answer(token="x"), "exec plugin: invalid apiVersion 'client.authentication.k8s.io/v1alpha1'"),
    ("a version other than the configured one", {"apiVersion": V1, "interactiveMode": "Never"},
     answer(BETA, token="x"), f"configured to use API version {V1}, plugin returned version {BETA}"),
    ("not JSON", {"apiVersion": V1, "interactiveMode": "Never"}, b"Unable to locate credentials",
     "decoding stdout: "),
    ("an expiry that is not RFC 3339", {"apiVersion": V1, "interactiveMode": "Never"},
     answer(V1, token="x", expirationTimestamp="tomorrow"), "expirationTimestamp 'tomorrow' is not an RFC 3339 time"),
]


@pytest.mark.parametrize(("name", "section", "output", "expected"), REFRESH_CREDS, ids=[c[0] for c in REFRESH_CREDS])
def test_refresh_creds_table_of_client_go(name: str, section: dict[str, Any], output: bytes,
                                          expected: dict[str, Any] | str) -> None:
    try:
        settings = execplugin.exec_settings({"command": "plugin", **section}, {}, where="kubeconfig k", base_dir="/")
        result = execplugin.read_credential(output, settings.api_version)
    except (KubeConfigError, KubeCredentialError) as exc:
        assert isinstance(expected, str), f"{name}: {exc}"
        assert expected in str(exc)
        return
    assert isinstance(expected, dict), f"{name}: expected an error with {expected!r}"
    for field, value in expected.items():
        assert getattr(result, field) == value, (name, field)


def test_the_plugin_is_told_it_is_not_interactive_even_where_client_go_would_say_so() -> None:
    """TestRefreshCreds' wantInput for beta-basic-request; client-go's ...-if-available-interactive-mode-and-terminal
    case gives ``interactive: true`` where stdin is a terminal: the adapter's plugin never gets a terminal."""
    for mode in ("Never", "IfAvailable"):
        settings = execplugin.exec_settings({"command": "p", "apiVersion": BETA, "interactiveMode": mode}, {},
                                            where="k", base_dir="/")
        assert json.loads(execplugin.exec_info(settings)) == {
            "kind": "ExecCredential", "apiVersion": BETA, "spec": {"interactive": False}}


CLUSTER = {"server": "foo", "tls-server-name": "bar", "certificate-authority-data": "YmF6",
           "extensions": [{"name": "client.authentication.k8s.io/exec",
                           "extension": {"apiVersion": "group/v1", "kind": "PluginConfig",
                                         "spec": {"audience": "snorlax"}}}]}


@pytest.mark.parametrize("provide", [True, False], ids=["beta-with-cluster-and-provide-cluster-info-is-serialized",
                                                        "beta-with-cluster-and-without-provide-cluster-info-is-not-"
                                                        "serialized"])
def test_cluster_info_is_given_only_when_asked(provide: bool) -> None:
    settings = execplugin.exec_settings({"command": "p", "apiVersion": BETA, "provideClusterInfo": provide},
                                        CLUSTER, where="k", base_dir="/")
    spec = json.loads(execplugin.exec_info(settings))["spec"]
    if not provide:
        assert spec == {"interactive": False}
        return
    assert spec == {"interactive": False, "cluster": {
        "server": "foo", "tls-server-name": "bar", "certificate-authority-data": "YmF6",
        "config": {"apiVersion": "group/v1", "kind": "PluginConfig", "spec": {"audience": "snorlax"}}}}


def test_cluster_info_reads_the_ca_file_relative_to_the_kubeconfig(tmp_path: Path) -> None:
    """rest.ConfigToExecCluster: CertificateAuthorityData from the CA file when the kubeconfig names one."""
    (tmp_path / "ca.crt").write_bytes(b"baz")
    cluster = {"server": "https://k", "certificate-authority": "ca.crt", "insecure-skip-tls-verify": True,
               "proxy-url": "http://proxy:3128"}
    info = execplugin.cluster_info(cluster, str(tmp_path), "k")
    assert info == {"server": "https://k", "certificate-authority-data": "YmF6", "insecure-skip-tls-verify": True,
                    "proxy-url": "http://proxy:3128"}
    with pytest.raises(KubeConfigError, match=r"^k: failed to load CA bundle for the exec plugin: .*missing\.crt"):
        execplugin.cluster_info({"certificate-authority": "missing.crt"}, str(tmp_path), "k")


def test_a_command_with_a_directory_is_relative_to_the_kubeconfig() -> None:
    """clientcmd's ResolveLocalPaths resolves an exec command holding a path separator; a bare name is PATH's."""
    relative = execplugin.exec_settings({"command": "./bin/get-token", "apiVersion": V1, "interactiveMode": "Never",
                                         "args": ["--region", "eu"], "env": [{"name": "AWS_PROFILE", "value": "x"}]},
                                        {}, where="k", base_dir="/etc/kube")
    bare = execplugin.exec_settings({"command": "aws", "apiVersion": V1, "interactiveMode": "Never"}, {}, where="k",
                                    base_dir="/etc/kube")
    assert (relative.command, relative.args, relative.env) == ("/etc/kube/bin/get-token", ("--region", "eu"),
                                                              (("AWS_PROFILE", "x"),))
    assert bare.command == "aws" and bare.name == "aws"


@pytest.mark.parametrize(("section", "message"), [
    ({"apiVersion": V1, "interactiveMode": "Never"}, "exec plugin: no command"),
    ({"command": "aws", "apiVersion": V1, "interactiveMode": "Never", "args": "eks get-token"},
     "args must be a list of strings"),
    ({"command": "aws", "apiVersion": V1, "interactiveMode": "Never", "env": [{"value": "x"}]},
     "env must be a list of {name, value}"),
    ({"command": "aws", "apiVersion": V1, "interactiveMode": "Sometimes"}, 'unknown interactiveMode: "Sometimes"'),
])
def test_unusable_exec_sections_are_one_line_errors_naming_the_kubeconfig(section: dict[str, Any],
                                                                          message: str) -> None:
    with pytest.raises(KubeConfigError) as caught:
        execplugin.exec_settings(section, {}, where="kubeconfig /etc/kube/config", base_dir="/etc/kube")
    assert str(caught.value).startswith("kubeconfig /etc/kube/config: ") and message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_missing_plugin_names_the_command_and_the_install_hint() -> None:
    """TestRefreshCreds' unknown-binary: the error carries the kubeconfig's installHint (on one line here)."""
    settings = execplugin.exec_settings({"command": "/nonexistent/aws-iam-authenticator", "apiVersion": BETA,
                                         "installHint": "install it:\n  brew install aws-iam-authenticator"},
                                        {}, where="k", base_dir="/")
    with pytest.raises(KubeCredentialError) as caught:
        execplugin.run(settings)
    assert str(caught.value) == ("exec: executable /nonexistent/aws-iam-authenticator not found (install it: brew "
                                 "install aws-iam-authenticator)")


def kubeconfig(user: dict[str, Any]) -> dict[str, Any]:
    return {"current-context": "c", "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
            "clusters": [{"name": "k", "cluster": {"server": "https://k"}}],
            "users": [{"name": "other", "user": {"token": "t"}}, {"name": "u", "user": user}]}


EXEC = {"command": "aws", "apiVersion": V1, "interactiveMode": "Never"}


@pytest.mark.parametrize(("user", "chosen"), [
    ({"exec": EXEC}, True),
    ({"exec": EXEC, "token": "t"}, False),  # exec.go UpdateTransportConfig: HasTokenAuth
    ({"exec": EXEC, "tokenFile": "/t"}, False),
    ({"exec": EXEC, "username": "u", "password": "p"}, False),  # HasBasicAuth
    ({"exec": EXEC, "client-certificate": "c.crt", "client-key": "c.key"}, False),  # HasCertAuth
    ({"exec": EXEC, "client-certificate-data": "Zm9v", "client-key-data": "YmFy"}, False),
    ({"exec": EXEC, "auth-provider": {"name": "oidc"}}, False),  # the Python loader tries it first
    ({"token": "t"}, False),
])
def test_the_exec_plugin_authenticates_only_a_user_without_other_credentials(user: dict[str, Any],
                                                                             chosen: bool) -> None:
    document = kubeconfig(user)
    found = execplugin.chosen_exec(document)
    assert (found is not None) == chosen
    if found is not None:
        assert found == (EXEC, {"server": "https://k"})
    stripped = execplugin.without_exec(document)
    assert "exec" not in stripped["users"][1]["user"] and {k: v for k, v in user.items() if k != "exec"} == \
        stripped["users"][1]["user"]
    assert document["users"][1]["user"] == user  # the document itself is left as it was


@pytest.mark.parametrize("document", [None, [], {"current-context": "nope"}, {**kubeconfig({"exec": EXEC}),
                                                                               "users": "u"}])
def test_malformed_documents_are_left_to_the_loader(document: Any) -> None:
    assert execplugin.chosen_exec(document) is None


# -- when credentials are loaded ---------------------------------------------------------------------------------

def plain(authorization: str, *, expires_in: float | None = None, reload_in: float = float("inf")) -> Credential:
    configuration = Configuration()
    configuration.host = "http://kube.example"
    return credential_for(configuration, authorization, None,
                          expires_at=None if expires_in is None else time.time() + expires_in,
                          reload_at=time.monotonic() + reload_in)


class Source:
    """Answers its ``answers`` in order (an exception is raised), each once ``gate`` is open."""

    description = "the test source"

    def __init__(self, *answers: Credential | Exception) -> None:
        self.answers = list(answers)
        self.gate = threading.Event()
        self.gate.set()
        self.threads: list[str] = []

    @property
    def calls(self) -> int:
        return len(self.threads)

    def load(self, previous: Credential | None) -> Credential:
        self.threads.append(threading.current_thread().name)
        assert self.gate.wait(20)
        found = self.answers.pop(0)
        if isinstance(found, Exception):
            raise found
        return found

    def close(self) -> None:
        pass


@pytest.fixture
def credential_log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    with caplog.at_level(logging.INFO, logger="adapter.kube.credentials"):
        yield caplog


def test_concurrent_callers_share_one_load_and_the_loop_keeps_running() -> None:
    """exec.go: the mutex guards calling the plugin; here threads (the watch caches) and coroutines (the reviews)
    wait for one load in a worker thread, and the loop serves other work meanwhile."""
    first = plain("Bearer one")
    source = Source(first)
    source.gate.clear()
    credentials = Credentials(source)
    got: list[Credential] = []
    threads = [threading.Thread(target=lambda: got.append(credentials.get(20))) for _ in range(4)]
    for thread in threads:
        thread.start()

    async def go() -> list[Credential]:
        async with LoopTicks() as ticks:
            waiting = asyncio.gather(*(credentials.aget(20) for _ in range(3)))
            await ticks.more(what="the loop running while the load waits")
            source.gate.set()
            return await waiting

    on_loop = asyncio.run(go())
    for thread in threads:
        thread.join(20)
    assert source.calls == 1 and source.threads == ["kube-credentials"]
    assert all(c is first for c in [*got, *on_loop]) and len(got) == 4


@pytest.mark.parametrize(("expires_in", "loads"), [(None, 1), (60.0, 1), (-1.0, 2)],
                         ids=["no expiry: kept", "not yet expired: kept", "expired: loaded again"])
def test_a_credential_is_loaded_again_once_its_expiry_passed(expires_in: float | None, loads: int) -> None:
    """exec.go credsExpired: a zero expiry never expires; otherwise expired once now is after it (no early skew,
    unlike the Python client's kube_config.py, which refreshes five minutes early)."""
    first, second = plain("Bearer one", expires_in=expires_in), plain("Bearer two")
    source = Source(first, second)
    credentials = Credentials(source)
    assert credentials.get(5) is first
    assert credentials.get(5) is (first if loads == 1 else second)
    assert source.calls == loads


def test_the_expiry_passing_while_in_use_loads_again() -> None:
    first, second = plain("Bearer one", expires_in=0.3), plain("Bearer two")
    credentials = Credentials(Source(first, second))
    assert credentials.get(5) is first
    wait_until(lambda: time.time() > first.expires_at, what="the expiry passing")  # type: ignore[operator]
    assert credentials.get(5) is second


def test_a_401_loads_again_once_for_the_credential_it_refused() -> None:
    """maybeRefreshCreds: only when the refused credentials are still the current ones."""
    first, second = plain("Bearer one"), plain("Bearer two")
    source = Source(first, second)
    credentials = Credentials(source)
    assert credentials.get(5) is first
    credentials.invalidate(first)
    credentials.invalidate(first)
    assert credentials.get(5) is second
    credentials.invalidate(first)  # an old credential's 401 arriving late
    assert credentials.get(5) is second and source.calls == 2


def test_a_due_reload_runs_in_the_background_while_the_credential_in_hand_is_sent() -> None:
    """token_source.go's file token: re-read every minute; here the request does not wait for the re-read."""
    first, second = plain("Bearer one", reload_in=-1), plain("Bearer two")
    source = Source(first, second)
    credentials = Credentials(source)
    assert credentials.get(5) is first
    source.gate.clear()
    assert credentials.get(0.01) is first  # due: a reload starts, and this caller does not wait for it
    wait_until(lambda: source.calls == 2, what="the background reload")
    source.gate.set()
    wait_until(lambda: credentials.get(5) is second, what="the reloaded credential")


def test_a_failed_background_reload_keeps_the_credential_in_hand(credential_log: pytest.LogCaptureFixture) -> None:
    """cachingTokenSource.Token: an error with a token in hand logs "Unable to rotate token" and returns it."""
    first = plain("Bearer one", reload_in=-1)
    source = Source(first, KubeCredentialError("reading the token file /t: No such file or directory"))
    credentials = Credentials(source)
    assert credentials.get(5) is first
    assert credentials.get(5) is first
    wait_until(lambda: credentials.failures_total == 1, what="the failed reload")
    assert credentials.get(5) is first and source.calls == 2  # retried later (RETRY_S), not on every request
    assert [r.getMessage() for r in credential_log.records] == [
        "the test source: reading the token file /t: No such file or directory"]


def test_with_nothing_to_send_every_waiter_gets_the_failure_logged_once(
        credential_log: pytest.LogCaptureFixture) -> None:
    source = Source(KubeCredentialError("exec: executable aws failed with exit code 255: An error occurred "
                                        "(ExpiredTokenException)"), ValueError("boom"), plain("Bearer ok"))
    source.gate.clear()
    credentials = Credentials(source)
    errors: list[str] = []

    def call() -> None:
        try:
            credentials.get(20)
        except KubeCredentialError as exc:
            errors.append(str(exc))

    threads = [threading.Thread(target=call) for _ in range(3)]
    for thread in threads:
        thread.start()
    wait_until(lambda: source.calls == 1, what="the load started")
    source.gate.set()
    for thread in threads:
        thread.join(20)
    assert errors == ["the test source: exec: executable aws failed with exit code 255: An error occurred "
                      "(ExpiredTokenException)"] * 3
    with pytest.raises(KubeCredentialError, match=r"^the test source: ValueError: boom$"):
        credentials.get(5)  # a bug in a source is one line too; and a failure is not remembered: this loads again
    assert credentials.get(5).authorization == "Bearer ok"
    assert len(credential_log.records) == 2 and all(r.levelno == logging.WARNING for r in credential_log.records)
    assert not any(r.exc_info for r in credential_log.records)


def test_a_caller_that_cannot_wait_longer_gets_a_clear_error() -> None:
    source = Source(plain("Bearer late"))
    source.gate.clear()
    credentials = Credentials(source)
    with pytest.raises(KubeCredentialError, match=r"^the test source: no credentials within 0\.05s \(still loading\)$"):
        credentials.get(0.05)

    async def go() -> None:
        with pytest.raises(KubeCredentialError, match=r"no credentials within 0\.05s"):
            await credentials.aget(0.05)

    asyncio.run(go())
    source.gate.set()
    assert credentials.get(5).authorization == "Bearer late" and source.calls == 1


# -- TLS material ------------------------------------------------------------------------------------------------

def https(tmp_path: Path) -> Configuration:
    configuration = Configuration()
    configuration.host = "https://kube.example:6443"
    configuration.ssl_ca_cert = str(tmp_path / "ca.crt")
    (tmp_path / "ca.crt").write_bytes(CA.cert_pem)
    return configuration


def test_the_tls_context_is_rebuilt_only_when_certificate_key_or_ca_change(tmp_path: Path) -> None:
    configuration = https(tmp_path)
    cert, key = CERT.write(tmp_path, "client")
    first = credential_for(configuration, None, None, cert_file=cert, key_file=key)
    same = credential_for(configuration, "Bearer t", first, cert_file=cert, key_file=key)
    issue(CA, "adapter-rotated").write(tmp_path, "client")
    rotated = credential_for(configuration, None, same, cert_file=cert, key_file=key)
    assert first.tls is not None and same.tls is first.tls and same.identity == first.identity
    assert rotated.tls is not first.tls and rotated.identity != first.identity
    assert rotated.configuration.cert_file == cert and configuration.cert_file is None  # the base is left alone


def test_unusable_tls_material_is_a_credential_error_naming_the_files(tmp_path: Path) -> None:
    """TestRefreshCreds' beta-with-bad-TLS-credentials: a certificate and key that do not parse."""
    configuration = https(tmp_path)
    (tmp_path / "bad.crt").write_text("bar")
    (tmp_path / "bad.key").write_text("foo")
    bad = r"TLS material \(.*ca\.crt, .*bad\.crt, .*bad\.key\) cannot be used"
    with pytest.raises(KubeCredentialError, match=bad):
        credential_for(configuration, None, None, cert_file=str(tmp_path / "bad.crt"),
                       key_file=str(tmp_path / "bad.key"))
    with pytest.raises(KubeCredentialError, match=r"reading the client certificate .*gone\.crt: No such file"):
        credential_for(configuration, None, None, cert_file=str(tmp_path / "gone.crt"), key_file=str(tmp_path / "k"))


def test_a_plugins_certificate_files_are_private_and_only_the_two_newest_pairs_are_kept() -> None:
    files = PrivateFiles()
    pairs = [files.write(issued.cert_pem, issued.key_pem) for issued in (CERT, issue(CA, "b"), issue(CA, "c"))]
    directory = os.path.dirname(pairs[0][0])
    assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
    assert all(stat.S_IMODE(os.stat(path).st_mode) == 0o600 for pair in pairs[1:] for path in pair)
    assert [os.path.exists(pair[0]) for pair in pairs] == [False, True, True]
    assert files.write(CERT.cert_pem, CERT.key_pem) == pairs[0]  # the same content: the same names
    assert Path(pairs[0][0]).read_bytes() == CERT.cert_pem
    files.close()
    assert not os.path.exists(directory)
