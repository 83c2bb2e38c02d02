"""Errors of the rules engine: one for the rules file, one for a query built from a request."""

from __future__ import annotations

import re


class RulesError(ValueError):
    """A rules-file problem, one line: ``<file>: <rule>.<field>: <reason>``."""

    def __init__(self, reason: str, *, source: str = "", path: str = "") -> None:
        self.source = source
        self.path = path
        self.reason = reason
        super().__init__(": ".join(part for part in (source, path, _one_line(reason)) if part))


class QueryError(ValueError):
    """A query could not be built from a request, or what was built is not valid PromQL."""


def _one_line(text: str) -> str:
    return re.sub(r"\s*\n\s*", " ", text.strip())
