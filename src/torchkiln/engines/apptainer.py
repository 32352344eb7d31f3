"""Apptainer (or SingularityCE) as an engine: ``apptainer build`` of the rendered definition file.

A peer of ``OciEngine``: it implements the ``Engine`` protocol and not ``ImageStore``, because
apptainer has no image store: an image is a ``.sif`` file, named by its path. So a build request's
``build_file`` is the definition (``kiln.def``) and ``writes`` is the ``.sif``; ``run`` is ``apptainer
exec`` (``--nv`` for GPUs, ``--bind`` for mounts); ``image_exists`` and ``inspect_image`` read the
SIF file itself (``torchkiln.images.sif``). Commands that need a store (``kiln push``, ``export``,
``base bootstrap``, ``inspect`` of an image name) ask ``require_store`` and say what to do instead.

Builds run ``apptainer build`` in the definition's folder (its ``%files`` paths are relative to
it), with ``--fakeroot`` when not root (user namespaces; apptainer 1.1+ needs no setuid for it).
Package sources arrive like BuildKit secrets: the files are copied into ``.kiln/secrets/`` for
the duration of the build (``%post`` reads them from ``/kiln/secrets``, and deletes ``/kiln``), and
removed from the folder afterwards. Labels given to ``build`` go to ``.kiln/build.labels``, which
``%post`` appends to ``$APPTAINER_LABELS`` (apptainer merges that file into the image's labels).
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Mapping
from pathlib import Path

from torchkiln.contract import VERIFY_SCRIPT, VERIFY_SPEC
from torchkiln.engines.engine import (
    BuildCommand,
    BuildEvent,
    BuildOutcome,
    BuildRequest,
    Engine,
    EngineInfo,
    EngineName,
    ImageDetails,
    ProgressCallback,
    RunRequest,
    StepRecord,
)
from torchkiln.errors import BuildError, EngineMissingError, InputError
from torchkiln.fsio import read_bytes, write_private
from torchkiln.images.sif import INSPECT_METADATA, is_sif, read_sif
from torchkiln.runner import Completed, Runner

#: the name engines are selected by (``kiln build --engine apptainer``)
APPTAINER: EngineName = "apptainer"
BINARIES = ("apptainer", "singularity")

INSTALL_HINT = (
    "Install Apptainer (https://apptainer.org/docs/admin/main/installation.html: Ubuntu `add-apt-repository "
    "ppa:apptainer/ppa && apt-get install apptainer`, RHEL/Fedora `dnf install apptainer` from EPEL, or the "
    ".deb/.rpm of its GitHub release), or load the `apptainer` module on your cluster. On a machine with "
    "Docker only: `kiln build` the image with docker and write the .sif with `kiln export IMAGE --format sif`."
)

#: apptainer's INFO lines that start a build stage
_STAGES = (
    (re.compile(r"Starting build"), "bootstrap"),
    (re.compile(r"Copying .* to "), "files"),
    (re.compile(r"Running post scriptlet"), "post"),
    (re.compile(r"Adding (environment|runscript|labels|help|testscript)"), "metadata"),
    (re.compile(r"Running testscript"), "test"),
    (re.compile(r"Creating SIF file"), "sif"),
)


def require_runtime(target: str | None) -> None:
    """An Apptainer definition builds one image (the runtime one): any other target is an error."""
    if target not in (None, "runtime"):
        raise InputError(
            f"an Apptainer definition has no {target!r} target: it builds the runtime image only.",
            hint="Drop --target, or build the dev image with docker or podman.",
        )


class _Steps:
    """Turns apptainer's streamed output into BuildEvents, one step per build stage."""

    def __init__(self, progress: ProgressCallback | None) -> None:
        self.progress = progress
        self.steps: list[StepRecord] = []
        self.started = time.monotonic()

    @property
    def current(self) -> StepRecord | None:
        return self.steps[-1] if self.steps else None

    def _emit(self, rec: StepRecord, line: str | None = None) -> None:
        if self.progress is not None:
            self.progress(BuildEvent(rec.step, rec.stage, rec.name, rec.status, rec.seconds, line))

    def _close(self, status: str) -> None:
        rec = self.current
        if rec is not None and rec.status == "running":
            rec.status = "done" if status == "done" else "error"
            rec.seconds = time.monotonic() - self.started
            self._emit(rec)

    def feed(self, line: str) -> None:
        for pattern, stage in _STAGES:
            if pattern.search(line) and (self.current is None or self.current.stage != stage):
                self._close("done")
                self.started = time.monotonic()
                rec = StepRecord(step=f"#{len(self.steps) + 1}", stage=stage, name=line.split(":", 1)[-1].strip())
                self.steps.append(rec)
                self._emit(rec)
                return
        if self.current is not None:
            self.current.log.append(line)
            self._emit(self.current, line)

    def finish(self, ok: bool) -> None:
        self._close("done" if ok else "error")


