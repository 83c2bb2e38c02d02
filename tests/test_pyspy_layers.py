"""bench/pyspy.py's layers: which layer one sampled stack (a line of ``py-spy record --format raw``) is counted in."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from tests.support.scripts import load_script

pytestmark = pytest.mark.unit

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "pyspy.py"


def load_pyspy() -> ModuleType:
    return load_script("bench/pyspy.py", "pyspy_bench")


pyspy = load_pyspy()

# The frames every stack on the serving loop starts with: the server's start-up, then asyncio's loop.
LOOP = ("<module> (gpu-autoscaler-adapter:8);main (adapter/cli/main.py:41);serve (adapter/cli/serve.py:71);"
        "run (adapter/server/lifecycle.py:240);run (asyncio/runners.py:118);"
        "run_until_complete (asyncio/base_events.py:640);run_forever (asyncio/base_events.py:607);"
        "_run_once (asyncio/base_events.py:1922);_run (asyncio/events.py:80)")
THREAD = "_bootstrap (threading.py:995);_bootstrap_inner (threading.py:1038);run (threading.py:975)"


@pytest.mark.parametrize(("line", "layer"), [
    pytest.param(f"{THREAD};_run (adapter/kube/cache.py:131);_watch (adapter/kube/cache.py:225);"
                 "stream (urllib3/response.py:1057);read (urllib3/response.py:949);recv_into (ssl.py:1307) 9",
                 "engine", id="watch-cache-thread-in-urllib3-is-engine-not-reviews"),
    pytest.param(f"{LOOP};__call__ (adapter/auth/middleware.py:88);review_token (adapter/auth/authn.py:120);"
                 "post_json (adapter/kube/asyncapi.py:64);_call (adapter/kube/asyncapi.py:72);"
                 "_request (aiohttp/client.py:703) 9",
                 "auth and reviews", id="review-through-asyncapi-claims-its-aiohttp-frames"),
    pytest.param(f"{LOOP};review_access (adapter/auth/delegated.py:96);_call (adapter/kube/asyncapi.py:72);"
                 "SSL_write (libssl.so.3) 9",
                 "auth and reviews", id="a-reviews-own-tls-is-the-reviews-cost"),
    pytest.param(f"{LOOP};_serve (uvicorn/server.py:83) 9",
                 "event loop/other", id="start-up-frames-alone-do-not-decide-a-layer"),
    pytest.param(f"{LOOP};data_received (aiohttp/client_proto.py:318) 9",
                 "PromQL client", id="aiohttp-answer-outside-a-review-is-the-promql-clients"),
    pytest.param(f"{LOOP};__call__ (starlette/routing.py:74);app (starlette/routing.py:297);"
                 "render (starlette/responses.py:187) 9",
                 "JSON encoding", id="innermost-named-frame-wins-over-the-routing-around-it"),
    pytest.param(f"{LOOP};send (uvicorn/protocols/http/httptools_impl.py:470);SSL_write (libssl.so.3) 9",
                 "TLS", id="tls-under-the-http-protocol-is-tls"),
])
def test_a_sampled_stack_is_counted_in_its_layer(line: str, layer: str, tmp_path: Path) -> None:
    raw = tmp_path / "raw.txt"
    raw.write_text(line + "\n")
    [(frames, samples)] = pyspy.read_raw(raw)
    assert samples == 9
    assert pyspy.layer_of(frames) == layer
