"""The one subprocess runner of torchkiln.

Every external program (docker, podman, debootstrap, tar, pip) is started through ``Runner.run``:
it resolves the binary on ``PATH`` (a missing tool becomes a typed error that says what to
install), echoes the command when asked (``kiln --debug``), either captures the output or streams
it line by line to a callback, and on failure raises a typed ``KilnError`` whose ``details`` replay
the last lines of the output. Quiet by default, loud on failure (the pattern of pypa/build's
``_ctx.py`` and scikit-build-core's ``FailedProcessError``); written here because the standard
library's ``subprocess`` has no such wrapper and the runner is passed in, never patched.

Every child (except ``passthrough`` ones, which share the terminal) starts in a process group of its
own; when the command stops early (Ctrl-C, SIGTERM, an error of ours) the whole group is stopped
(SIGTERM, then SIGKILL), so a ``docker build`` never leaves its buildx plugin, nor ``kiln lock`` a
``uv``, running. ``stop_children`` stops every group still alive (the CLI calls it on its way out).
"""

from __future__ import annotations

import fcntl
import logging
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from torchkiln.errors import BuildError, EngineMissingError, KilnError

log = logging.getLogger("torchkiln.runner")

#: builds a typed error from (message, hint, details)
ErrorFactory = Callable[[str, str | None, str | None], KilnError]
#: looks at a failed command's output and returns a more specific error, or None
Classifier = Callable[["Completed"], KilnError | None]

#: how much of a streamed command's output is kept in memory (the head is dropped beyond this)
_KEEP_CHARS = 4 * 1024 * 1024


#: the process groups of the children running now (their leaders' pids)
_LIVE: set[int] = set()


def _popen(args: list[str], **kwargs: object) -> subprocess.Popen[bytes]:
    """Start ``args`` in a process group of its own (recorded until it is waited for). Popen's
    ``process_group`` is Python 3.11+; on 3.10 the child calls setpgid itself before it runs."""
    if sys.version_info >= (3, 11):
        kwargs["process_group"] = 0
    else:
        kwargs["preexec_fn"] = os.setpgrp
    proc: subprocess.Popen[bytes] = subprocess.Popen(args, **kwargs)  # type: ignore[call-overload]
    _LIVE.add(proc.pid)
    return proc


