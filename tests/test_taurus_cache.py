"""JMeter's cache manager as Taurus sets it up (store-cache: clearEachIteration and useExpires on), checked with the
cases of JMeter's own tests: apache/jmeter src/protocol/http/src/test/java/org/apache/jmeter/protocol/http/control/
TestCacheManagerBase.java and TestCacheManagerHC4.java (their useExpires=false cases do not apply: Taurus always
sets it). Their answer stub carries ``Date`` and ``Last-Modified`` of now and ``ETag: 0xCAFEBABEDEADBEEF``; each
case adds or replaces headers. Time is passed in, where JMeter's tests sleep."""

from __future__ import annotations

from email.utils import formatdate

import pytest

from loadtest.loadgen.taurus.cache import HttpCache

pytestmark = pytest.mark.unit

URL = "http://localhost/"
ETAG = "0xCAFEBABEDEADBEEF"
NOW = 1_750_000_000.0  # a whole second, as HTTP dates are


def date(seconds_from_now: float) -> str:
    return formatdate(NOW + seconds_from_now, usegmt=True)


def stub(**headers: str | None) -> list[tuple[str, str]]:
    """The tests' HttpResponseStub: Date and Last-Modified now, the ETag; ``None`` leaves one out."""
    base: dict[str, str | None] = {"Date": date(0), "Last-Modified": date(0), "ETag": ETAG}
    base.update({name.replace("_", "-"): value for name, value in headers.items()})
    return [(name, value) for name, value in base.items() if value is not None]


# (JMeter test, status, method, answer headers, [(seconds after saving, fresh?)]; an empty list: nothing saved)
CASES = [
    ("testExpires", 200, "GET", stub(Expires=date(2)), [(0, True), (1.9, True), (2.01, False)]),
    ("testExpiresBug59962", 304, "GET", stub(Expires=date(2)), [(0, True), (2.01, False)]),
    ("testCacheControl", 200, "GET", stub(Expires=date(0), Cache_Control="public, max-age=1"),
     [(0.5, True), (2.01, False)]),
    ("testPrivateCache", 200, "GET", stub(Expires=date(0), Cache_Control="private, max-age=1"),
     [(0.5, True), (2.02, False)]),
    ("testCacheHttpClientBug51932", 200, "GET", stub(Expires=date(0), Cache_Control="public, max-age=1, no-transform"),
     [(0.5, True), (2.01, False)]),
    # No Cache-Control, no Expires: fresh for a tenth of Date - Last-Modified (30 s: 3 s).
    ("testNoCacheControlNoMaxAgeNoExpire", 200, "GET", stub(Last_Modified=date(-30)), [(2.9, True), (4.01, False)]),
    ("testPrivateCacheNoMaxAgeNoExpire", 200, "GET", stub(Last_Modified=date(-30), Cache_Control="private"),
     [(2.9, True), (4.01, False)]),
    ("testPrivateCacheExpireNoMaxAge", 200, "GET", stub(Expires=date(2), Cache_Control="private"),
     [(0, True), (2.01, False)]),
    ("testNoCache", 200, "GET", stub(Cache_Control="no-cache"), [(0, False)]),
    ("testNoStore", 200, "GET", stub(Cache_Control="no-store"), []),
    ("testNoCachingHeadersBug64915", 200, "GET", stub(Last_Modified=None, ETag=None), []),
    ("testCacheHEAD", 200, "HEAD", stub(Expires=date(0), Cache_Control="public, max-age=5"), []),
    ("testSaveDetailsHttpMethodWithSampleResultWithResponseCode404GivesNoCacheEntry", 404, "GET", stub(), []),
    # calcExpiresDate: a Last-Modified with no Date to measure it from: a year.
    ("calcExpiresDate (no Date)", 200, "GET", stub(Date=None), [(364 * 86400, True), (366 * 86400, False)]),
    # extractExpiresDateFromExpires: an Expires HttpClient cannot read is no date: revalidate.
    ("extractExpiresDateFromExpires (Expires: 0)", 200, "GET", stub(Expires="0"), [(0, False)]),
    # isCacheable: Vary: * is never saved.
    ("isCacheable (Vary: *)", 200, "GET", stub(Cache_Control="max-age=60", Vary="*"), []),
    # extractExpiresDateFromCacheControl: Long.parseLong throws, and JMeter fails the sample; here: not saved.
    ("max-age not a number", 200, "GET", stub(Cache_Control="max-age=soon"), []),
]


