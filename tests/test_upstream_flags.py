"""Every prometheus-adapter flag is carried, accepted or refused in one line, as adapter/cli/upstream.py says;
docs/flags.md shows the code's flag tables."""

from __future__ import annotations

import re
import ssl
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main

from adapter.cli import flags as flag_tables
from adapter.cli.main import app
from adapter.cli.upstream import FLAGS, Disposition, UpstreamFlag, UpstreamFlagError, markdown, translate
from adapter.server.serving import TLSSettings, TLSSettingsError, listening_socket
from tests.support.docs import generated_block

pytestmark = pytest.mark.unit

SAMPLE = {"string": "x", "bool": "true", "int": "3", "float": "1.5", "duration": "30s", "ip": "127.0.0.1",
          "stringSlice": "a,b", "stringArray": "k=v"}


def _serve_options() -> set[str]:
    serve = typer.main.get_command(app).commands["serve"]  # type: ignore[attr-defined]
    return {opt for param in serve.params for opt in param.opts}


def test_docs_table_is_the_code_table() -> None:
    table = generated_block("flags.md", "upstream-flags")
    assert table == markdown(), "regenerate docs/flags.md's upstream-flags table: python -c 'from adapter.cli." \
                                "upstream import markdown; print(markdown(), end=\"\")'"
    assert all(f"`--{flag.name}`" in table for flag in FLAGS)


def test_docs_adapter_tables_are_the_code_tables() -> None:
    tables = generated_block("flags.md", "adapter-flags")
    assert tables == flag_tables.markdown(flag_tables.TABLES), (
        "regenerate docs/flags.md's adapter-flags tables: python -c 'from adapter.cli.flags import TABLES, "
        "markdown; print(markdown(TABLES), end=\"\")'")
    for title, flags in flag_tables.TABLES:
        assert f"### `{title}`" in tables and all(f"| `{flag.name}`" in tables for flag in flags)


@pytest.mark.parametrize("flag", FLAGS, ids=lambda f: f.name)
def test_every_upstream_flag_is_carried_accepted_or_refused(flag: UpstreamFlag) -> None:
    value = "false" if flag.accept_only is False else SAMPLE[flag.kind]
    args = [f"--{flag.name}={value}"]
    if flag.disposition is Disposition.REFUSED:
        with pytest.raises(UpstreamFlagError) as refused:
            translate(args)
        message = str(refused.value)
        assert "\n" not in message and message.startswith(f"--{flag.name} ")
        if flag.ours:
            assert flag.ours in message
        return
    out = translate(args)
    if flag.disposition is Disposition.NO_EFFECT:
        assert out == []
    else:
        assert out and out[0] == flag.target and out[0] in _serve_options()
    if flag.accept_only is not None:  # the other position is refused
        with pytest.raises(UpstreamFlagError, match=f"--{flag.name} "):
            translate([f"--{flag.name}=true"])


@pytest.mark.parametrize(("args", "expected"), [
    (["-v", "4"], ["--v", "4"]),
    (["-v=4"], ["--v", "4"]),
    (["-v4"], ["--v", "4"]),
    (["--v=6"], ["--v", "6"]),
    (["--authentication-skip-lookup"], ["--authentication-skip-lookup"]),
    (["--authentication-skip-lookup=false"], []),
    (["--authentication-skip-lookup=T", "--authentication-skip-lookup=0"], []),  # the last one wins, as pflag
    (["--requestheader-group-headers=a", "--requestheader-group-headers", "b,c"],
     ["--requestheader-group-headers", "a,b,c"]),  # pflag appends repeated string slices
    (["--prometheus-header=a=b", "--prometheus-header", "a=c"], ["--prometheus-header", "a=b", "--prometheus-header",
                                                                 "a=c"]),
    (["--lister-kubeconfig=k", "--authentication-kubeconfig=k", "--authorization-kubeconfig", "k"],
     ["--kubeconfig", "k"] * 3),
    (["--disable-http2", "--profiling=false", "--http2-max-streams-per-connection=100", "--log-flush-frequency=5s",
      "--permit-address-sharing", "--enable-priority-and-fairness=false"], []),
    (["--query-cache-ttl", "5s", "--", "--client-qps=9"], ["--query-cache-ttl", "5s", "--", "--client-qps=9"]),
])
def test_pflag_spellings_become_ours(args: list[str], expected: list[str]) -> None:
    assert translate(args) == expected


