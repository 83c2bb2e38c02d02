"""``gpu-adapter``: ``serve`` the custom metrics API, ``check`` what the rules yield from a live Prometheus."""

from __future__ import annotations

import asyncio
import gc
import logging
import ssl
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated

import httpx
import typer

import clikit
from adapter import goflag, malloc, prometheus_auth
from adapter.auth.middleware import DEFAULT_ALWAYS_ALLOW_PATHS
from adapter.auth.stack import AuthOptions, AuthSetupError, AuthStack
from adapter.http1 import header_name_ok, header_value_ok
from adapter.kube.api import KubeApi, KubeError
from adapter.kube.config import KubeConfigError, load_api_client
from adapter.kube.resolver import KubeResolver
from adapter.kube.restmapper import ResourceDiscovery
from adapter.logs import FORMATS, configure_logging
from adapter.prometheus import PrometheusClient, PrometheusConfig
from adapter.prometheus_auth import PrometheusCredentials
from adapter.provider import ObjectResolver, StandaloneResolver
from adapter.rules import RulesConfig, RulesError, gpu_presets, load_rules
from adapter.serving import TLSSettings, TLSSettingsError, listening_socket, server_context, uvicorn_config
from adapter.standalone import StandaloneObjects
from adapter.upstream_flags import UpstreamFlagError, translate

if TYPE_CHECKING:
    from adapter.discovery import Discovery

log = logging.getLogger("adapter")

app = typer.Typer(add_completion=False, rich_markup_mode=None, no_args_is_help=True,
                  help="Kubernetes custom metrics API for GPU workloads, answered from Prometheus.")



class UsageError(Exception):
    pass


MaxSampleAge = Annotated[str | None, typer.Option("--max-sample-age", help=(
    "A value whose newest underlying sample is older than this is no value, as NaN is (checked only for rules "
    "whose query reaches further back, e.g. avg_over_time(x[5m])); 0 disables; default: 3 times the longest "
    "scrape interval Prometheus reports (1m when it reports none)."))]


def sample_age_limit(discovery: Discovery, flag_s: float | None) -> Callable[[], float | None]:
    """``--max-sample-age`` for the provider: the flag's value (0: no limit), else 3 scrape intervals as last read."""
    if flag_s is not None:
        return lambda: flag_s or None
    return lambda: discovery.default_max_sample_age_s


def parse_duration(text: str, flag: str) -> float:
    """Go durations, as prometheus-adapter takes them: ``1m``, ``30s``, ``1m30s``, ``1.5h``, ``500ms``."""
    try:
        seconds = goflag.parse_duration(text)
    except goflag.FlagValueError as exc:
        raise UsageError(f"{flag} {exc}") from None
    if seconds <= 0:
        raise UsageError(f"{flag} {text!r}: expected a duration like 30s, 1m or 1m30s")
    return seconds


def parse_duration_or_zero(text: str, flag: str) -> float:
    """A duration, or ``0`` to turn the feature off."""
    return 0.0 if text.strip() == "0" else parse_duration(text, flag)


def prometheus_headers(values: list[str]) -> list[tuple[str, str]]:
    """``--prometheus-header`` as prometheus-adapter reads it (cmd/adapter/adapter.go, parseHeaderArgs): split at
    the first ``=``; no ``=`` sends the header empty; a repeated name sends every value, in order."""
    headers = []
    for item in values:
        key, _, value = item.partition("=")
        if not header_name_ok(key):
            raise UsageError(f"--prometheus-header {item!r}: {key!r} is not a valid header name (expected key=value)")
        if any(c in value for c in "\r\n\0"):
            raise UsageError(f"--prometheus-header {item!r}: a header value cannot hold a line break")
        if not header_value_ok(value):
            raise UsageError(f"--prometheus-header {key}: the value must be printable ASCII (it is not shown here)")
        headers.append((key, value))
    return headers


def _rules(config: str | None) -> RulesConfig:
    return load_rules(config) if config else gpu_presets()


