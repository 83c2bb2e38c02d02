"""Every flag prometheus-adapter v0.12 registers, and what ``gpu-adapter serve`` does with it: one table.

prometheus-adapter's flag set is its own (cmd/adapter/adapter.go), custom-metrics-apiserver's AdapterBase
(pkg/cmd/builder.go, v1.30), the generic API server options that one embeds (k8s.io/apiserver v0.30
pkg/server/options: serving, authentication, authorization, audit, feature) and component-base's log flags.
Each is either carried by one of our flags with the same meaning (``SAME``), accepted because what it asks
for is already how this server behaves (``NO_EFFECT``), or refused with one line naming what to use instead
(``REFUSED``). ``translate`` rewrites an upstream command line into ours before typer parses it: pflag's
``--flag=value`` booleans, repeated string slices and the ``-v`` shorthand included. README's flag table is
rendered from this one (``markdown``), and a test keeps the two equal.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from adapter.cli.goflag import FlagValueError, parse_bool, parse_duration, parse_float, parse_int

Kind = Literal["string", "bool", "int", "float", "duration", "ip", "stringSlice", "stringArray"]

ADAPTER = "cmd/adapter/adapter.go"
BUILDER = "custom-metrics-apiserver pkg/cmd/builder.go"
SERVING = "apiserver pkg/server/options/serving.go"
AUTHN = "apiserver pkg/server/options/authentication.go"
AUTHZ = "apiserver pkg/server/options/authorization.go"
AUDIT = "apiserver pkg/server/options/audit.go"
FEATURE = "apiserver pkg/server/options/feature.go"
LOGS = "component-base logs/logs.go"


class Disposition(StrEnum):
    SAME = "same meaning"
    NO_EFFECT = "accepted, no effect"
    REFUSED = "refused"


class UpstreamFlagError(Exception):
    """An upstream flag this server refuses, or a value pflag would refuse; one line for the CLI."""


@dataclass(frozen=True)
class UpstreamFlag:
    """``ours``: the flag that carries it (``SAME``), or the equivalent a refusal names ("" when none).

    ``accept_only``: for booleans accepted in one position only (``--profiling=false``), that value; the other
    is refused with ``note`` as the reason.
    """

    name: str
    kind: Kind
    source: str
    disposition: Disposition
    note: str
    ours: str = ""
    accept_only: bool | None = None

    @property
    def target(self) -> str:
        return self.ours or f"--{self.name}"

    def refusal(self) -> str:
        instead = f"; use {self.ours} instead" if self.ours else ""
        return f"--{self.name} (a prometheus-adapter flag) is not supported here: {self.note}{instead}"


S, N, R = Disposition.SAME, Disposition.NO_EFFECT, Disposition.REFUSED
_NO_AUDIT = "this server keeps no audit log; the access log (--v=2) records every request with its user"
_ONE_KUBECONFIG = ("one kubeconfig serves object lookups, API discovery, TokenReview and SubjectAccessReview; "
                   "given with another of these flags, the files must be the same")


def _audit(name: str, kind: Kind) -> UpstreamFlag:
    return UpstreamFlag(name, kind, AUDIT, R, _NO_AUDIT, "--v=2")


_AUDIT_BACKEND_FLAGS: tuple[tuple[str, Kind], ...] = (
    ("mode", "string"), ("batch-buffer-size", "int"), ("batch-max-size", "int"), ("batch-max-wait", "duration"),
    ("batch-throttle-enable", "bool"), ("batch-throttle-qps", "float"), ("batch-throttle-burst", "int"),
    ("truncate-enabled", "bool"), ("truncate-max-batch-size", "int"), ("truncate-max-event-size", "int"),
)

FLAGS: tuple[UpstreamFlag, ...] = (
    # -- cmd/adapter/adapter.go -------------------------------------------------------------------------------
    UpstreamFlag("prometheus-url", "string", ADAPTER, S,
                 "Required here (upstream defaults to https://localhost). A path prefix is kept, and query "
                 "parameters are sent with every request (upstream drops them with --prometheus-verb=GET)."),
    UpstreamFlag("prometheus-auth-incluster", "bool", ADAPTER, S,
                 "The pod's service-account token (re-read when rotated) and cluster CA, as client-go's "
                 "in-cluster config; the API server address is not used."),
    UpstreamFlag("prometheus-auth-config", "string", ADAPTER, S,
                 "A kubeconfig for Prometheus' credentials: the current context's cluster CA, "
                 "insecure-skip-tls-verify and tls-server-name, and its user's client certificate, token, "
                 "tokenFile, username/password or exec plugin. Its server is not used: --prometheus-url is."),
    UpstreamFlag("prometheus-ca-file", "string", ADAPTER, S,
                 "As upstream, --prometheus-auth-config/--prometheus-auth-incluster are not read when this is "
                 "set; here a warning at start says so (upstream is silent)."),
    UpstreamFlag("prometheus-client-tls-cert-file", "string", ADAPTER, S,
                 "Used with or without --prometheus-ca-file (upstream reads it only with one); refused without "
                 "--prometheus-client-tls-key-file."),
    UpstreamFlag("prometheus-client-tls-key-file", "string", ADAPTER, S,
                 "As --prometheus-client-tls-cert-file."),
    UpstreamFlag("prometheus-token-file", "string", ADAPTER, S,
                 "Re-read when the file changes (upstream reads it once); wins over a kubeconfig's token, as "
                 "upstream, and an Authorization --prometheus-header wins over both."),
    UpstreamFlag("prometheus-header", "stringArray", ADAPTER, S,
                 "key=value, repeatable; a repeated key sends every value, a key without = an empty value, as "
                 "upstream. An empty or invalid header name is refused."),
    UpstreamFlag("prometheus-verb", "string", ADAPTER, S, "Default POST here, GET upstream."),
    UpstreamFlag("config", "string", ADAPTER, S,
                 "Optional here: without it the built-in GPU presets are served (upstream requires it)."),
    UpstreamFlag("metrics-relist-interval", "duration", ADAPTER, S, "Default 1m here, 10m upstream."),
    UpstreamFlag("metrics-max-age", "duration", ADAPTER, S,
                 "Default: the relist interval plus the longest scrape interval (upstream: the relist interval, "
                 "which loses series between scrapes)."),
    UpstreamFlag("disable-http2", "bool", ADAPTER, N,
                 "HTTP/2 is never offered (TLS ALPN lists http/1.1 only), so it is always disabled."),
    # -- custom-metrics-apiserver pkg/cmd/builder.go ------------------------------------------------------------
    UpstreamFlag("lister-kubeconfig", "string", BUILDER, S, _ONE_KUBECONFIG, "--kubeconfig"),
    UpstreamFlag("discovery-interval", "duration", BUILDER, S,
                 "How often API discovery (the REST mapper) is re-read; default 1m, 0 reads it once. Upstream "
                 "registers the flag but never starts the refresh, so its mapper never sees a new CRD."),
    UpstreamFlag("client-qps", "float", BUILDER, N,
                 "No client-side throttle to set: objects are LISTed once per resource and then WATCHed, never "
                 "fetched per request, and TokenReview/SubjectAccessReview answers are cached."),
    UpstreamFlag("client-burst", "int", BUILDER, N,
                 "No client-side throttle to set: objects are LISTed once per resource and then WATCHed, never "
                 "fetched per request, and TokenReview/SubjectAccessReview answers are cached."),
    # -- k8s.io/apiserver pkg/server/options/serving.go ---------------------------------------------------------
    UpstreamFlag("bind-address", "ip", SERVING, S, "Default 0.0.0.0, as upstream."),
    UpstreamFlag("secure-port", "int", SERVING, S,
                 "Default 6443 here, 443 upstream; 0 (serve no HTTPS) is refused."),
    UpstreamFlag("cert-dir", "string", SERVING, S,
                 "Self-signed apiserver.crt/apiserver.key kept here; default apiserver.local.config/certificates, "
                 "as upstream."),
    UpstreamFlag("tls-cert-file", "string", SERVING, S, ""),
    UpstreamFlag("tls-private-key-file", "string", SERVING, S, ""),
    UpstreamFlag("tls-cipher-suites", "stringSlice", SERVING, S,
                 "TLS 1.2 suites by their Go/IANA names; TLS 1.3 suites are accepted and, as in Go, not "
                 "configurable. Go's RC4 and 3DES suites are refused; its other insecure ones (CBC-SHA256) are "
                 "served."),
    UpstreamFlag("tls-min-version", "string", SERVING, S,
                 "VersionTLS12 (default) or VersionTLS13; VersionTLS10/VersionTLS11 are refused (never served "
                 "below TLS 1.2)."),
    UpstreamFlag("tls-sni-cert-key", "string", SERVING, R,
                 "one serving certificate per process (no SNI certificates)", "--tls-cert-file/--tls-private-key-file"),
    UpstreamFlag("http2-max-streams-per-connection", "int", SERVING, N, "No HTTP/2, so no streams to limit."),
    UpstreamFlag("permit-port-sharing", "bool", SERVING, S, "SO_REUSEPORT on the listening socket."),
    UpstreamFlag("permit-address-sharing", "bool", SERVING, N,
                 "SO_REUSEADDR is always set on the listening socket (as Go sets it on every listener)."),
    # -- k8s.io/apiserver pkg/server/options/authentication.go --------------------------------------------------
    UpstreamFlag("authentication-kubeconfig", "string", AUTHN, S, _ONE_KUBECONFIG, "--kubeconfig"),
    UpstreamFlag("authentication-token-webhook-cache-ttl", "duration", AUTHN, S,
                 "TokenReview answers kept this long; default 10s, as upstream."),
    UpstreamFlag("client-ca-file", "string", AUTHN, S, ""),
    UpstreamFlag("requestheader-client-ca-file", "string", AUTHN, S, ""),
    UpstreamFlag("requestheader-allowed-names", "stringSlice", AUTHN, S, ""),
    UpstreamFlag("requestheader-username-headers", "stringSlice", AUTHN, S, ""),
    UpstreamFlag("requestheader-group-headers", "stringSlice", AUTHN, S, ""),
    UpstreamFlag("requestheader-extra-headers-prefix", "stringSlice", AUTHN, S, ""),
    UpstreamFlag("authentication-skip-lookup", "bool", AUTHN, S, ""),
    UpstreamFlag("authentication-tolerate-lookup-failure", "bool", AUTHN, S, ""),
    # -- k8s.io/apiserver pkg/server/options/authorization.go ---------------------------------------------------
    UpstreamFlag("authorization-kubeconfig", "string", AUTHZ, S, _ONE_KUBECONFIG, "--kubeconfig"),
    UpstreamFlag("authorization-webhook-cache-authorized-ttl", "duration", AUTHZ, S,
                 "'Allowed' SubjectAccessReview answers kept this long; default 10s, as upstream."),
    UpstreamFlag("authorization-webhook-cache-unauthorized-ttl", "duration", AUTHZ, S,
                 "'Denied' SubjectAccessReview answers kept this long; default 10s, as upstream."),
    UpstreamFlag("authorization-always-allow-paths", "stringSlice", AUTHZ, S,
                 "Default /healthz,/readyz,/livez, as upstream; here these paths also skip authentication."),
    # -- k8s.io/apiserver pkg/server/options/audit.go -----------------------------------------------------------
    _audit("audit-policy-file", "string"),
    _audit("audit-log-path", "string"),
    _audit("audit-log-maxage", "int"),
    _audit("audit-log-maxbackup", "int"),
    _audit("audit-log-maxsize", "int"),
    _audit("audit-log-format", "string"),
    _audit("audit-log-version", "string"),
    _audit("audit-log-compress", "bool"),
    *(_audit(f"audit-log-{suffix}", kind) for suffix, kind in _AUDIT_BACKEND_FLAGS),
    _audit("audit-webhook-config-file", "string"),
    _audit("audit-webhook-initial-backoff", "duration"),
    _audit("audit-webhook-batch-initial-backoff", "duration"),
    _audit("audit-webhook-version", "string"),
    *(_audit(f"audit-webhook-{suffix}", kind) for suffix, kind in _AUDIT_BACKEND_FLAGS),
    # -- k8s.io/apiserver pkg/server/options/feature.go ---------------------------------------------------------
    UpstreamFlag("profiling", "bool", FEATURE, N,
                 "no /debug/pprof endpoint; upstream serves one by default, so only --profiling=false is accepted",
                 accept_only=False),
    UpstreamFlag("contention-profiling", "bool", FEATURE, N,
                 "no /debug/pprof endpoint, so only --contention-profiling=false is accepted", accept_only=False),
    UpstreamFlag("debug-socket-path", "string", FEATURE, R, "no profiling endpoint, on a socket or otherwise"),
    UpstreamFlag("enable-priority-and-fairness", "bool", FEATURE, N,
                 "no API priority and fairness (custom-metrics-apiserver turns it off too), so only "
                 "--enable-priority-and-fairness=false is accepted", accept_only=False),
    # -- k8s.io/component-base logs/logs.go ----------------------------------------------------------------------
    UpstreamFlag("v", "int", LOGS, S, "Also -v. 0 info, 2 access log, 4 debug, 6 every rendered PromQL."),
    UpstreamFlag("vmodule", "string", LOGS, R, "no per-file verbosity", "--v"),
    UpstreamFlag("log-flush-frequency", "duration", LOGS, N, "Every log line is written and flushed at once."),
)

BY_NAME = {flag.name: flag for flag in FLAGS}


# Our flags that carry more than one upstream flag: all spellings given must say the same.
_SHARED = frozenset(f.ours for f in FLAGS if f.disposition is Disposition.SAME and f.ours)


def _agree(carried: dict[str, tuple[str, str]], ours: str, spelling: str, value: str) -> None:
    seen = carried.setdefault(ours, (spelling, value))
    if seen[1] != value:
        note = next(f.note for f in FLAGS if f.ours == ours)
        raise UpstreamFlagError(f"{seen[0]} {seen[1]!r} and {spelling} {value!r} differ: {note}")


def _check_value(flag: UpstreamFlag, value: str) -> None:
    """Refuse what pflag would refuse for the flag's type (for flags whose value we then drop or pass on)."""
    try:
        if flag.kind == "bool":
            parse_bool(value)
        elif flag.kind == "int":
            parse_int(value)
        elif flag.kind == "float":
            parse_float(value)
        elif flag.kind == "duration":
            parse_duration(value)
    except FlagValueError as exc:
        raise UpstreamFlagError(f"--{flag.name} {exc}") from None


