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
    SPEC = 3  # kiln.toml (or the settings file, a KILN_* variable) cannot be read or does not validate
    RESOLVE = 4  # the spec is valid but asks for an impossible combination
    ENGINE_MISSING = 5  # no usable container engine (or the one asked for is not installed)
    BUILD = 6  # the engine ran and failed (a RUN step, an export, a push)
    INPUT = 7  # an image, archive or binary given to us is missing, corrupt or of the wrong kind
    NO_GPU = 8  # a GPU check was asked for where no CUDA device is visible
    SOURCE = 9  # a package index, wheel folder or CA bundle is unreachable or unusable
    FILES = 10  # the operating system refused to read or write a file or folder (OSError)
    TOOL_MISSING = 11  # a program a command needs besides the engine (mksquashfs) is not installed
    REGISTRY = 12  # an image registry cannot be reached (down, wrong address, untrusted TLS certificate)
    REGISTRY_AUTH = 13  # an image registry refused the engine's credentials (none, wrong, no permission)
    LOCK = 14  # kiln.lock is missing, unreadable, stale against the spec, or for another platform
    INTERRUPTED = 130


class KilnError(Exception):
    """Base of every error that reaches the user. ``hint`` says how to fix it."""

    exit_code: ExitCode = ExitCode.CHECK_FAILED
    #: the fix shown when the raiser gives none: every error exit prints a `fix:` line
    default_hint: str = "Run the command again with --debug to see every step; the message names what failed."
    #: the command's --json output already holds this error (a matrix summary): stdout gets no second document
    in_json_output: bool = False

    def __init__(self, message: str, hint: str | None = None, *, details: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint or self.default_hint
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
    """kiln.toml is missing, is not TOML, or does not validate (or the settings file, a ``KILN_*`` setting:
    ``torchkiln.settings`` raises this type for them, exit code 3)."""

    exit_code = ExitCode.SPEC
    default_hint = "Fix the spec as the message says; `kiln init` writes a commented example of every table."


class ResolveError(KilnError):
    """The spec is well-formed but cannot be satisfied (the message says why, the hint what works).

    ``fixes``: the changes the hint offers, as spec patches (``{table: {key: value}}``, or
    ``{table: [...]}`` to replace an array of tables); each was checked to resolve.
    """

    exit_code = ExitCode.RESOLVE
    default_hint = "Change the spec as the message says; `kiln explain --gpus` lists the GPUs known."

    def __init__(self, message: str, hint: str | None = None, *, details: str | None = None,
                 fixes: tuple[dict[str, object], ...] = ()) -> None:
        super().__init__(message, hint, details=details)
        self.fixes = fixes

    def to_dict(self) -> dict[str, object]:
        return {**super().to_dict(), "fixes": list(self.fixes)}


class OutputError(KilnError):
    """A file or folder named on the command line cannot be written (-o, kiln init PATH)."""

    exit_code = ExitCode.USAGE
    default_hint = "Give a path in a folder you can write to."


class EngineMissingError(KilnError):
    """No container engine is installed or usable (daemon down, too old, no permission)."""

    exit_code = ExitCode.ENGINE_MISSING
    default_hint = "Install and start docker (or podman); `kiln build --dry-run` shows what would run."


class BuildError(KilnError):
    """A container engine command failed; ``details`` holds the tail of its output."""

    exit_code = ExitCode.BUILD
    default_hint = "Read the failing step's lines above; `kiln build --debug` shows the whole log."


class InputError(KilnError):
    """An input file or image is missing, truncated, corrupt, or not what it claims to be."""

    exit_code = ExitCode.INPUT
    default_hint = "Give a complete image name, image archive (docker-archive/OCI), .sif, wheel or ELF file."


class NoGPUError(KilnError):
    """A GPU was required but none is visible."""

    exit_code = ExitCode.NO_GPU
    default_hint = "Run on a machine with an NVIDIA GPU and driver (nvidia-smi must list one)."


class FilesError(KilnError):
    """The operating system refused a file operation; made from an ``OSError`` at the CLI boundary."""

    exit_code = ExitCode.FILES

    @classmethod
    def from_os(cls, e: OSError) -> FilesError:
        where = " → ".join(str(f) for f in (e.filename, e.filename2) if f is not None)
        what = e.strerror or str(e)
        return cls(
            f"{where}: {what}." if where else f"{what}.",
            hint="Check that the path exists, that you may write there and that the disk has room; "
                 "or give another path.",
        )


class SourceError(KilnError):
    """A package source (index, wheel folder, CA bundle) is unusable."""

    exit_code = ExitCode.SOURCE
    default_hint = "Check the index URL, wheel folder or CA bundle named above (see docs/build.md)."


class ToolMissingError(KilnError):
    """A program the command needs, other than the container engine, is not installed."""

    exit_code = ExitCode.TOOL_MISSING
    default_hint = "Install the program named above and make sure it is on PATH."


class RegistryError(KilnError):
    """An image registry cannot be reached: down, a wrong address, or a TLS certificate not trusted."""

    exit_code = ExitCode.REGISTRY


class RegistryAuthError(KilnError):
    """An image registry refused the engine's credentials (none stored, wrong ones, or no permission)."""

    exit_code = ExitCode.REGISTRY_AUTH


class LockError(KilnError):
    """``kiln.lock`` cannot be used: missing, not ours, stale against the spec, another platform, or
    its pinned base image is gone."""

    exit_code = ExitCode.LOCK
    default_hint = "Write the lock again with `kiln lock SPEC` and commit it beside the spec."