PromUrl = Annotated[str, typer.Option("--prometheus-url", help="Prometheus base URL (a path prefix is allowed).")]
Config = Annotated[str | None, typer.Option("--config", help="prometheus-adapter rules file; default: GPU presets.")]
Verb = Annotated[str, typer.Option("--prometheus-verb", help="POST (default; no URL limits) or GET.")]
Timeout = Annotated[str, typer.Option("--prometheus-timeout", help="Per-query timeout, also sent to Prometheus.")]
TokenFile = Annotated[str | None, typer.Option("--prometheus-token-file", help="Bearer token, re-read on change.")]
CaFile = Annotated[str | None, typer.Option("--prometheus-ca-file")]
CertFile = Annotated[str | None, typer.Option("--prometheus-client-tls-cert-file")]
KeyFile = Annotated[str | None, typer.Option("--prometheus-client-tls-key-file")]
Headers = Annotated[list[str] | None, typer.Option("--prometheus-header", help="Extra header key=value, repeatable.")]
AuthConfig = Annotated[str | None, typer.Option("--prometheus-auth-config", help=(
    "kubeconfig-format file whose current context's credentials (CA, client certificate, token or basic auth) are "
    "used for Prometheus; ignored with --prometheus-ca-file, as upstream."))]
AuthInCluster = Annotated[bool, typer.Option("--prometheus-auth-incluster", help=(
    "Use the pod's service account token and cluster CA for Prometheus (e.g. behind kube-rbac-proxy)."))]


def prometheus_config(url: str, verb: str, timeout: str, token_file: str | None, ca_file: str | None,
                      cert_file: str | None, key_file: str | None, headers: list[str] | None,
                      auth_config: str | None = None, auth_incluster: bool = False) -> PrometheusConfig:
    if auth_config and auth_incluster:
        raise UsageError("--prometheus-auth-config and --prometheus-auth-incluster: may not use both in-cluster auth "
                         "and an explicit kubeconfig at the same time")
    if verb.upper() not in ("GET", "POST"):
        raise UsageError(f"--prometheus-verb {verb!r}: expected GET or POST")
    if bool(cert_file) != bool(key_file):
        raise UsageError("--prometheus-client-tls-cert-file and --prometheus-client-tls-key-file go together")
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL:
        parsed = None
    if parsed is None or parsed.scheme not in ("http", "https") or not parsed.host:
        raise UsageError(f"--prometheus-url {url!r}: expected an http:// or https:// URL with a host")
    extra = prometheus_headers(headers or [])
    credentials = PrometheusCredentials()
    if ca_file and (auth_config or auth_incluster):
        log.warning("--prometheus-ca-file is set, so %s is not read (as in prometheus-adapter); put the CA in the "
                    "kubeconfig instead to use its credentials", "--prometheus-auth-config" if auth_config
                    else "--prometheus-auth-incluster")
    if not ca_file and (auth_config or auth_incluster):  # upstream reads neither when a CA file is given
        credentials = prometheus_auth.from_kubeconfig(auth_config) if auth_config else prometheus_auth.in_cluster()
    source = "--prometheus-auth-config" if auth_config else "--prometheus-auth-incluster"
    pair = (cert_file, key_file) if cert_file else (credentials.client_cert_file, credentials.client_key_file)
    _check_tls_files(ca_file or credentials.ca_file, "--prometheus-ca-file" if ca_file else source,
                     pair, "--prometheus-client-tls-cert-file" if cert_file else source)
    if credentials.authorization and not token_file and not any(k.lower() == "authorization" for k, _ in extra):
        if not header_value_ok(credentials.authorization):
            raise UsageError(f"{source}: the credentials hold a line break, a control or a non-ASCII character")
        extra.append(("Authorization", credentials.authorization))
    return PrometheusConfig(url=url, method=verb.upper(), timeout_s=parse_duration(timeout, "--prometheus-timeout"),  # type: ignore[arg-type]
                            bearer_token_file=token_file or credentials.bearer_token_file,
                            ca_file=ca_file or credentials.ca_file,
                            client_cert_file=cert_file or credentials.client_cert_file,
                            client_key_file=key_file or credentials.client_key_file,
                            insecure_skip_verify=credentials.insecure_skip_verify and not ca_file, headers=extra)


