"""The keys ``gpu-loadtest run --taurus`` reads at each level of a Taurus file, and those it refuses (pure).

One table per level. A key either has a reader (the value into a typed value; it raises ``TaurusValueError`` or
``DurationError``) or is refused with the reason; a refused key may still be accepted with the one value that asks
for what this runner does anyway (``use-dns-cache-mgr: false``, which Taurus' JMX converter writes in every file).
A key in no table is unknown. Nothing is ignored: docs/taurus.md lists the same.

Sources (Taurus' repository): site/dat/docs/ExecutionSettings.md (execution keys), site/dat/docs/JMeter.md
("Global Settings", "HTTP Requests", "Extractors", "Assertions", "JSR223 Blocks", "Logic Blocks"),
site/dat/docs/ConfigSyntax.md (top-level keys); defaults from ``bzt/jmx/http.py`` (``HTTPProtocolHandler``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from clikit.durations import parse_taurus_duration
from loadtest.loadgen.taurus.values import TaurusValueError, parse_think_time

__all__ = ["ANY_VALUE", "EXECUTION", "LEVELS", "LOGIC_BLOCKS", "REQUEST", "SCENARIO", "TOP_LEVEL", "Key", "markdown",
           "read_flag"]

ANY_VALUE = object()  # Key.only's default: no value makes a refused key acceptable


@dataclass(frozen=True)
class Key:
    """``note``: what the key does here, or why it is refused. ``read``: the value into its typed form (``None``:
    refused). ``only``: a refused key is still accepted with this value (what this runner does anyway)."""

    note: str
    read: Callable[[Any], Any] | None = None
    only: object = ANY_VALUE

    def accepts(self, value: object) -> bool:
        return self.read is not None or (self.only is not ANY_VALUE and value == self.only)

    @property
    def only_text(self) -> str:
        """``only`` as YAML writes it (``false``, ``jmeter``)."""
        return str(self.only).lower() if isinstance(self.only, bool) else str(self.only)


def read_flag(value: object) -> bool:
    if not isinstance(value, bool):
        raise TaurusValueError(f"expected true or false, got {value!r}")
    return value


def _count(value: object) -> int:
    """A whole number of at least 1 (YAML may write it as text: ``"10"``)."""
    try:
        number = int(value) if isinstance(value, int | str) and not isinstance(value, bool) else None
    except ValueError:
        number = None
    if number is None or number < 1:
        raise TaurusValueError(f"expected a whole number of at least 1, got {value!r}")
    return number


def _per_provisioning(read: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``concurrency`` and ``throughput`` may be written per provisioning (``{local: 10, cloud: 100}``): the
    ``local`` value counts (``ensure_is_dict`` and ``get_raw_load`` in ``bzt/engine/modules.py``)."""

    def reader(value: object) -> Any:
        if isinstance(value, Mapping):
            if "local" not in value:
                raise TaurusValueError(f"per-provisioning values {dict(value)!r} have no 'local' value, the one a "
                                       "local run uses")
            return read(value["local"])
        return read(value)

    return reader


def _rate(value: object) -> float:
    """Requests per second, above 0."""
    try:
        rate = float(value) if isinstance(value, int | float | str) and not isinstance(value, bool) else math.nan
    except ValueError:
        rate = math.nan
    if not math.isfinite(rate) or rate <= 0:
        raise TaurusValueError(f"expected requests per second above 0, got {value!r}")
    return rate