class ApptainerEngine(Engine):
    """Implements ``Engine`` (not ``ImageStore``: an image is a ``.sif`` file, named by its path)."""

    name: EngineName = APPTAINER

    def __init__(self, info: EngineInfo, runner: Runner, *, fakeroot: bool | None = None) -> None:
        self.info = info
        self.runner = runner
        self._fakeroot = fakeroot

    def __repr__(self) -> str:
        return f"ApptainerEngine({self.info!r})"

    @property
    def fakeroot(self) -> bool:
        """Build with ``--fakeroot``: when not root, unless the caller decided otherwise."""
        return os.geteuid() != 0 if self._fakeroot is None else self._fakeroot

    # -- building -----------------------------------------------------------------------------------
    def build_command(self, request: BuildRequest) -> BuildCommand:
        """``apptainer build [--fakeroot] --force [--disable-cache] WRITES DEF``, run in the definition's folder.

        Secrets and labels are not on the command line: ``run_build`` places them beside the
        definition; apptainer shares the host's network, so ``request.network`` needs no option.
        """
        require_runtime(request.target)
        cmd = [self.info.binary, "build"]
        if self.fakeroot:
            cmd.append("--fakeroot")
        cmd.append("--force")
        if request.no_cache:
            cmd.append("--disable-cache")
        cmd += [str(request.writes), str(request.build_file)]
        return BuildCommand(tuple(cmd), {}, request.context, request.writes)

    def run_build(
        self,
        command: BuildCommand,
        *,
        secrets: Mapping[str, Path] | None = None,
        labels: Mapping[str, str] | None = None,
        progress: ProgressCallback | None = None,
    ) -> BuildOutcome:
        """Run exactly ``command`` in the definition's folder (``command.cwd``), the secrets and labels
        placed in its ``.kiln/`` for the run only; the image is the file ``command.writes``."""
        context = command.cwd or Path.cwd()
        placed = self._place_inputs(context, secrets or {}, labels or {})
        steps = _Steps(progress)
        try:
            result = self.runner.run(list(command.argv), env=dict(command.env), cwd=context, on_line=steps.feed,
                                     check=False, what="apptainer build")
        finally:
            for p in placed:
                p.unlink(missing_ok=True)
        steps.finish(result.returncode == 0)
        if result.returncode != 0:
            raise _build_error(steps, result, self.fakeroot)
        return BuildOutcome(image_id=str(command.writes), seconds=result.seconds, steps=tuple(steps.steps))

    def _place_inputs(self, context: Path, secrets: Mapping[str, Path], labels: Mapping[str, str]) -> list[Path]:
        placed: list[Path] = []
        sdir = context / ".kiln" / "secrets"
        for sid, src in sorted(secrets.items()):
            if not re.fullmatch(r"[A-Za-z0-9_.-]+", sid):
                raise InputError(f"secret id {sid!r} cannot be a file name.")
            sdir.mkdir(parents=True, exist_ok=True)
            dest = sdir / sid
            dest.unlink(missing_ok=True)
            placed.append(dest)
            write_private(dest, read_bytes(src, what="secret"))  # 0600 from the first byte
        if labels:
            dest = context / ".kiln" / "build.labels"
            lines = []
            for k, v in sorted(labels.items()):
                if not re.fullmatch(r"[A-Za-z0-9_.-]+", k) or "\n" in v:
                    raise InputError(f"label {k!r} cannot be written into an Apptainer image (space or line break).")
                lines.append(f"{k} {v}")
            dest.write_text("\n".join(lines) + "\n")
            placed.append(dest)
        return placed

    # -- running ------------------------------------------------------------------------------------
    def run_command(self, request: RunRequest) -> list[str]:
        """``apptainer exec`` of the request in the image file (``--nv`` for GPUs, ``--bind`` for mounts);
        no command: ``apptainer run``, the image's runscript (what docker calls the image's CMD)."""
        cmd = [self.info.binary, "exec" if request.argv or request.entrypoint else "run"]
        if request.gpus:
            cmd.append("--nv")
        for m in request.mounts:
            cmd += ["--bind", f"{m.source}:{m.target}{':ro' if m.read_only else ''}"]
        for k, v in request.env.items():
            cmd += ["--env", f"{k}={v}"]
        user = request.user
        if user not in (None, "", "root") and user != str(os.getuid()):
            raise InputError(
                f"apptainer runs containers as the calling user; it cannot switch to {user!r}.",
                hint="Leave --user out (or use root, which maps to --fakeroot).",
            )
        if user in ("root", "0") and os.geteuid() != 0:
            cmd.append("--fakeroot")
        if request.workdir is not None:
            cmd += ["--pwd", request.workdir]
        if request.network not in (None, "default", "host"):
            cmd += ["--net", "--network", request.network]
        cmd.append(request.image)
        return cmd + ([request.entrypoint] if request.entrypoint else []) + list(request.argv)

    def check_runnable(self, image: str) -> None:
        """Only a SIF file runs (``run`` is ``Engine``'s: this check, then ``run_command``)."""
        self._require_sif(image)

    def verify_command(self, image: str, *, gpus: bool = True, json: bool = True) -> list[str]:
        """``kiln verify IMAGE.sif``: the checks a kiln-built image carries (``/opt/kiln/verify``)."""
        argv = ["python", VERIFY_SCRIPT, "--spec-json", VERIFY_SPEC] + (["--json"] if json else [])
        return self.run_command(RunRequest(image, tuple(argv), gpus=gpus))

    # -- the image file -----------------------------------------------------------------------------
    def _require_sif(self, image: str) -> Path:
        p = Path(image)
        if not p.is_file():
            raise InputError(f"{image} is not a file: apptainer images are .sif files.",
                             hint="Give the path of a .sif (kiln build --engine apptainer / kiln export --format sif).")
        if not is_sif(p):
            raise InputError(f"{image} is not a SIF file.", hint="Give the path of a .sif.")
        return p

    def image_exists(self, image: str) -> bool:
        return is_sif(Path(image))

    def inspect_image(self, image: str) -> ImageDetails:
        sif = read_sif(self._require_sif(image))
        labels: dict[str, str] = {}
        if sif.by_name(INSPECT_METADATA) is not None:
            meta = sif.json_object(INSPECT_METADATA)
            labels = dict(((meta.get("data") or {}).get("attributes") or {}).get("labels") or {})
        part = sif.primary_partition()
        return ImageDetails(
            id=str(sif.header.id),
            size=part.size if part else 0,
            layers=1,
            user="",
            env=(),
            labels=labels,
            created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(sif.header.created)),
        )

    def history(self, image: str) -> list[str]:
        """The definition the image was built from, line by line (a SIF has no layer history)."""
        return read_sif(self._require_sif(image)).deffile.splitlines()

    def remove_image(self, image: str, *, missing_ok: bool = True) -> bool:
        p = Path(image)
        if not p.exists():
            if missing_ok:
                return False
            raise InputError(f"{image} does not exist.")
        self._require_sif(image)
        p.unlink()
        return True

    def pull(self, image: str, *, timeout: float | None = 120, platform: str | None = None) -> bool:
        """True when ``image`` is a SIF on disk; registry bases are pulled by ``apptainer build`` itself."""
        return is_sif(Path(image))