def _check_tls_files(ca_file: str | None, ca_source: str, pair: tuple[str | None, str | None],
                     pair_source: str) -> None:
    """Load the CA bundle and client key pair once, so a bad file is a one-line usage error at start."""
    try:
        if ca_file:
            ssl.create_default_context(cafile=ca_file)
    except (ssl.SSLError, OSError) as exc:
        raise UsageError(f"{ca_source} {ca_file}: not a readable PEM CA bundle ({_reason(exc)})") from None
    try:
        if pair[0]:
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(pair[0], pair[1])
    except (ssl.SSLError, OSError) as exc:
        raise UsageError(f"{pair_source} {pair[0]}: not a readable PEM certificate and key ({_reason(exc)})") from None


def _reason(exc: BaseException) -> str:
    return getattr(exc, "reason", None) or getattr(exc, "strerror", None) or str(exc)


@app.command()
def serve(
    prometheus_url: PromUrl,
    config: Config = None,
    secure_port: Annotated[int, typer.Option("--secure-port", min=1, max=65535)] = 6443,
    bind_address: Annotated[str, typer.Option("--bind-address")] = "0.0.0.0",
    cert_dir: Annotated[str, typer.Option("--cert-dir", help="Where a self-signed pair is kept.")] = (
        "apiserver.local.config/certificates"),
    tls_cert_file: Annotated[str | None, typer.Option("--tls-cert-file")] = None,
    tls_private_key_file: Annotated[str | None, typer.Option("--tls-private-key-file")] = None,
    metrics_relist_interval: Annotated[str, typer.Option("--metrics-relist-interval")] = "1m",
    metrics_max_age: Annotated[str | None, typer.Option(
        "--metrics-max-age", help="Look-back for series discovery (at least the relist interval); default: the "
        "relist interval plus the longest scrape interval Prometheus reports (1m when it reports none).")] = None,
    max_sample_age: MaxSampleAge = None,
    prometheus_verb: Verb = "POST",
    prometheus_timeout: Timeout = "5s",
    prometheus_token_file: TokenFile = None,
    prometheus_ca_file: CaFile = None,
    prometheus_client_tls_cert_file: CertFile = None,
    prometheus_client_tls_key_file: KeyFile = None,
    prometheus_header: Headers = None,
    prometheus_auth_config: AuthConfig = None,
    prometheus_auth_incluster: AuthInCluster = False,
    discovery_interval: Annotated[str, typer.Option("--discovery-interval", help=(
        "How often the Kubernetes API's discovery is re-read, so resources (CRDs) added later resolve in the "
        "rules; 0: only at start."))] = "1m",
    tls_min_version: Annotated[str, typer.Option("--tls-min-version", help="VersionTLS12 or VersionTLS13.")] = (
        "VersionTLS12"),
    tls_cipher_suites: Annotated[str, typer.Option("--tls-cipher-suites", help=(
        "Comma-separated TLS 1.2 cipher suites (Go/IANA names); default: OpenSSL's secure set."))] = "",
    permit_port_sharing: Annotated[bool, typer.Option("--permit-port-sharing", help=(
        "Bind with SO_REUSEPORT, so several processes can listen on one port."))] = False,
    v: Annotated[int, typer.Option("--v", "-v", help="Log verbosity: 0 info, 2 access log, 4 debug, 6 every rendered "
                                   "PromQL.")] = 0,
    logging_format: Annotated[str, typer.Option("--logging-format", help="text or json.")] = "text",
    query_cache_ttl: Annotated[str, typer.Option("--query-cache-ttl", help=(
        "Reuse a query result this long, never longer than Prometheus' scrape interval; 0: only share "
        "identical queries in flight."))] = "5s",
    config_reload_interval: Annotated[str, typer.Option("--config-reload-interval", help=(
        "How often --config is checked for changes; 0 disables reloading."))] = "5s",
    kubeconfig: Annotated[str | None, typer.Option("--kubeconfig", help=(
        "Kubernetes API access; default: the in-cluster config when running in a pod, else none."))] = None,
    standalone_objects: Annotated[str | None, typer.Option("--standalone-objects", help=(
        "Without a Kubernetes API: a JSON/YAML file of objects (resource -> [{namespace, name, labels}]) that "
        "label selectors match; re-read on change."))] = None,
    disable_auth: Annotated[bool, typer.Option("--disable-auth", help=(
        "Serve every request without authentication or authorisation. Local use only."))] = False,
    anonymous_auth: Annotated[bool, typer.Option("--anonymous-auth", help=(
        "Treat requests without credentials as system:anonymous (then authorised by SubjectAccessReview) "
        "instead of answering 401."))] = False,
    requestheader_client_ca_file: Annotated[str | None, typer.Option("--requestheader-client-ca-file", help=(
        "CA of the front-proxy client certificate; default: read from kube-system/"
        "extension-apiserver-authentication."))] = None,
    requestheader_allowed_names: Annotated[str, typer.Option("--requestheader-allowed-names", help=(
        "Comma-separated front-proxy certificate CNs; empty: any CN signed by the CA."))] = "",
    requestheader_username_headers: Annotated[str, typer.Option("--requestheader-username-headers")] = (
        "X-Remote-User"),
    requestheader_group_headers: Annotated[str, typer.Option("--requestheader-group-headers")] = "X-Remote-Group",
    requestheader_extra_headers_prefix: Annotated[str, typer.Option("--requestheader-extra-headers-prefix")] = (
        "X-Remote-Extra-"),
    client_ca_file: Annotated[str | None, typer.Option("--client-ca-file", help=(
        "CA for ordinary x509 client certificates (CN = user, O = groups)."))] = None,
    authentication_skip_lookup: Annotated[bool, typer.Option("--authentication-skip-lookup", help=(
        "Do not read kube-system/extension-apiserver-authentication."))] = False,
    authentication_tolerate_lookup_failure: Annotated[bool, typer.Option(
        "--authentication-tolerate-lookup-failure", help=(
            "Start even when that ConfigMap cannot be read (aggregated requests then fail with 401)."))] = False,
    authorization_always_allow_paths: Annotated[str, typer.Option("--authorization-always-allow-paths", help=(
        "Comma-separated paths served without authentication (a trailing * matches a prefix)."))] = (
        ",".join(DEFAULT_ALWAYS_ALLOW_PATHS)),
    authentication_token_webhook_cache_ttl: Annotated[str, typer.Option(
        "--authentication-token-webhook-cache-ttl", help="How long TokenReview answers are kept; 0: not kept.")] = (
        "10s"),
    authorization_webhook_cache_authorized_ttl: Annotated[str, typer.Option(
        "--authorization-webhook-cache-authorized-ttl", help="How long 'allowed' answers are kept.")] = "10s",
    authorization_webhook_cache_unauthorized_ttl: Annotated[str, typer.Option(
        "--authorization-webhook-cache-unauthorized-ttl", help="How long 'denied' answers are kept.")] = "10s",
) -> None:
    """Serve custom.metrics.k8s.io (v1beta1 and v1beta2) and, with externalRules, external.metrics.k8s.io."""

    from adapter.app import AdapterState, create_app
    from adapter.discovery import Discovery
    from adapter.provider import Provider
    from adapter.querycache import QueryCache
    from adapter.rules_source import RulesSource
    from adapter.selfmetrics import AdapterMetrics
    from adapter.tls import self_signed

    malloc.configure()  # before any thread starts
    if logging_format not in FORMATS:
        raise UsageError(f"--logging-format {logging_format!r}: expected text or json")
    configure_logging(v, logging_format)
    cache_ttl = parse_duration_or_zero(query_cache_ttl, "--query-cache-ttl")
    reload_interval = parse_duration_or_zero(config_reload_interval, "--config-reload-interval")
    prom = prometheus_config(prometheus_url, prometheus_verb, prometheus_timeout, prometheus_token_file,
                             prometheus_ca_file, prometheus_client_tls_cert_file, prometheus_client_tls_key_file,
                             prometheus_header, prometheus_auth_config, prometheus_auth_incluster)
    tls = serving_tls(tls_min_version, tls_cipher_suites)
    auth_ttls = [parse_duration_or_zero(text, flag) for text, flag in (
        (authentication_token_webhook_cache_ttl, "--authentication-token-webhook-cache-ttl"),
        (authorization_webhook_cache_authorized_ttl, "--authorization-webhook-cache-authorized-ttl"),
        (authorization_webhook_cache_unauthorized_ttl, "--authorization-webhook-cache-unauthorized-ttl"))]
    front_proxy = {  # checked whether or not auth is on, as the apiserver's options are
        "requestheader_allowed_names": _csv(requestheader_allowed_names, "--requestheader-allowed-names"),
        "requestheader_username_headers": _csv(requestheader_username_headers, "--requestheader-username-headers"),
        "requestheader_group_headers": _csv(requestheader_group_headers, "--requestheader-group-headers"),
        "requestheader_extra_headers_prefix": _csv(requestheader_extra_headers_prefix,
                                                   "--requestheader-extra-headers-prefix")}
    always_allow = _csv(authorization_always_allow_paths, "--authorization-always-allow-paths")
    relist = parse_duration(metrics_relist_interval, "--metrics-relist-interval")
    max_age = parse_duration(metrics_max_age, "--metrics-max-age") if metrics_max_age else None
    if max_age is not None and max_age < relist:
        raise UsageError("--metrics-max-age must be at least --metrics-relist-interval, or series are missed")
    sample_age = parse_duration_or_zero(max_sample_age, "--max-sample-age") if max_sample_age else None
    api_client = load_api_client(kubeconfig)
    resources = _resource_discovery(api_client, parse_duration_or_zero(discovery_interval, "--discovery-interval"))
    rules = RulesSource.load(config, interval_s=reload_interval)
    if resources is not None:
        resources.on_change = lambda: rules.reparse() and None
    if bool(tls_cert_file) != bool(tls_private_key_file):
        raise UsageError("--tls-cert-file and --tls-private-key-file go together")
    client = PrometheusClient(prom)
    metrics = AdapterMetrics()
    cache = QueryCache(client, ttl_s=cache_ttl, observe=metrics.observe_query)
    discovery = Discovery(client, rules, interval_s=relist, max_age_s=max_age)
    discovery.after_relist(lambda: cache.refresh_freshness(discovery.scrape_intervals))
    discovery.after_relist(_trim_malloc)  # a relist decodes megabytes of series: give the free pages back
    rules.on_change(lambda _: discovery.request_relist())
    resolver = _resolver(api_client, standalone_objects)
    auth = None
    if disable_auth:
        log.warning("--disable-auth: every caller can read every metric; never use this in a cluster")
    else:
        auth = AuthStack(AuthOptions(
            requestheader_client_ca_file=requestheader_client_ca_file,
            **front_proxy,
            client_ca_file=client_ca_file, skip_lookup=authentication_skip_lookup,
            tolerate_lookup_failure=authentication_tolerate_lookup_failure,
            always_allow_paths=always_allow, anonymous=anonymous_auth,
            token_cache_ttl_s=auth_ttls[0], allowed_cache_ttl_s=auth_ttls[1], denied_cache_ttl_s=auth_ttls[2]),
            api_client)
        asyncio.run(auth.load())
    provider = Provider(cache, lambda: discovery.catalogue, resolver, sample_age_limit(discovery, sample_age))
    metrics.watch_discovery(discovery)
    metrics.watch_query_cache(cache)
    metrics.watch_rules(rules)
    metrics.watch_several_series(provider.series_conflicts)
    state = AdapterState(client, discovery, provider, serve_external=lambda: bool(rules.current.external_rules),
                         metrics=metrics, rules=rules, auth=auth)
    if resources is not None:
        state.background.append(resources)
    if isinstance(resolver, KubeResolver):
        kube = resolver
        metrics.watch_kube(lambda: {str(gr): c for gr, c in kube.caches.items()})
        state.on_shutdown.append(kube.close)
    if tls_cert_file and tls_private_key_file:
        cert, key = tls_cert_file, tls_private_key_file
    else:  # only once every other setting has been accepted: a refused start writes nothing
        cert, key = self_signed(cert_dir, ["localhost", "127.0.0.1", "::1"])
        log.info("serving with a self-signed certificate from %s", cert_dir)
    ctx = server_context(cert, key, None, request_client_certs=auth is not None, tls=tls)
    if auth is not None:
        auth.attach_tls(ctx)
    import uvicorn

    server = uvicorn.Server(uvicorn_config(create_app(state), bind_address, secure_port, ctx, log_config=None))
    try:
        sock = listening_socket(bind_address, secure_port, reuse_port=permit_port_sharing)
    except OSError as exc:
        raise UsageError(f"cannot listen on {bind_address}:{secure_port}: {exc.strerror or exc}") from None
    # Everything built so far (modules, rules, the app: ~90,000 objects) lives as long as the process. Out of the
    # collector's sight, a full collection no longer walks them all: under load that walk took ~20 % of the CPU.
    gc.freeze()
    server.run(sockets=[sock])


