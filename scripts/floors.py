"""Print each direct dependency's floor beside the installed version; exit 1 where a floor was not installed.

Run inside the lowest-direct environment (scripts/lowest-venv.sh runs it): there every ``>=`` floor must be the version
installed, or the floor cannot be installed with the rest and is not a version the code is tested with.
"""

from __future__ import annotations

import sys
import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def direct_requirements() -> list[Requirement]:
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    name = project["name"]
    reqs = [Requirement(text) for text in project["dependencies"]]
    for extra in project.get("optional-dependencies", {}).values():
        reqs += [Requirement(text) for text in extra if Requirement(text).name != name]
    return reqs


def main() -> int:
    bad = []
    for req in direct_requirements():
        floors = [Version(spec.version) for spec in req.specifier if spec.operator == ">="]
        try:
            installed = Version(version(req.name))
        except PackageNotFoundError:
            bad.append(f"{req.name}: not installed")
            continue
        floor = max(floors) if floors else None
        mark = "ok" if floor is None or installed == floor else "NOT THE FLOOR"
        print(f"  {req.name:24} floor {floor!s:12} installed {installed!s:12} {mark}")
        if floor is not None and installed != floor:
            bad.append(f"{req.name}: floor {floor} but {installed} was installed (the floor cannot be installed "
                       f"with the rest; raise it)")
    for line in bad:
        print(f"check-floors: {line}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
