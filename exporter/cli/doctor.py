"""``gpu-exporter doctor``: on a GPU node, our values next to ``nvidia-smi --query-gpu``'s.

The values are the exporter's own: a :class:`~exporter.serving.collector.Collector` over the same backend renders the
same ``/metrics`` text the exporter serves, and that text is what is compared (field table and conversions
included). The pairing and tolerances live in :mod:`exporter.cli.smi_compare`. Exit status: 0 all agree, 1 some
field or GPU disagrees, 2 the check could not run (no nvidia-smi, backend down).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated, Any

import typer

from exporter.backends.base import Backend
from exporter.cli.smi_compare import IDENTITY, PAIRS, Pair, Status, Verdict, judge, ours_of, parse_rows
from exporter.cli.startup import StartupError, open_backend
from exporter.fields.counters import Counter
from exporter.fields.table import FIELDS
from exporter.serving.collector import Collector, CollectorOptions

_INVALID_FIELD = re.compile(r'Field "([^"]+)" is not a valid field to query')
_IDENTITY_LABELS = ("modelName", "pci_bus_id")

app = typer.Typer(add_completion=False, rich_markup_mode=None)


class BackendName(StrEnum):
    nvml = "nvml"
    fake = "fake"


@dataclass
class GpuReport:
    index: int | None
    uuid: str
    model: str = ""
    verdicts: list[Verdict] = field(default_factory=list)
    not_supported: list[str] = field(default_factory=list)
    problem: str = ""  # a GPU only one side sees, or one that answered nothing

    @property
    def disagreements(self) -> int:
        return sum(v.status is Status.DIFFER for v in self.verdicts) + (1 if self.problem else 0)


@dataclass
class Report:
    gpus: list[GpuReport]
    smi_lacks: list[str]

    @property
    def disagreements(self) -> int:
        return sum(g.disagreements for g in self.gpus)

    def to_json(self) -> dict[str, Any]:
        return {
            "disagreements": self.disagreements,
            "nvidia_smi_lacks": self.smi_lacks,
            "gpus": [{
                "index": g.index, "uuid": g.uuid, "model": g.model, "problem": g.problem or None,
                "not_supported": g.not_supported,
                "fields": [{"field": v.pair.ours, "nvidia_smi": v.pair.smi, "ours": v.ours,
                            "nvidia_smi_values": list(v.smi), "tolerance": v.pair.tolerance(),
                            "status": v.status.value, "note": v.note or None} for v in g.verdicts],
            } for g in self.gpus],
        }


@dataclass
class _Ours:
    index: int
    uuid: str
    values: dict[str, float] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    unsupported: set[str] = field(default_factory=set)
    up: bool = True


# -- nvidia-smi --------------------------------------------------------------------------------------------
def query_nvidia_smi(exe: str, properties: Sequence[str], timeout: float = 30.0) -> tuple[list[dict[str, str]],
                                                                                           list[str]]:
    """Rows of ``{property: cell}``, and the properties this nvidia-smi does not know (dropped and retried)."""
    wanted, lacking = list(properties), list[str]()
    while True:
        try:
            done = subprocess.run([exe, f"--query-gpu={','.join(wanted)}", "--format=csv,noheader,nounits"],
                                  capture_output=True, text=True, timeout=timeout, check=False)
        except OSError as exc:
            raise StartupError(f"cannot run {exe}: {exc.strerror or exc}") from None
        except subprocess.TimeoutExpired:
            raise StartupError(f"{exe} did not answer within {timeout:g}s") from None
        output = (done.stdout + done.stderr).strip()
        if done.returncode == 0:
            try:
                return parse_rows(done.stdout, wanted), lacking
            except ValueError as exc:
                raise StartupError(str(exc)) from None
        invalid = _INVALID_FIELD.search(output)
        if invalid and invalid.group(1) in wanted and invalid.group(1) not in IDENTITY:
            wanted.remove(invalid.group(1))
            lacking.append(invalid.group(1))
            continue
        first = output.splitlines()[0] if output else f"exit status {done.returncode}"
        raise StartupError(f"nvidia-smi failed: {first}")


# -- our side ----------------------------------------------------------------------------------------------
def doctor_counters(backend: Backend) -> list[Counter]:
    """Every field of the table this backend can try (NVML: those with an NVML reader)."""
    return [Counter(f.name, f.kind, f.help, f) for f in FIELDS if backend.name != "nvml" or f.nvml is not None]


def _samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Every sample of a /metrics text, DCGM counters under their own names (the parser appends ``_total``)."""
    from prometheus_client.parser import text_string_to_metric_families

    rows = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.name
            if family.name.startswith("DCGM_") and name == family.name + "_total":
                name = family.name
            rows.append((name, dict(sample.labels), float(sample.value)))
    return rows


