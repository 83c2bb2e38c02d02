"""Front-proxy trust, identity headers, request attributes and the authn/authz decisions, in-process
(../shared/spec/k8s-metrics-api.md §4, the project's shared spec beside the repository)."""

from __future__ import annotations

import asyncio
import datetime as dt
import json

import pytest

from adapter.auth import authn as authn_module
from adapter.auth.attributes import (
    NonResourceAttributes,
    ResourceAttributes,
    forbidden_message,
    request_attributes,
)
from adapter.auth.authn import Authenticator, Unauthenticated
from adapter.auth.authz import Authorizer
from adapter.auth.delegated import AccessResult, DelegationUnavailable, TokenResult
from adapter.auth.identity import User
from adapter.auth.requestheader import (
    ClientCAs,
    ConfigError,
    RequestHeaderConfig,
    from_configmap,
    front_proxy_allowed,
    identity_from_headers,
)
from tests.support.certs import issue, make_ca

pytestmark = pytest.mark.unit

FRONT_PROXY_CA = make_ca("front-proxy-ca")
OTHER_CA = make_ca("some-other-ca")
CLIENT_CA = make_ca("kubernetes-client-ca")
PROXY_CERT = issue(FRONT_PROXY_CA, "front-proxy-client")


def _headers(*pairs: tuple[str, str]) -> list[tuple[bytes, bytes]]:
    return [(k.lower().encode(), v.encode()) for k, v in pairs]


def _configmap(**overrides: str) -> dict[str, str]:
    data = {
        "client-ca-file": CLIENT_CA.cert_pem.decode(),
        "requestheader-client-ca-file": FRONT_PROXY_CA.cert_pem.decode(),
        "requestheader-allowed-names": '["front-proxy-client"]',
        "requestheader-username-headers": '["X-Remote-User"]',
        "requestheader-group-headers": '["X-Remote-Group"]',
        "requestheader-extra-headers-prefix": '["X-Remote-Extra-"]',
    }
    data.update(overrides)
    return data


# -- the ConfigMap ---------------------------------------------------------------------------------------
def test_configmap_is_read_like_kube_apiserver_publishes_it() -> None:
    cas = from_configmap(_configmap())
    assert cas.requestheader is not None
    assert cas.requestheader.allowed_names == ("front-proxy-client",)
    assert cas.requestheader.username_headers == ("x-remote-user",)
    assert cas.requestheader.extra_prefixes == ("x-remote-extra-",)
    assert cas.client_cas[0].subject == CLIENT_CA.cert.subject


def test_configmap_without_requestheader_ca_means_no_front_proxy() -> None:
    assert from_configmap({"client-ca-file": CLIENT_CA.cert_pem.decode()}).requestheader is None


@pytest.mark.parametrize(("key", "value"), [
    ("requestheader-allowed-names", "front-proxy-client"),
    ("requestheader-group-headers", '{"a": 1}'),
    ("requestheader-client-ca-file", "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n"),
])
def test_bad_configmap_values_are_named(key: str, value: str) -> None:
    with pytest.raises(ConfigError, match=key):
        from_configmap(_configmap(**{key: value}))


# -- front-proxy certificates ----------------------------------------------------------------------------
def test_front_proxy_certificate_checks() -> None:
    config = from_configmap(_configmap()).requestheader
    assert config is not None
    assert front_proxy_allowed(PROXY_CERT.cert, config)
    assert not front_proxy_allowed(issue(OTHER_CA, "front-proxy-client").cert, config), "wrong CA"
    assert not front_proxy_allowed(issue(FRONT_PROXY_CA, "someone-else").cert, config), "CN not allowed"
    assert not front_proxy_allowed(issue(FRONT_PROXY_CA, "front-proxy-client", expired=True).cert, config)
    assert not front_proxy_allowed(issue(FRONT_PROXY_CA, "front-proxy-client", client=False).cert, config), \
        "a serving-only certificate is not a client certificate"
    any_name = from_configmap(_configmap(**{"requestheader-allowed-names": "[]"})).requestheader
    assert any_name is not None and front_proxy_allowed(issue(FRONT_PROXY_CA, "whoever").cert, any_name)


def test_identity_headers_as_the_aggregator_sends_them() -> None:
    config = RequestHeaderConfig(FRONT_PROXY_CA.cert_pem)
    user = identity_from_headers(_headers(
        ("X-Remote-User", "system:serviceaccount:kube-system:horizontal-pod-autoscaler"),
        ("X-Remote-Group", "system:serviceaccounts"), ("X-Remote-Group", ""),
        ("X-Remote-Group", "system:serviceaccounts:kube-system"),
        ("X-Remote-Extra-Authentication.kubernetes.io%2FPod-Name", "kcm-1"),
        ("X-Remote-Extra-Scopes", "a"), ("X-Remote-Extra-Scopes", "b"),
        ("X-Remote-Uid", "ignored-without-uid-headers"),
    ), config)
    assert user == User("system:serviceaccount:kube-system:horizontal-pod-autoscaler", "",
                        ("system:serviceaccounts", "system:serviceaccounts:kube-system"),
                        {"authentication.kubernetes.io/pod-name": ("kcm-1",), "scopes": ("a", "b")})
    assert identity_from_headers(_headers(("X-Remote-Group", "g")), config) is None


