"""torchkiln: build production PyTorch + CUDA container images from one declarative spec."""

__version__ = "0.1.0"


def _exit_early(signum: int, _frame: object) -> None:  # pragma: no cover - timing-dependent
    """Ctrl-C (or SIGTERM) while the ``kiln`` command's modules load: nothing was written yet; exit quietly
    (130 or 143) instead of printing a KeyboardInterrupt traceback. ``torchkiln.cli.main`` replaces it."""
    import os

    os.write(2, b"interrupted\n")
    os._exit(128 + signum)


def _install_early_handlers() -> None:
    import sys

    argv0 = sys.argv[0] if sys.argv else ""
    if argv0 != "-m" and argv0.rsplit("/", 1)[-1] != "kiln":
        return  # imported as a library (or by a test runner): signals are the host program's
    import _signal  # type: ignore[import-not-found]  # the C module: `signal` imports enum, which takes long enough to be interrupted

    if _signal.getsignal(_signal.SIGINT) is not _signal.default_int_handler:
        return
    for sig in (_signal.SIGINT, _signal.SIGTERM):
        _signal.signal(sig, _exit_early)


_install_early_handlers()