def read_ours(text: str) -> dict[str, _Ours]:
    """Per GPU UUID: its values, labels and unsupported fields, from a rendered /metrics text."""
    gpus: dict[str, _Ours] = {}
    by_index: dict[int, _Ours] = {}
    rows = _samples(text)
    for name, labels, value in rows:
        if name == "gpu_exporter_gpu_up":
            gpu = gpus.setdefault(labels["UUID"], _Ours(int(labels["gpu"]), labels["UUID"]))
            gpu.up = value == 1
            by_index[gpu.index] = gpu
    for name, labels, value in rows:
        if name.startswith("DCGM_FI_") and "UUID" in labels:
            gpu = gpus.setdefault(labels["UUID"], _Ours(int(labels["gpu"]), labels["UUID"]))
            gpu.values[name] = value
            gpu.labels.update(labels)
        elif name == "gpu_exporter_field_supported" and value == 0 and int(labels["gpu"]) in by_index:
            by_index[int(labels["gpu"])].unsupported.add(labels["field"])
    return gpus


def _supported(pair: Pair, gpu: _Ours, counted: set[str]) -> bool:
    if pair.ours in _IDENTITY_LABELS or pair.is_text:
        return pair.ours in gpu.labels
    return pair.ours in counted and pair.ours not in gpu.unsupported


# -- the check ---------------------------------------------------------------------------------------------
def examine(backend: Backend, nvidia_smi: str, gap_s: float = 1.0) -> Report:
    counters = doctor_counters(backend)
    counted = {c.name for c in counters}
    pairs = [p for p in PAIRS if p.ours in _IDENTITY_LABELS or p.ours in counted]
    collector = Collector(backend, counters, CollectorOptions(device_mode="g", hostname_label=None))
    collector.collect_once()  # primes rates and profiling sample pairs, as a running exporter has them
    time.sleep(gap_s)
    before, lacking = query_nvidia_smi(nvidia_smi, [*IDENTITY, *(p.smi for p in pairs)])
    collector.collect_once()
    moving = [p.smi for p in pairs if p.moves and p.smi not in lacking]
    after, _ = query_nvidia_smi(nvidia_smi, [*IDENTITY, *moving]) if moving else ([], [])
    if not collector.backend_up:
        raise StartupError(f"GPU backend unavailable: {collector.backend_error}")
    ours = read_ours(collector.snapshot.body.decode())
    smi_before = {row["uuid"]: row for row in before}
    smi_after = {row["uuid"]: row for row in after}
    reports = []
    for gpu in sorted(ours.values(), key=lambda g: g.index):
        report = GpuReport(gpu.index, gpu.uuid, gpu.labels.get("modelName", ""),
                           not_supported=sorted(gpu.unsupported))
        reports.append(report)
        row = smi_before.get(gpu.uuid)
        if row is None:
            report.problem = "nvidia-smi does not list this GPU"
            continue
        if not gpu.up:
            report.problem = "the exporter got no values from this GPU (it failed or is lost)"
            continue
        for pair in pairs:
            cells: list[str | None] = [row.get(pair.smi)]
            if pair.moves and gpu.uuid in smi_after:
                cells.append(smi_after[gpu.uuid].get(pair.smi))
            report.verdicts.append(judge(pair, ours_of(pair, gpu.values, gpu.labels),
                                         _supported(pair, gpu, counted), cells))
    for row in before:
        if row["uuid"] not in ours:
            index = int(row["index"]) if row["index"].isdigit() else None
            reports.append(GpuReport(index, row["uuid"], problem="only nvidia-smi lists this GPU"))
    return Report(reports, lacking)