# -- request attributes (k8s-metrics-api.md §4.6's table) --------------------------------------------------------------
C1 = "/apis/custom.metrics.k8s.io/v1beta2"


@pytest.mark.parametrize(("method", "path", "expected"), [
    ("GET", f"{C1}/namespaces/ml/pods/*/DCGM_FI_DEV_GPU_UTIL",
     ResourceAttributes("get", "custom.metrics.k8s.io", "v1beta2", "pods", "ml", "DCGM_FI_DEV_GPU_UTIL", "*")),
    ("GET", f"{C1}/namespaces/ml/pods/%2A/M", ResourceAttributes("get", "custom.metrics.k8s.io", "v1beta2", "pods",
                                                                 "ml", "M", "*")),
    ("GET", f"{C1}/namespaces/ml/services/triton/M",
     ResourceAttributes("get", "custom.metrics.k8s.io", "v1beta2", "services", "ml", "M", "triton")),
    ("GET", f"{C1}/namespaces/ml/metrics/M",
     ResourceAttributes("get", "custom.metrics.k8s.io", "v1beta2", "metrics", "ml", "", "M")),
    ("GET", f"{C1}/nodes/n1/M", ResourceAttributes("get", "custom.metrics.k8s.io", "v1beta2", "nodes", "", "M", "n1")),
    ("GET", "/apis/external.metrics.k8s.io/v1beta1/namespaces/ml/queue_depth",
     ResourceAttributes("list", "external.metrics.k8s.io", "v1beta1", "queue_depth", "ml")),
    ("GET", C1, NonResourceAttributes("get", C1)),
    ("GET", "/apis", NonResourceAttributes("get", "/apis")),
    ("GET", "/metrics", NonResourceAttributes("get", "/metrics")),
    ("POST", "/metrics", NonResourceAttributes("post", "/metrics")),
])
def test_request_attributes(method: str, path: str, expected: object) -> None:
    assert request_attributes(method, path) == expected


def test_forbidden_wording_matches_kube_apiserver() -> None:
    hpa = User("system:serviceaccount:kube-system:horizontal-pod-autoscaler")
    message, details = forbidden_message(hpa, request_attributes("GET", f"{C1}/namespaces/ml/pods/*/M"))
    assert message == ('pods.custom.metrics.k8s.io "*" is forbidden: User "system:serviceaccount:kube-system:'
                       'horizontal-pod-autoscaler" cannot get resource "pods/M" in API group "custom.metrics.k8s.io" '
                       'in the namespace "ml"')
    assert details == {"group": "custom.metrics.k8s.io", "kind": "pods", "name": "*"}
    message, _ = forbidden_message(User("bob"), request_attributes("GET", f"{C1}/nodes/n1/M"), "no RBAC policy")
    assert message.endswith('cannot get resource "nodes/M" in API group "custom.metrics.k8s.io" at the cluster '
                            'scope: no RBAC policy')
    assert forbidden_message(User("bob"), request_attributes("GET", "/metrics"))[0] == \
        'forbidden: User "bob" cannot get path "/metrics"'


# -- the authenticator -----------------------------------------------------------------------------------
class FakeTokens:
    def __init__(self) -> None:
        self.calls = 0
        self.tokens = {"good": User("alice", "u1", ("devs",))}

    async def review_token(self, token: str) -> TokenResult:
        self.calls += 1
        await asyncio.sleep(0.01)
        user = self.tokens.get(token)
        return TokenResult(user, "" if user else "invalid bearer token")


def _authenticator(tokens: FakeTokens | None = None, anonymous: bool = False) -> Authenticator:
    cas = from_configmap(_configmap())
    return Authenticator(lambda: cas, tokens or FakeTokens(), allow_anonymous=anonymous)


def _run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def test_front_proxy_identity_gets_system_authenticated() -> None:
    authn = _run(_authenticator().authenticate(PROXY_CERT.cert_pem.decode(), _headers(
        ("X-Remote-User", "system:kube-aggregator"), ("X-Remote-Group", "system:masters"))))
    assert authn.method == "frontproxy"
    assert authn.user.groups == ("system:masters", "system:authenticated")


