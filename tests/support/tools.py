"""The suite's one policy for external tools (prometheus, promtool, helm, kubectl, openssl, buildah, ...).

``require_tool(name)`` returns the tool's absolute path (``.tools/bin`` first, then ``PATH``). When it is
missing: under CI (``CI=true``) the test fails naming the tool, since a CI run that skips what matters is not a
pass; elsewhere the test is skipped with the command that installs it. ``make test`` installs every tool, so it
never skips.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TOOLS_BIN = REPO / ".tools" / "bin"

_INSTALL_TOOLS = "bash scripts/install-tools.sh (make test runs it)"
INSTALL = {
    "helm": _INSTALL_TOOLS,
    "kubectl": _INSTALL_TOOLS,
    "prometheus": f"sudo apt-get install prometheus, or {_INSTALL_TOOLS}",
    "promtool": f"sudo apt-get install prometheus, or {_INSTALL_TOOLS}",
    "openssl": "sudo apt-get install openssl",
    "buildah": "sudo apt-get install buildah mmdebstrap, or bash scripts/build-image.sh (installs them as root)",
    "victoria-metrics": f"sudo apt-get install victoria-metrics, or {_INSTALL_TOOLS}",
    "mmdebstrap": "sudo apt-get install buildah mmdebstrap, or bash scripts/build-image.sh (installs them as root)",
}


def under_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"true", "1", "yes"}


def find_tool(name: str) -> str | None:
    candidate = TOOLS_BIN / name
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return str(candidate)
    return shutil.which(name)


def missing(name: str) -> None:
    """Fail (under CI) or skip (elsewhere) the current test because ``name`` is not installed."""
    unavailable(f"{name} is not installed; install it with: {INSTALL.get(name, f'your package manager ({name})')}",
                "a required tool is missing")


def unavailable(message: str, what: str) -> None:
    """Fail (under CI) or skip (elsewhere) the current test because something it needs is absent."""
    if under_ci():
        pytest.fail(f"CI=true and {what}: {message}", pytrace=False)
    pytest.skip(message)


def require_tool(name: str) -> str:
    """Absolute path of ``name``; see the module docstring for what happens when it is missing."""
    found = find_tool(name)
    if found is None:
        missing(name)
    return found  # type: ignore[return-value]  # missing() never returns
