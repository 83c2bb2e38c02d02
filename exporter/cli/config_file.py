"""``--config-file``: dcgm-exporter 4.8.3's start-up YAML (schema version ``v1``).

The schema, from NVIDIA's ``dcgm-exporter`` command reference: ``metrics.file`` (a counters CSV) or inline
``metrics.fields[]`` (``name``, ``prometheusType``, ``help``), ``collection.interval`` and
``collection.watchGroups[]`` (``name``, ``interval``, ``fields``). It sits below flags and environment
variables: an explicit ``-f`` or ``--configmap-data`` replaces its metric source, ``-c`` its interval.
An interval is milliseconds (an integer) or a Go duration (``30s``). Unknown keys are an error naming them.
Watch groups are checked and accepted, but every field is collected at the one collection interval here
(NVML has no per-field watch; the start-up log says so).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clikit.durations import DurationError
from clikit.durations import parse_go_duration as parse_duration
from clikit.yaml_file import load_yaml, strict_mapping


class ConfigFileError(ValueError):
    """A config file the exporter cannot start with; the message names the file and the key."""


@dataclass(frozen=True)
class ConfigFile:
    values: dict[str, Any]  # settings field -> value, below flags and environment
    inline_counters: str | None  # metrics.fields as counters CSV text, when given inline
    watch_groups: tuple[str, ...]


def _keys(value: Any, where: str, allowed: set[str]) -> dict[str, Any]:
    return strict_mapping(value, where, allowed, ConfigFileError)


def _interval_ms(value: Any, where: str) -> int:
    if isinstance(value, bool):
        raise ConfigFileError(f"{where}: expected milliseconds or a duration like 30s")
    if isinstance(value, int):
        ms = value
    else:
        try:
            ms = round(parse_duration(str(value), where) * 1000)
        except DurationError as exc:
            raise ConfigFileError(str(exc)) from None
    if ms < 100:
        raise ConfigFileError(f"{where}: {value!r} is below the 100 ms minimum")
    return ms


def load_config_file(path: str) -> ConfigFile:
    top = _keys(load_yaml(path, "config file", ConfigFileError), path, {"version", "metrics", "collection"})
    version = top.get("version", "v1")
    if str(version) not in ("v1", "1"):
        raise ConfigFileError(f"{path}: version: {version!r} is not supported (expected v1)")
    values: dict[str, Any] = {}
    inline: str | None = None
    metrics = _keys(top.get("metrics"), f"{path}: metrics", {"file", "fields"})
    if metrics.get("file") and metrics.get("fields"):
        raise ConfigFileError(f"{path}: metrics: give file or fields, not both")
    if metrics.get("file"):
        values["collectors"] = str(Path(path).resolve().parent / str(metrics["file"]))
    elif metrics.get("fields") is not None:
        fields = metrics["fields"]
        if not isinstance(fields, list) or not fields:
            raise ConfigFileError(f"{path}: metrics.fields: expected a non-empty list")
        rows = []
        for i, item in enumerate(fields):
            where = f"{path}: metrics.fields[{i}]"
            entry = _keys(item, where, {"name", "prometheusType", "help"})
            if not entry.get("name") or not entry.get("prometheusType"):
                raise ConfigFileError(f"{where}: name and prometheusType are required")
            rows.append(f"{entry['name']}, {entry['prometheusType']}, {entry.get('help') or ''}")
        inline = "\n".join(rows) + "\n"
    collection = _keys(top.get("collection"), f"{path}: collection", {"interval", "watchGroups"})
    if collection.get("interval") is not None:
        values["collect_interval"] = _interval_ms(collection["interval"], f"{path}: collection.interval")
    groups: list[str] = []
    for i, item in enumerate(collection.get("watchGroups") or []):
        where = f"{path}: collection.watchGroups[{i}]"
        group = _keys(item, where, {"name", "interval", "fields"})
        if group.get("interval") is not None:
            _interval_ms(group["interval"], f"{where}.interval")
        if not isinstance(group.get("fields") or [], list):
            raise ConfigFileError(f"{where}.fields: expected a list of field names")
        groups.append(str(group.get("name") or f"#{i}"))
    return ConfigFile(values, inline, tuple(groups))
