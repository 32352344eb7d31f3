"""[gpu] forward_compat: NVIDIA's cuda-compat for data-center GPUs on older driver branches (never GeForce/RTX),
rendered so it is used only when the host driver is older; and offered as a fix only where it resolves."""

import os
import subprocess
from pathlib import Path

import pytest

from torchkiln.contract import image_labels
from torchkiln.errors import ExitCode, ResolveError
from torchkiln.knowledge import load_knowledge
from torchkiln.render.dockerfile import context_files, render_dockerfile
from torchkiln.resolve import resolve
from torchkiln.resolve.compat import eligible, entrypoint_script
from torchkiln.spec import parse_spec


def plan(**tables):
    return resolve(parse_spec({"image": {"name": "acme/t"}, **tables}), load_knowledge())


def fails(**tables) -> ResolveError:
    with pytest.raises(ResolveError) as e:
        plan(**tables)
    assert e.value.exit_code == ExitCode.RESOLVE
    return e.value


@pytest.mark.parametrize("gpus", [["L4"], ["A100"], ["L4", "A100"], ["H100"], ["T4"]])
def test_offered_for_data_center_gpus_on_r535(gpus: list[str]) -> None:
    e = fails(torch={"version": "2.14.1", "cuda": "13.0"}, gpu={"targets": gpus, "min_driver": "535.104"})
    assert {"gpu": {"forward_compat": True}} in e.fixes
    assert "forward_compat = true" in e.hint


@pytest.mark.parametrize("gpus", [["RTX 4090"], ["A100", "RTX 3090"], ["RTX A6000"]])
def test_never_offered_for_geforce_or_workstation_cards(gpus: list[str]) -> None:
    e = fails(torch={"version": "2.14.1", "cuda": "13.0"}, gpu={"targets": gpus, "min_driver": "535.104"})
    assert all("forward_compat" not in f.get("gpu", {}) for f in e.fixes)
    e = fails(torch={"version": "2.14.1", "cuda": "13.0"},
              gpu={"targets": gpus, "min_driver": "535.104", "forward_compat": True})
    assert "data-center GPUs" in e.message


def test_cuda13_compat_needs_r535_so_r470_gets_cuda12_compat() -> None:
    e = fails(torch={"cuda": "13.0"}, gpu={"targets": ["A100"], "min_driver": "470.82"})
    assert any(f.get("gpu", {}).get("forward_compat") and f["torch"]["cuda"].startswith("12.") for f in e.fixes)
    e = fails(torch={"cuda": "13.0"}, gpu={"targets": ["A100"], "min_driver": "470.82", "forward_compat": True})
    assert "535.54.03" in e.message


def test_compat_cannot_teach_an_old_kernel_driver_a_new_gpu() -> None:
    """L4 (Ada) needs R520+: forward compatibility is user-mode only."""
    e = fails(torch={"cuda": "12.6"}, gpu={"targets": ["L4"], "min_driver": "470.82", "forward_compat": True})
    assert "L4 needs driver 520.61.05" in e.message


def test_plan_and_render() -> None:
    p = plan(torch={"version": "2.14.1"}, gpu={"targets": ["L4", "A100"], "min_driver": "535.104",
                                               "forward_compat": True})
    assert p.torch.variant == "cu130"  # the default variant, now runnable on R535
    assert p.cuda_compat == "nvidia/cuda:13.0.0-base-ubuntu24.04"
    assert p.min_driver == "535.54.03" and p.nvidia_require_cuda == "cuda>=12.0"
    assert any(d.topic == "driver floor" and "never shadowed" in d.why for d in p.decisions)
    text = render_dockerfile(p)
    runtime = text[text.index("AS runtime"):]
    copy = "COPY --from=nvidia/cuda:13.0.0-base-ubuntu24.04 /usr/local/cuda-13.0/compat /usr/local/cuda/compat"
    assert copy in runtime
    assert 'ENTRYPOINT ["/usr/local/bin/kiln-cuda-compat"]' in runtime
    assert "LD_LIBRARY_PATH" not in text and "ldconfig" not in text  # never switched on for every host
    assert context_files(p)[".kiln/cuda-compat.sh"] == entrypoint_script("13.0")
    assert image_labels(p)["io.torchkiln.cuda-compat"] == p.cuda_compat
    plain = plan(torch={"version": "2.14.1"}, gpu={"targets": ["L4"]})
    assert plain.cuda_compat == "" and "ENTRYPOINT" not in render_dockerfile(plain)


