"""``gpu-adapter serve --keda-scaler-*``: every refusal is one line naming the flag, before anything is written."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.certs import issue, make_ca
from tests.support.prometheus import free_port

pytestmark = pytest.mark.e2e

PROMETHEUS = ["--prometheus-url", "http://127.0.0.1:1"]


def serve(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "adapter", "serve", *PROMETHEUS, "--cert-dir",
                           str(tmp_path / "certs"), "--bind-address", "127.0.0.1", *args],
                          capture_output=True, text=True, timeout=60)


def one_line_error(out: subprocess.CompletedProcess[str], needle: str) -> str:
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu-adapter: error: ") and needle in lines[0], out.stderr
    return lines[0]


@pytest.mark.parametrize(("args", "needle"), [
    (["--keda-scaler-client-ca-file", "ca.crt"], "--keda-scaler-client-ca-file needs --keda-scaler-port"),
    (["--keda-scaler-insecure"], "--keda-scaler-insecure needs --keda-scaler-port"),
    (["--keda-scaler-port", "9443", "--disable-auth", "--keda-scaler-stream-interval", "often"],
     "--keda-scaler-stream-interval"),
    (["--keda-scaler-port", "9443", "--disable-auth", "--keda-scaler-tls-cert-file", "x.crt"],
     "--keda-scaler-tls-cert-file and --keda-scaler-tls-private-key-file go together"),
    (["--keda-scaler-port", "9443", "--keda-scaler-insecure", "--keda-scaler-client-ca-file", "ca.crt"],
     "--keda-scaler-insecure serves plain text: --keda-scaler-client-ca-file would not be used"),
    (["--keda-scaler-port", "9443", "--disable-auth", "--keda-scaler-client-ca-file", "/nonexistent/ca.crt"],
     "--keda-scaler-client-ca-file /nonexistent/ca.crt: not a readable PEM CA bundle"),
    (["--keda-scaler-port", "6443", "--disable-auth"], "--keda-scaler-port 6443: the HTTPS server"),
    (["--keda-scaler-port", "70000", "--disable-auth"], "--keda-scaler-port"),
    (["--keda-scaler-port", "9443", "--disable-auth", "--keda-scaler-max-connection-age-grace", "5s"],
     "--keda-scaler-max-connection-age-grace 5s: too short for a StreamIsActive to end within it"),
    (["--keda-scaler-port", "9443", "--disable-auth", "--keda-scaler-handshake-timeout", "0s"],
     "--keda-scaler-handshake-timeout"),
    (["--keda-scaler-port", "9443", "--disable-auth", "--keda-scaler-max-requests-inflight", "0"],
     "--keda-scaler-max-requests-inflight"),
])
def test_bad_scaler_flags_are_one_line_and_write_nothing(tmp_path: Path, args: list[str], needle: str) -> None:
    one_line_error(serve(tmp_path, *args), needle)
    assert not (tmp_path / "certs").exists()  # the self-signed pair is written only once every flag is accepted


def test_the_scaler_needs_client_certificates_unless_told_to_serve_everyone(tmp_path: Path) -> None:
    line = one_line_error(serve(tmp_path, "--keda-scaler-port", "9443"),
                          "without --keda-scaler-client-ca-file the scaler would serve every caller")
    assert "--disable-auth or --keda-scaler-insecure" in line
    assert not (tmp_path / "certs").exists()


def test_a_bad_serving_pair_is_one_line(tmp_path: Path) -> None:
    ca = make_ca("ca")
    cert, _ = issue(ca, "localhost", client=False, server_names=("localhost",)).write(tmp_path, "a")
    _, other_key = issue(ca, "localhost", client=False, server_names=("localhost",)).write(tmp_path, "b")
    one_line_error(serve(tmp_path, "--keda-scaler-port", "9443", "--disable-auth", "--keda-scaler-tls-cert-file",
                         cert, "--keda-scaler-tls-private-key-file", other_key),
                   f"--keda-scaler-tls-cert-file {cert}: not a readable PEM certificate and key")


def test_a_port_in_use_is_one_line(tmp_path: Path) -> None:
    """Checked where the HTTPS port is (after the settings are built and logged), before serving anything."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out = serve(tmp_path, "--secure-port", str(free_port()), "--disable-auth", "--keda-scaler-port", str(port),
                    "--keda-scaler-insecure")
    assert out.returncode == 2, out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert last == f"gpu-adapter: error: --keda-scaler-port: cannot listen on 127.0.0.1:{port}: Address already in use"
    assert "Traceback" not in out.stderr