def _reaped(proc: subprocess.Popen[bytes]) -> None:
    _LIVE.discard(proc.pid)


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop(proc: subprocess.Popen[bytes], grace: float = 5.0) -> None:
    """Stop ``proc`` and everything it started (its process group): SIGTERM, then SIGKILL after ``grace`` s."""
    if proc.poll() is None:
        _signal_group(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            _signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
    _signal_group(proc.pid, signal.SIGKILL)  # grandchildren left in the group
    _reaped(proc)


def stop_children() -> None:
    """Kill every child process group still running (the CLI's last step on any early exit)."""
    for pgid in list(_LIVE):
        _signal_group(pgid, signal.SIGKILL)
        _LIVE.discard(pgid)


def _default_error(message: str, hint: str | None, details: str | None) -> KilnError:
    return BuildError(message, hint, details=details)


@dataclass(frozen=True)
class Completed:
    """What a finished command left behind."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def output(self) -> str:
        """stdout and stderr together (streamed commands have everything in ``stdout``)."""
        if self.stderr and self.stdout:
            return self.stdout.rstrip("\n") + "\n" + self.stderr
        return self.stdout or self.stderr

    def tail(self, lines: int = 30) -> str:
        kept = [ln for ln in self.output.splitlines() if ln.strip()]
        return "\n".join(kept[-lines:])

    @property
    def command(self) -> str:
        return shlex.join(self.argv)


@dataclass
class Runner:
    """Runs external programs. ``echo`` receives each command line before it starts (``--debug``).

    ``env`` is added to every child's environment (on top of ``os.environ``), and the names in
    ``unset`` are removed from it (a docker context must not meet an inherited ``DOCKER_HOST``, which
    the docker client prefers even when it is empty); ``tail_lines`` is how
    many lines of output a failure replays.
    """

    echo: Callable[[str], None] | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    unset: tuple[str, ...] = ()
    tail_lines: int = 30

    def which(self, name: str, *, install_hint: str | None = None) -> str:
        """The absolute path of ``name`` (searched on PATH unless it already is a path)."""
        if os.sep in name:
            if os.access(name, os.X_OK) and Path(name).is_file():
                return name
            found = None
        else:
            found = shutil.which(name)
        if found is None:
            raise EngineMissingError(
                f"`{name}` is not installed (not found on PATH).",
                hint=install_hint or f"Install `{name}` and make sure it is on PATH.",
            )
        return found

    def run(
        self,
        argv: Sequence[str | os.PathLike[str]],
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        stdin: Path | None = None,
        on_line: Callable[[str], None] | None = None,
        passthrough: bool = False,
        check: bool = True,
        what: str | None = None,
        hint: str | None = None,
        error: ErrorFactory = _default_error,
        classify: Classifier | None = None,
        install_hint: str | None = None,
        timeout: float | None = None,
    ) -> Completed:
        """Run ``argv`` and wait for it.

        - default: capture stdout and stderr separately;
        - ``on_line``: stream stdout+stderr merged, one line at a time, to the callback;
        - ``passthrough``: the child inherits this process's terminal (for ``kiln run``).

        With ``check`` a non-zero exit raises ``classify(result)`` if that returns an error, else
        ``error(message, hint, tail)``. ``what`` names the action in the message ("docker build").
        """
        args = [str(a) for a in argv]
        args[0] = self.which(args[0], install_hint=install_hint)
        child_env = {k: v for k, v in os.environ.items() if k not in self.unset}
        child_env.update(self.env)
        extra = dict(env or {})
        child_env.update(extra)
        shown = shlex.join(args)
        if extra:
            shown = " ".join(f"{k}={shlex.quote(v)}" for k, v in extra.items()) + " " + shown
        log.debug("run: %s", shown)
        if self.echo is not None:
            self.echo(shown)

        start = time.monotonic()
        stdin_file: IO[bytes] | None = stdin.open("rb") if stdin is not None else None
        try:
            if passthrough:
                proc = subprocess.run(args, env=child_env, cwd=cwd, stdin=stdin_file, timeout=timeout, check=False)
                result = Completed(tuple(args), proc.returncode, "", "", time.monotonic() - start)
            elif on_line is not None:
                result = self._stream(args, child_env, cwd, stdin_file, on_line, timeout, start)
            else:
                child = _popen(args, env=child_env, cwd=cwd,
                               stdin=stdin_file if stdin_file is not None else subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                try:
                    out, err = child.communicate(timeout=timeout)
                except BaseException:  # Ctrl-C, SIGTERM, a timeout: never leave the child (or its children) running
                    stop(child)
                    raise
                _reaped(child)
                result = Completed(
                    tuple(args),
                    child.returncode,
                    out.decode("utf-8", "replace"),
                    err.decode("utf-8", "replace"),
                    time.monotonic() - start,
                )
        except subprocess.TimeoutExpired:
            raise error(
                f"{what or Path(args[0]).name} did not finish within {timeout:.0f} s.",
                hint,
                f"$ {shown}",
            ) from None
        except OSError as e:  # exec failed: not executable, wrong format
            raise EngineMissingError(
                f"`{args[0]}` cannot be started ({e.strerror}).",
                hint=install_hint or f"Reinstall `{Path(args[0]).name}`.",
            ) from None
        finally:
            if stdin_file is not None:
                stdin_file.close()

        if check and result.returncode != 0:
            specific = classify(result) if classify is not None else None
            if specific is not None:
                raise specific
            name = what or Path(args[0]).name
            details = f"$ {shown}\n{result.tail(self.tail_lines)}".rstrip()
            raise error(f"{name} failed (exit code {result.returncode}).", hint, details)
        return result

    @contextmanager
    def pipe(
        self,
        argv: Sequence[str | os.PathLike[str]],
        *,
        what: str | None = None,
        hint: str | None = None,
        error: ErrorFactory = _default_error,
        pipe_size: int = 32 << 20,
    ) -> Iterator[int]:
        """Run ``argv`` with its stdout on a pipe and yield the pipe's read end (a file descriptor).

        The pipe is enlarged to ``pipe_size`` where the kernel allows (root; else 1 MiB), so the
        writer runs on while the reader parses and the two wake each other less often. After the body the
        child is waited for, and a non-zero exit raises
        ``error(message, hint, stderr tail)``; if the body raises, the child is stopped first.
        """
        args = [str(a) for a in argv]
        args[0] = self.which(args[0])
        child_env = {**{k: v for k, v in os.environ.items() if k not in self.unset}, **self.env}
        shown = shlex.join(args)
        log.debug("run: %s", shown)
        if self.echo is not None:
            self.echo(shown)
        with tempfile.TemporaryFile() as err:
            try:
                proc = _popen(args, env=child_env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=err, bufsize=0)
            except OSError as e:
                raise EngineMissingError(f"`{args[0]}` cannot be started ({e.strerror}).") from None
            assert proc.stdout is not None
            fd = proc.stdout.fileno()
            for size in (pipe_size, 1 << 20):  # above /proc/sys/fs/pipe-max-size needs root
                try:
                    fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, size)
                    break
                except (OSError, AttributeError):
                    continue
            try:
                yield fd
            except Exception as body_error:
                # the reader failed: if the program failed first (`docker save` of a missing image writes nothing,
                # which reads as "empty file"), its own error is the one to report
                try:
                    code = proc.wait(timeout=2)
                except subprocess.TimeoutExpired:
                    code = None
                stop(proc, grace=0)
                proc.stdout.close()
                if code not in (None, 0):
                    err.seek(0)
                    tail = "\n".join(err.read().decode("utf-8", "replace").strip().splitlines()[-self.tail_lines:])
                    raise error(f"{what or Path(args[0]).name} failed (exit code {code}).", hint,
                                f"$ {shown}\n{tail}".rstrip()) from body_error
                raise
            except BaseException:
                stop(proc, grace=0)
                proc.stdout.close()
                raise
            proc.stdout.close()
            try:
                code = proc.wait()
            except BaseException:
                stop(proc)
                raise
            _reaped(proc)
            if code != 0:
                err.seek(0)
                tail = "\n".join(err.read().decode("utf-8", "replace").strip().splitlines()[-self.tail_lines:])
                raise error(f"{what or Path(args[0]).name} failed (exit code {code}).", hint,
                            f"$ {shown}\n{tail}".rstrip())

    def _stream(
        self,
        args: list[str],
        env: dict[str, str],
        cwd: Path | None,
        stdin: IO[bytes] | None,
        on_line: Callable[[str], None],
        timeout: float | None,
        start: float,
    ) -> Completed:
        proc = _popen(
            args,
            env=env,
            cwd=cwd,
            stdin=stdin if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        chunks: deque[str] = deque()
        kept = 0
        assert proc.stdout is not None
        try:
            for raw in proc.stdout:
                line = raw.decode("utf-8", "replace")
                chunks.append(line)
                kept += len(line)
                while kept > _KEEP_CHARS and len(chunks) > 1:
                    kept -= len(chunks.popleft())
                on_line(line.rstrip("\r\n"))
                if timeout is not None and time.monotonic() - start > timeout:
                    proc.kill()
                    raise subprocess.TimeoutExpired(args, timeout)
            rc = proc.wait()
            _reaped(proc)
        except BaseException:
            # KeyboardInterrupt, SIGTERM, a callback's error, a timeout: never leave the child (or its own
            # children: docker's buildx plugin) running
            stop(proc, grace=10)
            raise
        finally:
            proc.stdout.close()
        return Completed(tuple(args), rc, "".join(chunks), "", time.monotonic() - start)
