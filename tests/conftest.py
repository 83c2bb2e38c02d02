"""Shared fixtures: a real Prometheus, a real PodResources gRPC server, a binding-level fake NVML.

Also the order tests run in: the longest first (the image build, the demo, then end-to-end and tool tests, then
unit tests), so that parallel workers start the long files at once and fill the end with short ones, instead of
one worker running the demo alone at the end. The Makefile's ``--dist loadfile --no-loadscope-reorder`` hands files
to workers in this order (xdist's default reorders them by their number of tests).
"""

from __future__ import annotations

import pytest

from tests.support.tools import require_tool

pytest_plugins = ["tests.support.prometheus", "tests.podresources_server", "tests.support.fake_kube"]

_FIRST = ("image", "demo", "e2e", "tools")


def _rank(item: pytest.Item) -> int:
    marks = {mark.name for mark in item.iter_markers()}
    return next((i for i, name in enumerate(_FIRST) if name in marks), len(_FIRST))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_rank)  # stable: within a rank, files and tests keep their order


@pytest.fixture(autouse=True)
def _demo_needs_prometheus(request: pytest.FixtureRequest) -> None:
    """Every demo runs a real Prometheus: by the suite's missing-tool policy (tests/support/tools.py)."""
    if request.node.get_closest_marker("demo") is not None:
        require_tool("prometheus")
