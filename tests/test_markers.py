"""Every test module says what it needs, so the lanes stay honest: ``make test-quick`` runs what is none of e2e,
tools, demo or image, and a test that starts Prometheus or a process inside a ``unit`` module must say so itself."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

TESTS = Path(__file__).resolve().parent
KINDS = {"unit", "e2e", "tools", "demo", "image"}
NOT_QUICK = KINDS - {"unit"}
# What starts a real server or process, or needs an installed tool (tests/support has the helpers).
# Unit modules that name those only to test the helpers themselves.
HELPER_TESTS = {"test_markers.py", "test_tool_policy.py"}  # the latter: require_tool with its lookup patched, or sh
STARTS = re.compile(r"\b(PrometheusServer|AdapterProcess|ExporterProcess|VictoriaMetricsServer|prometheus_factory|"
                    r"podresources_server|fake_kube|require_tool|kubectl_get_raw|Popen)\b|\bsubprocess\.run\(")


def modules() -> list[Path]:
    return sorted(TESTS.rglob("test_*.py"))


def marks_in(node: ast.expr | None) -> set[str]:
    """``pytest.mark.x`` names in a pytestmark value or a decorator."""
    if node is None:
        return set()
    return {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)
            and isinstance(n.value, ast.Attribute) and n.value.attr == "mark"}


def module_marks(tree: ast.Module) -> set[str] | None:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            return marks_in(node.value)
    return None


def test_every_test_module_declares_its_kind() -> None:
    undeclared = [str(path.relative_to(TESTS.parent)) for path in modules()
                  if not (module_marks(ast.parse(path.read_text())) or set()) & KINDS]
    assert not undeclared, ("add a module-level pytestmark with one of " + ", ".join(sorted(KINDS))
                            + f" (pyproject.toml describes them): {undeclared}")


def unmarked_server_tests(source: str) -> list[str]:
    """Tests of a module not marked e2e/tools/demo/image that start a server or process, or need a tool (directly,
    through a helper of the module, or through a fixture of the module), without a mark of their own."""
    tree = ast.parse(source)
    if (module_marks(tree) or set()) & NOT_QUICK:
        return []
    lines = source.splitlines()
    functions = [n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    texts = {f.name: "\n".join(lines[f.lineno - 1:f.end_lineno]) for f in functions}
    starting = {f.name for f in functions if not f.name.startswith("test_") and STARTS.search(texts[f.name])}
    found = []
    for function in functions:
        if not function.name.startswith("test_"):
            continue
        text = texts[function.name]
        used = {a.arg for a in function.args.args} | set(re.findall(r"\b(\w+)\(", text))
        marked = set().union(*(marks_in(d) for d in function.decorator_list))
        if (STARTS.search(text) or used & starting) and not marked & NOT_QUICK:
            found.append(function.name)
    return found


def test_a_test_that_starts_servers_or_tools_in_a_unit_module_is_marked() -> None:
    unmarked = [f"{path.relative_to(TESTS.parent)}::{name}" for path in modules() if path.name not in HELPER_TESTS
                for name in unmarked_server_tests(path.read_text())]
    assert not unmarked, f"mark these @pytest.mark.e2e (or tools): they would run in the quick lane: {unmarked}"


def test_the_check_finds_servers_behind_helpers_and_fixtures() -> None:
    module = ("import pytest\npytestmark = pytest.mark.unit\n"
              "def helper():\n    return PrometheusServer([])\n"
              "@pytest.fixture\ndef adapter():\n    yield AdapterProcess('u', 'd')\n"
              "def test_helper():\n    helper()\n"
              "def test_fixture(adapter):\n    pass\n"
              "def test_shared(podresources_server):\n    pass\n"
              "def test_pure():\n    assert 1\n"
              "@pytest.mark.e2e\ndef test_marked():\n    helper()\n")
    assert unmarked_server_tests(module) == ["test_helper", "test_fixture", "test_shared"]
    assert unmarked_server_tests(module.replace("pytest.mark.unit", "pytest.mark.e2e")) == []
