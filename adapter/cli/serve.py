"""``gpu-adapter serve``: check every flag, build the adapter (``build``), then serve it over HTTPS until stopped.

Nothing is written or bound before every setting has been accepted: a refused start leaves no files behind.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from adapter.auth.stack import AuthOptions, AuthStack
from adapter.cli import values
from adapter.cli.flags import UsageError
from adapter.kube.api import KubeClient
from adapter.kube.config import KubeConfigError, load_api_client
from adapter.kube.resolver import KubeResolver
from adapter.kube.standalone import StandaloneObjects
from adapter.prometheus.client import PrometheusClient
from adapter.prometheus.discovery import Discovery
from adapter.prometheus.querycache import QueryCache
from adapter.provider.engine import Engine
from adapter.provider.resolvers import ObjectResolver, StandaloneResolver
from adapter.rules.resources import BUILTIN
from adapter.rulesfile.source import RulesSource
from adapter.server.app import create_app
from adapter.server.certreload import ServingCertificate
from adapter.server.certs import self_signed
from adapter.server.lifecycle import GracefulServer, Lifecycle
from adapter.server.lifecycle import run as run_until_stopped
from adapter.server.logs import FORMATS, configure_logging
from adapter.server.parts import AdapterState
from adapter.server.selfmetrics import AdapterMetrics
from adapter.server.serving import guard, listening_socket, server_context, uvicorn_config
from clikit.flags import Options
from listener.limits import raise_open_files_limit

if TYPE_CHECKING:
    from adapter.kube.restmapper import ResourceDiscovery

log = logging.getLogger("adapter")


def serve(options: Options) -> None:
    """Serve custom.metrics.k8s.io (v1beta1 and v1beta2) and, with externalRules, external.metrics.k8s.io."""
    if options.logging_format not in FORMATS:
        raise UsageError(f"--logging-format {options.logging_format!r}: expected text or json")
    configure_logging(options.v, options.logging_format)
    adapter = build(options)
    lifecycle = adapter.state.lifecycle
    guard = adapter.state.listener
    assert guard is not None
    server = GracefulServer(uvicorn_config(create_app(adapter.state), options.bind_address, options.secure_port,
                                           adapter.tls, listener=guard, log_config=None,
                                           timeout_graceful_shutdown=lifecycle.listener_close_timeout_s),
                            lifecycle, guard)
    try:
        sock = listening_socket(options.bind_address, options.secure_port, reuse_port=options.permit_port_sharing)
    except OSError as exc:
        raise UsageError(f"cannot listen on {options.bind_address}:{options.secure_port}: "
                         f"{exc.strerror or exc}") from None
    if options.keda_scaler_port:  # gRPC binds it in the app's lifespan: say now, in one line, if it cannot
        try:
            listening_socket(options.bind_address, options.keda_scaler_port,
                             reuse_port=options.permit_port_sharing).close()
        except OSError as exc:
            sock.close()
            raise UsageError(f"--keda-scaler-port: cannot listen on {options.bind_address}:"
                             f"{options.keda_scaler_port}: {exc.strerror or exc}") from None
    # Everything built so far (modules, rules, the app) lives as long as the process: out of the collector's sight,
    # a full collection no longer walks it all.
    gc.freeze()
    raise_open_files_limit()  # every connection is a descriptor: the limit must not be what refuses them
    run_until_stopped(server, sockets=[sock])


@dataclass
class Adapter:
    state: AdapterState
    tls: Any  # ssl.SSLContext: the listening one (its certificate follows the files, adapter.server.certreload)


def build(options: Options) -> Adapter:
    """The adapter's parts from its flags, checked; nothing is started yet (the app's lifespan starts them)."""
    o = options
    cache_ttl = values.duration_or_zero(o.query_cache_ttl, "--query-cache-ttl")
    reload_interval = values.duration_or_zero(o.config_reload_interval, "--config-reload-interval")
    prom = values.prometheus_config(o)
    tls = values.serving_tls(o.tls_min_version, o.tls_cipher_suites)
    auth_ttls = [values.duration_or_zero(text, flag) for text, flag in (
        (o.authentication_token_webhook_cache_ttl, "--authentication-token-webhook-cache-ttl"),
        (o.authorization_webhook_cache_authorized_ttl, "--authorization-webhook-cache-authorized-ttl"),
        (o.authorization_webhook_cache_unauthorized_ttl, "--authorization-webhook-cache-unauthorized-ttl"))]
    auth_options = AuthOptions(  # checked whether or not auth is on, as the apiserver's options are
        requestheader_client_ca_file=o.requestheader_client_ca_file,
        requestheader_allowed_names=values.csv(o.requestheader_allowed_names, "--requestheader-allowed-names"),
        requestheader_username_headers=values.csv(o.requestheader_username_headers,
                                                  "--requestheader-username-headers"),
        requestheader_group_headers=values.csv(o.requestheader_group_headers, "--requestheader-group-headers"),
        requestheader_extra_headers_prefix=values.csv(o.requestheader_extra_headers_prefix,
                                                      "--requestheader-extra-headers-prefix"),
        client_ca_file=o.client_ca_file, skip_lookup=o.authentication_skip_lookup,
        tolerate_lookup_failure=o.authentication_tolerate_lookup_failure,
        always_allow_paths=values.csv(o.authorization_always_allow_paths, "--authorization-always-allow-paths"),
        anonymous=o.anonymous_auth,
        token_cache_ttl_s=auth_ttls[0], allowed_cache_ttl_s=auth_ttls[1], denied_cache_ttl_s=auth_ttls[2])
    relist = values.duration(o.metrics_relist_interval, "--metrics-relist-interval")
    max_age = values.duration(o.metrics_max_age, "--metrics-max-age") if o.metrics_max_age else None
    if max_age is not None and max_age < relist:
        raise UsageError("--metrics-max-age must be at least --metrics-relist-interval, or series are missed")
    sample_age = values.duration_or_zero(o.max_sample_age, "--max-sample-age") if o.max_sample_age else None
    shutdown = values.shutdown_settings(o.shutdown_delay_duration, o.shutdown_send_retry_after,
                                        o.shutdown_drain_timeout)
    if bool(o.tls_cert_file) != bool(o.tls_private_key_file):
        raise UsageError("--tls-cert-file and --tls-private-key-file go together")
    keda_options = keda_flags(o)
    limits, requests = values.listener_limits(o)
    api_client = load_api_client(o.kubeconfig)
    resources = _resource_discovery(api_client, values.duration_or_zero(o.discovery_interval, "--discovery-interval"))
    rules = RulesSource.load(o.config, interval_s=reload_interval, table=resources.table if resources else BUILTIN)
    client = PrometheusClient(prom)
    metrics = AdapterMetrics()
    cache = QueryCache(client, ttl_s=cache_ttl, observe=metrics.observe_query)
    discovery = Discovery(client, rules, interval_s=relist, max_age_s=max_age)
    resolver = object_resolver(api_client, o.standalone_objects)
    auth = None
    if o.disable_auth:
        log.warning("--disable-auth: every caller can read every metric; never use this in a cluster")
    else:
        auth = AuthStack(auth_options, api_client)
        asyncio.run(auth.load())
    engine = Engine(cache, lambda: discovery.catalogue, resolver, sample_age_limit(discovery, sample_age),
                    discovery.waiting_reason)
    if o.tls_cert_file and o.tls_private_key_file:
        cert, key = o.tls_cert_file, o.tls_private_key_file
    else:  # only once every other setting has been accepted: a refused start writes nothing
        cert, key = self_signed(o.cert_dir, ["localhost", "127.0.0.1", "::1"])
        log.info("serving with a self-signed certificate from %s", o.cert_dir)
    serving = ServingCertificate(cert, key, lambda c, k: server_context(c, k, None,
                                                                        request_client_certs=auth is not None, tls=tls))
    state = AdapterState(client, discovery, engine, serve_external=lambda: bool(rules.current.external_rules),
                         metrics=metrics, lifecycle=Lifecycle(shutdown), rules=rules, cache=cache, auth=auth,
                         serving=serving, resources=resources,
                         kube=resolver if isinstance(resolver, KubeResolver) else None,
                         requests=requests, listener=guard(serving.listening, limits))
    if keda_options is not None:
        state.scaler = keda_scaler(o, keda_options, state, cert, key)
    state.connect()  # what triggers what: AdapterState.triggers
    return Adapter(state, serving.listening)


@dataclass(frozen=True)
class KedaOptions:
    stream_interval_s: float
    plain_text: bool
    limits: Any  # adapter.keda.limits.ScalerLimits
    stream_lifetime_s: tuple[float, float] | None


def keda_flags(o: Options) -> KedaOptions | None:
    """The ``--keda-scaler-*`` flags checked (before anything is written); None when the scaler is off."""
    given = [flag for flag, value in (("--keda-scaler-tls-cert-file", o.keda_scaler_tls_cert_file),
                                      ("--keda-scaler-client-ca-file", o.keda_scaler_client_ca_file),
                                      ("--keda-scaler-insecure", o.keda_scaler_insecure)) if value]
    if not o.keda_scaler_port:
        if given:
            raise UsageError(f"{given[0]} needs --keda-scaler-port")
        return None
    if o.keda_scaler_port == o.secure_port:
        raise UsageError(f"--keda-scaler-port {o.keda_scaler_port}: the HTTPS server (--secure-port) has it")
    interval = values.duration(o.keda_scaler_stream_interval, "--keda-scaler-stream-interval")
    limits, lifetime = keda_limits(o, interval)
    if bool(o.keda_scaler_tls_cert_file) != bool(o.keda_scaler_tls_private_key_file):
        raise UsageError("--keda-scaler-tls-cert-file and --keda-scaler-tls-private-key-file go together")
    if o.keda_scaler_insecure:
        if len(given) > 1:
            raise UsageError(f"--keda-scaler-insecure serves plain text: {given[0]} would not be used")
        return KedaOptions(interval, True, limits, lifetime)
    if not o.keda_scaler_client_ca_file and not o.disable_auth:
        raise UsageError("--keda-scaler-port: without --keda-scaler-client-ca-file the scaler would serve every "
                         "caller; give the CA of KEDA's client certificate (tlsClientCert), or pass --disable-auth "
                         "or --keda-scaler-insecure to serve everyone")
    if o.keda_scaler_client_ca_file:
        values.check_ca_file(o.keda_scaler_client_ca_file, "--keda-scaler-client-ca-file")
    if o.keda_scaler_tls_cert_file:
        values.check_key_pair(o.keda_scaler_tls_cert_file, o.keda_scaler_tls_private_key_file,
                              "--keda-scaler-tls-cert-file")
    return KedaOptions(interval, False, limits, lifetime)


def keda_limits(o: Options, stream_interval_s: float) -> tuple[Any, tuple[float, float] | None]:
    """The scaler's limits from their flags, and the range of a stream's lifetime they give."""
    from adapter.keda.limits import ScalerLimits

    durations = [values.duration_or_zero(getattr(o, flag[2:].replace("-", "_")), flag) for flag in (
        "--keda-scaler-max-connection-idle", "--keda-scaler-max-connection-age",
        "--keda-scaler-max-connection-age-grace", "--keda-scaler-keepalive-min-time")]
    limits = ScalerLimits(o.keda_scaler_max_requests_inflight, o.keda_scaler_max_streams, o.keda_scaler_max_connections,
                          values.duration(o.keda_scaler_handshake_timeout, "--keda-scaler-handshake-timeout"),
                          *durations)
    try:
        lifetime = limits.stream_lifetime_s(
            stream_interval_s + values.duration(o.prometheus_timeout, "--prometheus-timeout"))
    except ValueError as exc:
        raise UsageError(f"--keda-scaler-max-connection-age-grace {o.keda_scaler_max_connection_age_grace}: too short "
                         f"for a StreamIsActive to end within it ({exc}: --keda-scaler-stream-interval, "
                         f"--prometheus-timeout and the wait for a seat)") from None
    return limits, lifetime


def keda_scaler(o: Options, keda: KedaOptions, state: AdapterState, cert: str, key: str) -> Any:
    """The external scaler's server over the app's providers (one engine, one cache), started with the app."""
    from adapter.keda.guard import Guard
    from adapter.keda.limits import seats_for
    from adapter.keda.server import KedaScalerServer, ScalerSettings, ScalerTLS
    from adapter.keda.servicer import ExternalScalerServicer

    if keda.plain_text:
        log.warning("--keda-scaler-insecure: the KEDA scaler serves every caller in plain text on port %d",
                    o.keda_scaler_port)
        tls = None
    else:
        if not o.keda_scaler_client_ca_file:
            log.warning("the KEDA scaler serves every caller (no --keda-scaler-client-ca-file)")
        tls = ScalerTLS(o.keda_scaler_tls_cert_file or cert, o.keda_scaler_tls_private_key_file or key,
                        o.keda_scaler_client_ca_file)
    calls, streams = seats_for(keda.limits)
    servicer = ExternalScalerServicer(state.custom, state.external, keda.stream_interval_s, state.metrics.registry,
                                      calls=calls, stream_lifetime_s=keda.stream_lifetime_s)
    guard = Guard(calls, streams, keda.limits.handshake_timeout_s, state.metrics.registry)
    return KedaScalerServer(ScalerSettings(o.bind_address, o.keda_scaler_port, tls, o.permit_port_sharing,
                                           keda.limits), servicer, guard)


def sample_age_limit(discovery: Discovery, flag_s: float | None) -> Callable[[], float | None]:
    """``--max-sample-age`` for the engine: the flag's value (0: no limit), else 3 scrape intervals as last read."""
    if flag_s is not None:
        return lambda: flag_s or None
    return lambda: discovery.default_max_sample_age_s


def object_resolver(api_client: KubeClient | None, standalone_objects: str | None) -> ObjectResolver:
    """Who resolves label selectors: the Kubernetes API's caches, a ``--standalone-objects`` file, or nobody."""
    if standalone_objects and api_client is not None:
        raise UsageError("--standalone-objects is for running without a Kubernetes API; with one, selectors are "
                         "resolved from the API")
    if api_client is not None:
        return KubeResolver(api_client)
    if standalone_objects:
        return StandaloneObjects(standalone_objects)
    return StandaloneResolver()


def _resource_discovery(api_client: KubeClient | None, interval_s: float) -> ResourceDiscovery | None:
    """With a Kubernetes API: resource names resolve by its discovery (read now, then every ``interval_s``)."""
    if api_client is None:
        return None
    from adapter.kube.api import KubeApi, KubeError
    from adapter.kube.restmapper import ResourceDiscovery

    resources = ResourceDiscovery(KubeApi(api_client), interval_s)
    try:
        resources.refresh()
    except KubeError as exc:
        raise KubeConfigError(f"reading the Kubernetes API's discovery (which resources exist) failed: {exc}") from None
    return resources
