"""Why did a build fail? Recognise the usual failures of compiled extensions in a build log.

``diagnose(log_text)`` reads the output of a failed build (BuildKit's plain progress, podman/buildah,
or a bare pip/uv/ninja log) and returns what it recognises, each with the failing lines and a hint:

* ``oom``: nvcc, cicc, ptxas, cc1plus or the linker killed by the kernel's OOM killer (signal 9,
  exit code 137, "Killed signal terminated program cc1plus") or out of memory → lower MAX_JOBS;
* ``build-isolation``: "No module named 'torch'" while a package was being built → the build ran in
  an isolated environment without torch: build with ``--no-build-isolation``;
* ``build-requirement``: another module a no-isolation build imports is missing (packaging, ninja…);
* ``unsupported-arch``: the toolkit cannot compile for an architecture in the arch list
  ("nvcc fatal : Unsupported gpu architecture 'compute_70'", torch's "Unknown CUDA arch");
* ``cuda-mismatch``: nvcc's CUDA differs from torch's (torch's, apex's, DeepSpeed's and torchkiln's
  own checks);
* ``no-nvcc``: no CUDA compiler where one is needed (CUDA_HOME unset);
* ``python-headers``: ``Python.h`` missing (the base image has no Python development headers).

Pure: text in, data out. The build engine calls it on a failed build's output and shows the
diagnoses with the error. Our own code: no library classifies compiler and pip failures.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

Kind = Literal[
    "oom", "build-isolation", "build-requirement", "unsupported-arch", "cuda-mismatch", "no-nvcc", "python-headers"
]

#: BuildKit plain progress ("#12 34.56 text"), podman's "STEP" lines stay as they are
_PREFIX = re.compile(r"^#\d+ (?:\d+\.\d+ )?")
_MAX_LINES = 8
_MAX_WIDTH = 400


@dataclass(frozen=True)
class Diagnosis:
    kind: Kind
    title: str  # what happened, one sentence
    hint: str  # what to do about it
    lines: tuple[str, ...]  # the failing lines of the log (prefixes removed, long lines shortened)
    line_numbers: tuple[int, ...]  # where they are in the log (1-based)

    def to_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "title": self.title, "hint": self.hint, "lines": list(self.lines),
                "line_numbers": list(self.line_numbers)}

    def format(self) -> str:
        """The diagnosis as text: title, the failing lines (with their line numbers), the hint."""
        shown = "\n".join(f"  {n:>6} | {line}" for n, line in zip(self.line_numbers, self.lines, strict=True))
        return f"{self.title}\n{shown}\nfix: {self.hint}"


def _clean(line: str) -> str:
    text = _PREFIX.sub("", line.rstrip("\r\n")).strip()
    return text if len(text) <= _MAX_WIDTH else text[: _MAX_WIDTH - 3] + "..."


@dataclass(frozen=True)
class _Hit:
    number: int  # 1-based
    text: str
    match: re.Match[str]


def _find(lines: list[str], pattern: re.Pattern[str]) -> list[_Hit]:
    return [_Hit(i + 1, line, m) for i, line in enumerate(lines) if (m := pattern.search(line))]


def _with_context(lines: list[str], hits: Iterable[_Hit], before: re.Pattern[str] | None = None,
                  reach: int = 6) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """The hit lines, each preceded by the nearest earlier line matching ``before`` (the failing command)."""
    picked: dict[int, str] = {}
    for h in hits:
        if before is not None:
            for j in range(h.number - 2, max(-1, h.number - 2 - reach), -1):
                if before.search(lines[j]):
                    picked.setdefault(j + 1, lines[j])
                    if j + 1 < len(lines) and j + 1 != h.number - 1 and not before.search(lines[j + 1]):
                        picked.setdefault(j + 2, lines[j + 1])  # the command line ninja prints after FAILED:
                    break
        picked.setdefault(h.number, h.text)
    numbers = sorted(picked)[:_MAX_LINES]
    return tuple(picked[n] for n in numbers), tuple(numbers)


# -- the recognisers ---------------------------------------------------------------------------------

_OOM_KILLED = re.compile(
    r"Killed signal terminated program (?P<prog>\S+)"
    r"|'(?P<tool>cicc|ptxas|cudafe\+\+|nvlink|fatbinary|gcc|g\+\+|cc1plus)' died due to signal 9"
    r"|died due to signal 9 \(Kill signal\)"
    r"|terminated with signal 9"
    r"|FAILED: \[code=137\]"
    r"|returned non-zero exit status 137"
    r"|exit code: 137\b"
)
_OOM_BARE_KILLED = re.compile(r"^(?:/bin/(?:ba)?sh: (?:line \d+: )?\d+ )?Killed\b")
_OOM_EXHAUSTED = re.compile(
    r"virtual memory exhausted|out of memory allocating \d+ bytes|cc1plus: out of memory"
    r"|std::bad_alloc|nvcc error\s*:.*[Oo]ut of memory|Cannot allocate memory"
)
_FAILED = re.compile(r"FAILED:|error: command '.*' failed|\bcode=\d+\b")
_JOBS = re.compile(r"kiln: MAX_JOBS=(\d+)|Using envvar MAX_JOBS \((\d+)\)|ninja', '-v', '-j', '(\d+)'")
_ARCH_LIST = re.compile(r"TORCH_CUDA_ARCH_LIST=([0-9.;+ PTXa-z]+)")


def _oom(lines: list[str]) -> Diagnosis | None:
    hits = _find(lines, _OOM_KILLED) + _find(lines, _OOM_EXHAUSTED)
    # a bare "Killed" (the shell's report of SIGKILL) counts after a compiler command line
    for h in _find(lines, _OOM_BARE_KILLED):
        before = " ".join(lines[max(0, h.number - 4): h.number - 1])
        if re.search(r"nvcc|c\+\+|g\+\+|gcc|cicc|ptxas|FAILED:|ninja", before):
            hits.append(h)
    if not hits:
        return None
    hits.sort(key=lambda h: h.number)
    progs = []
    for h in hits:
        prog = h.match.groupdict().get("prog") or h.match.groupdict().get("tool") if h.match.re is _OOM_KILLED else None
        if prog:
            progs.append(prog)
        elif "nvcc" in " ".join(lines[max(0, h.number - 4): h.number]):
            progs.append("nvcc")
    jobs = [int(next(g for g in m.groups() if g)) for line in lines if (m := _JOBS.search(line))]
    now = jobs[-1] if jobs else None
    lower = str(max(1, now // 2)) if now else "1 or 2"
    what = ", ".join(dict.fromkeys(progs)) or "a compiler"
    shown, numbers = _with_context(lines, hits, _FAILED)
    title = (f"the build ran out of memory: {what} was killed (signal 9, the kernel's OOM killer)"
             + (f" while MAX_JOBS={now}" if now else ""))
    return Diagnosis(
        "oom", title,
        f"Lower the parallel compile jobs to MAX_JOBS={lower} (in the extension's [[extensions]] env, or "
        "`--build-arg MAX_JOBS=N` for torchkiln's builder stages, or `export MAX_JOBS=N` before pip); for "
        "flash-attn also NVCC_THREADS=1. Or give the build more memory (the Docker VM, or the "
        "container's cgroup limit): each nvcc or cc1plus job of a large extension needs 4-9 GiB.",
        shown, numbers,
    )


_NO_TORCH = re.compile(r"No module named '?torch'?(?![._\w])")
_BUILD_CONTEXT = re.compile(
    r"Getting requirements to build wheel|get_requires_for_build_wheel|build backend|Preparing metadata"
    r"|Building wheel|setup\.py|prepare_metadata_for_build_wheel|installing build dependencies",
    re.IGNORECASE,
)


def _isolation(lines: list[str]) -> Diagnosis | None:
    hits = _find(lines, _NO_TORCH)
    if not hits:
        return None
    context = [h for h in _find(lines, _BUILD_CONTEXT) if h.number < hits[0].number]
    shown, numbers = _with_context(lines, [*context[-1:], *hits])
    during = "while a package was being built" if context else "during the build"
    return Diagnosis(
        "build-isolation",
        f"\"No module named 'torch'\" {during}: the package's build imports torch, but pip/uv built it in an "
        "isolated environment that has no torch",
        "Build it without isolation against the torch already installed: list it under [[extensions]] "
        "(torchkiln builds those with --no-build-isolation in its extensions stage), or in your own step "
        "`pip install --no-build-isolation PKG` / `uv pip install --no-build-isolation PKG` after torch, "
        "setuptools, wheel, ninja and packaging are installed.",
        shown, numbers,
    )


_MISSING_REQ = re.compile(r"No module named '?(packaging|psutil|ninja|wheel|setuptools|einops|numpy|cpuinfo)'?")


def _build_requirement(lines: list[str]) -> Diagnosis | None:
    hits = [h for h in _find(lines, _MISSING_REQ)
            if any(_BUILD_CONTEXT.search(x) for x in lines[: h.number])]
    hits = [h for h in hits if "Failed to initialize NumPy" not in h.text]
    if not hits:
        return None
    mods = list(dict.fromkeys(h.match.group(1) for h in hits))
    pkgs = ["py-cpuinfo" if m == "cpuinfo" else m for m in mods]
    shown, numbers = _with_context(lines, hits)
    return Diagnosis(
        "build-requirement",
        f"the build imports {', '.join(mods)}, which is not installed in the build environment",
        f"Install {' '.join(pkgs)} beside torch before a build without isolation (torchkiln's toolchain stage "
        "installs the knowledge base's build requirements; an unknown extension can name more in its env or "
        "in [packages] pip).",
        shown, numbers,
    )


_ARCH = re.compile(
    r"Unsupported gpu architecture '(?P<nv>(?:compute|sm)_\d+[af]?)'"
    r"|Value '(?P<val>(?:sm|compute)_\d+[af]?)' is not defined for option 'gpu-(?:name|architecture)'"
    r"|Unknown CUDA arch \((?P<torch>[^)]+)\) or GPU not supported"
)
_NVCC_RELEASE = re.compile(r"release (\d+\.\d+), V\d")


def _arch(lines: list[str]) -> Diagnosis | None:
    hits = _find(lines, _ARCH)
    if not hits:
        return None
    names = []
    for h in hits:
        raw = h.match.group("nv") or h.match.group("val") or h.match.group("torch") or ""
        m = re.fullmatch(r"(?:compute|sm)_(\d+)(\d)[af]?", raw)
        names.append(f"{m.group(1)}.{m.group(2)}" if m else raw)
    archs = ", ".join(dict.fromkeys(names))
    releases = [m.group(1) for line in lines if (m := _NVCC_RELEASE.search(line))]
    toolkit = f"CUDA {releases[-1]}" if releases else "this CUDA toolkit"
    lists = [m.group(1).strip() for line in lines if (m := _ARCH_LIST.search(line))]
    shown, numbers = _with_context(lines, hits, _FAILED)
    return Diagnosis(
        "unsupported-arch",
        f"{toolkit} cannot compile for compute capability {archs}"
        + (f" (TORCH_CUDA_ARCH_LIST={lists[-1]})" if lists else ""),
        "Remove that architecture from [gpu] targets (or TORCH_CUDA_ARCH_LIST), or build against a torch whose "
        "CUDA still supports it: CUDA 12.x compiles 5.0-12.x, CUDA 13.x starts at Turing (7.5); Kepler (3.x) "
        "needs CUDA 11. A TORCH_CUDA_ARCH_LIST inherited from the base image (NGC images set one) causes this "
        "too: torchkiln sets its own in the builder stages.",
        shown, numbers,
    )


_MISMATCH = re.compile(
    r"The detected CUDA version \((?P<have>[^)]+)\) mismatches the version that was used to compile\s*"
    r"(?:PyTorch \((?P<want>[^)]+)\))?"
    r"|The detected CUDA version \((?P<minor_have>[^)]+)\) has a minor version mismatch with the version that was "
    r"used to compile PyTorch \((?P<minor_want>[^)]+)\)"
    r"|Cuda extensions are being compiled with a version of Cuda that does not match"
    r"|Installed CUDA version (?P<ds_have>\S+) does not match the version torch was compiled with (?P<ds_want>\S+)"
    r"|kiln: CUDA toolkit mismatch: nvcc is CUDA (?P<k_have>\S+), torch was built with CUDA (?P<k_want>\S+),"
)


def _mismatch(lines: list[str]) -> Diagnosis | None:
    hits = _find(lines, _MISMATCH)
    if not hits:
        return None
    have = want = None
    for h in hits:
        g = h.match.groupdict()
        have = g.get("have") or g.get("minor_have") or g.get("ds_have") or g.get("k_have") or have
        want = g.get("want") or g.get("minor_want") or g.get("ds_want") or g.get("k_want") or want
    if want is None:
        m = next((re.search(r"compiled with Cuda (\d+\.\d+)", x) for x in lines if "compiled with Cuda" in x), None)
        want = m.group(1) if m else None
    if have is None:
        releases = [m.group(1) for line in lines if (m := _NVCC_RELEASE.search(line))]
        have = releases[-1] if releases else None
    what = f"nvcc is CUDA {have}, torch was built with CUDA {want}" if have and want else (
        "nvcc's CUDA version differs from the one torch was built with")
    target = want or "torch's"
    shown, numbers = _with_context(lines, hits)
    return Diagnosis(
        "cuda-mismatch",
        f"CUDA toolkit mismatch: {what}",
        f"Compile with the nvcc of torch's own CUDA ({target}): torchkiln's toolchain stage installs it from "
        f"NVIDIA's wheels (cuda-toolkit[nvcc] / nvidia-cuda-nvcc == {target}.*) on a slim base; on a CUDA devel "
        "base use the tag of that CUDA version, or choose the torch variant of the base's CUDA ([torch] cuda).",
        shown, numbers,
    )


_NO_NVCC = re.compile(
    r"CUDA_HOME environment variable is not set|nvcc was not found|OSError: CUDA_HOME|CUDA was not found on the system"
    r"|No CUDA runtime is found, using CUDA_HOME=''|(?:/usr/local/cuda|CUDA_HOME)/bin/nvcc: (?:not found|No such file)"
)


def _no_nvcc(lines: list[str]) -> Diagnosis | None:
    hits = _find(lines, _NO_NVCC)
    if not hits:
        return None
    shown, numbers = _with_context(lines, hits)
    return Diagnosis(
        "no-nvcc",
        "a CUDA extension was built where no CUDA compiler (nvcc, CUDA_HOME) is installed",
        "Build it in a stage that has nvcc of torch's CUDA: list it under [[extensions]] (torchkiln's toolchain "
        "stage provides one), or set CUDA_HOME to a toolkit of torch's CUDA version.",
        shown, numbers,
    )


_PY_H = re.compile(r"Python\.h: No such file or directory")


def _python_headers(lines: list[str]) -> Diagnosis | None:
    hits = _find(lines, _PY_H)
    if not hits:
        return None
    shown, numbers = _with_context(lines, hits)
    return Diagnosis(
        "python-headers",
        "Python's development headers (Python.h) are missing from the build stage",
        "Install them (Debian/Ubuntu: apt-get install python3.X-dev for the image's Python), or build on an image "
        "whose Python ships them (the official python images do); torchkiln's builder stages install them when "
        "missing.",
        shown, numbers,
    )


_RECOGNISERS: tuple[Callable[[list[str]], Diagnosis | None], ...] = (
    _oom, _isolation, _build_requirement, _arch, _mismatch, _no_nvcc, _python_headers,
)


def diagnose(log_text: str) -> list[Diagnosis]:
    """Everything recognised in a failed build's output, in the order it shows up in the log."""
    lines = [_clean(line) for line in log_text.splitlines()]
    found = [d for r in _RECOGNISERS if (d := r(lines)) is not None]
    return sorted(found, key=lambda d: d.line_numbers[0] if d.line_numbers else 0)


def format_diagnoses(diagnoses: Iterable[Diagnosis]) -> str:
    """The diagnoses as text, separated by blank lines (empty when there are none)."""
    return "\n\n".join(d.format() for d in diagnoses)