# -- output ------------------------------------------------------------------------------------------------
_STYLE = {Status.AGREE: "green", Status.DIFFER: "bold red", Status.OURS_UNSUPPORTED: "yellow",
          Status.NO_VALUE: "yellow", Status.SMI_UNAVAILABLE: "dim", Status.BOTH_UNSUPPORTED: "dim",
          Status.SMI_LACKS: "dim"}


def print_report(report: Report) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False, width=None if sys.stdout.isatty() else 200)  # piped: no wrapped cells
    for gpu in report.gpus:
        title = f"GPU {gpu.index if gpu.index is not None else '?'}  {gpu.uuid}  {gpu.model}".rstrip()
        if gpu.problem:
            console.print(f"[bold red]{title}: {gpu.problem}[/]")
            continue
        table = Table(title=title, title_justify="left")
        for column in ("field", "nvidia-smi property", "ours", "nvidia-smi", "tolerance", "status"):
            table.add_column(column)
        for v in gpu.verdicts:
            table.add_row(v.pair.ours, v.pair.smi, "" if v.ours is None else _show(v.ours), " / ".join(v.smi),
                          v.pair.tolerance(), f"[{_STYLE[v.status]}]{v.status.value}[/]"
                          + (f" ({v.note})" if v.note else ""))
        console.print(table)
        console.print("Not supported on this GPU: " + (", ".join(gpu.not_supported) or "none"))
    if report.smi_lacks:
        console.print("This nvidia-smi has no query property " + ", ".join(report.smi_lacks))
    count = report.disagreements
    console.print(f"[bold red]{count} disagreement(s)[/]" if count else "[green]All values agree.[/]")


def _show(value: float | str) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


@app.command(context_settings={"help_option_names": ["-h", "--help"]})
def doctor(
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    nvidia_smi: Annotated[str, typer.Option("--nvidia-smi", help="nvidia-smi executable (name on PATH or path).")
                          ] = "nvidia-smi",
    backend: Annotated[BackendName, typer.Option("--backend", envvar="GPU_EXPORTER_BACKEND")] = BackendName.nvml,
    fake_gpu_count: Annotated[int, typer.Option("--fake-gpu-count", min=1, max=1024,
                                                help="Number of simulated GPUs (fake backend).")] = 2,
    fake_state: Annotated[str | None, typer.Option("--fake-state", help="Fake backend state file.")] = None,
    fake_seed: Annotated[str, typer.Option("--fake-seed", help="Varies the simulated GPU UUIDs.")] = "",
    sample_gap: Annotated[int, typer.Option("--sample-gap", min=0,
                                            help="Milliseconds between the priming collection and the compared "
                                                 "one (rates and profiling fields need two samples).")] = 1000,
) -> None:
    """Compare the exporter's values with nvidia-smi's on this node; exit 1 when they disagree."""
    exe = shutil.which(nvidia_smi)
    if exe is None:
        raise StartupError(f"nvidia-smi not found ({nvidia_smi!r} is not an executable on PATH): doctor compares "
                           "the exporter's values with nvidia-smi's, run it on a GPU node with the NVIDIA driver "
                           "utilities or pass --nvidia-smi PATH")
    gpu_backend = open_backend(backend.value, fake_gpu_count, fake_state, fake_seed)
    try:
        report = examine(gpu_backend, exe, sample_gap / 1000.0)
    finally:
        gpu_backend.close()
    if as_json:
        typer.echo(json.dumps(report.to_json(), indent=2))
    else:
        print_report(report)
    raise typer.Exit(1 if report.disagreements else 0)
