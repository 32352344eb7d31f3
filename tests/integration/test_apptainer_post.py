"""The rendered %post really installs torch: run it with chroot in a debootstrapped bookworm root.

``apptainer build`` runs %post as root in the image's root file system with a clean environment and
``/`` as working directory, after copying %files in. This test does the same with ``chroot``
(apptainer cannot be installed here): a debootstrapped bookworm (``--variant=minbase`` with
python3; made once and cached in pytest's cache folder), %files emulated by copying, the package
sources prepared exactly as ``kiln build`` prepares them (torchkiln.building.sources: the pip configuration's
wheel folder linked into ``.kiln/wheels``, its index folders served on 127.0.0.1, a uv.toml as the
``kiln-uv`` secret). Then torch is imported in the result, and %environment + %runscript + %test
are run the way apptainer runs them.

Skips cleanly without root, debootstrap, a reachable Debian mirror, or a package mirror in the pip
configuration (``pip config list``: a find-links folder holding the CPU torch 2.13.0 wheel).
The finished root is kept for the session (tests/integration/test_sif.py turns it into a .sif).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from torchkiln.building import sources as src
from torchkiln.building.bootstrap import host_apt_sources, mirror_for_suite
from torchkiln.building.context import write_apptainer_context
from torchkiln.cache import kiln_cache_dir
from torchkiln.knowledge import load_knowledge
from torchkiln.plan import BuildPlan
from torchkiln.render.apptainer import scriptlets
from torchkiln.resolve import resolve
from torchkiln.runner import Runner
from torchkiln.spec import load_spec

ROOT = Path(__file__).parents[2]
EXAMPLES = ROOT / "examples"
SPEC = EXAMPLES / "cpu.toml"
#: the environment %post gets from apptainer (--cleanenv): no host variables
CLEAN_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root",
             "LANG": "C.UTF-8"}

pytestmark = pytest.mark.slow


def plan() -> BuildPlan:
    return resolve(load_spec(SPEC), load_knowledge())


def _need_root_tools() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (debootstrap and chroot)")
    for tool in ("debootstrap", "chroot", "mount", "umount"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")


@pytest.fixture(scope="session")
def bookworm_rootfs(request: pytest.FixtureRequest) -> Path:
    """A pristine ``debootstrap --variant=minbase --include=python3 bookworm`` root, made once and cached."""
    _need_root_tools()
    cache = Path(request.config.cache.mkdir("kiln-apptainer")) / "bookworm-minbase-python3"
    if (cache / ".kiln-ready").exists():
        return cache
    part = cache.with_name(cache.name + ".part")
    shutil.rmtree(part, ignore_errors=True)
    debs = kiln_cache_dir() / "debootstrap" / f"bookworm-{os.uname().machine}"
    debs.mkdir(parents=True, exist_ok=True)
    mirror = os.environ.get("KILN_DEBIAN_MIRROR") or mirror_for_suite(host_apt_sources(), "bookworm")
    cmd = ["debootstrap", f"--cache-dir={debs}", "--variant=minbase", "--include=python3", "bookworm", str(part)]
    r = subprocess.run(cmd + ([mirror] if mirror else []), capture_output=True, text=True)
    if r.returncode != 0:
        shutil.rmtree(part, ignore_errors=True)
        pytest.skip(f"debootstrap failed (no reachable Debian mirror? set KILN_DEBIAN_MIRROR): {r.stdout[-500:]}")
    (part / ".kiln-ready").touch()
    shutil.rmtree(cache, ignore_errors=True)
    part.rename(cache)
    return cache


@contextmanager
def chroot_mounts(root: Path) -> Iterator[None]:
    """/proc and /dev inside the root for the duration (what a container runtime provides)."""
    mounted: list[Path] = []
    try:
        for target, args in ((root / "proc", ["-t", "proc", "proc"]), (root / "dev", ["--bind", "/dev"])):
            target.mkdir(exist_ok=True)
            subprocess.run(["mount", *args, str(target)], check=True)
            mounted.append(target)
        yield
    finally:
        for target in reversed(mounted):
            subprocess.run(["umount", "-l", str(target)], check=False)


def chroot(root: Path, *argv: str, env: dict[str, str] | None = None,
           timeout: float = 1200) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("chroot")
    assert exe is not None
    with chroot_mounts(root):
        return subprocess.run([exe, str(root), *argv], capture_output=True, text=True,
                              env=env or CLEAN_ENV, timeout=timeout)


def _pip_sources() -> src.Sources:
    try:
        sources = src.resolve_sources(env={}, plan_sources=None, from_pip=True, runner=Runner())
    except Exception as e:  # noqa: BLE001 - no pip configuration is a reason to skip, whatever its form
        pytest.skip(f"no package mirror in the pip configuration: {e}")
    local = [f for f in (src.local_folder(x) for x in sources.find_links) if f is not None and f.is_dir()]
    if not any(list(f.glob("torch-2.13.0*cp311*.whl")) for f in local):
        pytest.skip("the pip configuration names no wheel folder with the CPU torch 2.13.0 wheel (pip config list)")
    return sources


def emulate_files(ctx: Path, root: Path, p: BuildPlan) -> None:
    """What apptainer's %files does (``cp -fLr SRC ROOTFS/DST``, sources relative to the build folder)."""
    for line in filter(None, scriptlets((ctx / "kiln.def").read_text())["files"].splitlines()):
        src_rel, dst = line.split()
        dest = root / dst.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cp", "-fLr", str(ctx / src_rel), str(dest)], check=True)


