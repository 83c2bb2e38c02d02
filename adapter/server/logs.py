"""Logging for ``gpu-adapter``: ``--logging-format text|json`` and ``--v`` verbosity.

``--v``: 0 info; 2 adds one access line per API request (logger ``adapter.access``); 4 debug; 6 adds every
rendered PromQL (logger ``adapter.promql``) and every Prometheus request URL (httpx's own ``httpx`` logger, one
line per request the Prometheus client sends). Key/value context is passed
with ``extra={...}``: JSON puts it beside the standard keys, text appends it as ``key=value``.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
from typing import Any, TextIO

FORMATS = ("text", "json")

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime", "taskName"}


def rfc3339(created: float) -> str:
    """UTC with milliseconds and a ``Z``."""
    return dt.datetime.fromtimestamp(created, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def extras(record: logging.LogRecord) -> dict[str, Any]:
    """The ``extra=`` key/values of a record."""
    return {k: v for k, v in record.__dict__.items() if k not in _STANDARD and not k.startswith("_")}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, then the record's extra key/values."""

    def format(self, record: logging.LogRecord) -> str:
        body: dict[str, Any] = {"ts": rfc3339(record.created), "level": record.levelname.lower(),
                                "logger": record.name, "msg": record.getMessage()}
        for key, value in extras(record).items():
            body.setdefault(key, value)
        if record.exc_info:
            body["exc"] = self.formatException(record.exc_info)
        return json.dumps(body, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """``<ts> <LEVEL> <logger>: <msg> key=value ...``; values with spaces or quotes are JSON-quoted."""

    def format(self, record: logging.LogRecord) -> str:
        line = f"{rfc3339(record.created)} {record.levelname} {record.name}: {record.getMessage()}"
        pairs = " ".join(f"{k}={_text_value(v)}" for k, v in extras(record).items())
        if pairs:
            line += " " + pairs
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def _text_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    if text == "" or any(c in text for c in ' "=\n\t'):
        return json.dumps(text)
    return text


def configure_logging(v: int, fmt: str = "text", stream: TextIO | None = None) -> None:
    """Replace the root handlers with one writing ``fmt`` to ``stream`` (stderr), levels from ``v``."""
    if fmt not in FORMATS:
        raise ValueError(f"--logging-format {fmt!r}: expected text or json")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    # Our own loggers go to debug at 4; third-party ones (httpx, asyncio) stay at info and above.
    logging.getLogger("adapter").setLevel(logging.DEBUG if v >= 4 else logging.INFO)
    logging.getLogger("adapter.access").setLevel(logging.INFO if v >= 2 else logging.WARNING)
    logging.getLogger("adapter.promql").setLevel(logging.DEBUG if v >= 6 else logging.INFO)
    logging.getLogger("httpx").setLevel(logging.INFO if v >= 6 else logging.WARNING)  # one line per request
    logging.getLogger("httpcore").setLevel(logging.WARNING)