async def _trim_malloc() -> None:
    malloc.trim()


def serving_tls(min_version: str, cipher_suites: str) -> TLSSettings:
    try:
        return TLSSettings.parse(min_version, _csv(cipher_suites, "--tls-cipher-suites"))
    except TLSSettingsError as exc:
        raise UsageError(str(exc)) from None


def _resource_discovery(api_client: object | None, interval_s: float) -> ResourceDiscovery | None:
    """With a Kubernetes API: resource names resolve by its discovery (read now, then every ``interval_s``)."""
    if api_client is None:
        return None
    resources = ResourceDiscovery(KubeApi(api_client), interval_s, on_change=lambda: None)  # type: ignore[arg-type]
    try:
        resources.refresh()
    except KubeError as exc:
        raise KubeConfigError(f"reading the Kubernetes API's discovery (which resources exist) failed: {exc}") from None
    return resources


def _csv(text: str, flag: str) -> list[str]:
    """A string-slice flag, read as pflag does (one CSV record); like the apiserver's options, an entry of only
    spaces is refused."""
    try:
        values = goflag.split_slice(text)
    except goflag.FlagValueError as exc:
        raise UsageError(f"{flag} {exc}") from None
    if any(not value.strip() for value in values):
        raise UsageError(f"{flag} {text!r}: empty value")
    return [value.strip() for value in values]


