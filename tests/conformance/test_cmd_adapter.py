"""prometheus-adapter's cmd/adapter TestFlags and custom-metrics-apiserver's options TestValidate, as our cases.

Each case names its upstream file and test; the inputs and expected outcomes are theirs, the code is ours. The
other cmd/adapter tables (TestParseHeaderArgs, TestMakeKubeconfigHTTPClient, TestMakePrometheusCAClient) are
replayed in tests/test_prometheus_client.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import typer.main

from adapter.cli.flags import UsageError
from adapter.cli.main import app
from adapter.cli.upstream import UpstreamFlagError, translate
from tests.conformance.upstream import stated

pytestmark = pytest.mark.unit

ADAPTER_TEST = "cmd/adapter/adapter_test.go"
OPTIONS_TEST = "custom-metrics-apiserver pkg/cmd/options/options_test.go"


# -- TestFlags ----------------------------------------------------------------------------------------------------

def _defaults() -> dict[str, object]:
    serve = typer.main.get_command(app).commands["serve"]  # type: ignore[attr-defined]
    return {opt.lstrip("-"): param.default for param in serve.params for opt in param.opts}


@pytest.mark.parametrize(("flag", "default"), [
    pytest.param("v", "0", id="TestFlags: v"),
    pytest.param("prometheus-url", "https://localhost", id="TestFlags: prometheus-url", marks=pytest.mark.xfail(
        strict=True, reason=stated("Required here (upstream defaults to https://localhost)."))),
])
def test_flags(flag: str, default: str) -> None:
    """ADAPTER_TEST TestFlags: the flag is registered, with upstream's default."""
    defaults = _defaults()
    assert flag in defaults
    assert str(defaults[flag]) == default


# -- custom-metrics-apiserver's options TestValidate --------------------------------------------------------------

def _serve_validate(args: list[str], tmp: Path) -> None:
    """Run ``serve`` with an upstream command line (a prometheus-url added); every case here stops before serving."""
    from click.testing import CliRunner  # typer runs on click

    full = ["serve", "--prometheus-url", "http://127.0.0.1:1", "--disable-auth", "--cert-dir", str(tmp),
            *translate(args)]
    result = CliRunner().invoke(typer.main.get_command(app), full, catch_exceptions=True)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    if result.exit_code == 2:
        raise UsageError(result.output.strip())


@pytest.mark.parametrize(("args", "should_err"), [
    pytest.param(["--secure-port=-1"], True, id="TestValidate: invalid-secure-port"),
    pytest.param(["--secure-port=6443", '--requestheader-username-headers=" "'], True, id="TestValidate: empty-header"),
    pytest.param(["--secure-port=6443", "--audit-log-path=file", "--audit-log-format=txt"], True,
                 id="TestValidate: invalid-audit-log-format"),
    pytest.param(["--secure-port=0"], False, id="TestValidate: secure-port-0", marks=pytest.mark.xfail(
        strict=True, raises=UsageError, reason=stated("0 (serve no HTTPS) is refused."))),
])
def test_options_validate(tmp_path: Path, args: list[str], should_err: bool) -> None:
    """OPTIONS_TEST TestValidate: the cases that fail validation fail the start with one line here too."""
    if should_err:
        with pytest.raises((UsageError, UpstreamFlagError)):
            _serve_validate(args, tmp_path)
    else:
        _serve_validate(args, tmp_path)
