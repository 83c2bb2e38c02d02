"""py-spy on a running adapter: record its stacks for a while, then read them as top frames or as layers.

``py-spy record --format raw`` writes one line per distinct stack, root first, frames separated by ``;``, then the
number of samples. With ``--native`` the stacks carry the C frames too (OpenSSL under uvloop's TLS, httptools'
parser, orjson), which are where a request's TLS and HTTP parsing happen: without them those samples land on
whichever Python frame called into C.

A sample's layer (``LAYERS``, by module path): a stack that runs a delegated review or the watch cache's thread
belongs to that whole (``CLAIMS``: the TLS and JSON a review's coroutine runs itself are the review's cost;
aiohttp's protocol callbacks for its answer run outside it and count as the PromQL client's or TLS); any other stack
belongs to its innermost frame that a layer names (the ASGI middleware frames wrap every route, so the outer frames
cannot decide). Frames no layer names (the interpreter, libc, asyncio, uvloop's loop, its socket reads) leave the
sample to the event loop. A socket write counts for the layer that wrote: the responses' for HTTP (uvicorn's
protocol), the queries' for the PromQL client.
"""

from __future__ import annotations

import collections
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

OTHER = "event loop/other"

# A stack holding one of these frames belongs to its layer whatever runs inside it.
# The first claim that a stack holds wins: the watch cache's thread runs the official client (kubernetes/client/,
# urllib3/) too, so it is claimed first; reviews went through that client in a worker thread before they moved to
# the serving loop's aiohttp (adapter/kube/asyncapi.py), and the same patterns claim them in a before-profile.
CLAIMS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("engine", ("adapter/kube/cache.py",)),  # the watch cache's thread: what selectors are answered from
    ("auth and reviews", ("adapter/auth/delegated.py", "adapter/kube/asyncapi.py", "kubernetes/client/",
                          "urllib3/")),
)

# Otherwise the innermost frame naming a layer decides; for one frame, the first layer (in this order) that names
# it wins, so the narrower patterns come first (``_JSON.render`` lives in routes.py, responses in starlette/).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("TLS", ("libssl", "libcrypto", "ssl.py", "_ssl.c", "sslproto.pyx")),
    ("JSON encoding", ("orjson", "_JSON.render", "starlette/responses.py", "adapter/api/serialise.py", "_json.c",
                       "json/encoder.py")),
    ("HTTP parsing", ("uvicorn/protocols/http/", "httptools", "llhttp", "h11/")),
    ("auth and reviews", ("adapter/auth/", "cryptography/", "_rust.abi3")),
    ("PromQL client", ("adapter/prometheus/client.py", "aiohttp/", "yarl/", "multidict/", "propcache/")),
    ("engine", ("adapter/provider/", "adapter/rules/", "adapter/rulesfile/", "adapter/presets/", "adapter/kube/",
                "adapter/prometheus/")),
    # The server's start-up frames (adapter/cli/serve.py, adapter/server/lifecycle.py's run, uvicorn's server) are
    # at the root of every stack on the loop: naming them would put the loop's own work here.
    ("routing", ("starlette/", "fastapi/", "adapter/server/app.py", "adapter/server/routes.py",
                 "adapter/server/observe.py", "adapter/server/selfmetrics.py", "DrainRequests", "adapter/api/",
                 "prometheus_client/")),
)
# A thread waiting (a worker thread on its queue, the loop in epoll, a socket poll) is not using the CPU. py-spy
# drops idle Python threads by itself, but with native frames it keeps them: the innermost named frame tells.
IDLE = ("PyThread_acquire_lock_timed", "pthread_cond_timedwait", "pthread_cond_wait", "poll ", "epoll_wait",
        "epoll_pwait", "select ", "sem_wait", "sem_timedwait", "sem_clockwait", "take_gil", "nanosleep",
        "clock_nanosleep", "accept ")
ORDER = tuple(dict.fromkeys([name for name, _ in LAYERS] + [name for name, _ in CLAIMS] + [OTHER]))


def idle(frames: Sequence[str]) -> bool:
    """Whether the stack (root first) is a thread waiting; native frames without a symbol do not tell."""
    named = next((f for f in reversed(frames) if not f.startswith("0x")), "")
    return named.startswith(IDLE)


def layer_of(frames: Sequence[str]) -> str:
    """The layer of one sample's stack (root first)."""
    for name, patterns in CLAIMS:
        if any(p in frame for frame in frames for p in patterns):
            return name
    for frame in reversed(frames):
        for name, patterns in LAYERS:
            if any(p in frame for p in patterns):
                return name
    return OTHER


def read_raw(raw: Path) -> list[tuple[list[str], int]]:
    """(stack root first, samples) per line of py-spy's raw output."""
    out = []
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            out.append((stack.split(";"), int(count)))
    return out


def fold_layers(raw: Path) -> dict[str, int]:
    """Samples on the CPU per layer, every layer of ``ORDER`` present (waiting threads left out)."""
    samples = dict.fromkeys(ORDER, 0)
    for frames, count in read_raw(raw):
        if not idle(frames):
            samples[layer_of(frames)] += count
    return samples


def top_frames(raw: Path, limit: int = 20) -> dict[str, list[tuple[str, float]]]:
    """The functions with the most samples on top of the stack (``self``) and the adapter's own functions by
    samples anywhere in the stack (``adapter``), in % of all samples."""
    inclusive: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    total = 0
    for stack, n in read_raw(raw):
        total += n
        frames = [re.sub(r" \((?:.*/)?([^/]+/[^/]+\.py):\d+\)$", r" (\1)", f) for f in stack]
        for f in set(frames):
            inclusive[f] += n
        own[frames[-1]] += n
    if not total:
        return {}
    ours = [(f, c) for f, c in inclusive.most_common() if "(adapter/" in f or "(rules/" in f or "(api/" in f
            or "(kube/" in f or "(auth/" in f]
    return {"self": [(f, 100.0 * c / total) for f, c in own.most_common(limit)],
            "adapter": [(f, 100.0 * c / total) for f, c in ours[:limit]]}


class Recording:
    """``py-spy record`` on ``pid`` for ``seconds`` into ``raw`` (collapsed stacks); ``finish()`` waits for it and
    says whether the file is there. Without py-spy on PATH it records nothing and says so once."""

    def __init__(self, raw: Path, pid: int, seconds: float, *, rate: int = 100, native: bool = False) -> None:
        exe = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
        self.raw = raw
        self.proc: subprocess.Popen[bytes] | None = None
        if exe is None:
            print("note: py-spy not found (pip install py-spy); no profile", file=sys.stderr)
            return
        raw.parent.mkdir(parents=True, exist_ok=True)
        # Native unwinding needs the process paused at each sample; Python frames alone are read without pausing.
        mode = ["--native"] if native else ["--nonblocking"]
        self.proc = subprocess.Popen([exe, "record", "--pid", str(pid), "--duration", str(max(1, round(seconds))),
                                      "--rate", str(rate), "--format", "raw", "-o", str(raw), *mode],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def finish(self, timeout: float = 60.0) -> Path | None:
        if self.proc is None:
            return None
        try:
            _, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()
            return None
        if self.proc.returncode != 0 or not self.raw.exists():
            print(f"note: py-spy failed ({self.proc.returncode}): {err.decode(errors='replace').strip()[-300:]}",
                  file=sys.stderr)
            return None
        return self.raw
