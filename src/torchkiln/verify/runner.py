"""Run the checks where the GPUs are: in an image through its engine, or in a Python of this host.

``kiln verify IMAGE`` stages ``checks.py`` (with the fat-binary reader ``fatbin.py`` beside it and
the spec as ``spec.json``) in a temporary folder, mounts it read-only at ``/kiln-verify`` and runs
``python3 /kiln-verify/checks.py --json`` in a fresh container with every GPU attached through the
engine (``docker run --gpus all``, ``podman run --device nvidia.com/gpu=all`` (CDI), ``apptainer
exec --nv`` for ``.sif`` files). ``kiln verify --here`` runs the same files with a Python of this
machine: the one running kiln, or ``--python``. Either way the checks run in a child process, so a
crash, a hang or a broken CUDA context there cannot take kiln down; the report comes back as JSON.

``kiln verify --record-first-run FILE`` runs ``firstrun.py`` of the same bundle the same way (the
same mounts, GPUs and interpreter) instead of the checks: it returns a ``FirstRun``, the files a
first ``import torch`` and first kernels read.

The pure parts (the command line, the spec from image labels, the classification of failures) are
separate functions, tested without an engine.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchkiln.engines import Engine, Mount, RunRequest
from torchkiln.errors import BuildError, InputError, KilnError, NoGPUError
from torchkiln.runner import Completed, Runner
from torchkiln.verify.report import VerifyReport, parse_report, report_error

#: where the staged checks are mounted in the container
MOUNT = "/kiln-verify"
#: the exit codes checks.py ends with when it wrote a report (ok, a check failed, no GPU)
REPORT_EXIT_CODES = (0, 1, 8)
#: how long the checks may take before kiln gives up (a hung NCCL rank, a wedged GPU)
DEFAULT_TIMEOUT = 1800.0


@dataclass(frozen=True)
class VerifyOptions:
    """What to run. ``spec`` becomes ``spec.json``; ``spec_in_image`` names one the image carries."""

    spec: Mapping[str, Any] | None = None
    spec_in_image: str | None = None
    only: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()
    matmul_size: int | None = None
    python: str | None = None
    timeout: float | None = DEFAULT_TIMEOUT
    #: attach the GPUs (off: a smoke test on a build host; the report then says "no CUDA device")
    gpus: bool = True
    #: run the checks through this program of the image (its [gpu] forward_compat entrypoint, which puts the
    #: cuda-compat libraries first on an older host driver, as the image's own processes get them)
    through: str | None = None


def bundle_sources() -> list[Path]:
    """The files the checks need, in every bundle (an image's /opt/kiln/verify, ``kiln verify``'s staged
    folder): checks.py and, beside it, the stdlib-only modules it loads: the architecture rules
    (``arch.py``) and the ELF and fat-binary reader (``fatbin.py``); and the first-run recorder
    (``firstrun.py``, ``kiln verify --record-first-run``)."""
    import torchkiln.arch as arch
    import torchkiln.inspect.fatbin as fatbin
    import torchkiln.verify.checks as checks
    import torchkiln.verify.firstrun as firstrun

    return [Path(checks.__file__), Path(arch.__file__), Path(fatbin.__file__), Path(firstrun.__file__)]


def stage_bundle(dest: Path, spec: Mapping[str, Any] | None) -> None:
    """Copy the checks into ``dest`` (world-readable: images often run as a non-root user)."""
    dest.mkdir(parents=True, exist_ok=True)
    for src in bundle_sources():
        shutil.copyfile(src, dest / src.name)
    if spec is not None:
        (dest / "spec.json").write_text(json.dumps(dict(spec), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    dest.chmod(0o755)
    for f in dest.iterdir():
        f.chmod(0o644)


@contextmanager
def staged(spec: Mapping[str, Any] | None) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="kiln-verify-") as tmp:
        root = Path(tmp) / "bundle"
        stage_bundle(root, spec)
        yield root


def checks_args(root: str, options: VerifyOptions) -> list[str]:
    """The arguments after the interpreter: ``ROOT/checks.py --json ...``."""
    args = [f"{root}/checks.py", "--json"]
    if options.spec is not None:
        args += ["--spec-json", f"{root}/spec.json"]
    elif options.spec_in_image:
        args += ["--spec-json", options.spec_in_image]
    if options.only:
        args += ["--only", ",".join(options.only)]
    if options.skip:
        args += ["--skip", ",".join(options.skip)]
    if options.matmul_size is not None:
        args += ["--matmul-size", str(options.matmul_size)]
    return args


def spec_from_labels(labels: Mapping[str, str]) -> dict[str, Any] | None:
    """What a kiln-built image's labels say about itself (``io.torchkiln.cuda`` / ``min-driver``)."""
    cuda = labels.get("io.torchkiln.cuda") or ""
    driver = labels.get("io.torchkiln.min-driver") or ""
    if not cuda and not driver:
        return None
    out: dict[str, Any] = {}
    if cuda:
        out["cuda"] = cuda
    if driver:
        out["min_driver"] = driver
    if labels.get("io.torchkiln.python"):
        out["python"] = labels["io.torchkiln.python"]
    if labels.get("io.torchkiln.cuda-compat"):
        out["forward_compat"] = True
    return out