def _build_error(steps: _Steps, result: Completed, fakeroot: bool) -> BuildError:
    failing = next((s for s in steps.steps if s.status == "error"), steps.current)
    where = f"the {failing.stage} stage" if failing else "the build"
    tail = result.tail(40)
    hint = "Read the stage's last lines above; fix kiln.toml (package names, versions) and build again."
    if failing is not None and failing.stage == "bootstrap":
        hint = ("The base image could not be fetched. Without a registry, give it as a file: "
                "`kiln export BASE --format oci-archive -o base.tar` where Docker is, then "
                "`kiln build SPEC --engine apptainer --bootstrap oci-archive --from base.tar` (see docs/hpc.md).")
    if fakeroot and re.search(r"fakeroot|user namespace|subuid|newuidmap", tail, re.IGNORECASE):
        hint = ("--fakeroot needs user namespaces and an /etc/subuid entry for your user: ask the admins to run "
                "`apptainer config fakeroot --add $USER`, or build where you are root, or build with docker and "
                "convert with `kiln export IMAGE --format sif`.")
    return BuildError(f"apptainer build failed at {where}.", hint=hint,
                      details="\n".join([*(failing.log[-25:] if failing else []), *tail.splitlines()[-6:]]))


def probe_apptainer(runner: Runner, env: Mapping[str, str] | None = None) -> ApptainerEngine:
    """The apptainer (or singularity) on PATH, or ``KILN_APPTAINER``; ``EngineMissingError`` when none."""
    env = os.environ if env is None else env
    names = [env["KILN_APPTAINER"]] if env.get("KILN_APPTAINER") else list(BINARIES)
    tried: list[str] = []
    for name in names:
        path = name if os.sep in name else shutil.which(name, path=env.get("PATH"))
        if path is None or not os.access(path, os.X_OK):
            tried.append(f"{name}: not found")
            continue
        r = runner.run([path, "--version"], check=False)
        m = re.search(r"(\d+\.\d+(?:\.\d+)?)", r.stdout)
        if r.returncode != 0 or m is None:
            tried.append(f"{path}: `--version` failed ({r.tail(1) or 'no output'})")
            continue
        flavour = r.stdout.split()[0] if r.stdout.split() else name
        builder = "apptainer build --fakeroot" if os.geteuid() != 0 else "apptainer build"
        return ApptainerEngine(EngineInfo(APPTAINER, path, f"{flavour} {m.group(1)}", "", builder), runner)
    raise EngineMissingError(f"apptainer is not installed ({'; '.join(tried)}).", hint=INSTALL_HINT)