@pytest.mark.parametrize(("args", "needle"), [
    (["--lister-kubeconfig=a", "--kubeconfig=b"], "--lister-kubeconfig 'a' and --kubeconfig 'b' differ"),
    (["--metrics-relist-interval=soon"], "--metrics-relist-interval 'soon': expected a duration"),
    (["--authentication-skip-lookup=maybe"], "--authentication-skip-lookup 'maybe': expected true or false"),
    (["--secure-port"], "flag needs an argument: --secure-port"),
    (["--profiling"], "only --profiling=false is accepted"),
    (["--vmodule=x=2"], "use --v instead"),
    (["--tls-sni-cert-key=a.crt,a.key"], "use --tls-cert-file/--tls-private-key-file instead"),
])
def test_refusals_say_why(args: list[str], needle: str) -> None:
    with pytest.raises(UpstreamFlagError, match=re.escape(needle)):
        translate(args)


@pytest.mark.e2e
def test_upstream_deployment_manifest_command_line_starts(tmp_path: Path) -> None:
    """prometheus-adapter's deploy/manifests/deployment.yaml arguments (v0.12), with our loopback addresses: the
    process parses them and gets as far as serving (here it fails on purpose at the port, which is taken)."""
    suites = ("TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305,TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305,"
              "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,"
              "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,"
              "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA,TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256,"
              "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA,TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA,"
              "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA,TLS_RSA_WITH_AES_128_GCM_SHA256,TLS_RSA_WITH_AES_256_GCM_SHA384,"
              "TLS_RSA_WITH_AES_128_CBC_SHA,TLS_RSA_WITH_AES_256_CBC_SHA")
    rules = tmp_path / "config.yaml"
    rules.write_text("rules: []\n")
    with listening_socket("127.0.0.1", 0, reuse_port=False) as taken:
        port = taken.getsockname()[1]
        out = subprocess.run([sys.executable, "-m", "adapter", "serve", f"--cert-dir={tmp_path / 'certs'}",
                              f"--config={rules}", "--metrics-relist-interval=1m",
                              "--prometheus-url=https://127.0.0.1:1/", f"--secure-port={port}",
                              f"--tls-cipher-suites={suites}", "--bind-address=127.0.0.1", "--disable-auth"],
                             capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1] == (
        f"gpu-adapter: error: cannot listen on 127.0.0.1:{port}: Address already in use"), out.stderr


def test_permit_port_sharing_lets_two_servers_bind_one_port() -> None:
    first = listening_socket("127.0.0.1", 0, reuse_port=True)
    port = first.getsockname()[1]
    try:
        listening_socket("127.0.0.1", port, reuse_port=True).close()
        with pytest.raises(OSError):
            listening_socket("127.0.0.1", port, reuse_port=False)
    finally:
        first.close()


def test_tls_settings_from_apiserver_names() -> None:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    TLSSettings.parse("VersionTLS12", ["TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "TLS_AES_128_GCM_SHA256"]).apply(ctx)
    tls12 = {c["name"] for c in ctx.get_ciphers() if c["protocol"] == "TLSv1.2"}
    assert tls12 == {"ECDHE-ECDSA-AES128-GCM-SHA256"}
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    TLSSettings.parse("VersionTLS13", []).apply(ctx)
    assert ctx.minimum_version is ssl.TLSVersion.TLSv1_3
    for version, suites in (("VersionTLS10", []), ("VersionTLS12", ["TLS_RSA_WITH_RC4_128_SHA"]),
                            ("VersionTLS12", ["TLS_AES_128_GCM_SHA256"])):
        with pytest.raises(TLSSettingsError):
            TLSSettings.parse(version, suites)