def _text(value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise TaurusValueError(f"expected text, got {value!r}")
    return str(value)


def _headers(value: object) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise TaurusValueError(f"expected a mapping of header names to values, got {value!r}")
    return {str(k): "" if v is None else str(v) for k, v in value.items()}


def _scenario_ref(value: object) -> object:
    """A scenario's name, or the scenario itself written inline; checked where scenarios are resolved."""
    if isinstance(value, str | Mapping):
        return value
    raise TaurusValueError(f"expected the name of a scenario under scenarios, or a scenario mapping, got {value!r}")


def _raw(value: object) -> object:
    return value


def _jmeter_only(what: str) -> Key:
    return Key(f"{what} is a JMeter setting this runner does not emulate")


_TO_RUN_JMETER = ("runs its tool's own test plan (a .jmx: JMeter's), which needs the tool: this runner sends the "
                  "requests a scenario lists")
_NOT_EVALUATED = ("JMeter variables and functions are not evaluated by this runner (it sends what the file says)")

TOP_LEVEL: dict[str, Key] = {
    "execution": Key("the executions, run at once: a list, or one mapping", read=_raw),
    "scenarios": Key("scenarios by name, for `scenario` to name", read=_raw),
    "reporting": Key("only `console` and `final-stats`, which display (this runner prints its own progress and "
                     "summary)", read=_raw),
    "provisioning": Key("cloud provisioning runs on BlazeMeter", only="local"),
    "settings": Key("Taurus engine settings (artifacts-dir, env, default-executor, ...) are not read by this runner"),
    "modules": Key("module settings configure Taurus' tools (JMeter's path, properties, ...), which this runner "
                   "does not use"),
    "services": Key("services (shellexec, monitoring, ...) are not run by this runner"),
    "included-configs": Key("included configs are not merged by this runner: run one file"),
    "cli-aliases": Key("aliases belong to bzt's command line"),
}

EXECUTION: dict[str, Key] = {
    "concurrency": Key("virtual users (default 1); per provisioning (`{local: 10, cloud: 100}`): `local`",
                       read=_per_provisioning(_count)),
    "ramp-up": Key("seconds to reach `concurrency` (whole seconds)", read=parse_taurus_duration),
    "hold-for": Key("seconds to hold `concurrency` after the ramp-up (whole seconds)", read=parse_taurus_duration),
    "iterations": Key("passes over the requests per user (a regular thread group)", read=_count),
    "throughput": Key("requests per second at most (Taurus' shaper); per provisioning like `concurrency`",
                      read=_per_provisioning(_rate)),
    "steps": Key("the ramp-up in this many equal steps", read=_count),
    "scenario": Key("a name under `scenarios`, or a scenario written inline", read=_scenario_ref),
    "delay": Key("start this long after the run starts", read=parse_taurus_duration),
    "executor": Key("this runner runs what Taurus' default executor, JMeter, runs from a requests scenario; other "
                    "executors (locust, gatling, k6, ...) have their own semantics", only="jmeter"),
    "start-at": Key("starting at a wall-clock time is not supported (delay is)"),
    "env": Key("execution environment variables are for the executor's tools"),
    "files": Key("additional files are for the executor's tools and cloud runs"),
    "locations": Key("locations are for cloud runs"),
    "locations-weighted": Key("locations are for cloud runs"),
    "distributed": Key("distributed JMeter is not used by this runner"),
    "properties": _jmeter_only("properties"),
    "system-properties": _jmeter_only("system-properties"),
}

# Keys a scenario and a request both take (JMeter.md, "Global Settings" and "HTTP Requests").
_BOTH_LEVELS: dict[str, Key] = {
    "content-encoding": _jmeter_only("content-encoding"),
    "random-source-ip": _jmeter_only("random-source-ip"),
    "protocol": Key("only HTTP requests are sent (protocol: mqtt/grpc needs JMeter's plugins)", only="http"),
    "jsr223": Key("JSR223 scripts run inside JMeter"),
}

SCENARIO: dict[str, Key] = {
    "requests": Key("the requests each user sends in order: URLs or mappings", read=_raw),
    "default-address": Key("scheme, host and port for URLs without them", read=_text),
    "headers": Key("headers of every request", read=_headers),
    "think-time": Key("the wait before each request: a duration, or uniform/gaussian/poisson(MEAN, DEV)",
                      read=parse_think_time),
    "timeout": Key("per request (default 30s)", read=parse_taurus_duration),
    "keepalive": Key("reuse connections (default true; false sends `Connection: close`)", read=read_flag),
    "follow-redirects": Key("follow redirects (default true)", read=read_flag),
    "store-cookie": Key("each user keeps the cookies it is sent (default true)", read=read_flag),
    "store-cache": Key("each user keeps JMeter's cache of GET answers for one pass over the requests (default true, "
                       "as Taurus writes it: a fresh answer is not asked again, a stale one is asked with "
                       "If-None-Match/If-Modified-Since)", read=read_flag),
    "retrieve-resources": Key("the images, scripts and styles an HTML answer embeds are not fetched (left out, "
                              "Taurus' default true gets a note)", only=False),
    "retrieve-resources-regex": _jmeter_only("retrieve-resources-regex"),
    "concurrent-pool-size": _jmeter_only("concurrent-pool-size"),
    "use-dns-cache-mgr": Key("the DNS cache manager is a JMeter setting this runner does not emulate (each JMeter "
                             "user keeps the address it resolved first; here a user resolves through the system's "
                             "resolver when it opens a connection)", only=False),
    "force-parent-sample": _jmeter_only("force-parent-sample"),
    "data-sources": Key("data sources (CSV files feeding variables) are not read: JMeter variables are not "
                        "evaluated by this runner"),
    "variables": Key(_NOT_EVALUATED),
    "properties": _jmeter_only("properties"),
    "modifications": Key(f"modifications apply to a JMX file; a script {_TO_RUN_JMETER}"),
    "script": Key(f"a script {_TO_RUN_JMETER}"),
    "authorization": _jmeter_only("authorization (JMeter's HTTP Authorization Manager); send an Authorization "
                                  "header under headers"),
    "keystore-config": _jmeter_only("keystore-config"),
    "cookies": _jmeter_only("cookies (pre-set cookies)"),
    **_BOTH_LEVELS,
}

REQUEST: dict[str, Key] = {
    "url": Key("absolute, or a path under the scenario's `default-address`", read=_text),
    "method": Key("default GET", read=_text),
    "label": Key("what it is counted under (default: the URL as written)", read=_text),
    "body": Key("text as it is; a list, a number, a nested mapping, or any mapping with a JSON Content-Type: JSON; "
                "a flat mapping: parameters (the query of a GET, DELETE or OPTIONS, the form of a POST)", read=_raw),
    "body-file": Key("a file's bytes as the body (not with GET), relative to the Taurus file", read=_text),
    # A request's own settings win over its scenario's (Request.priority_option in bzt/requests_model.py).
    **{key: Key("over the scenario's" + (", by name" if key == "headers" else ""), read=SCENARIO[key].read)
       for key in ("headers", "think-time", "timeout", "keepalive", "follow-redirects")},
    "upload-files": Key("file uploads (multipart forms) are not built by this runner"),
    **_BOTH_LEVELS,
    **{key: Key("assertions are not checked by this runner: a request fails on a transport error or an HTTP status "
                "of 400 or above, as JMeter's default")
       for key in ("assert", "assert-jsonpath", "assert-xpath")},
    **{key: Key(f"extractors feed JMeter variables, and {_NOT_EVALUATED}")
       for key in ("extract-regexp", "extract-jsonpath", "extract-css-jquery", "extract-xpath", "extract-boundary")},
}

# Logic blocks of a requests list (``HierarchicRequestParser`` in ``bzt/requests_model.py``): a block is known by
# one of these keys in place of ``url``.
LOGIC_BLOCKS = ("if", "once", "loop", "while", "foreach", "transaction", "include-scenario", "action",
                "set-variables", "setup", "teardown")

LEVELS = (("Top level", TOP_LEVEL), ("`execution` items", EXECUTION), ("Scenarios", SCENARIO),
          ("Requests", REQUEST))


def markdown() -> str:
    """docs/taurus.md's key tables, from the tables above."""
    out: list[str] = []
    for title, table in LEVELS:
        out += [f"#### {title}", "", "| key | here |", "|---|---|"]
        for key, spec in table.items():
            if spec.read is not None:
                here = spec.note
            elif spec.only is not ANY_VALUE:
                here = f"only `{key}: {spec.only_text}` runs; otherwise refused: {spec.note}"
            else:
                here = f"refused: {spec.note}"
            out.append(f"| `{key}` | {here} |")
        out.append("")
    blocks = ", ".join(f"`{block}`" for block in LOGIC_BLOCKS)
    out.append(f"A request that is a logic block ({blocks}) is refused: logic blocks run inside JMeter. Any other "
               "key is unknown, and an error too.")
    return "\n".join(out) + "\n"
