"""JMeter's HTTP cache for one virtual user, as Taurus' ``store-cache`` (on by default) sets it up (pure).

Taurus adds a Cache Manager to the test plan unless the scenario says ``store-cache: false``
(``HTTPProtocolHandler._gen_managers`` in ``bzt/jmx/http.py``), with ``clearEachIteration`` and ``useExpires`` on
(``JMX._get_cache_mgr`` in ``bzt/jmx/base.py``). JMeter's ``CacheManager`` (apache/jmeter
src/protocol/http/.../control/CacheManager.java; its tests: TestCacheManagerBase.java, TestCacheManagerHC4.java)
then works so, for each thread:

* the cache is emptied when a pass over the requests starts (``testIterationStart`` with ``clearEachIteration``), so
  only a URL asked for again in the same pass can be affected;
* an answer to a GET (``cacheable_methods``' default) with a status from 200 to 299, or 304, and not ``Vary: *``,
  is saved when it has a ``Last-Modified``, ``Expires``, ``ETag`` or ``Cache-Control`` header (the last of each,
  ``getLastHeader``), unless ``Cache-Control`` holds ``no-store``. The entry is fresh until: now plus ``max-age``
  when ``Cache-Control`` holds ``max-age=N``; else the ``Expires`` date; else, with no ``Expires``, now plus a
  tenth of ``Date - Last-Modified`` when both are there, or a year. With ``no-cache`` in ``Cache-Control`` only the
  ``Expires`` date counts (none: not fresh). An unreadable ``Expires`` is no date. A URL already saved keeps its
  first entry (``setCache``), except with ``Vary``;
* with ``Vary``, the entry is kept per the values of the request headers ``Vary`` names (names matched exactly, as
  JMeter matches them); a request with other values finds none;
* a GET of a URL whose entry is fresh is not sent, and JMeter records no sample for it
  (``cache_manager.cached_resource_mode=RETURN_NO_SAMPLE``, ``HTTPAbstractImpl``); any other request of a saved
  URL, whatever its method, carries ``If-Modified-Since`` (the saved ``Last-Modified``) and ``If-None-Match``
  (the saved ``ETag``), so the server may answer 304 (``setHeaders``).

Where JMeter's cache manager throws (a ``max-age`` that is not a number, a ``Date`` or ``Last-Modified`` it cannot
read while working out the heuristic), JMeter fails that sample; here the answer is just not saved.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from email.utils import mktime_tz, parsedate_tz

__all__ = ["CacheEntry", "HttpCache"]

Headers = Sequence[tuple[str, str]]
_YEAR_S = 365 * 24 * 60 * 60.0
_MAX_AGE = "max-age="


@dataclass(frozen=True)
class CacheEntry:
    """``fresh_until``: when the entry stops being fresh (seconds since the epoch); ``None``: never fresh, only
    revalidated. ``vary``: the ``Vary`` header it was saved under (only on the URL's own entry)."""

    last_modified: str | None
    etag: str | None
    fresh_until: float | None
    vary: str | None = None


def _last(headers: Headers, name: str) -> str | None:
    """The last value of a header, by a name in any case (HttpClient's ``getLastHeader``)."""
    found = None
    for key, value in headers:
        if key.lower() == name.lower():
            found = value
    return found


def _http_date(text: str | None) -> float | None:
    parsed = parsedate_tz(text) if text else None
    return None if parsed is None else float(mktime_tz(parsed))


def _vary_key(vary: str, request_headers: Headers) -> str:
    """The values of the request headers ``vary`` names (``getVaryHeader``: names split at commas, matched
    exactly), as one key."""
    names = sorted({name for name in re.split(r",\s*", vary) if name})
    values = {name: [value for key, value in request_headers if key == name] for name in names}
    return f"vary-{vary}-{values}"


def _fresh_until(headers: Headers, now: float) -> tuple[bool, float | None]:
    """(save it?, fresh until) for an answer's headers, as ``setCache`` works it out with ``useExpires``."""
    cache_control, expires = _last(headers, "Cache-Control"), _last(headers, "Expires")
    if cache_control is not None and "no-store" in cache_control:
        return False, None
    until = _http_date(expires) if expires is not None else None
    if cache_control is not None and "no-cache" in cache_control:
        return True, until
    if cache_control is not None and _MAX_AGE in cache_control:
        seconds = re.split(r"[, ]", cache_control[cache_control.index(_MAX_AGE) + len(_MAX_AGE):])[0]
        if not re.fullmatch(r"[+-]?\d+", seconds):
            return False, None  # Long.parseLong throws: JMeter fails the sample
        return True, now + int(seconds)
    if expires is not None:
        return True, until
    last_modified, date = _last(headers, "Last-Modified"), _last(headers, "Date")
    if last_modified and date:
        modified_at, dated_at = _http_date(last_modified), _http_date(date)
        if modified_at is None or dated_at is None:
            return False, None  # a date HttpClient cannot read: JMeter fails the sample
        return True, now + math.floor((dated_at - modified_at) * 1000 * 0.1 + 0.5) / 1000  # Math.round of ms
    return True, now + _YEAR_S


class HttpCache:
    """One virtual user's cache; :meth:`clear` at the start of each pass over its requests."""

    def __init__(self) -> None:
        self._entries: dict[str, CacheEntry] = {}

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def save(self, method: str, url: str, status: int, response_headers: Headers, request_headers: Headers,
             now: float) -> None:
        """Keep what an answer says about caching (``saveDetails``); ``request_headers``: those sent."""
        vary = _last(response_headers, "Vary")
        if vary == "*" or method.upper() != "GET" or not (200 <= status <= 299 or status == 304):
            return
        validators = [_last(response_headers, name) for name in ("Last-Modified", "Expires", "ETag", "Cache-Control")]
        if not any(value and value.strip() for value in validators):
            return
        keep, until = _fresh_until(response_headers, now)
        if not keep:
            return
        last_modified, etag = _last(response_headers, "Last-Modified"), _last(response_headers, "ETag")
        if vary is not None:
            self._entries[url] = CacheEntry(last_modified, etag, until, vary)
            self._entries[f"{_vary_key(vary, request_headers)}-{url}"] = CacheEntry(last_modified, etag, until)
        elif url not in self._entries:
            self._entries[url] = CacheEntry(last_modified, etag, until)

    def entry(self, url: str, request_headers: Headers) -> CacheEntry | None:
        """The entry a request with these headers finds (``getEntry``)."""
        found = self._entries.get(url)
        if found is None or found.vary is None:
            return found
        return self._entries.get(f"{_vary_key(found.vary, request_headers)}-{url}")

    def fresh(self, url: str, request_headers: Headers, now: float) -> bool:
        """Whether a GET of ``url`` is answered from the cache, unsent (``inCache``)."""
        found = self.entry(url, request_headers)
        return found is not None and found.vary is None and found.fresh_until is not None and found.fresh_until > now

    def validators(self, url: str, request_headers: Headers) -> list[tuple[str, str]]:
        """``If-Modified-Since`` and ``If-None-Match`` for a request of ``url`` (``setHeaders``)."""
        found = self.entry(url, request_headers)
        if found is None:
            return []
        pairs = [("If-Modified-Since", found.last_modified), ("If-None-Match", found.etag)]
        return [(name, value) for name, value in pairs if value is not None]