@pytest.mark.parametrize(("case", "status", "method", "headers", "checks"), CASES, ids=[c[0] for c in CASES])
def test_what_is_saved_and_how_long_it_is_fresh(case: str, status: int, method: str, headers: list[tuple[str, str]],
                                                checks: list[tuple[float, bool]]) -> None:
    cache = HttpCache()
    cache.save(method, URL, status, headers, [], NOW)
    assert (cache.entry(URL, []) is not None) == bool(checks)
    for after, fresh in checks:
        assert cache.fresh(URL, [], NOW + after) is fresh, (case, after)


def test_the_saved_validators_go_on_the_next_request() -> None:
    """testSetHeadersHttpMethodWithSampleResultWithResponseCode200GivesCacheEntry and
    testSaveDetailsHttpMethodWithSampleResultWithResponseCode200GivesCacheEntry."""
    cache = HttpCache()
    cache.save("GET", URL, 200, stub(), [], NOW)
    entry = cache.entry(URL, [])
    assert entry is not None and (entry.etag, entry.last_modified) == (ETAG, date(0))
    assert cache.validators(URL, []) == [("If-Modified-Since", date(0)), ("If-None-Match", ETAG)]
    assert cache.validators("http://localhost/other", []) == []


def test_an_entry_is_kept_not_replaced_without_vary() -> None:
    """testBug61321 (its cache part): a later 304 without Last-Modified leaves the entry, so If-Modified-Since is
    still sent (setCache only puts a URL that is absent)."""
    cache = HttpCache()
    cache.save("GET", URL, 200, stub(), [], NOW)
    cache.save("GET", URL, 304, stub(Last_Modified=None), [], NOW + 1)
    assert ("If-Modified-Since", date(0)) in cache.validators(URL, [])


def test_a_new_pass_starts_empty() -> None:
    """testClearCache; Taurus' clearEachIteration clears it when each pass starts."""
    cache = HttpCache()
    cache.save("GET", URL, 200, stub(), [], NOW)
    assert len(cache) == 1
    cache.clear()
    assert len(cache) == 0 and cache.validators(URL, []) == []


VARY = [
    # (JMeter test, Vary, the request headers it was saved with, request headers that differ)
    ("testCacheVarySomething", "Something", [("Something", "value")],
     [("Something", "something completely different")]),
    ("testCacheVaryAcceptEncoding", "Accept-Encoding", [("Accept-Encoding", "value")],
     [("Accept-Encoding", "something completely different")]),
    ("testCacheMultiValueVaryHeaders", "Accept-Encoding",
     [("Accept-Encoding", "value"), ("Accept-Encoding", "another value")],
     [("Accept-Encoding", "something completely different")]),
    ("testCacheMultipleVaryHeaders", "Accept-Encoding,Something",
     [("Accept-Encoding", "first value"), ("Something", "another value")], [("Accept-Encoding", "first")]),
    ("testCacheMultipleMultiVaryHeaders", "Accept-Encoding,Something",
     [("Accept-Encoding", "first value"), ("Accept-Encoding", "second value"), ("Something", "another value")],
     [("Accept-Encoding", "first value"), ("Accept-Encoding", "another value")]),
]


@pytest.mark.parametrize(("case", "vary", "sent", "different"), VARY, ids=[v[0] for v in VARY])
def test_an_answer_that_varies_is_found_by_the_headers_it_varies_on(
        case: str, vary: str, sent: list[tuple[str, str]], different: list[tuple[str, str]]) -> None:
    cache = HttpCache()
    cache.save("GET", URL, 200, stub(Expires=date(0), Cache_Control="public, max-age=5", Vary=vary), sent, NOW)
    assert not cache.fresh(URL, [], NOW)  # "Should not find valid entry without headers"
    assert cache.fresh(URL, sent, NOW)  # "Should find valid entry with headers"
    assert not cache.fresh(URL, different, NOW)  # "Should not find valid entry with different header"