def test_headers_without_front_proxy_certificate_are_ignored() -> None:
    forged = _headers(("X-Remote-User", "admin"), ("X-Remote-Group", "system:masters"))
    with pytest.raises(Unauthenticated):
        _run(_authenticator().authenticate(None, forged))
    with pytest.raises(Unauthenticated, match="not in the allowed list"):
        _run(_authenticator().authenticate(issue(FRONT_PROXY_CA, "mallory").cert_pem.decode(), forged))
    with pytest.raises(Unauthenticated, match="not trusted"):
        _run(_authenticator().authenticate(issue(OTHER_CA, "front-proxy-client").cert_pem.decode(), forged))
    # Forged headers next to a valid token: the token's user, never the headers' one.
    authn = _run(_authenticator().authenticate(None, [*forged, (b"authorization", b"Bearer good")]))
    assert authn.user.name == "alice" and "system:masters" not in authn.user.groups


def test_ordinary_client_certificate_is_a_user() -> None:
    cert = issue(CLIENT_CA, "carol", orgs=("ops", "devs"))
    authn = _run(_authenticator().authenticate(cert.cert_pem.decode(), []))
    assert (authn.method, authn.user.name, authn.user.groups) == ("x509", "carol", ("ops", "devs",
                                                                                     "system:authenticated"))


def test_a_certificate_is_judged_once_per_ca_bundle_and_never_past_its_expiry() -> None:
    """The aggregator presents one certificate on every request: it is judged (its signature checked) once, not per
    request; a rotated bundle without its CA refuses it at once, and so does its own not-after."""
    cas = [from_configmap(_configmap())]
    now = [dt.datetime.now(dt.UTC)]
    checks = []
    authn = Authenticator(lambda: cas[0], FakeTokens(), clock=lambda: now[0])
    headers = _headers(("X-Remote-User", "system:serviceaccount:kube-system:horizontal-pod-autoscaler"))
    real_judge = authn_module._judge

    def counted(pem: str, cas: object, now: dt.datetime) -> object:
        checks.append(now)
        return real_judge(pem, cas, now)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(authn_module, "_judge", counted)
        for _ in range(5):
            assert _run(authn.authenticate(PROXY_CERT.cert_pem.decode(), headers)).method == "frontproxy"
        assert len(checks) == 1
        rotated = _configmap(**{"requestheader-client-ca-file": OTHER_CA.cert_pem.decode()})
        cas[0] = from_configmap(rotated)  # a bundle without the proxy's CA
        with pytest.raises(Unauthenticated, match="not trusted"):
            _run(authn.authenticate(PROXY_CERT.cert_pem.decode(), headers))
        cas[0] = from_configmap(_configmap())
        assert _run(authn.authenticate(PROXY_CERT.cert_pem.decode(), headers)).method == "frontproxy"
        now[0] = PROXY_CERT.cert.not_valid_after_utc + dt.timedelta(seconds=1)
        with pytest.raises(Unauthenticated, match="not trusted"):
            _run(authn.authenticate(PROXY_CERT.cert_pem.decode(), headers))


def test_bearer_tokens_are_reviewed_once_per_ttl_and_bad_ones_get_401() -> None:
    tokens = FakeTokens()
    authn = _authenticator(tokens)

    async def many() -> list[str]:
        results = await asyncio.gather(*(authn.authenticate(None, _headers(("Authorization", "Bearer good")))
                                         for _ in range(20)))
        return [r.user.name for r in results]

    assert _run(many()) == ["alice"] * 20
    assert tokens.calls == 1
    with pytest.raises(Unauthenticated, match="invalid bearer token"):
        _run(authn.authenticate(None, _headers(("Authorization", "Bearer bad"))))


def test_anonymous_only_when_enabled() -> None:
    with pytest.raises(Unauthenticated, match="no credentials"):
        _run(_authenticator().authenticate(None, []))
    assert _run(_authenticator(anonymous=True).authenticate(None, [])).user.name == "system:anonymous"


# -- the authorizer --------------------------------------------------------------------------------------
class FakeAccess:
    def __init__(self, allowed: bool | Exception) -> None:
        self.allowed = allowed
        self.specs: list[dict] = []

    async def review_access(self, spec: bytes) -> AccessResult:
        self.specs.append(json.loads(spec))
        await asyncio.sleep(0.01)
        if isinstance(self.allowed, Exception):
            raise self.allowed
        return AccessResult(self.allowed, "" if self.allowed else "denied by test")


def test_system_masters_skips_the_review() -> None:
    access = FakeAccess(False)
    decision, _ = _run(Authorizer(access).authorize(User("system:kube-aggregator", groups=("system:masters",)),
                                                     request_attributes("GET", C1)))
    assert decision.allowed and access.specs == []