def _resolver(api_client: object | None, standalone_objects: str | None) -> ObjectResolver:
    if standalone_objects and api_client is not None:
        raise UsageError("--standalone-objects is for running without a Kubernetes API; with one, selectors are "
                         "resolved from the API")
    if api_client is not None:
        return KubeResolver(api_client)  # type: ignore[arg-type]
    if standalone_objects:
        return StandaloneObjects(standalone_objects)
    return StandaloneResolver()


@app.command()
def check(
    prometheus_url: PromUrl,
    config: Config = None,
    metrics_max_age: Annotated[str, typer.Option("--metrics-max-age")] = "5m",
    prometheus_verb: Verb = "POST",
    prometheus_timeout: Timeout = "10s",
    prometheus_token_file: TokenFile = None,
    prometheus_ca_file: CaFile = None,
    prometheus_header: Headers = None,
    prometheus_auth_config: AuthConfig = None,
    prometheus_auth_incluster: AuthInCluster = False,
) -> None:
    """For each rule, print the metrics and resources it yields from live Prometheus; flag rules matching nothing."""
    from rich.console import Console

    from adapter.discovery import Discovery
    from adapter.provider import check_resource_rules

    prom = prometheus_config(prometheus_url, prometheus_verb, prometheus_timeout, prometheus_token_file,
                             prometheus_ca_file, None, None, prometheus_header, prometheus_auth_config,
                             prometheus_auth_incluster)
    rules = _rules(config)
    console = Console(highlight=False)

    async def run() -> int:
        client = PrometheusClient(prom)
        discovery = Discovery(client, lambda: rules, max_age_s=parse_duration(metrics_max_age, "--metrics-max-age"))
        try:
            if not await discovery.relist():
                console.print(f"[red]cannot list series from {prometheus_url}: {discovery.last_error}[/red]")
                return 1
            resource = await check_resource_rules(client, rules.resource_rules) if rules.resource_rules else []
        finally:
            await client.aclose()
        catalogue = discovery.catalogue
        assert catalogue is not None
        empty = 0
        for section, rule_list in (("rules", rules.rules), ("externalRules", rules.external_rules)):
            for i, rule in enumerate(rule_list):
                yielded = catalogue.rule_metrics(rule)
                console.print(f"[bold]{section}[{i}][/bold] {rule.series_query}")
                if not yielded:
                    empty += 1
                    console.print("  [yellow]matches no series: this rule yields nothing[/yellow]")
                for line in yielded:
                    console.print(f"  {line}")
        for where, query, count in resource:  # resourceRules: pods (by container) and nodes with usable samples
            console.print(f"[bold]{where}[/bold] {query.strip()}")
            console.print(f"  {count} {'pods' if 'container' in where else 'nodes'} with samples" if count else
                          "  [yellow]matches no series: this query yields nothing[/yellow]")
            empty += not count
        console.print(f"{empty} rule(s) matched nothing" if empty else "every rule yields metrics")
        return 0

    code = asyncio.run(run())
    if code:
        raise typer.Exit(code)


