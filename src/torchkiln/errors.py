"""Every user-facing failure of torchkiln, one type each.

The CLI is the only place that catches these (see ``torchkiln.cli.main``): it prints the message
and the hint, and exits with the type's exit code. Library code raises them and never prints.
A traceback is shown only with ``--debug``.

Exit codes are part of the interface (scripts and CI depend on them) and are documented in the
README; they never change meaning.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    CHECK_FAILED = 1  # the command ran, but what it checked failed (lint findings, verify failures)
    USAGE = 2  # bad command-line arguments (click's own code)
    SPEC = 3  # kiln.toml cannot be read or does not validate
    RESOLVE = 4  # the spec is valid but asks for an impossible combination
    ENGINE_MISSING = 5  # no usable container engine (or the one asked for is not installed)
    BUILD = 6  # the engine ran and failed (a RUN step, an export, a push)
    INPUT = 7  # an image, archive or binary given to us is missing, corrupt or of the wrong kind
    NO_GPU = 8  # a GPU check was asked for where no CUDA device is visible
    SOURCE = 9  # a package index, wheel folder or CA bundle is unreachable or unusable
    INTERRUPTED = 130


class KilnError(Exception):
    """Base of every error that reaches the user. ``hint`` says how to fix it."""

    exit_code: ExitCode = ExitCode.CHECK_FAILED

    def __init__(self, message: str, hint: str | None = None, *, details: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        #: extra text shown after the message (e.g. the last lines of a failed build step)
        self.details = details

    def to_dict(self) -> dict[str, object]:
        return {
            "error": type(self).__name__,
            "exit_code": int(self.exit_code),
            "message": self.message,
            "hint": self.hint,
            "details": self.details,
        }


class SpecError(KilnError):
    """kiln.toml is missing, is not TOML, or does not validate."""

    exit_code = ExitCode.SPEC


class ResolveError(KilnError):
    """The spec is well-formed but cannot be satisfied (the message says why, the hint what works)."""

    exit_code = ExitCode.RESOLVE


class EngineMissingError(KilnError):
    """No container engine is installed or usable (daemon down, too old, no permission)."""

    exit_code = ExitCode.ENGINE_MISSING


class BuildError(KilnError):
    """A container engine command failed; ``details`` holds the tail of its output."""

    exit_code = ExitCode.BUILD


class InputError(KilnError):
    """An input file or image is missing, truncated, corrupt, or not what it claims to be."""

    exit_code = ExitCode.INPUT


class NoGPUError(KilnError):
    """A GPU was required but none is visible."""

    exit_code = ExitCode.NO_GPU


class SourceError(KilnError):
    """A package source (index, wheel folder, CA bundle) is unusable."""

    exit_code = ExitCode.SOURCE