def _split(args: Sequence[str], i: int) -> tuple[UpstreamFlag | None, str | None, int]:
    """The upstream flag at ``args[i]``, its value (None for a bare boolean) and how many arguments it used."""
    arg = args[i]
    if arg.startswith("--"):
        name, eq, value = arg[2:].partition("=")
    elif arg.startswith("-v"):  # pflag's shorthand: -v 4, -v=4, -v4
        name, rest = "v", arg[2:]
        eq, value = ("=", rest.removeprefix("=")) if rest else ("", "")
    else:
        return None, None, 1
    flag = BY_NAME.get(name)
    if flag is None:
        return None, None, 1
    if eq:
        return flag, value, 1
    if flag.kind == "bool":
        return flag, None, 1
    if i + 1 >= len(args):
        raise UpstreamFlagError(f"flag needs an argument: --{flag.name}")
    return flag, args[i + 1], 2


def translate(args: Sequence[str]) -> list[str]:
    """``args`` (after the subcommand) with every upstream flag in the form ``serve`` takes, or raise.

    Flags outside the table pass through untouched; ``--`` ends the scan. Booleans become their bare flag
    (true) or disappear (false: every boolean here defaults to false). Repeated string slices are joined, as
    pflag appends them. Two upstream flags carried by one of ours (the kubeconfigs) must agree.
    """
    out: list[str] = []
    slices: dict[str, list[str]] = {}
    bools: dict[str, bool] = {}
    carried: dict[str, tuple[str, str]] = {}  # a flag in _SHARED -> (the spelling first given, its value)
    i = 0
    while i < len(args):
        if args[i] == "--":
            out.extend(args[i:])
            break
        flag, value, used = _split(args, i)
        if flag is None:
            name, eq, inline = args[i].partition("=")
            if name in _SHARED and (eq or i + 1 < len(args)):  # ours, given beside the upstream spellings
                _agree(carried, name, name, inline if eq else args[i + 1])
            out.append(args[i])
            i += 1
            continue
        i += used
        if value is not None:
            _check_value(flag, value)
        if flag.disposition is Disposition.REFUSED:
            raise UpstreamFlagError(flag.refusal())
        if flag.kind == "bool":
            on = True if value is None else parse_bool(value)
            if flag.accept_only is not None:
                if on != flag.accept_only:
                    raise UpstreamFlagError(flag.refusal())
                continue
            if flag.disposition is Disposition.SAME:
                bools[flag.target] = on
            continue
        assert value is not None
        if flag.disposition is Disposition.NO_EFFECT:
            continue
        if flag.kind == "stringSlice":
            slices.setdefault(flag.target, []).append(value)
            continue
        if flag.target in _SHARED:
            _agree(carried, flag.target, f"--{flag.name}", value)
        out.extend([flag.target, value])
    out.extend(name for name, on in bools.items() if on)
    for name, values in slices.items():
        out.extend([name, ",".join(values)])
    return out