@app.command()
def explain(
    path: Annotated[str, typer.Argument(help="API path, e.g. /apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/"
                                             "pods/*/DCGM_FI_DEV_GPU_UTIL or /apis/metrics.k8s.io/v1beta1/nodes "
                                             "(a ?labelSelector=... query works too).")],
    prometheus_url: PromUrl,
    config: Config = None,
    label_selector: Annotated[str | None, typer.Option("--label-selector")] = None,
    metric_label_selector: Annotated[str | None, typer.Option("--metric-label-selector")] = None,
    output: Annotated[str, typer.Option("--output", "-o", help="text or json.")] = "text",
    metrics_max_age: Annotated[str, typer.Option("--metrics-max-age")] = "5m",
    prometheus_verb: Verb = "POST",
    prometheus_timeout: Timeout = "10s",
    prometheus_token_file: TokenFile = None,
    prometheus_ca_file: CaFile = None,
    prometheus_header: Headers = None,
    prometheus_auth_config: AuthConfig = None,
    prometheus_auth_incluster: AuthInCluster = False,
    kubeconfig: Annotated[str | None, typer.Option("--kubeconfig", help=(
        "Resolve labelSelector through this cluster's API (default: in-cluster config when in a pod)."))] = None,
    standalone_objects: Annotated[str | None, typer.Option("--standalone-objects")] = None,
) -> None:
    """Show how a metric request is answered: rule, rendered PromQL, Prometheus' raw samples, objects, items."""
    import json

    from rich.console import Console

    from adapter.explain import explain_live, query_selectors, render_text
    from adapter.status import ApiError

    if output not in ("text", "json"):
        raise UsageError(f"--output {output!r}: expected text or json")
    logging.getLogger("adapter").setLevel(logging.ERROR)  # a failure is reported once, as the error line
    prom = prometheus_config(prometheus_url, prometheus_verb, prometheus_timeout, prometheus_token_file,
                             prometheus_ca_file, None, None, prometheus_header, prometheus_auth_config,
                             prometheus_auth_incluster)
    in_path = query_selectors(path)
    selectors = (label_selector if label_selector is not None else in_path[0],
                 metric_label_selector if metric_label_selector is not None else in_path[1])
    resolver = _resolver(load_api_client(kubeconfig), standalone_objects)
    try:
        report = asyncio.run(explain_live(prom, _rules(config), path, *selectors,
                                          max_age_s=parse_duration(metrics_max_age, "--metrics-max-age"),
                                          resolver=resolver))
    except ApiError as exc:
        print(f"gpu-adapter: error: {exc.code} {exc.body()['reason']}: {exc.message}", file=sys.stderr)
        raise typer.Exit(1) from None
    finally:
        if isinstance(resolver, KubeResolver):
            resolver.close()
    if output == "json":
        print(json.dumps(report, indent=2))
    else:
        render_text(Console(highlight=False, soft_wrap=True), report)


def main(argv: list[str] | None = None) -> None:
    """Usage and configuration errors are one line on stderr, never a traceback."""
    clikit.run(app, "gpu-adapter", argv, (UsageError, RulesError, KubeConfigError, AuthSetupError,
                                          UpstreamFlagError), prepare=_upstream_spellings)


def _upstream_spellings(args: list[str]) -> list[str]:
    """``serve`` takes prometheus-adapter's command line as written (adapter.upstream_flags)."""
    return ["serve", *translate(args[1:])] if args[:1] == ["serve"] else args


# `gpu-adapter check-install` (the chart's `helm test`): adapter/install_check.py.
from adapter.install_check import check_install  # noqa: E402

app.command("check-install")(check_install)
