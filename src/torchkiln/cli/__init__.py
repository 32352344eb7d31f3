"""The ``kiln`` command line: argument parsing, the one error boundary, output.

Commands live in one module each (``torchkiln/cli/<command>.py``) and register themselves on
``app``; the modules are listed in ``COMMAND_MODULES``. Library code raises ``KilnError``
subclasses and never prints; ``main`` turns them into a message, a hint and an exit code.
"""

from __future__ import annotations

import importlib
import json
import sys
from typing import Annotated, cast

import typer
from rich.markup import escape
from typer.core import TyperOption
from typer.exceptions import TyperException

from torchkiln import __version__
from torchkiln.cli._common import err_console, state
from torchkiln.errors import ExitCode, FilesError, KilnError
from torchkiln.redact import redact, redact_data


def _flag_type(self: TyperOption, ctx: object) -> str | None:
    """Flags take no value: show none in --help (typer 0.29's rich help prints ``<bool>`` for them,
    which reads as "--json true"; the plain formatter already leaves it out)."""
    if self.is_flag:
        return None
    assert _typer_option_type is not None  # installed only where typer has it
    return cast("str | None", _typer_option_type(self, ctx))


_typer_option_type = getattr(TyperOption, "display_type_rich", None)
if _typer_option_type is not None:  # typer versions without it print no type for flags anyway
    TyperOption.display_type_rich = _flag_type  # type: ignore[method-assign]

app = typer.Typer(
    name="kiln",
    help="Build production PyTorch + CUDA container images from one declarative spec (kiln.toml).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)


def _version(value: bool) -> None:
    if value:
        print(f"torchkiln {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks and echo every subprocess.")] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    state.debug = debug


# Each module registers its command (of the same name) on ``app`` when imported.
COMMAND_MODULES = (
    "init",
    "resolve",
    "render",
    "explain",
    "lint",
    "build",
    "push",
    "lock",
    "knowledge",
    "run",
    "base",
    "inspect",
    "export",
    "verify",
    "prune",
    "config",
)


def load_commands(args: list[str]) -> None:
    """Register the command ``args`` names, or every command when they name none (help, typos).

    Importing all of them costs more than most commands do (``kiln resolve`` is a 1 ms resolve
    behind ~0.5 s of imports of the engine, inspect, lint and verify code), so only the one
    that runs is imported; help and "did you mean" need them all.
    """
    first = next((a for a in args if not a.startswith("-")), None)
    names = (first,) if first in COMMAND_MODULES else COMMAND_MODULES
    for name in names:
        importlib.import_module(f"torchkiln.cli.{name}")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``kiln`` script; returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    load_commands(args)
    debug = "--debug" in args
    wants_json = "--json" in args
    try:
        rv = app(args=args, prog_name="kiln", standalone_mode=False)
    except KilnError as e:
        if debug:
            err_console.print_exception()
        _report(e, wants_json)
        return int(e.exit_code)
    except OSError as e:  # a file the library reads or writes: no traceback, a message and exit code 10
        if debug:
            err_console.print_exception()
        error = FilesError.from_os(e)
        _report(error, wants_json)
        return int(error.exit_code)
    except typer.Exit as e:
        return int(e.exit_code)
    except typer.Abort:
        err_console.print("[red]aborted[/red]")
        return int(ExitCode.INTERRUPTED)
    except TyperException as e:  # usage errors: the usage line, the error, and where the options are
        ctx = getattr(e, "ctx", None)
        if ctx is not None:
            err_console.print(ctx.get_usage(), markup=False, highlight=False)
        command = ctx.command_path if ctx is not None else "kiln"
        err_console.print(f"[bold red]error:[/bold red] {escape(e.format_message())}", highlight=False)
        err_console.print(f"[bold]fix:[/bold] see `{escape(command)} --help` for what it takes "
                          "(flags such as --json take no value).", highlight=False)
        return int(e.exit_code)
    except KeyboardInterrupt:
        err_console.print("[red]interrupted[/red]")
        return int(ExitCode.INTERRUPTED)
    return int(rv) if isinstance(rv, int) else 0


def _report(e: KilnError, wants_json: bool) -> None:
    if wants_json and not e.in_json_output:
        print(json.dumps(redact_data(e.to_dict()), indent=2))
    # messages name spec tables such as [torch]: escape them, or rich would read them as markup
    err_console.print(f"[bold red]error:[/bold red] {escape(redact(e.message))}", highlight=False, soft_wrap=True)
    if e.details:
        err_console.print(redact(e.details), highlight=False, markup=False, soft_wrap=True)
    if e.hint:
        err_console.print(f"[bold]fix:[/bold] {escape(redact(e.hint))}", highlight=False, soft_wrap=True)
