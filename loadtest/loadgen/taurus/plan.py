"""A Taurus YAML file (and ``-o`` overrides) read into a typed :class:`TaurusPlan`, or one error naming the file and
the key (pure but for reading the file and any ``body-file``).

What each key means here, and where Taurus says so, is in ``keys`` (the tables), ``values`` (think times),
``clikit.durations`` (Taurus' durations), ``merge`` (a file's documents into one config, with the ``~``, ``^``, ``$``
prefixes) and ``schedule`` (users and the throughput cap); this module resolves the pieces Taurus resolves:

* ``execution`` is a list, or one mapping standing for a one-item list (site/dat/docs/ExecutionSettings.md; the
  mapping's keys are ``execution.KEY`` in messages, as ``-o`` addresses them before Taurus expands the shorthand);
  its items run concurrently, as Taurus runs them by default ("Startup Schedule" there), each after its ``delay``.
* ``concurrency`` defaults to 1 (``_divide_concurrency`` in ``bzt/jmx/tools.py`` never gives a group 0 threads);
  with no ``ramp-up``/``hold-for`` and no ``iterations``, each user makes 1 pass (``get_load`` in
  ``bzt/engine/modules.py``). ``ramp-up`` and ``hold-for`` are whole seconds in the thread group Taurus writes
  (``cond_int`` in ``bzt/jmx/base.py``; its test_JMX.py ``test_CTG_h``: 70.5 s holds for 70 s).
* ``throughput`` needs ``ramp-up`` or ``hold-for`` (Taurus skips the shaper otherwise, with a warning); ``steps``
  needs ``ramp-up`` (ExecutionSettings.md) and no ``iterations`` (regular thread groups do not step:
  ``LoadSettingsProcessor.modify`` warns). Each is an error here rather than a setting quietly dropped.
* A request is a URL or a mapping (site/dat/docs/JMeter.md "HTTP Requests"); ``label`` defaults to the URL as
  written, ``method`` to GET; a URL without scheme and host takes them from ``default-address`` (only its scheme,
  host and port: ``_get_http_defaults`` in ``bzt/jmx/base.py``). Request settings (``headers``, ``think-time``,
  ``timeout``, ``keepalive``, ``follow-redirects``) override the scenario's (``Request.priority_option`` in
  ``bzt/requests_model.py``); headers merge by name, the request's winning. Defaults from ``bzt/jmx/http.py``:
  ``timeout`` 30s, ``keepalive``, ``follow-redirects``, ``store-cookie`` and ``store-cache`` true;
  ``retrieve-resources`` is true there too, which this runner does not do: a scenario that leaves it on gets a note.
* ``body``: text is sent as it is; a number, a list, a nested mapping, or any mapping when the merged
  ``Content-Type`` header is exactly ``application/json``, is sent as JSON; a flat mapping (text and numbers, so
  booleans too, written as Python writes them: ``True``) otherwise is JMeter parameters (``convert_body_to_string``
  and ``simple_body_dict`` in ``bzt/utils.py``, ``_string_prop`` in ``bzt/jmx/base.py``): the query string of a GET,
  DELETE or OPTIONS
  (``HTTPSamplerBase.getUrl`` in JMeter), a form body of a POST. ``body-file`` is the file's bytes (not with GET:
  Taurus sends no body then, ``HTTPProtocolHandler.get_sampler_pair``).
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import yaml

from clikit.durations import DurationError
from loadtest.loadgen.taurus.keys import ANY_VALUE, EXECUTION, LOGIC_BLOCKS, REQUEST, SCENARIO, TOP_LEVEL, Key
from loadtest.loadgen.taurus.merge import PREFIXES, merge_documents, prefix_of, replace_tabs
from loadtest.loadgen.taurus.overrides import OverrideError, apply_overrides
from loadtest.loadgen.taurus.schedule import RateCap, concurrency_group_starts, shaper_rows, thread_group_starts
from loadtest.loadgen.taurus.values import TaurusValueError, ThinkTime

__all__ = ["Execution", "HttpRequest", "Scenario", "TaurusFileError", "TaurusPlan", "load_plan", "read_plan"]

DEFAULT_TIMEOUT_S = 30.0  # bzt/jmx/http.py: scenario.get("timeout", "30s")
DISPLAY_REPORTERS = ("console", "final-stats")  # they only display; this runner prints its own progress and summary
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an HTTP method or header name (RFC 9110 token)
_QUERY_METHODS = ("GET", "DELETE", "OPTIONS")


class TaurusFileError(ValueError):
    """A file this runner cannot run as written; the message names the file and the key."""


@dataclass(frozen=True)
class HttpRequest:
    label: str
    method: str
    url: str
    headers: tuple[tuple[str, str], ...]
    body: bytes | None
    think: ThinkTime | None
    timeout_s: float
    follow_redirects: bool


@dataclass(frozen=True)
class Scenario:
    """``store_cookie``: each user keeps a cookie jar; ``store_cache``: each user keeps JMeter's cache of GET answers
    for one pass (``loadtest.loadgen.taurus.cache``)."""

    name: str
    requests: tuple[HttpRequest, ...]
    store_cookie: bool = True
    store_cache: bool = True


@dataclass(frozen=True)
class Execution:
    """One ``execution`` item. ``concurrency_group``: JMeter's Concurrency Thread Group (time-bound, users loop
    until the end) rather than a regular Thread Group (``iterations`` passes per user, stopped at ``end_s`` when
    there is one)."""

    index: int
    scenario: Scenario
    concurrency: int
    ramp_up_s: int
    hold_s: int
    iterations: int | None
    throughput: float | None
    steps: int | None
    delay_s: float
    concurrency_group: bool

    @property
    def end_s(self) -> float | None:
        """Seconds after its start when the execution stops its users; ``None``: when their iterations are done."""
        if self.concurrency_group or self.hold_s:
            return float(self.ramp_up_s + self.hold_s)
        return None

    def user_starts(self) -> list[float]:
        if self.concurrency_group:
            return concurrency_group_starts(self.concurrency, self.ramp_up_s, self.steps)
        return thread_group_starts(self.concurrency, self.ramp_up_s)

    def rate_cap(self) -> RateCap | None:
        if self.throughput is None:
            return None
        return RateCap(tuple(shaper_rows(self.throughput, self.ramp_up_s, self.hold_s, self.steps)))

    def text(self) -> str:
        parts = [f"concurrency {self.concurrency}"]
        for name, value in (("ramp-up", self.ramp_up_s), ("hold-for", self.hold_s), ("delay", self.delay_s)):
            if value:
                parts.append(f"{name} {value:g}s")
        if self.steps:
            parts.append(f"steps {self.steps}")
        if self.iterations is not None:
            parts.append(f"iterations {self.iterations}")
        if self.throughput is not None:
            parts.append(f"throughput {self.throughput:g}/s")
        count = len(self.scenario.requests)
        return f"{', '.join(parts)}; scenario {self.scenario.name} ({count} request{'' if count == 1 else 's'})"


@dataclass(frozen=True)
class TaurusPlan:
    source: Path
    executions: tuple[Execution, ...]
    notes: tuple[str, ...] = ()

    @property
    def end_s(self) -> float | None:
        """When the last execution stops its users; ``None`` when one runs until its iterations are done."""
        ends = [e.end_s for e in self.executions]
        if any(end is None for end in ends):
            return None
        return max(e.delay_s + (e.end_s or 0.0) for e in self.executions)

    def users_at(self, t: float) -> int:
        """Users planned to be running ``t`` seconds in (iteration-bound users counted until the plan's end)."""
        count = 0
        for e in self.executions:
            end = e.end_s
            if end is not None and t >= e.delay_s + end:
                continue
            count += sum(1 for start in e.user_starts() if e.delay_s + start <= t)
        return count

    def rate_cap_at(self, t: float) -> float | None:
        """The executions' throughput caps summed ``t`` seconds in (0 when none runs); ``None`` when one running
        then, or every one, has no cap."""
        if all(e.throughput is None for e in self.executions):
            return None
        total = 0.0
        for e in self.executions:
            end = e.end_s
            if t < e.delay_s or (end is not None and t >= e.delay_s + end):
                continue
            cap = e.rate_cap()
            if cap is None:
                return None
            total += cap.rate_at(t - e.delay_s)
        return total

    def phase_at(self, t: float) -> str:
        """``idle`` before the first execution starts, ``ramp-up`` while one ramps up, then ``hold``."""
        started = [e for e in self.executions if t >= e.delay_s]
        if not started:
            return "idle"
        if any(t < e.delay_s + e.ramp_up_s for e in started):
            return "ramp-up"
        return "hold"

    @property
    def load_step_at(self) -> float:
        return min(e.delay_s for e in self.executions)

    def text(self) -> str:
        return " | ".join(e.text() for e in self.executions)


class _Reader:
    """Reads one file's mappings against the key tables; every error names the file and the key's path."""

    def __init__(self, source: Path, overridden: list[str]) -> None:
        self.source = source
        self.overridden = overridden
        self.notes: list[str] = []

    def error(self, path: str, problem: str) -> TaurusFileError:
        by_override = any(path == o or path.startswith(o + ".") or o.startswith(path + ".") for o in self.overridden)
        return TaurusFileError(f"{self.source}: {path or 'the file'}: {problem}"
                               + (" (as set by -o)" if by_override else ""))

    def level(self, mapping: object, table: Mapping[str, Key], path: str, what: str) -> dict[str, Any]:
        """The keys of ``mapping`` read through ``table``; absent and null keys are left out."""
        if not isinstance(mapping, Mapping):
            raise self.error(path, f"expected {what} (a mapping), got {mapping!r}")
        values: dict[str, Any] = {}
        for key, value in mapping.items():
            where = f"{path}.{key}" if path else str(key)
            spec = table.get(str(key))
            if spec is None and prefix_of(key):
                raise self.error(where, _unmerged_prefix(str(key)))
            if spec is None:
                close = difflib.get_close_matches(str(key), list(table), n=1)
                hint = f"; did you mean {close[0]}?" if close else ""
                raise self.error(where, f"unknown key for {what}{hint} (docs/taurus.md lists the keys read)")
            if value is None:
                continue
            if not spec.accepts(value):
                drop = f"-o {path + '.' if path else ''}^{key}="
                only = "" if spec.only is ANY_VALUE else f" ({key}: {spec.only_text} is accepted)"
                raise self.error(where, f"{spec.note}{only}; remove it from the file, or drop it for this run with "
                                        f"{drop}")
            if spec.read is None:  # a refused key with the value this runner follows anyway
                continue
            try:
                values[str(key)] = spec.read(value)
            except (TaurusValueError, DurationError) as exc:
                raise self.error(where, str(exc)) from None
        return values

    def plan(self, config: Any) -> TaurusPlan:
        top = self.level(config, TOP_LEVEL, "", "a Taurus file")
        self._reporting(top.get("reporting"))
        scenarios = top.get("scenarios", {})
        if not isinstance(scenarios, Mapping):
            raise self.error("scenarios", f"expected a mapping of scenario names to scenarios, got {scenarios!r}")
        items = top.get("execution")
        if items is None:
            raise self.error("execution", "missing: the file runs nothing")
        if isinstance(items, Mapping):  # one execution, its keys at execution.KEY (as -o addresses them)
            executions: tuple[Execution, ...] = (self._execution(0, "execution", items, scenarios),)
        elif isinstance(items, list) and items:
            executions = tuple(self._execution(i, f"execution.{i}", item, scenarios) for i, item in enumerate(items))
        else:
            raise self.error("execution", f"expected a list of executions, got {items!r}")
        return TaurusPlan(self.source, executions, tuple(dict.fromkeys(self.notes)))

    def _reporting(self, reporting: object) -> None:
        if reporting is None:
            return
        entries = reporting if isinstance(reporting, list) else [reporting]
        for i, entry in enumerate(entries):
            module = entry.get("module") if isinstance(entry, Mapping) else entry
            if module not in DISPLAY_REPORTERS or (isinstance(entry, Mapping) and set(entry) - {"module"}):
                raise self.error(f"reporting.{i}", f"reporter {module!r} is not run by this runner (console and "
                                                   "final-stats are: it prints its own progress and summary); "
                                                   f"remove it, or drop it for this run with -o reporting.^{i}=")
        self.notes.append("reporting (console, final-stats): this runner prints its own progress and summary")

    def _execution(self, index: int, path: str, item: object, scenarios: Mapping[str, Any]) -> Execution:
        values = self.level(item, EXECUTION, path, "an execution")
        scenario = self._scenario_of(index, path, values.get("scenario"), scenarios)
        ramp, hold = values.get("ramp-up", 0.0), values.get("hold-for", 0.0)
        iterations, steps, throughput = values.get("iterations"), values.get("steps"), values.get("throughput")
        for key, seconds in (("ramp-up", ramp), ("hold-for", hold)):
            if seconds != int(seconds):
                self.notes.append(f"{path}.{key} {seconds:g}s: JMeter's thread group takes whole seconds, "
                                  f"{int(seconds)}s (as Taurus writes it)")
        if ramp + hold > 0 and int(ramp) + int(hold) == 0:
            raise self.error(f"{path}.hold-for", "under a second in all: Taurus writes whole seconds into the thread "
                                                 "group, so nothing would run; use at least 1s")
        timed = int(ramp) + int(hold) > 0
        if throughput is not None and not timed:
            raise self.error(f"{path}.throughput", "needs ramp-up and/or hold-for (Taurus drops the cap otherwise)")
        if steps is not None:
            if not int(ramp):
                raise self.error(f"{path}.steps", "needs ramp-up (steps divide the ramp-up)")
            if iterations is not None:
                raise self.error(f"{path}.steps", "not with iterations: Taurus runs iterations in a regular thread "
                                                  "group, which does not step")
        return Execution(index=index, scenario=scenario, concurrency=values.get("concurrency", 1),
                         ramp_up_s=int(ramp), hold_s=int(hold),
                         iterations=iterations if iterations is not None or timed else 1,
                         throughput=throughput, steps=steps, delay_s=values.get("delay", 0.0),
                         concurrency_group=timed and iterations is None)

    def _scenario_of(self, index: int, path: str, ref: object, scenarios: Mapping[str, Any]) -> Scenario:
        if ref is None:
            raise self.error(f"{path}.scenario", "missing: name a scenario under scenarios or write one inline")
        if isinstance(ref, str):
            if ref not in scenarios:
                names = ", ".join(map(str, scenarios)) or "none"
                raise self.error(f"{path}.scenario", f"no scenario named {ref!r} under scenarios (there: {names}); "
                                                     "a JMX or other script file is not run: it needs its tool")
            return self._scenario(ref, f"scenarios.{ref}", scenarios[ref])
        return self._scenario(f"execution {index}", f"{path}.scenario", ref)

    def _scenario(self, name: str, path: str, mapping: object) -> Scenario:
        values = self.level(mapping, SCENARIO, path, "a scenario")
        raw = values.get("requests")
        if not isinstance(raw, list) or not raw:
            raise self.error(f"{path}.requests", "expected a list of requests (URLs or mappings with url)")
        requests = tuple(self._request(f"{path}.requests.{i}", item, values) for i, item in enumerate(raw))
        if isinstance(mapping, Mapping) and mapping.get("retrieve-resources") is None:
            self.notes.append(f"{path}: retrieve-resources is on (Taurus' default): JMeter would also fetch the "
                              "images, scripts and styles an HTML answer embeds; this runner sends only the requests "
                              "listed (retrieve-resources: false says so)")
        return Scenario(name, requests, store_cookie=values.get("store-cookie", True),
                        store_cache=values.get("store-cache", True))

    def _request(self, path: str, item: object, scenario: dict[str, Any]) -> HttpRequest:
        if isinstance(item, str):
            item = {"url": item}
        if isinstance(item, Mapping):
            block = next((k for k in LOGIC_BLOCKS if k in item), None)
            if block is not None and "url" not in item:
                raise self.error(f"{path}.{block}", f"logic blocks ({block}) run inside JMeter; this runner sends a "
                                                    "flat list of requests")
        values = self.level(item, REQUEST, path, "a request")
        if "url" not in values:
            raise self.error(f"{path}.url", "missing: every request needs a url")
        written = values["url"]
        method = values.get("method", "GET").upper()
        if not _TOKEN.match(method):
            raise self.error(f"{path}.method", f"{values['method']!r} is not an HTTP method")
        headers = self._headers(path, scenario.get("headers", {}), values.get("headers", {}))
        url, body, extra = self._body(path, method, self._url(path, written, scenario.get("default-address")),
                                      values, headers)
        for name, value in (*headers, *extra):
            if "${" in name or "${" in value:
                raise self.error(f"{path}.headers", f"{name}: {value!r}: JMeter variables and functions are not "
                                                    "evaluated by this runner")
        if not values.get("keepalive", scenario.get("keepalive", True)):
            extra.append(("Connection", "close"))
        think = values.get("think-time", scenario.get("think-time"))
        timeout = values.get("timeout", scenario.get("timeout", DEFAULT_TIMEOUT_S))
        if timeout <= 0:
            raise self.error(f"{path}.timeout", "must be longer than 0 s")
        return HttpRequest(label=values.get("label", written), method=method, url=url,
                           headers=(*headers, *extra), body=body,
                           think=think if think is not None and think.mean_s > 0 else None, timeout_s=timeout,
                           follow_redirects=values.get("follow-redirects", scenario.get("follow-redirects", True)))

    def _url(self, path: str, written: str, default_address: str | None) -> str:
        if "${" in written:
            raise self.error(f"{path}.url", f"{written!r}: JMeter variables and functions are not evaluated by this "
                                            "runner")
        parts = urlsplit(written)
        if parts.scheme and parts.netloc:
            if parts.scheme not in ("http", "https"):
                raise self.error(f"{path}.url", f"{written!r}: only http and https URLs are sent")
            return written
        if default_address is None:
            raise self.error(f"{path}.url", f"{written!r} has no scheme and host, and the scenario has no "
                                            "default-address to take them from")
        base = urlsplit(default_address)
        if base.scheme not in ("http", "https") or not base.netloc or "${" in default_address:
            raise self.error(path.rsplit(".requests.", 1)[0] + ".default-address",
                             f"{default_address!r}: expected http(s)://host[:port]")
        return f"{base.scheme}://{base.netloc}{'' if written.startswith('/') else '/'}{written}"

    def _headers(self, path: str, scenario: Mapping[str, str], request: Mapping[str, str]) -> list[tuple[str, str]]:
        merged: dict[str, tuple[str, str]] = {}
        for where, headers in ((path.rsplit(".requests.", 1)[0], scenario), (path, request)):
            for name, value in headers.items():
                if not _TOKEN.match(name) or any(c in value for c in "\r\n"):
                    raise self.error(f"{where}.headers.{name}", "not a valid HTTP header (a token name, a one-line "
                                                                "value)")
                merged[name.lower()] = (name, value)
        return list(merged.values())

    def _body(self, path: str, method: str, url: str, values: dict[str, Any], headers: list[tuple[str, str]],
              ) -> tuple[str, bytes | None, list[tuple[str, str]]]:
        """The URL (a GET's parameters join its query), the body's bytes and headers the body brings."""
        body, body_file = values.get("body"), values.get("body-file")
        if body is not None and body_file is not None:
            raise self.error(f"{path}.body-file", "give body or body-file, not both (Taurus sends body and warns)")
        if body_file is not None:
            if method == "GET":
                raise self.error(f"{path}.body-file", "not with GET: Taurus sends no body-file with a GET")
            file = Path(body_file) if Path(body_file).is_absolute() else self.source.parent / body_file
            try:
                return url, file.read_bytes(), []
            except OSError as exc:
                raise self.error(f"{path}.body-file", f"{file}: {exc.strerror}") from None
        if body is None:
            return url, None, []
        if isinstance(body, str):
            if "${" in body:
                raise self.error(f"{path}.body", "JMeter variables and functions are not evaluated by this runner")
            return url, body.encode(), []
        content_type = next((v for n, v in headers if n.lower() == "content-type"), None)
        # simple_body_dict: text and numbers, and so booleans (a Python bool is an int), written by str(): True
        flat = isinstance(body, Mapping) and all(isinstance(v, str | int | float) for v in body.values())
        if not flat or (content_type or "").lower() == "application/json":
            return url, json.dumps(body).encode(), []
        params = urlencode([(str(k), str(v)) for k, v in body.items()])
        if method in _QUERY_METHODS:
            return f"{url}{'&' if '?' in url else '?'}{params}", None, []
        if method == "POST":
            extra = [] if content_type else [("Content-Type", "application/x-www-form-urlencoded")]
            return url, params.encode(), extra
        raise self.error(f"{path}.body", f"a mapping of parameters with {method}: JMeter's handling differs by method; "
                                         "write the body as text, or as JSON with Content-Type: application/json")


def _unmerged_prefix(key: str) -> str:
    """Why a key still carrying a merge prefix is refused (``merge`` says where Taurus leaves one)."""
    return (f"{key[0]} ({PREFIXES[key[0]]}) is a merge prefix, which Taurus applies only where a mapping merges "
            f"into a mapping; here (in a list item, in a mapping that replaced a value of another type, or set by "
            f"-o) it keeps {key!r} as a key of that name and does not know it; write {key[1:]}")


def read_plan(config: Any, source: Path, overrides: list[str] | None = None) -> TaurusPlan:
    """The plan of a loaded config (``config``: a file's documents as ``merge`` merges them), after ``-o``
    overrides, applied to the config as written (``overrides``)."""
    overridden: list[str] = []
    if overrides:
        if not isinstance(config, dict):
            raise TaurusFileError(f"{source}: expected a mapping at the top of the file")
        try:
            overridden = apply_overrides(config, overrides)
        except OverrideError as exc:
            raise TaurusFileError(f"{source}: {exc}") from None
    return _Reader(source, overridden).plan(config)


def _yaml_error(path: Path, exc: yaml.YAMLError) -> TaurusFileError:
    mark = getattr(exc, "problem_mark", None)
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    problem = getattr(exc, "problem", None) or "not valid YAML"
    return TaurusFileError(f"{path}: not valid YAML{where}: {problem}")


def _documents(path: Path, text: str) -> list[Mapping[Any, Any]]:
    """The file's documents, as ``Configuration._read_yaml_or_json`` (``bzt/engine/dicts.py``) reads them: every
    YAML document, empty ones skipped; text YAML cannot read, if it starts with ``{``, as JSON."""
    try:
        loaded = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        if not text.lstrip().startswith("{"):
            raise _yaml_error(path, exc) from None
        try:
            loaded = [json.loads(text)]
        except json.JSONDecodeError as json_exc:
            raise TaurusFileError(f"{path}: neither YAML nor JSON: {json_exc}") from None
    for number, document in enumerate(loaded, 1):
        if document is not None and not isinstance(document, dict):
            where = "the file" if len(loaded) == 1 else f"document {number} (of {len(loaded)})"
            raise TaurusFileError(f"{path}: {where}: expected a Taurus file (a mapping), got {document!r}; Taurus "
                                  "refuses a document that is not a mapping")
    return [document for document in loaded if document is not None]


def load_plan(path: Path, overrides: list[str] | None = None) -> TaurusPlan:
    """Read a Taurus YAML (or JSON) file, merge its documents as Taurus does, apply ``-o`` overrides, check every
    key: the plan, or one error."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TaurusFileError(f"{path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise TaurusFileError(f"{path}: not UTF-8 text") from None
    text, tabbed = replace_tabs(text)
    plan = read_plan(merge_documents(_documents(path, text)), path, overrides)
    if not tabbed:
        return plan
    lines = ", ".join(map(str, tabbed[:5])) + (", ..." if len(tabbed) > 5 else "")
    note = (f"line{'s' if len(tabbed) > 1 else ''} {lines}: leading tabs read as 4 spaces, as Taurus reads them "
            "(YAML does not allow tabs there)")
    return replace(plan, notes=(note, *plan.notes))
