"""Files under ../shared/reference (the project's reference data, read in place and never copied into the repo).

A missing file fails the test under CI (``CI=true``) and skips it elsewhere, like a missing tool.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.tools import REPO, under_ci

REFERENCE = REPO.parent / "shared" / "reference" / "dcgm-exporter"


def missing_reference(path: Path) -> None:
    message = f"reference file {path} is missing (it lives beside the repository, in ../shared/reference)"
    if under_ci():
        pytest.fail(f"CI=true and {message}", pytrace=False)
    pytest.skip(message)
