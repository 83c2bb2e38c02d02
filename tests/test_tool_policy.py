"""The suite's one missing-tool policy: fail under CI, skip with the install command elsewhere."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support import tools

pytestmark = pytest.mark.unit

NOT_A_TOOL = "gpu-autoscaler-no-such-tool"


def test_a_missing_tool_fails_under_ci_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match=f"{NOT_A_TOOL} is not installed"):
        tools.require_tool(NOT_A_TOOL)


def test_a_missing_tool_skips_with_the_install_command_locally(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"promtool is not installed; install it with: sudo apt-get"):
        monkeypatch.setattr(tools, "find_tool", lambda name: None)
        tools.require_tool("promtool")


def test_a_present_tool_is_found_by_absolute_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    assert Path(tools.require_tool("sh")).is_absolute()


def test_no_test_decides_about_a_missing_tool_on_its_own() -> None:
    """Every tool lookup in tests/ goes through tests/support/tools.py, so no file can skip silently."""
    ad_hoc = re.compile(r"shutil\.which\(|skipif\(")
    offenders = [
        str(path.relative_to(tools.REPO))
        for path in (tools.REPO / "tests").rglob("*.py")
        if path.name != "tools.py" and path.name != Path(__file__).name and ad_hoc.search(path.read_text())
    ]
    assert offenders == []
