"""Running a typer app so that every usage or configuration error is one line on stderr, never a traceback."""

from __future__ import annotations

import sys
from collections.abc import Callable

import typer


def run(app: typer.Typer, prog: str, argv: list[str] | None, expected: tuple[type[Exception], ...],
        prepare: Callable[[list[str]], list[str]] | None = None) -> None:
    """Run ``app``; typer usage errors and the ``expected`` exceptions end the process with one line.

    An expected exception may carry an exit ``code`` attribute (default 2). ``prepare`` rewrites the arguments
    first (it may raise an expected exception too).
    """
    try:
        args = list(sys.argv[1:] if argv is None else argv)
        code = app(args=prepare(args) if prepare else args, prog_name=prog, standalone_mode=False)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        sys.exit(130)
    except typer.TyperException as exc:  # unknown flag, bad value
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        _fail(prog, " ".join(message.split()), 2)
    except expected as exc:
        _fail(prog, str(exc), getattr(exc, "code", 2))
    else:
        if isinstance(code, int) and code:  # click returns (not raises) a command's typer.Exit(code) here
            sys.exit(code)


def _fail(prog: str, message: str, code: int) -> None:
    print(f"{prog}: error: {message}", file=sys.stderr)
    sys.exit(code)
