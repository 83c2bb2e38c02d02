"""The real ``kubectl get --raw`` (from ``.tools/bin``) pointed at an adapter over HTTPS, as a user checks it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.support.tools import require_tool


def kubectl_get_raw(server_url: str, workdir: Path, path: str) -> subprocess.CompletedProcess[str]:
    """``kubectl get --raw PATH`` against ``server_url`` (TLS unverified, a token the adapter does not check)."""
    kubeconfig = workdir / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "adapter",
        "clusters": [{"name": "adapter", "cluster": {"server": server_url, "insecure-skip-tls-verify": True}}],
        "contexts": [{"name": "adapter", "context": {"cluster": "adapter", "user": "nobody"}}],
        "users": [{"name": "nobody", "user": {"token": "not-checked-without-auth"}}]}))
    return subprocess.run([require_tool("kubectl"), "--kubeconfig", str(kubeconfig), "get", "--raw", path],
                          capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
