"""``gpu-adapter``'s flags as tables (:mod:`clikit.flags`): one row per flag (name, type, default, help), shared
between commands, so the same row serves ``serve``, ``check`` and ``explain`` where they share it. ``docs/flags.md``
is rendered from these tables (``markdown``), and a test keeps the two equal.
"""

from __future__ import annotations

from collections.abc import Sequence

from adapter.auth.middleware import DEFAULT_ALWAYS_ALLOW_PATHS
from clikit.flags import REQUIRED, Flag


class UsageError(Exception):
    """A flag value or combination this server refuses; one line for the CLI."""


def markdown(tables: Sequence[tuple[str, Sequence[Flag]]]) -> str:
    """One Markdown table per command: flag, default, what it does."""
    out = []
    for title, flags in tables:
        out += [f"### `{title}`", "", "| flag | default | what it does |", "|---|---|---|"]
        for flag in flags:
            spelled = f"`{flag.name}`" + (f", `{flag.short}`" if flag.short else "")
            default = ("required" if flag.default is REQUIRED else "" if flag.default in (None, "", False)
                       else f"`{flag.default}`")
            out.append(f"| {spelled} | {default} | {flag.help.replace('|', '/')} |")
        out.append("")
    return "\n".join(out)


# -- Prometheus: every command asks it ---------------------------------------------------------------------------
PROMETHEUS = (
    Flag("--prometheus-url", str, REQUIRED, "Prometheus base URL (a path prefix and query parameters are kept)."),
    Flag("--config", str | None, None, "prometheus-adapter rules file; default: the built-in GPU presets."),
    Flag("--prometheus-verb", str, "POST", "POST (no URL length limits) or GET."),
    Flag("--prometheus-timeout", str, "5s", "Per-query timeout, also sent to Prometheus."),
    Flag("--prometheus-token-file", str | None, None, "Bearer token for Prometheus, re-read when it changes."),
    Flag("--prometheus-ca-file", str | None, None, "CA bundle that signed Prometheus' certificate."),
    Flag("--prometheus-client-tls-cert-file", str | None, None, "Client certificate for Prometheus (mTLS)."),
    Flag("--prometheus-client-tls-key-file", str | None, None, "Its private key."),
    Flag("--prometheus-header", list[str] | None, None, "Extra header key=value on every request, repeatable."),
    Flag("--prometheus-auth-config", str | None, None,
         "kubeconfig-format file whose current context's credentials (CA, client certificate, token or basic auth) "
         "are used for Prometheus; ignored with --prometheus-ca-file, as upstream."),
    Flag("--prometheus-auth-incluster", bool, False,
         "Use the pod's service account token and cluster CA for Prometheus (e.g. behind kube-rbac-proxy)."),
)
_NO_CLIENT_PAIR = {"--prometheus-client-tls-cert-file", "--prometheus-client-tls-key-file"}
PROMETHEUS_FOR_TOOLS = tuple(f.with_default("10s") if f.name == "--prometheus-timeout" else f
                             for f in PROMETHEUS if f.name not in _NO_CLIENT_PAIR)
"""``check`` and ``explain``: a longer timeout, no client certificate flags."""

