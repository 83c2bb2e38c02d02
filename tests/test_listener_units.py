"""The listener's pure parts: the request-head meter (limits as Go's net/http and kube-apiserver apply them) and the
waiting room's budget (who is closed first)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from listener.head import HeadMeter, Refusal
from listener.limits import HEAD_SLOP_BYTES, Limits, LimitsError
from listener.logs import QuietFilter, QuietLog
from listener.waiting import WaitingRoom

pytestmark = pytest.mark.unit

SMALL = Limits(max_header_bytes=1024, max_request_line_bytes=100, max_header_fields=5)


def head(fields: int = 2, line: str = "GET /x HTTP/1.1", end: bytes = b"\r\n") -> bytes:
    return (line.encode() + end + b"".join(f"h{i}: v".encode() + end for i in range(fields)) + end)


def feed(limits: Limits, *chunks: bytes) -> tuple[HeadMeter, Refusal | None]:
    meter = HeadMeter(limits)
    refusal = None
    for chunk in chunks:
        refusal = meter.feed(chunk) or refusal
    return meter, refusal


@pytest.mark.parametrize("split", range(1, len(head()) + 1))
def test_a_head_is_measured_the_same_however_it_is_split(split: int) -> None:
    whole = head()
    meter, refusal = feed(SMALL, whole[:split], whole[split:])
    assert refusal is None and meter.complete
    assert (meter.size, meter.line_size, meter.fields) == (len(whole), len("GET /x HTTP/1.1\r\n"), 2)


@pytest.mark.parametrize("whole", [head(end=b"\n"), head(0), b"GET / HTTP/1.0\r\n\r\n"],
                         ids=["bare LF line ends", "no header fields", "HTTP/1.0 without fields"])
def test_heads_that_llhttp_accepts_complete(whole: bytes) -> None:
    meter, refusal = feed(SMALL, *[whole[i:i + 1] for i in range(len(whole))])
    assert refusal is None and meter.complete and meter.size == len(whole)


def test_bytes_after_the_head_are_not_counted() -> None:
    whole = head()
    meter, refusal = feed(SMALL, whole + b"x" * 5000)  # a pipelined request or a body: not the head's
    assert refusal is None and meter.size == len(whole)


@pytest.mark.parametrize(("size", "refused"), [
    # Go's server reads MaxHeaderBytes + 4096 before answering 431 (net/http server.go initialReadLimitSize).
    (1024 + HEAD_SLOP_BYTES, None),
    (1024 + HEAD_SLOP_BYTES + 1, 431),
])
def test_head_size_limit_with_gos_slack(size: int, refused: int | None) -> None:
    start = b"GET /x HTTP/1.1\r\nBig: "
    filler = b"a" * (size - len(start) - 4)
    _, refusal = feed(SMALL, start + filler + b"\r\n\r\n")
    assert (refusal.status if refusal else None) == refused


def test_an_endless_header_is_refused_before_it_ends() -> None:
    limits = Limits()
    meter = HeadMeter(limits)
    refusal = None
    sent = 0
    chunk = b"GET / HTTP/1.1\r\nX: " + b"a" * 65536
    while refusal is None:
        refusal = meter.feed(chunk)
        sent += len(chunk)
        chunk = b"a" * 65536
    assert refusal.status == 431
    assert limits.max_head_bytes < sent <= limits.max_head_bytes + 65536  # one read past the limit at most


@pytest.mark.parametrize(("line_size", "refused"), [(100, None), (101, 414)])
def test_request_line_limit(line_size: int, refused: int | None) -> None:
    line = "GET /" + "a" * (line_size - len("GET / HTTP/1.1\r\n")) + " HTTP/1.1"
    meter, refusal = feed(SMALL, line.encode() + b"\r\n\r\n")
    assert meter.line_size == line_size
    assert (refusal.status if refusal else None) == refused


def test_a_long_request_line_is_refused_before_its_end_arrives() -> None:
    meter, refusal = feed(SMALL, b"GET /" + b"a" * 200)
    assert refusal is not None and refusal.status == 414 and not meter.line_ended


@pytest.mark.parametrize(("fields", "refused"), [(5, None), (6, 431)])
def test_header_field_count_limit(fields: int, refused: int | None) -> None:
    _, refusal = feed(SMALL, head(fields))
    assert (refusal.status if refusal else None) == refused


def test_limits_name_the_flag_of_a_bad_value() -> None:
    with pytest.raises(LimitsError, match="--read-header-timeout"):
        Limits(read_header_timeout_s=0).check({"read_header_timeout_s": "--read-header-timeout"})
    with pytest.raises(LimitsError, match="must not exceed"):
        Limits(max_header_bytes=10, max_request_line_bytes=20).check()
    assert Limits().handshake_timeout_s == 32.0  # min(read-header 32 s, write 70 s): Go's tlsHandshakeTimeout


class Conn:
    """A connection named ``<address>.<n>``: ``p.1`` and ``p.2`` come from one pod."""

    def __init__(self, name: str, room: WaitingRoom, closed: list[str]) -> None:
        self.name, self.room, self.closed = name, room, closed
        self.address = name.split(".")[0]

    def evict(self) -> None:
        self.closed.append(self.name)

    def __repr__(self) -> str:
        return self.name


# Each step: (action, connection, bytes); what the room (3 connections, 100 bytes) closed, in order.
ROOM_CASES = {
    "one address each: the longest waiting goes first": (
        [("enter", "a.1", 0), ("enter", "b.1", 0), ("enter", "c.1", 0), ("enter", "d.1", 0)], ["a.1"]),
    "the address with the most waiting loses one, its longest waiting": (
        [("enter", "p.1", 0), ("enter", "p.2", 0), ("enter", "hpa.1", 0), ("enter", "p.3", 0)], ["p.1"]),
    "a flood cannot push out a real client that came before it": (
        [("enter", "hpa.1", 0), *[("enter", f"p.{i}", 0) for i in range(1, 6)]], ["p.1", "p.2", "p.3"]),
    "a connection that was served and waits again goes to the back": (
        [("enter", "a.1", 0), ("enter", "b.1", 0), ("leave", "a.1", 0), ("enter", "a.1", 0), ("enter", "c.1", 0),
         ("enter", "d.1", 0)], ["b.1"]),
    "sending bytes does not keep a trickling client's place": (
        [("enter", "a.1", 0), ("enter", "b.1", 0), ("hold", "a.1", 10), ("enter", "c.1", 0), ("enter", "d.1", 0)],
        ["a.1"]),
    "unfinished heads over the byte budget close another, not the one sending": (
        [("enter", "a.1", 0), ("enter", "b.1", 0), ("hold", "a.1", 60), ("hold", "b.1", 60)], ["a.1"]),
    "alone over the byte budget: kept (its head limit bounds it)": ([("enter", "a.1", 0), ("hold", "a.1", 500)], []),
    "a finished head gives its bytes back": (
        [("enter", "a.1", 0), ("hold", "a.1", 90), ("leave", "a.1", 0), ("enter", "b.1", 0), ("hold", "b.1", 90)],
        []),
}


@pytest.mark.parametrize("steps,closed", ROOM_CASES.values(), ids=ROOM_CASES.keys())
def test_waiting_room_budget(steps: list[tuple[str, str, int]], closed: list[str]) -> None:
    room = WaitingRoom(max_connections=3, max_head_bytes=100)
    seen: list[str] = []
    conns: dict[str, Conn] = {}
    for action, name, nbytes in steps:
        conn = conns.setdefault(name, Conn(name, room, seen))
        if action == "hold":
            room.hold(conn, nbytes)
        else:
            getattr(room, action)(conn)
    assert seen == closed
    assert room.evicted_total == len(closed)
    assert len(room) <= 3
    assert len(room) == 1 or room.head_bytes <= 100


def test_quiet_log_lets_one_line_a_minute_through_and_counts_the_rest(caplog: pytest.LogCaptureFixture) -> None:
    import logging

    now = [0.0]
    quiet = QuietLog(logging.getLogger("test.quiet"), interval_s=60, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, "test.quiet"):
        assert quiet.warning("431", "first")
        assert not any(quiet.warning("431", "again") for _ in range(500))
        assert quiet.warning("414", "another kind")
        now[0] = 61.0
        assert quiet.warning("431", "later")
    assert [r.getMessage() for r in caplog.records] == [
        "first", "another kind", "later (500 more like it in the last 61s not logged)"]


def test_quiet_filter_passes_other_messages() -> None:
    import logging

    now = [0.0]
    f = QuietFilter(("Invalid HTTP request received.",), interval_s=60, clock=lambda: now[0])

    def record(msg: str) -> logging.LogRecord:
        return logging.LogRecord("uvicorn.error", logging.WARNING, __file__, 1, msg, None, None)

    assert f.filter(record("Invalid HTTP request received."))
    assert not f.filter(record("Invalid HTTP request received."))
    assert f.filter(record("something else")) and f.filter(record("something else"))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["enter", "leave", "hold"]), st.sampled_from("abc"), st.integers(0, 4),
                          st.integers(0, 60)), max_size=60))
def test_waiting_room_always_evicts_as_a_brute_force_scan_would(steps: list[tuple[str, str, int, int]]) -> None:
    room = WaitingRoom(max_connections=4, max_head_bytes=100)
    closed: list[str] = []
    conns: dict[str, Conn] = {}
    # The model: each waiting connection's address, bytes and when it began waiting.
    model: dict[str, tuple[int, int]] = {}
    for clock, (action, address, n, nbytes) in enumerate(steps):
        name = f"{address}.{n}"
        conn = conns.setdefault(name, Conn(name, room, closed))
        before = list(closed)
        if action == "enter":
            model[name] = (0, clock)
            room.enter(conn)
        elif action == "leave":
            model.pop(name, None)
            room.leave(conn)
        elif name in model:
            model[name] = (model[name][0] + nbytes, model[name][1])
            room.hold(conn, nbytes)
        for victim in closed[len(before):]:
            counts = {a: sum(1 for k in model if k.split(".")[0] == a) for a in {k.split(".")[0] for k in model}}
            most = max(c for a, c in counts.items() if any(k.split(".")[0] == a and k != name for k in model))
            assert counts[victim.split(".")[0]] == most, (victim, counts)
            line = sorted((when, k) for k, (_, when) in model.items() if k.split(".")[0] == victim.split(".")[0])
            assert victim == next(k for _, k in line if k != name)
            model.pop(victim)
        assert len(room) == len(model) <= 4
        assert room.head_bytes == sum(b for b, _ in model.values())