def test_rendered_dockerfile_passes_kiln_lint(tmp_path: Path) -> None:
    """KL024 (compat libcuda on every process's library path) does not fire: it is switched on per start."""
    from torchkiln.lint.check import lint_text

    p = plan(torch={"version": "2.14.1"}, gpu={"targets": ["H100"], "min_driver": "535.104", "forward_compat": True})
    findings = lint_text(render_dockerfile(p), "Dockerfile")
    assert not [f for f in findings if f.rule == "KL024" or f.severity == "error"]


def _run(tmp_path: Path, host_version_line: str | None, env: dict[str, str] | None = None) -> str:
    compat = tmp_path / "compat"
    compat.mkdir(exist_ok=True)
    (compat / "libcuda.so.580.65.06").write_text("")
    (compat / "libcuda.so.1").write_text("")
    script = tmp_path / "entry.sh"
    script.write_text(entrypoint_script("13.0"))
    version = tmp_path / "version"
    if host_version_line is not None:
        version.write_text(host_version_line + "\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n")
    full = {"PATH": os.environ["PATH"], "KILN_CUDA_COMPAT_DIR": str(compat), "KILN_DRIVER_VERSION_FILE": str(version),
            **(env or {})}
    out = subprocess.run(["sh", str(script), "sh", "-c", 'printf %s "$LD_LIBRARY_PATH"'], env=full,
                         capture_output=True, text=True, check=True)
    return out.stdout


def test_entrypoint_uses_compat_only_on_an_older_host_driver(tmp_path: Path) -> None:
    old = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  535.104.05  Release Build  (dvs-builder@U16)"
    new = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  590.44.01  Sat Nov 12 2025"
    same = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  Sat Nov 12 2025"
    assert _run(tmp_path, old) == str(tmp_path / "compat")
    assert _run(tmp_path, new) == ""  # a newer driver is never shadowed
    assert _run(tmp_path, same) == ""
    assert _run(tmp_path, None) == ""  # no GPU driver visible: nothing changes
    assert _run(tmp_path, old, {"KILN_CUDA_COMPAT": "0"}) == ""
    assert _run(tmp_path, new, {"KILN_CUDA_COMPAT": "1"}) == str(tmp_path / "compat")
    assert _run(tmp_path, old, {"LD_LIBRARY_PATH": "/x"}) == f"{tmp_path / 'compat'}:/x"


def test_eligibility_is_by_name() -> None:
    assert eligible("A100") and eligible("NVIDIA H100 PCIe") and eligible("Jetson Thor")
    assert not eligible("RTX 4090") and not eligible("GeForce RTX 5090") and not eligible("RTX PRO 6000")


def test_verify_runs_the_checks_through_the_compat_entrypoint() -> None:
    """verify replaces the image's entrypoint with python; for a forward_compat image it goes through the
    image's switch instead, so the checks see the driver the image's own processes see."""
    from torchkiln.verify.runner import VerifyOptions, verify_image

    class Stop(Exception):
        pass

    seen = []

    class Engine:
        name = "docker"

        def run_request(self, req, check=False, timeout=None):
            seen.append(req)
            raise Stop

    for options in (VerifyOptions(), VerifyOptions(through="/usr/local/bin/kiln-cuda-compat")):
        with pytest.raises(Stop):
            verify_image("acme/t:latest", Engine(), options)
    plain, compat = seen
    assert plain.entrypoint == "python3" and plain.argv[0] != "python3"
    assert compat.entrypoint == "/usr/local/bin/kiln-cuda-compat" and compat.argv[0] == "python3"
    assert compat.argv[1:] == plain.argv