# -- serve -------------------------------------------------------------------------------------------------------
SERVING = (
    Flag("--secure-port", int, 6443, "HTTPS port.", range=(1, 65535)),
    Flag("--bind-address", str, "0.0.0.0", "Address to listen on."),
    Flag("--cert-dir", str, "apiserver.local.config/certificates",
         "Where a self-signed pair is kept when no --tls-cert-file is given."),
    Flag("--tls-cert-file", str | None, None, "Serving certificate (PEM)."),
    Flag("--tls-private-key-file", str | None, None, "Its private key."),
    Flag("--tls-min-version", str, "VersionTLS12", "VersionTLS12 or VersionTLS13."),
    Flag("--tls-cipher-suites", str, "",
         "Comma-separated TLS 1.2 cipher suites (Go/IANA names); default: OpenSSL's secure set."),
    Flag("--permit-port-sharing", bool, False, "Bind with SO_REUSEPORT, so several processes can share the port."),
)
SHUTDOWN = (  # k8s.io/apiserver's flags of the same names (pkg/server/options/server_run_options.go)
    Flag("--shutdown-delay-duration", str, "0s",
         "After SIGTERM, keep serving this long with /readyz failing (and Connection: close on every response), so "
         "the endpoint's removal reaches every node before the listener closes; 0s: close at once, as upstream. "
         "The chart and manifests set 15s (docs/adapter.md says why)."),
    Flag("--shutdown-send-retry-after", bool, False,
         "Once the delay is over, keep listening until the requests in flight are done, answering new ones 429 "
         "with Retry-After: 5 and Connection: close (probes and /metrics are still served); needs "
         "--shutdown-delay-duration."),
    Flag("--shutdown-drain-timeout", str, "10s",
         "How long requests in flight may take to finish once the delay is over; then the process exits. The "
         "pod's terminationGracePeriodSeconds must cover the delay plus this."),
)
LIMITS = (  # what a client gets before it is authenticated (listener/, docs/adapter.md "Hostile clients")
    Flag("--max-requests-inflight", int, 20,
         "Requests answered at once (probes and /metrics not counted); the next ones wait for a seat, handed out in "
         "turn between client addresses, at most a quarter of --request-timeout, then get 429 with Retry-After: 1, "
         "which client-go (the HPA controller, through the aggregator) retries. kube-apiserver's flag, not its "
         "400: a request over 1,500 pods holds about 5 MiB while in flight here, and Prometheus runs 20 queries "
         "at once (--query.max-concurrency); 0: no limit.",
         range=(0, 100000)),
    Flag("--request-timeout", str, "60s",
         "A request not answered within this gets 504 (kube-apiserver's flag and default); its connection is "
         "dropped if the answer is still unwritten 10s later (a client that stopped reading)."),
    Flag("--read-header-timeout", str, "32s",
         "The TLS handshake, and then each request's line and headers, must arrive within this (kube-apiserver's "
         "ReadHeaderTimeout); then the connection is closed."),
    Flag("--idle-timeout", str, "90s",
         "A kept-alive connection is closed after this long without a request (kube-apiserver's IdleTimeout, "
         "Go's http.DefaultTransport keep-alive)."),
    Flag("--max-header-bytes", int, 1 << 20,
         "Request line and headers larger than this (plus Go's 4 KiB slack) are answered 431 and the rest is not "
         "read (kube-apiserver's MaxHeaderBytes); a request line over 64 KiB gets 414.",
         range=(4096, 64 << 20)),
    Flag("--max-waiting-connections", int, 1000,
         "Connections without a request in progress (in the TLS handshake, sending headers, or idle between "
         "requests): past this many, the one waiting longest is closed (about 30-50 KiB each).",
         range=(1, 1000000)),
)
DISCOVERY = (
    Flag("--metrics-relist-interval", str, "1m", "How often Prometheus' series are listed again."),
    Flag("--metrics-max-age", str | None, None,
         "Look-back for series discovery (at least the relist interval); default: the relist interval plus the "
         "longest scrape interval Prometheus reports (1m when it reports none)."),
    Flag("--max-sample-age", str | None, None,
         "A value whose newest underlying sample is older than this is no value, as NaN is (checked only for rules "
         "whose query reaches further back, e.g. avg_over_time(x[5m])); 0 disables; default: 3 times the longest "
         "scrape interval Prometheus reports (1m when it reports none)."),
    Flag("--query-cache-ttl", str, "5s",
         "Reuse a query result this long, never longer than Prometheus' scrape interval; 0: only share identical "
         "queries in flight."),
    Flag("--config-reload-interval", str, "5s", "How often --config is checked for changes; 0 disables reloading."),
    Flag("--discovery-interval", str, "1m",
         "How often the Kubernetes API's discovery is re-read, so resources (CRDs) added later resolve in the "
         "rules; 0: only at start."),
)
LOGGING = (
    Flag("--v", int, 0, "Log verbosity: 0 info, 2 access log, 4 debug, 6 every rendered PromQL query.", short="-v"),
    Flag("--logging-format", str, "text", "text or json."),
)
KUBERNETES = (
    Flag("--kubeconfig", str | None, None,
         "Kubernetes API access; default: the in-cluster config when running in a pod, else none."),
    Flag("--standalone-objects", str | None, None,
         "Without a Kubernetes API: a JSON/YAML file of objects (resource -> [{namespace, name, labels}]) that "
         "label selectors match; re-read on change."),
)
AUTH = (
    Flag("--disable-auth", bool, False,
         "Serve every request without authentication or authorisation. Local use only."),
    Flag("--anonymous-auth", bool, False,
         "Treat requests without credentials as system:anonymous (then authorised by SubjectAccessReview) instead "
         "of answering 401."),
    Flag("--requestheader-client-ca-file", str | None, None,
         "CA of the front-proxy client certificate; default: read from "
         "kube-system/extension-apiserver-authentication."),
    Flag("--requestheader-allowed-names", str, "",
         "Comma-separated front-proxy certificate CNs; empty: any CN signed by the CA."),
    Flag("--requestheader-username-headers", str, "X-Remote-User", "Headers that carry the user name."),
    Flag("--requestheader-group-headers", str, "X-Remote-Group", "Headers that carry the groups."),
    Flag("--requestheader-extra-headers-prefix", str, "X-Remote-Extra-", "Prefix of the headers that carry extras."),
    Flag("--client-ca-file", str | None, None, "CA for ordinary x509 client certificates (CN = user, O = groups)."),
    Flag("--authentication-skip-lookup", bool, False, "Do not read kube-system/extension-apiserver-authentication."),
    Flag("--authentication-tolerate-lookup-failure", bool, False,
         "Start even when that ConfigMap cannot be read (aggregated requests then fail with 401)."),
    Flag("--authorization-always-allow-paths", str, ",".join(DEFAULT_ALWAYS_ALLOW_PATHS),
         "Comma-separated paths served without authentication (a trailing * matches a prefix)."),
    Flag("--authentication-token-webhook-cache-ttl", str, "10s",
         "How long TokenReview answers are kept; 0: not kept."),
    Flag("--authorization-webhook-cache-authorized-ttl", str, "10s", "How long 'allowed' answers are kept."),
    Flag("--authorization-webhook-cache-unauthorized-ttl", str, "10s", "How long 'denied' answers are kept."),
)
KEDA = (
    Flag("--keda-scaler-port", int, 0,
         "Also serve KEDA's external scaler (gRPC externalscaler.ExternalScaler, docs/keda.md) on this port, on "
         "--bind-address; 0: off.", range=(0, 65535)),
    Flag("--keda-scaler-tls-cert-file", str | None, None,
         "The scaler's TLS certificate (PEM), for the name KEDA dials; default: the HTTPS serving pair."),
    Flag("--keda-scaler-tls-private-key-file", str | None, None, "Its private key."),
    Flag("--keda-scaler-client-ca-file", str | None, None,
         "Require client certificates signed by this CA (KEDA's tlsClientCert/tlsClientKey). Without it the "
         "scaler serves every caller, which needs --disable-auth or --keda-scaler-insecure."),
    Flag("--keda-scaler-insecure", bool, False,
         "Serve the scaler in plain text to every caller (KEDA's dial without enableTLS or caCert); only where a "
         "NetworkPolicy admits KEDA alone."),
    Flag("--keda-scaler-stream-interval", str, "5s",
         "How often a StreamIsActive stream (trigger type external-push) evaluates its trigger."),
    # Limits (docs/keda.md#limits says why each default), as kube-apiserver bounds its own port.
    Flag("--keda-scaler-max-requests-inflight", int, 20,
         "Calls (IsActive, GetMetrics, GetMetricSpec, and each stream's evaluation) running at once; up to 50 times "
         "as many wait (at most 5s), seated in turn per client address as kube-apiserver's priority and fairness "
         "seats them; beyond: RESOURCE_EXHAUSTED. Default: Prometheus' own --query.max-concurrency.",
         range=(1, 100_000)),
    Flag("--keda-scaler-max-streams", int, 500,
         "StreamIsActive streams open at once (one per external-push trigger of KEDA's), seated in turn per client "
         "address; beyond: RESOURCE_EXHAUSTED.", range=(1, 100_000)),
    Flag("--keda-scaler-max-connections", int, 1000,
         "Connections held at once, handshakes included (gRPC's max_allowed_incoming_connections): more are closed "
         "at once; 0: no limit.", range=(0, 1_000_000)),
    Flag("--keda-scaler-handshake-timeout", str, "10s",
         "A connection must finish its TLS handshake and HTTP/2 preface within this, and a call send its request "
         "message within it (else DEADLINE_EXCEEDED)."),
    Flag("--keda-scaler-max-connection-idle", str, "5m",
         "Close a connection without calls for this long (+-10 %; KEDA reconnects at its next call); 0: never."),
    Flag("--keda-scaler-max-connection-age", str, "30m",
         "Send GOAWAY to a connection this old (+-10 %), so KEDA's next calls go through the Service anew and "
         "certificates are checked again; 0: never."),
    Flag("--keda-scaler-max-connection-age-grace", str, "10m",
         "How long calls may go on after the GOAWAY of --keda-scaler-max-connection-age; each StreamIsActive ends "
         "cleanly (KEDA reopens it) within this time of opening, so none is cut."),
    Flag("--keda-scaler-keepalive-min-time", str, "5m",
         "Pings closer together than this while calls are in flight (without calls: one per 2 hours) are strikes; "
         "the third ends the connection (GOAWAY too_many_pings). KEDA's client sends no keepalive pings."),
)
SERVE = (*PROMETHEUS, *SERVING, *LIMITS, *SHUTDOWN, *DISCOVERY, *LOGGING, *KUBERNETES, *AUTH, *KEDA)

