"""The ``kiln`` command line: argument parsing, the one error boundary, output.

Commands live in one module each (``torchkiln/cli/<command>.py``) and register themselves on
``app``; the modules are listed in ``COMMAND_MODULES``. Library code raises ``KilnError``
subclasses and never prints; ``main`` turns them into a message, a hint and an exit code.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import sys
from types import FrameType
from typing import Annotated, cast

import typer
from rich.markup import escape
from typer.core import TyperOption
from typer.exceptions import TyperException

from torchkiln import __version__
from torchkiln.cli._common import err_console, state
from torchkiln.errors import ExitCode, FilesError, Interrupted, KilnError
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


def _raise_interrupted(signum: int, frame: FrameType | None) -> None:
    if _swallowing(frame):  # raised there, the stop would be printed as "Exception ignored" and lost:
        # deliver it again in 20 ms, when that short piece of code has returned
        signal.signal(signal.SIGALRM, lambda _s, f: _raise_interrupted(signum, f))
        signal.setitimer(signal.ITIMER_REAL, 0.02)
        return
    raise Interrupted(signum)


def _swallowing(frame: FrameType | None) -> bool:
    """Whether an exception raised at ``frame`` would be swallowed rather than propagate.

    CPython prints and drops an exception raised in a weakref callback (``weakref.finalize`` included) or a
    ``__del__``; the one a command meets is logging's handler-reference callback (a handler collected
    while the signal arrives), which runs with logging's module lock held. Any frame inside ``logging``
    counts: its critical sections are short, and raising inside one can leave the lock held.
    """
    while frame is not None:
        code = frame.f_code
        if code.co_name == "__del__" or code.co_filename.endswith(_LOGGING_FILES):
            return True
        frame = frame.f_back
    return False


_LOGGING_FILES = (os.path.join("logging", "__init__.py"), os.path.join("logging", "handlers.py"), "weakref.py")


#: the signals that stop a command: each raises ``Interrupted`` in the main thread, so every ``finally`` runs
#: (temporary folders and secret files removed, child process groups stopped) before the exit code is returned
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``kiln`` script; returns the exit code."""
    previous: dict[int, object] = {}
    try:
        for sig in STOP_SIGNALS:
            previous[sig] = signal.signal(sig, _raise_interrupted)
        previous[signal.SIGALRM] = signal.getsignal(signal.SIGALRM)  # a deferred stop (_raise_interrupted) uses it
    except ValueError:  # not the main thread (a test's worker): signals stay as they are
        pass
    try:
        return _main(argv)
    except KeyboardInterrupt as e:  # while the error itself was being reported
        return _interrupted(e)
    except Exception as e:  # a stop signal that Python wrapped (in an import, a class body's __set_name__)
        cause = _interruption(e)
        if cause is None:
            raise
        return _interrupted(cause)
    finally:
        from torchkiln.runner import stop_children

        stop_children()
        if signal.SIGALRM in previous:
            signal.setitimer(signal.ITIMER_REAL, 0)  # a stop still deferred (see _raise_interrupted) is moot now
        for signum, handler in previous.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]


def _interruption(e: BaseException) -> KeyboardInterrupt | None:
    """The KeyboardInterrupt (or ``Interrupted``) ``e`` was raised from, if any."""
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, KeyboardInterrupt):
            return cur
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return None


def _interrupted(e: BaseException) -> int:
    signum = e.signum if isinstance(e, Interrupted) else int(signal.SIGINT)
    try:
        err_console.print("[red]interrupted[/red]" if signum == signal.SIGINT else
                          f"[red]stopped by {signal.Signals(signum).name}[/red]")
    except Exception:  # noqa: BLE001 - a closed terminal: the exit code says it
        pass
    return 128 + int(signum)


def _main(argv: list[str] | None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    wants_json = "--json" in args
    try:
        load_commands(args)
        rv = app(args=args, prog_name="kiln", standalone_mode=False)
    except KilnError as e:
        if debug:
            err_console.print_exception()
        _report(e, wants_json)
        return int(e.exit_code)
    except BrokenPipeError as e:
        if _stdout_gone():  # `kiln ... | head`: the reader left; not an error of ours
            return int(ExitCode.OK)
        error = FilesError.from_os(e)
        _report(error, wants_json)
        return int(error.exit_code)
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
    except KeyboardInterrupt as e:  # Ctrl-C, SIGTERM, SIGHUP (Interrupted): cleaned up on the way here
        if debug:
            err_console.print_exception()
        return _interrupted(e)
    return int(rv) if isinstance(rv, int) else 0


def _stdout_gone() -> bool:
    """True when stdout's reader has gone (a closed pipe); stdout then points at /dev/null, so that the
    interpreter's last flush does not print a BrokenPipeError of its own."""
    try:
        sys.stdout.flush()
        return False
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return True
    except (OSError, ValueError):
        return False


def _report(e: KilnError, wants_json: bool) -> None:
    if wants_json and not e.in_json_output:
        print(json.dumps(redact_data(e.to_dict()), indent=2))
    # messages name spec tables such as [torch]: escape them, or rich would read them as markup
    err_console.print(f"[bold red]error:[/bold red] {escape(redact(e.message))}", highlight=False, soft_wrap=True)
    if e.details:
        err_console.print(redact(e.details), highlight=False, markup=False, soft_wrap=True)
    if e.hint:
        err_console.print(f"[bold]fix:[/bold] {escape(redact(e.hint))}", highlight=False, soft_wrap=True)


def _restore_early_handlers() -> None:
    """The modules are loaded: ``torchkiln._exit_early`` gives way to the default handlers (main() installs its own)."""
    import torchkiln

    for sig, default in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL)):
        if signal.getsignal(sig) is torchkiln._exit_early:
            signal.signal(sig, default)


_restore_early_handlers()