_GPU_DOCKER = re.compile(r'could not select device driver "[^"]*" with capabilities: \[\[gpu\]\]')
_GPU_CDI = re.compile(r"unresolvable CDI devices|CDI device[s]? .*(not found|unresolvable)", re.IGNORECASE)
_GPU_HOOK = re.compile(r"nvidia-container-cli:.*|NVML|Failed to initialize NVML|driver not loaded", re.IGNORECASE)
_NO_IMAGE = re.compile(
    r"Unable to find image|pull access denied|No such image|image not known|manifest unknown|"
    r"repository does not exist|could not open image|is not a SIF",
    re.IGNORECASE,
)
_NO_EXEC = re.compile(r'executable file not found|exec: "[^"]*": .*not found|no such file or directory|'
                      r"command not found|not found in \$PATH", re.IGNORECASE)


def classify_failure(result: Completed, engine: str, image: str, python: str) -> KilnError:
    """The error for a run that wrote no report: no GPU, no image, no Python, or the engine's own."""
    text = result.output
    details = f"$ {result.command}\n{result.tail(15)}".rstrip()
    if _GPU_DOCKER.search(text):
        return NoGPUError(
            f"docker cannot attach GPUs to {image}: it has no NVIDIA runtime (no CUDA device to verify on).",
            hint="Install the NVIDIA Container Toolkit, run `sudo nvidia-ctk runtime configure --runtime=docker` "
                 "and restart docker; or run `kiln verify --here` where the GPUs and torch are.",
            details=details,
        )
    if _GPU_CDI.search(text):
        return NoGPUError(
            f"podman cannot attach GPUs to {image}: no CDI device nvidia.com/gpu is defined "
            "(no CUDA device to verify on).",
            hint="Generate the CDI spec with `sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml` "
                 "(NVIDIA Container Toolkit 1.14+), check it with `nvidia-ctk cdi list`, and retry.",
            details=details,
        )
    if result.returncode in (125, 126, 127, 255) and _GPU_HOOK.search(text):
        return NoGPUError(
            f"{engine} could not set up the GPUs for {image}: the host's NVIDIA driver did not answer.",
            hint="Check `nvidia-smi` on the host; load the driver (or reboot after a driver update) and retry.",
            details=details,
        )
    if _NO_IMAGE.search(text):
        return InputError(
            f"{engine} has no image {image}.",
            hint="Build it first (`kiln build SPEC`), check the name with `docker images` / `podman images`, "
                 "or give the path of a .sif.",
            details=details,
        )
    if result.returncode in (126, 127) or (_NO_EXEC.search(text) and python in text):
        return InputError(
            f"{python} cannot be started in {image}.",
            hint="The checks need Python 3.10+ with torch in the image: pass the image's interpreter with "
                 "--python (for example /opt/venv/bin/python).",
            details=details,
        )
    return BuildError(
        f"{engine} could not run the checks in {image} (exit code {result.returncode}).",
        hint="Read the engine's last lines above; rerun with --debug to see the full command.",
        details=details,
    )


def interpret(result: Completed, target: str, *, engine: str, image: str, python: str) -> VerifyReport:
    """The report a finished run wrote, or the error that says why there is none."""
    if result.returncode not in REPORT_EXIT_CODES:
        if result.returncode == 2 and "checks.py" in result.stderr:
            err = report_error(target, "checks.py rejected its arguments")
            err.details = result.tail(10)
            raise err
        raise classify_failure(result, engine, image, python)
    if not result.stdout.strip():
        raise classify_failure(result, engine, image, python)
    report = parse_report(result.stdout, target)
    if int(report.exit_code) != result.returncode:
        raise report_error(target, f"it exited {result.returncode} but reported {report.status!r}")
    return report