# -- check and explain --------------------------------------------------------------------------------------------
CHECK = (*PROMETHEUS_FOR_TOOLS, Flag("--metrics-max-age", str, "5m", "Look-back for series discovery."))
EXPLAIN = (
    *PROMETHEUS_FOR_TOOLS,
    Flag("--label-selector", str | None, None, "The request's labelSelector (or in the path's query string)."),
    Flag("--metric-label-selector", str | None, None, "The request's metricLabelSelector (likewise)."),
    Flag("--output", str, "text", "text or json.", short="-o"),
    Flag("--metrics-max-age", str, "5m", "Look-back for series discovery."),
    Flag("--kubeconfig", str | None, None,
         "Resolve labelSelector through this cluster's API (default: in-cluster config when in a pod)."),
    Flag("--standalone-objects", str | None, None, "Without a cluster: objects that label selectors match."),
)

CHECK_INSTALL = (
    Flag("--apiservice", list[str], REQUIRED,
         "An APIService that must be Available, e.g. v1beta2.custom.metrics.k8s.io (repeat for more)."),
    Flag("--metric-path", str, "",
         "A metric to read through the Kubernetes API, as for kubectl get --raw, e.g. /apis/custom.metrics.k8s.io/"
         "v1beta2/namespaces/gpu-system/services/dcgm-exporter/DCGM_FI_DEV_GPU_UTIL_AVG."),
    Flag("--prometheus-url", str, "", "The adapter's Prometheus URL: checked for an answer, and named in the causes."),
    Flag("--kubeconfig", str | None, None, "Default: the pod's service account, else your current kubeconfig context."),
    Flag("--wait-seconds", int, 0,
         "Check again every 5 s for up to this long while something fails (a fresh install needs a minute).",
         range=(0, 86400)),
)

TABLES = (("gpu-adapter serve", SERVE), ("gpu-adapter check", CHECK), ("gpu-adapter explain", EXPLAIN),
          ("gpu-adapter check-install", CHECK_INSTALL))
