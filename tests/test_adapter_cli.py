"""gpu-adapter refuses bad configuration at start with one line naming what is wrong."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.lowest]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "adapter", *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(("rules", "needle"), [
    ("rules:\n- seriesQuery: 'up'\n  metricsQuery: 'up'\n  naem: {as: x}\n", "rules[0].naem: unknown"),
    ("rules:\n- seriesQuery: 'up'\n  name: {matches: '('}\n  metricsQuery: 'up'\n", "rules[0].name.matches"),
    ("rules:\n- seriesQuery: 'up'\n  metricsQuery: 'sum(<<.Nope>>)'\n", "rules[0].metricsQuery"),
    ("externalRules:\n- seriesQuery: 'up{'\n  metricsQuery: 'up'\n", "externalRules[0].seriesQuery"),
    ("include: [no-such-preset]\n", "include"),
])
def test_bad_rules_file_is_one_line_naming_file_rule_and_field(tmp_path: Path, rules: str, needle: str) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(rules)
    out = run("serve", "--prometheus-url", "http://127.0.0.1:1", "--config", str(path), "--cert-dir",
              str(tmp_path / "certs"))
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith(f"gpu-adapter: error: {path}: ") and needle in lines[0], lines[0]


@pytest.mark.parametrize(("args", "needle"), [
    (["serve", "--prometheus-url", "prometheus:9090"], "--prometheus-url 'prometheus:9090'"),
    (["serve", "--prometheus-url", "http://"], "--prometheus-url 'http://': expected an http:// or https:// URL "
     "with a host"),
    (["serve", "--prometheus-url", "http://[::1"], "--prometheus-url 'http://[::1'"),
    (["serve", "--prometheus-url", "http://p:9090", "--metrics-relist-interval", "soon"], "--metrics-relist-interval"),
    (["serve", "--prometheus-url", "http://p:9090", "--metrics-relist-interval", "1m", "--metrics-max-age", "30s"],
     "--metrics-max-age"),
    (["serve", "--prometheus-url", "http://p:9090", "--prometheus-verb", "PUT"], "--prometheus-verb"),
    (["serve", "--prometheus-url", "http://p:9090", "--prometheus-header", "=value"], "--prometheus-header"),
    (["serve", "--no-such-flag"], "No such option: --no-such-flag"),
    # The shutdown flags: upstream refuses a negative delay; a Retry-After window needs a delay before it.
    (["serve", "--prometheus-url", "http://p:9090", "--shutdown-delay-duration", "-5s"],
     "--shutdown-delay-duration '-5s': a negative duration"),
    (["serve", "--prometheus-url", "http://p:9090", "--shutdown-drain-timeout", "-1s"],
     "--shutdown-drain-timeout '-1s': a negative duration"),
    (["serve", "--prometheus-url", "http://p:9090", "--shutdown-delay-duration", "soon"],
     "--shutdown-delay-duration 'soon'"),
    (["serve", "--prometheus-url", "http://p:9090", "--shutdown-send-retry-after"],
     "--shutdown-send-retry-after needs --shutdown-delay-duration"),
    (["serve", "--prometheus-url", "http://p:9090", "--shutdown-send-retry-after", "--shutdown-delay-duration", "0s"],
     "--shutdown-send-retry-after needs --shutdown-delay-duration"),
])
def test_bad_flags_are_one_line(tmp_path: Path, args: list[str], needle: str) -> None:
    out = run(*args, "--cert-dir", str(tmp_path)) if args[-1] != "--no-such-flag" else run(*args)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], out.stderr
