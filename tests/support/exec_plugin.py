"""A stand-in for a kubeconfig exec credential plugin (``aws eks get-token``, ``gke-gcloud-auth-plugin``), run as
``python exec_plugin.py STATE_DIR`` from a kubeconfig's ``users[].user.exec``.

It speaks the protocol client-go's plugin/pkg/client/auth/exec/exec.go speaks: it reads ``KUBERNETES_EXEC_INFO``,
answers an ``ExecCredential`` of the same apiVersion on stdout, and fails with a message on stderr and a non-zero
exit. What it answers comes from files in STATE_DIR, read at every run, so a test rotates credentials by writing them:

- ``token``: the bearer token (absent: no token);
- ``client.crt`` and ``client.key``: PEM, answered as ``clientCertificateData`` / ``clientKeyData``;
- ``valid``: seconds the credential is valid (``expirationTimestamp`` = now + that; absent: no expiry);
- ``sleep``: seconds to take before answering (a slow ``aws`` call);
- ``gate``: when the file ``gate`` names is given, wait (at most 60 s) until that file exists before answering;
- ``fail``: when present, its text goes to stderr and the plugin exits 1;
- ``answer``: when present, printed instead of an ExecCredential (malformed answers).

Each run appends ``start N`` and ``end N`` lines to ``calls`` (N counts the runs) and keeps what it was given in
``info-N.json`` (``KUBERNETES_EXEC_INFO``, its argv, whether stdin is a terminal), so a test can count runs, see
whether two overlapped, and check what the plugin was told.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import sys
import time
from pathlib import Path


def _read(state: Path, name: str) -> str | None:
    path = state / name
    return path.read_text(encoding="utf-8") if path.exists() else None


def _count(state: Path) -> int:
    """The run's number: one more than the runs started so far (a lock makes concurrent runs count apart)."""
    with open(state / "calls", "a+", encoding="utf-8") as calls:
        fcntl.flock(calls, fcntl.LOCK_EX)
        calls.seek(0)
        number = sum(1 for line in calls if line.startswith("start ")) + 1
        calls.write(f"start {number} {time.time():.3f}\n")
        return number


def main(state: Path) -> int:
    number = _count(state)
    info = os.environ.get("KUBERNETES_EXEC_INFO", "{}")
    (state / f"info-{number}.json").write_text(json.dumps({
        "exec_info": json.loads(info), "argv": sys.argv[1:], "stdin_is_terminal": os.isatty(0)}), encoding="utf-8")
    time.sleep(float(_read(state, "sleep") or 0))
    gate = _read(state, "gate")
    if gate:
        deadline = time.monotonic() + 60
        while not Path(gate.strip()).exists() and time.monotonic() < deadline:
            time.sleep(0.02)
    try:
        failure = _read(state, "fail")
        if failure is not None:
            sys.stderr.write(failure)
            return 1
        answer = _read(state, "answer")
        if answer is not None:
            sys.stdout.write(answer)
            return 0
        status: dict[str, str] = {}
        token = _read(state, "token")
        if token is not None:
            status["token"] = token.strip()
        cert, key = _read(state, "client.crt"), _read(state, "client.key")
        if cert is not None and key is not None:
            status["clientCertificateData"], status["clientKeyData"] = cert, key
        valid = _read(state, "valid")
        if valid is not None:
            expires = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=float(valid))
            status["expirationTimestamp"] = expires.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        api_version = json.loads(info).get("apiVersion", "client.authentication.k8s.io/v1")
        json.dump({"apiVersion": api_version, "kind": "ExecCredential", "status": status}, sys.stdout)
        return 0
    finally:
        with open(state / "calls", "a", encoding="utf-8") as calls:
            calls.write(f"end {number} {time.time():.3f}\n")


def runs(state: Path) -> list[tuple[str, int, float]]:
    """(``start`` or ``end``, run number, time) of every run so far, in the order written."""
    path = state / "calls"
    if not path.exists():
        return []
    found = []
    for line in path.read_text(encoding="utf-8").splitlines():
        what, number, at = line.split()
        found.append((what, int(number), float(at)))
    return found


def exec_user(state: Path, api_version: str = "client.authentication.k8s.io/v1", **extra: object) -> dict:
    """A kubeconfig ``user`` whose exec plugin is this script with ``state`` as its directory."""
    return {"exec": {"apiVersion": api_version, "command": sys.executable, "args": [__file__, str(state)],
                     "interactiveMode": "Never", **extra}}


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