_CHILD_ENV = {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"}


def verify_here(options: VerifyOptions, runner: Runner) -> VerifyReport:
    """Run the checks with a Python of this machine (``options.python``, else the one running kiln)."""
    python = options.python or sys.executable
    with staged(options.spec) as root:
        result = runner.run([python, *checks_args(str(root), options)], env=_CHILD_ENV, check=False,
                            timeout=options.timeout, what="the checks", install_hint=(
                                f"Give an existing interpreter with --python (not found: {python})."))
    return interpret(result, f"--here: {python}", engine="python", image="this machine", python=python)


def run_bundled(image: str, engine: Engine, options: VerifyOptions, spec: Mapping[str, Any] | None,
                args: list[str]) -> Completed:
    """Run one script of the staged bundle (``args``: its path under ``MOUNT`` and its arguments) in a fresh
    container of ``image``, the bundle mounted read-only, every GPU attached unless ``options.gpus`` is off."""
    python = options.python or "python3"
    with staged(spec) as root:
        return engine.run_request(RunRequest(
            image,
            (python, *args) if options.through else tuple(args),
            gpus=options.gpus,
            mounts=(Mount(root, MOUNT, read_only=True),),
            env=_CHILD_ENV,
            entrypoint=options.through or python,
        ), check=False, timeout=options.timeout)


def verify_image(image: str, engine: Engine, options: VerifyOptions) -> VerifyReport:
    """Run the checks in a fresh container of ``image`` with every GPU attached."""
    result = run_bundled(image, engine, options, options.spec, checks_args(MOUNT, options))
    return interpret(result, f"{engine.name}:{image}", engine=engine.name, image=image,
                     python=options.python or "python3")


def is_sif_path(image: str) -> bool:
    """Whether ``image`` names a SIF file (apptainer) rather than an engine's image reference."""
    from torchkiln.images.sif import is_sif

    p = Path(image)
    return p.is_file() and is_sif(p)


def image_spec(engine: Engine, image: str) -> tuple[dict[str, Any] | None, str | None]:
    """(spec from the image's labels, path of a spec file the image carries) for an image kiln built."""
    labels = engine.inspect_image(image).labels
    carried = None
    verify_path = labels.get("io.torchkiln.verify")
    if verify_path and verify_path.endswith("/checks.py"):
        carried = os.path.dirname(verify_path) + "/spec.json"
    return spec_from_labels(labels), carried


# --------------------------------------------------------------------------------------------
# The first-run recorder (firstrun.py): the files a first run reads
# --------------------------------------------------------------------------------------------

#: the exit codes firstrun.py ends with when it printed its JSON (recorded, the first run failed)
FIRSTRUN_EXIT_CODES = (0, 1)


@dataclass(frozen=True)
class FirstRun:
    """What firstrun.py recorded: the files (resolved, in first-read order) and where it ran."""

    files: tuple[str, ...]
    device: str
    torch: str
    bytes: int
    kernels: tuple[str, ...] = ()
    gpu: str | None = None
    seconds: float = 0.0

    @property
    def mib(self) -> float:
        return self.bytes / (1 << 20)


def firstrun_args(root: str, imports: tuple[str, ...] = ()) -> list[str]:
    """The arguments after the interpreter: ``ROOT/firstrun.py --json [--import a,b]``."""
    args = [f"{root}/firstrun.py", "--json"]
    if imports:
        args += ["--import", ",".join(imports)]
    return args


def _last_json(stdout: str) -> dict[str, Any] | None:
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                return None
            return value if isinstance(value, dict) else None
    return None


def parse_firstrun(stdout: str, target: str) -> FirstRun:
    """firstrun.py's JSON (its last line on stdout) as a ``FirstRun``; ``InputError`` when it is not one,
    or when the first run itself failed (torch missing, a kernel raised)."""
    data = _last_json(stdout)
    if data is None or not isinstance(data.get("files"), list):
        raise InputError(f"the first-run recorder in {target} printed no record.",
                         hint="Rerun with --debug to see its output.", details=stdout[-2000:] or None)
    if data.get("error"):
        raise InputError(f"the first run in {target} failed: {data['error']}",
                         hint="The record needs torch to import and run in the image: check it with "
                              "`kiln verify` (the torch_import check says why), or pass its interpreter "
                              "with --python.",
                         details=str(data.get("traceback") or "") or None)
    files = tuple(f for f in data["files"] if isinstance(f, str))
    if not files or data.get("device") not in ("cuda", "cpu"):
        raise InputError(f"the first-run recorder in {target} recorded no file.",
                         hint="Rerun with --debug to see its output.")
    return FirstRun(files=files, device=str(data["device"]), torch=str(data.get("torch") or ""),
                    bytes=int(data.get("bytes") or 0),
                    kernels=tuple(str(k) for k in data.get("kernels") or ()),
                    gpu=str(data["gpu"]) if data.get("gpu") else None,
                    seconds=float(data.get("seconds") or 0.0))


def interpret_firstrun(result: Completed, target: str, *, engine: str, image: str, python: str) -> FirstRun:
    """The record a finished firstrun.py printed, or the error that says why there is none."""
    if result.returncode not in FIRSTRUN_EXIT_CODES or _last_json(result.stdout) is None:
        raise classify_failure(result, engine, image, python)
    return parse_firstrun(result.stdout, target)


def record_here(options: VerifyOptions, runner: Runner, imports: tuple[str, ...] = ()) -> FirstRun:
    """Record a first run with a Python of this machine (``options.python``, else the one running kiln)."""
    python = options.python or sys.executable
    with staged(None) as root:
        result = runner.run([python, *firstrun_args(str(root), imports)], env=_CHILD_ENV, check=False,
                            timeout=options.timeout, what="the first-run recorder", install_hint=(
                                f"Give an existing interpreter with --python (not found: {python})."))
    return interpret_firstrun(result, f"--here: {python}", engine="python", image="this machine", python=python)


def record_image(image: str, engine: Engine, options: VerifyOptions, imports: tuple[str, ...] = ()) -> FirstRun:
    """Record a first run in a fresh container of ``image`` (every GPU attached unless ``options.gpus`` is off)."""
    result = run_bundled(image, engine, options, None, firstrun_args(MOUNT, imports))
    return interpret_firstrun(result, f"{engine.name}:{image}", engine=engine.name, image=image,
                              python=options.python or "python3")