@pytest.fixture(scope="session")
def post_rootfs(bookworm_rootfs: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """The bookworm root after the rendered %post ran in it: (root, render folder, %post output)."""
    sources = _pip_sources()
    # one fixed folder per session: test_sif.py imports this fixture, and must not run %post again
    base = tmp_path_factory.getbasetemp() / "apptainer-post"
    root, ctx = base / "rootfs", base / "ctx"
    if (base / "post.log").exists():
        return root, ctx, (base / "post.log").read_text()
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir()
    subprocess.run(["cp", "-a", str(bookworm_rootfs), str(root)], check=True)
    (root / ".kiln-ready").unlink()
    p = plan()
    write_apptainer_context(p, EXAMPLES, ctx)
    post = scriptlets((ctx / "kiln.def").read_text())["post"]
    with src.prepare(sources, ctx, check_network=False) as prepared:
        for sid, path in prepared.secrets.items():
            shutil.copyfile(path, ctx / ".kiln" / "secrets" / sid)
        emulate_files(ctx, root, p)
        (root / ".post.script").write_text(post)
        shutil.copyfile("/etc/resolv.conf", root / "etc" / "resolv.conf")
        r = chroot(root, "/bin/sh", "/.post.script")
    (root / ".post.script").unlink()
    out = r.stdout + r.stderr
    assert r.returncode == 0, f"%post failed:\n{out[-4000:]}"
    (base / "post.log").write_text(out)
    return root, ctx, out


def _run_like_apptainer(root: Path, ctx: Path, section: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Source %environment (90-environment.sh), then run a section's script, as apptainer's actions do."""
    parts = scriptlets((ctx / "kiln.def").read_text())
    (root / "tmp" / "90-environment.sh").write_text("#!/bin/sh\n\n" + parts["environment"])
    (root / "tmp" / section).write_text("#!/bin/sh\n\n" + parts[section])
    return chroot(root, "/bin/sh", "-c", f'. /tmp/90-environment.sh; exec /bin/sh /tmp/{section} "$@"', section,
                  *args, env={"PATH": "/usr/bin:/bin", "HOME": "/root"})


def test_post_installs_torch_first_then_packages_and_cleans_up(post_rootfs: tuple[Path, Path, str]) -> None:
    root, _ctx, _out = post_rootfs
    r = chroot(root, "/opt/venv/bin/python", "-c",
               "import torch, six; print(torch.__version__, six.__version__, torch.ones(2).sum().item())")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["2.13.0+cpu", "1.16.0", "2.0"]
    constraints = (root / "etc/pip/constraint.txt").read_text().splitlines()
    assert "torch==2.13.0+cpu" in constraints
    assert not any(line.startswith("six") for line in constraints)  # the torch set only
    assert not (root / "kiln").exists()  # staging folder, uv, sources and wheels are gone
    assert not (root / "tmp/kiln-uv-cache").exists()
    assert (root / "workspace/apps/cpu_app.py").is_file()
    assert sorted(p.name for p in (root / "opt/kiln/verify").iterdir()) == ["arch.py", "checks.py", "fatbin.py", "firstrun.py", "spec.json"]


def test_runscript_and_test_run_as_apptainer_would(post_rootfs: tuple[Path, Path, str]) -> None:
    root, ctx, _ = post_rootfs
    r = _run_like_apptainer(root, ctx, "runscript")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "torch 2.13.0+cpu (CUDA None) - sum of 0..11 = 66"
    r = _run_like_apptainer(root, ctx, "runscript", "python", "-c", "import os; print(os.environ['VIRTUAL_ENV'])")
    assert (r.returncode, r.stdout.strip()) == (0, "/opt/venv")
    # %test: torchkiln's checks; torch imports, and without a GPU the script says so and passes
    r = _run_like_apptainer(root, ctx, "test")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "torch_import" in r.stdout and "PASS" in r.stdout
    assert "no CUDA device visible" in r.stderr