def test_decisions_are_cached_and_concurrent_reviews_coalesced() -> None:
    access = FakeAccess(True)
    authz = Authorizer(access)
    hpa = User("hpa", groups=("system:authenticated",))
    attrs = request_attributes("GET", f"{C1}/namespaces/ml/pods/*/M")

    async def go() -> list[bool]:
        first = await asyncio.gather(*(authz.authorize(hpa, attrs) for _ in range(10)))
        again = await authz.authorize(hpa, attrs)
        other = await authz.authorize(hpa, request_attributes("GET", f"{C1}/namespaces/other/pods/*/M"))
        return [d.allowed for d, _ in [*first, again, other]] + [again[1], other[1]]

    assert _run(go()) == [True] * 12 + [True, False]
    assert len(access.specs) == 2


def test_decision_cache_holds_as_many_decisions_as_the_go_library() -> None:
    """8,192 decisions (k8s.io/apiserver's webhook authorizer): 8,192 HPAs' Object metrics, each review naming its
    Service, are reviewed once per TTL, not once per request."""
    access = FakeAccess(True)
    authz = Authorizer(access)
    hpa = User("hpa", groups=("system:authenticated",))
    every = [request_attributes("GET", f"{C1}/namespaces/ml/services/svc-{i}/M") for i in range(8192)]

    async def twice() -> list[bool]:
        await asyncio.gather(*(authz.authorize(hpa, attrs) for attrs in every))
        return [(await authz.authorize(hpa, attrs))[1] for attrs in every]

    assert all(_run(twice()))
    assert len(access.specs) == 8192


def test_review_failure_is_not_cached_and_fails_closed() -> None:
    access = FakeAccess(DelegationUnavailable("SubjectAccessReview: connection refused"))
    authz = Authorizer(access)
    with pytest.raises(DelegationUnavailable):
        _run(authz.authorize(User("hpa"), request_attributes("GET", C1)))
    access.allowed = True
    assert _run(authz.authorize(User("hpa"), request_attributes("GET", C1)))[0].allowed


def test_sar_spec_shape() -> None:
    attrs = request_attributes("GET", f"{C1}/namespaces/ml/pods/*/DCGM_FI_DEV_GPU_UTIL")
    assert json.loads(json.dumps(attrs.sar())) == {
        "namespace": "ml", "verb": "get", "group": "custom.metrics.k8s.io", "version": "v1beta2",
        "resource": "pods", "subresource": "DCGM_FI_DEV_GPU_UTIL", "name": "*"}
    assert ClientCAs().bundle() == b""


# -- the front-proxy configuration source ----------------------------------------------------------------
class FakeConfigMaps:
    def __init__(self, *answers: dict[str, str] | Exception) -> None:
        self.answers = list(answers)

    async def extension_configmap(self) -> dict[str, str]:
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_rotated_configmap_replaces_the_cas_and_a_failed_read_keeps_them() -> None:
    from adapter.auth.source import ClientCASource

    rotated = make_ca("rotated-front-proxy-ca")
    changes: list[ClientCAs] = []
    source = ClientCASource(None, FakeConfigMaps(  # type: ignore[arg-type]
        _configmap(), DelegationUnavailable("configmap: connection refused"),
        _configmap(**{"requestheader-client-ca-file": rotated.cert_pem.decode()})),
        tolerate_lookup_failure=False, on_change=changes.append)

    async def go() -> None:
        await source.load()
        assert source.current().requestheader is not None
        assert front_proxy_allowed(PROXY_CERT.cert, source.current().requestheader)
        with pytest.raises(DelegationUnavailable):
            await source._refresh()  # the periodic loop logs this and keeps the last configuration
        assert len(changes) == 1
        await source._refresh()

    _run(go())
    assert len(changes) == 2
    proxy = source.current().requestheader
    assert proxy is not None
    assert not front_proxy_allowed(PROXY_CERT.cert, proxy), "the old CA no longer vouches"
    assert front_proxy_allowed(issue(rotated, "front-proxy-client").cert, proxy)


def test_unreadable_configmap_at_start_names_the_rbac_fix() -> None:
    from adapter.auth.source import ClientCASource

    source = ClientCASource(None, FakeConfigMaps(DelegationUnavailable("configmap: 403 Forbidden")),  # type: ignore[arg-type]
                            tolerate_lookup_failure=False, on_change=lambda _: None)
    with pytest.raises(ConfigError, match="extension-apiserver-authentication-reader"):
        _run(source.load())
    tolerant = ClientCASource(None, FakeConfigMaps(DelegationUnavailable("403")),  # type: ignore[arg-type]
                              tolerate_lookup_failure=True, on_change=lambda _: None)
    _run(tolerant.load())
    assert tolerant.current().requestheader is None