def _alike(flag: UpstreamFlag) -> tuple[str, Disposition, str, str]:
    return flag.source, flag.disposition, flag.note, flag.ours


def markdown() -> str:
    """README's table: every upstream flag, where it comes from, ours, and the meaning or the difference.
    Neighbouring flags treated alike (the audit flags) share a row."""
    rows = ["| prometheus-adapter flag | registered in | here | meaning / difference |", "|---|---|---|---|"]
    groups: list[list[UpstreamFlag]] = []
    for flag in FLAGS:
        last = groups[-1][0] if groups else None
        if last is not None and flag.disposition is Disposition.REFUSED and _alike(last) == _alike(flag):
            groups[-1].append(flag)
        else:
            groups.append([flag])
    for group in groups:
        flag = group[0]
        if flag.accept_only is not None:
            here = f"only `--{flag.name}={str(flag.accept_only).lower()}`"
        elif flag.disposition is Disposition.REFUSED:
            here = f"refused{'; use `' + flag.ours + '`' if flag.ours else ''}"
        elif flag.disposition is Disposition.NO_EFFECT:
            here = "accepted, no effect"
        else:
            here = f"`{flag.target}`"
        names = ", ".join(f"`--{f.name}`" for f in group)
        note = flag.note[:1].upper() + flag.note[1:] if flag.note else "Same."
        rows.append(f"| {names} | {flag.source} | {here} | {note.replace('|', '/')} |")
    return "\n".join(rows) + "\n"
