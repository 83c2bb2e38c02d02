"""A command's flags as a table: one row per flag (name, type, default, help), shared between commands.

A command is a function of one ``Options`` (its flags' values by Python name); ``command`` gives typer the
function's signature from the command's table, so a flag is declared once, where it is documented, and the same row
serves every command that takes it. ``gpu-adapter`` renders ``docs/flags.md`` from its tables; ``gpu-loadtest``
declares its commands' options the same way.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import Annotated, Any

import typer

__all__ = ["REQUIRED", "Flag", "Options", "command"]

Options = SimpleNamespace
"""A command's flag values, by Python name (``options.prometheus_url``)."""

REQUIRED = inspect.Parameter.empty


@dataclass(frozen=True)
class Flag:
    name: str  # "--secure-port"
    type: Any = str  # str, int, bool, str | None, list[str] | None, an enum
    default: Any = None
    help: str = ""
    short: str | None = None  # "-v"
    range: tuple[float | None, float | None] | None = None  # (least, most); None: unbounded on that side

    @property
    def attribute(self) -> str:
        return self.name.lstrip("-").replace("-", "_")

    def with_default(self, default: Any) -> Flag:
        return replace(self, default=default)

    def parameter(self) -> inspect.Parameter:
        names = (self.name, self.short) if self.short else (self.name,)
        low, high = self.range or (None, None)
        option = typer.Option(*names, help=self.help or None, min=low, max=high, show_default=self.default is not None)
        required = self.default is inspect.Parameter.empty
        return inspect.Parameter(self.attribute, inspect.Parameter.KEYWORD_ONLY,
                                 default=inspect.Parameter.empty if required else self.default,
                                 annotation=Annotated[self.type, option])


def command(app: typer.Typer, name: str, flags: Sequence[Flag],
            argument: inspect.Parameter | None = None) -> Callable[[Callable[[Options], None]], Callable[..., None]]:
    """Register ``run(options)`` as command ``name`` of ``app`` with ``flags`` (and one positional ``argument``)."""

    def register(run: Callable[[Options], None]) -> Callable[..., None]:
        def invoke(**values: Any) -> None:
            run(Options(**values))

        parameters = [p.parameter() for p in flags]
        if argument is not None:
            parameters.insert(0, argument)
        invoke.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]  # read by inspect.signature (PEP 362); not in typeshed's function type
        invoke.__doc__ = run.__doc__
        invoke.__name__ = name
        app.command(name)(invoke)
        return invoke

    return register
