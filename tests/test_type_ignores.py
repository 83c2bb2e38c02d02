"""Every ``# type: ignore`` left in the packages mypy checks names its error code and says why on the same line
(``# type: ignore[code]  # reason``); mypy itself (``make test``) fails one that is no longer needed."""

from __future__ import annotations

import io
import re
import tokenize
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
IGNORE = re.compile(r"#\s*type:\s*ignore(?P<codes>\[[^\]]*\])?(?P<rest>.*)$")


def checked_files() -> list[Path]:
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["packages"]
    return sorted(path for package in packages for path in (ROOT / package).rglob("*.py")
                  if "_pb2" not in path.name)  # protoc's output: mypy reads the .pyi beside it


def unexplained(source: str) -> list[tuple[int, str]]:
    """(line, comment) of each type: ignore without an error code or without a reason after it."""
    found = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        match = IGNORE.search(token.string) if token.type == tokenize.COMMENT else None
        if match and (not match["codes"] or not match["rest"].strip().lstrip("#").strip()):
            found.append((token.start[0], token.string))
    return found


@pytest.mark.parametrize(("line", "bad"), [
    ("x = f()  # type: ignore", True),
    ("x = f()  # type: ignore[arg-type]", True),
    ("x = f()  # type: ignore[arg-type]  #", True),
    ("x = f()  # type: ignore  # no code", True),
    ("x = f()  # type: ignore[arg-type]  # the library says int; it takes float", False),
    ("x = '# type: ignore'", False),
])
def test_the_check_tells_an_explained_ignore_from_a_bare_one(line: str, bad: bool) -> None:
    assert bool(unexplained(line + "\n")) is bad


def test_every_ignore_in_the_checked_packages_says_why() -> None:
    files = checked_files()
    assert len(files) > 100, "the packages [tool.mypy] names were not found"
    bare = [f"{path.relative_to(ROOT)}:{line}: {comment}" for path in files
            for line, comment in unexplained(path.read_text(encoding="utf-8"))]
    assert not bare, "a type: ignore needs its [code] and, on the same line, why:\n" + "\n".join(bare)
