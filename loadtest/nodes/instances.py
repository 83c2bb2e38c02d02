"""GPU instance types: how many ``nvidia.com/gpu`` each offers, from the chart's table.

The table is ``charts/gpu-autoscaler/files/gpu-instance-types.yaml`` (instance type -> ``{gpus, gpu}``, its header
names its source: AWS's accelerated-computing instance type page); the chart's templates read the same file. The load
test reads it from the checkout.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from clikit.yaml_file import load_yaml

__all__ = ["INSTANCE_TYPES_FILE", "InstanceType", "InstanceTypeError", "load_instance_types", "relative", "resolve"]

REPO = Path(__file__).resolve().parents[2]
INSTANCE_TYPES_FILE = REPO / "charts" / "gpu-autoscaler" / "files" / "gpu-instance-types.yaml"


class InstanceTypeError(ValueError):
    """One line naming the file, the field and the value."""


@dataclass(frozen=True)
class InstanceType:
    name: str
    gpus: int
    gpu: str = ""

    @property
    def family(self) -> str:
        return self.name.partition(".")[0]


def load_instance_types(path: Path = INSTANCE_TYPES_FILE) -> Mapping[str, InstanceType]:
    """The table, by instance type name (in the file's order); errors name the file and the entry."""
    return _load(Path(path))


@cache
def _load(path: Path) -> Mapping[str, InstanceType]:
    where = relative(path)
    document = load_yaml(str(path), "the GPU instance-type table", InstanceTypeError)
    if not isinstance(document, dict) or not document:
        raise InstanceTypeError(f"{where}: expected a mapping of instance type -> {{gpus, gpu}}")
    table = {}
    for name, entry in document.items():
        gpus = entry.get("gpus") if isinstance(entry, dict) else None
        if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 1:
            raise InstanceTypeError(f"{where}: {name}.gpus: expected a GPU count of at least 1, got {gpus!r}")
        table[str(name)] = InstanceType(str(name), gpus, str(entry.get("gpu", "")))
    return table


def resolve(names: Iterable[str], table: Mapping[str, InstanceType], *, families: bool, where: str
            ) -> tuple[InstanceType, ...]:
    """The instance types ``names`` select (instance types, or with ``families`` every size of each family), in
    the table's order within each; a name with no GPU count in the table is an error naming it and ``where``."""
    chosen: list[InstanceType] = []
    for name in names:
        found = [t for t in table.values() if (t.family if families else t.name) == name]
        if not found:
            what = "instance family" if families else "instance type"
            raise InstanceTypeError(f"{where}: {what} {name!r} has no known GPU count (not in "
                                    f"{relative(INSTANCE_TYPES_FILE)})")
        chosen += [t for t in found if t not in chosen]
    return tuple(chosen)


def relative(path: Path) -> str:
    """``path`` as the repository names it (as given when outside it), for messages."""
    try:
        return str(path.resolve().relative_to(REPO))
    except ValueError:
        return str(path)
