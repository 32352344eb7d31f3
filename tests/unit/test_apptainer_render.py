"""The Apptainer definition renderer: golden files, shell syntax, quoting executed in bash, refusals.

Regenerate the golden files after an intended change with KILN_UPDATE_GOLDENS=1 and review the diff.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from torchkiln.building.context import write_apptainer_context
from torchkiln.building.options import ApptainerOptions
from torchkiln.errors import ExitCode, InputError, SpecError
from torchkiln.knowledge import load_knowledge
from torchkiln.plan import BuildPlan
from torchkiln.render.apptainer import (
    BOOTSTRAPS,
    DEFFILE,
    apptainer_files,
    render_apptainer,
    scriptlets,
)
from torchkiln.resolve import resolve
from torchkiln.spec import load_spec, parse_spec

ROOT = Path(__file__).parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.toml"))
GOLDEN = ROOT / "tests" / "golden" / "apptainer"
#: the sections apptainer's parser accepts (pkg/build/types/parser/deffile.go validSections)
VALID_SECTIONS = {"help", "setup", "files", "labels", "environment", "pre", "post", "runscript", "test",
                  "startscript", "arguments"}
SHELL_SECTIONS = ("environment", "post", "runscript", "test")


def _plan(path: Path) -> BuildPlan:
    return resolve(load_spec(path), load_knowledge())


def _plan_of(**tables: object) -> BuildPlan:
    return resolve(parse_spec({"image": {"name": "acme/t"}, **tables}), load_knowledge())


def _with_app(plan: BuildPlan, **changes: object) -> BuildPlan:
    return dataclasses.replace(plan, app=dataclasses.replace(plan.app, **changes))


def test_a_vendor_torch_is_kept_installs_go_into_the_images_python() -> None:
    """examples/ngc.toml: no venv, no torch install; packages constrained by the image's file and a torch pin."""
    plan = _plan(ROOT / "examples" / "ngc.toml")
    text = render_apptainer(plan)
    post = scriptlets(text)["post"]
    assert "uv venv" not in post and "-r /kiln/requirements-torch.txt" not in post and "/opt/venv" not in text
    assert ("/kiln/bin/uv pip install --python /usr/bin/python3.12 --system --break-system-packages "
            "-c /etc/pip/constraint.txt -c /kiln/requirements-torch.txt -r /kiln/requirements.txt") in post
    assert post.index("xargs -0 sha256sum > /tmp/kiln-torch.sha256") < post.index("uv pip install")
    assert post.index("uv pip install") < post.index("sha256sum --quiet -c /tmp/kiln-torch.sha256")
    assert "PIP_CONSTRAINT" not in scriptlets(text)["environment"]  # the image's own ENV stays
    assert apptainer_files(plan)[".kiln/requirements-torch.txt"] == "torch==2.10.0a0+b4e4ee81d3\n"
    offline = render_apptainer(plan, ApptainerOptions(bootstrap="docker-archive", source="ngc-25.12.tar"))
    assert offline.startswith("Bootstrap: docker-archive\nFrom: ngc-25.12.tar\n")


def test_a_vendor_extension_uses_the_images_python_and_nvcc_and_purges_nothing() -> None:
    from torchkiln.image_facts import ImageFacts

    facts = ImageFacts(
        image="nvcr.io/nvidia/pytorch:25.12-py3", origin="image", torch_version="2.10.0a0+b4e4ee81d3",
        torch_cuda="13.1", torch_git="", python="3.12", python_exe="/usr/bin/python3.12",
        site="/usr/local/lib/python3.12/dist-packages", constraints_path="/etc/pip/constraint.txt",
        constraints_torch="", constraints_count=1, arch_entries=("sm_90",), arch_source="x", nvcc_cuda="13.1",
        cuda_home="/usr/local/cuda")
    spec = parse_spec({"image": {"name": "acme/t"}, "base": {"image": facts.image}, "torch": {"source": "image"},
                       "gpu": {"targets": ["H100"]}, "extensions": [{"name": "flash-attn", "version": "2.8.3"}]})
    post = scriptlets(render_apptainer(resolve(spec, load_knowledge(), facts)))["post"]
    assert "export KILN_PY=/usr/bin/python3.12" in post and "kiln_check_nvcc 13.1" in post
    assert ("--system --break-system-packages --no-build-isolation -c /etc/pip/constraint.txt "
            "-c /kiln/requirements-torch.txt flash-attn==2.8.3") in post
    assert "apt-get" not in post  # NGC has its compilers: none installed, none purged


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_definition_matches_golden(path: Path) -> None:
    text = render_apptainer(_plan(path))
    golden = GOLDEN / f"{path.stem}.def"
    if os.environ.get("KILN_UPDATE_GOLDENS") == "1":
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert golden.exists(), f"no golden file for {path.name}: run with KILN_UPDATE_GOLDENS=1"
    assert text == golden.read_text()


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_render_is_byte_identical_twice(path: Path) -> None:
    assert apptainer_files(_plan(path)) == apptainer_files(_plan(path))


#: a local CUDA extension on cu130 (compiler from NVIDIA's wheels: one stage)
LOCAL_EXT = {"torch": {"version": "2.14.1", "cuda": "13.0"}, "gpu": {"targets": ["A100", "H100"]},
             "extensions": [{"name": "my-op", "path": "ext/my_op", "env": {"MY_ARCHS": "80;90", "NOTE": "a b"}}]}
#: flash-attn on cu124 over NVIDIA's runtime image (compiled on its devel sibling: two stages)
DEVEL_EXT = {"python": {"version": "3.10"}, "torch": {"version": "2.5.1", "cuda": "12.4"},
             "gpu": {"targets": ["A100", "H100"]}, "extensions": [{"name": "flash-attn", "version": "2.7.4.post1"}],
             "base": {"image": "nvidia/cuda:12.4.1-runtime-ubuntu22.04", "python": "apt"}}


def _all_plans() -> list[BuildPlan]:
    return [_plan(p) for p in EXAMPLES] + [_plan_of(**LOCAL_EXT), _plan_of(**DEVEL_EXT)]


@pytest.mark.parametrize("index", range(len(EXAMPLES) + 2))
def test_every_scriptlet_passes_bash_and_sh_syntax_checks(index: int, tmp_path: Path) -> None:
    parts = scriptlets(render_apptainer(_all_plans()[index]))
    assert {k.rsplit("/", 1)[-1].split()[0] for k in parts} <= VALID_SECTIONS
    assert set(SHELL_SECTIONS) <= set(parts)
    shells = [s for s in ("bash", "dash") if shutil.which(s)]
    assert "bash" in shells
    for name in [k for k in parts if k.rsplit("/", 1)[-1] in SHELL_SECTIONS]:
        script = tmp_path / "script.sh"
        script.write_text(parts[name])
        for sh in shells:  # apptainer runs these with /bin/sh: dash on Debian, bash elsewhere
            r = subprocess.run([sh, "-n", str(script)], capture_output=True, text=True)
            assert r.returncode == 0, f"{sh} -n %{name}: {r.stderr}"


@pytest.mark.parametrize("index", range(len(EXAMPLES) + 2))
def test_header_and_sections_follow_apptainers_parser_rules(index: int) -> None:
    text = render_apptainer(_all_plans()[index])
    stages = re.split(r"(?m)^(?=Bootstrap:)", text)[1:]
    assert len(stages) in (1, 2)
    for stage in stages:
        head = stage.split("\n%", 1)[0]
        keys = [ln.split(":", 1)[0].lower().strip() for ln in head.splitlines() if ln.strip() and
                not ln.startswith("#")]
        assert keys == (["bootstrap", "from"] if len(stages) == 1 else ["bootstrap", "from", "stage"]), keys
    assert "{{" not in text  # build-argument syntax
    for name, body in scriptlets(text).items():
        for line in body.splitlines():
            assert not line.strip().startswith("%"), f"%{name} has a line apptainer reads as a section: {line}"
    labels = scriptlets(text)["labels"].splitlines()
    assert all(len(ln.split(" ", 1)) == 2 for ln in labels if ln.strip())


def test_post_stages_run_in_order_with_constraints_and_no_build_isolation() -> None:
    post = scriptlets(render_apptainer(_plan_of(**LOCAL_EXT)))["post"]
    order = [post.index(s) for s in (
        "apt-get install -y --no-install-recommends build-essential", "uv venv --python python3.11 /opt/venv",
        "-r /kiln/requirements-torch.txt", "pip freeze --python /opt/venv/bin/python > /etc/pip/constraint.txt",
        "kiln_cuda_home /kiln/cuda", "kiln_check_nvcc 13.0", "export TORCH_CUDA_ARCH_LIST='8.0;9.0+PTX'",
        "--no-build-isolation -c /etc/pip/constraint.txt /kiln/src/0", "apt-get purge", "rm -rf /kiln")]
    assert order == sorted(order)
    assert "export MY_ARCHS='80;90'" in post and "export NOTE='a b'" in post
    assert post.startswith("set -eu\n")
    pkgs = scriptlets(render_apptainer(_plan(ROOT / "examples" / "cu124-a100.toml")))["post"]
    assert "-c /etc/pip/constraint.txt -r /kiln/requirements.txt" in pkgs
    assert "libgl1" in pkgs and "build-essential" not in pkgs  # compilers only when extensions are built


def test_extensions_on_a_runtime_base_compile_in_a_builder_stage_on_its_devel_sibling() -> None:
    plan = _plan_of(**DEVEL_EXT)
    text = render_apptainer(plan)
    assert text.startswith("Bootstrap: docker\nFrom: nvidia/cuda:12.4.1-devel-ubuntu22.04\nStage: builder\n")
    assert "\nBootstrap: docker\nFrom: nvidia/cuda:12.4.1-runtime-ubuntu22.04\nStage: final\n" in text
    parts = scriptlets(text)
    assert "kiln_check_nvcc 12.4" in parts["builder/post"] and "flash-attn==2.7.4.post1" in parts["builder/post"]
    assert parts["files from builder"].split() == ["/opt/venv", "/opt/venv", "/etc/pip/constraint.txt",
                                                   "/etc/pip/constraint.txt"]
    final = parts["post"]
    assert "/kiln/bin/uv" not in final and "build-essential" not in final and "nvcc" not in final
    assert "python3.10" in final  # the runtime base gets the same Python the venv points at
    # offline: the builder image comes as a file too
    with pytest.raises(InputError, match="needs that image as a file") as e:
        render_apptainer(plan, ApptainerOptions("oci-archive", "runtime.tar"))
    assert "--builder-from" in (e.value.hint or "")
    off = render_apptainer(plan, ApptainerOptions("oci-archive", "runtime.tar", "devel.tar"))
    assert off.startswith("Bootstrap: oci-archive\nFrom: devel.tar\nStage: builder\n")


def _run_environment(plan: BuildPlan, tmp_path: Path, names: list[str]) -> dict[str, str]:
    """Source the rendered %environment in bash (as apptainer's 90-environment.sh) and read variables back."""
    env_sh = tmp_path / "90-environment.sh"
    env_sh.write_text("#!/bin/sh\n\n" + scriptlets(render_apptainer(plan))["environment"])
    reader = ("import json, os, sys; "
              "print(json.dumps({n: os.environ.get(n) for n in sys.argv[1:]}))")
    r = subprocess.run(
        ["bash", "-c", '. "$1"; shift; exec python3 -c "$0" "$@"', reader, str(env_sh), *names],
        capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""  # an unquoted ';' would have run the rest as a command and complained here
    return dict(json.loads(r.stdout))


def test_environment_round_trips_arch_lists_paths_with_spaces_and_shell_characters(tmp_path: Path) -> None:
    tricky = {
        "DATA_DIR": "/scratch/my project/data set 1",
        "QUOTES": "it's \"quoted\" and `not run` $(not run either) $HOME",
        "SEMI": "a;b && c || d | e > f",
        "GLOB": "*.py ? [ab]",
        "TRAIL": "ends with a backslash \\",
        "EMPTY": "",
    }
    plan = _plan_of(torch={"version": "2.5.1", "cuda": "12.4"}, gpu={"targets": ["A100", "H100"]},
                    app={"env": tricky, "workdir": "/opt/my app"})
    assert plan.arch_list == "8.0;9.0+PTX"
    got = _run_environment(plan, tmp_path, ["TORCH_CUDA_ARCH_LIST", "PATH", "VIRTUAL_ENV", *tricky])
    assert got["TORCH_CUDA_ARCH_LIST"] == "8.0;9.0+PTX"
    assert got["PATH"] == "/opt/venv/bin:/usr/bin:/bin"
    assert got["VIRTUAL_ENV"] == "/opt/venv"
    for k, v in tricky.items():
        assert got[k] == v, k


def test_post_exports_of_the_arch_list_survive_bash(tmp_path: Path) -> None:
    post = scriptlets(render_apptainer(_plan_of(**LOCAL_EXT)))["post"]
    exports = [ln for ln in post.splitlines() if ln.startswith("export TORCH_CUDA_ARCH_LIST=")]
    assert exports
    r = subprocess.run(["bash", "-c", exports[0] + '\nprintf "%s" "$TORCH_CUDA_ARCH_LIST"'],
                       capture_output=True, text=True)
    assert (r.returncode, r.stdout, r.stderr) == (0, "8.0;9.0+PTX", "")


def test_runscript_runs_the_command_in_a_workdir_with_spaces_or_the_given_arguments(tmp_path: Path) -> None:
    workdir = tmp_path / "my app dir"
    workdir.mkdir()
    plan = _with_app(_plan(ROOT / "examples" / "cpu.toml"), workdir=str(workdir),
                     command=("python3", "-c", "import os, sys; print(os.getcwd(), sys.argv[1:])", "a b"))
    script = tmp_path / "runscript"
    script.write_text(scriptlets(render_apptainer(plan))["runscript"])
    r = subprocess.run(["bash", str(script)], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"{workdir} ['a b']\n"
    r = subprocess.run(["bash", str(script), "echo", "x  y"], capture_output=True, text=True, cwd=tmp_path)
    assert r.stdout == "x  y\n"


def test_bootstraps_for_offline_sites() -> None:
    plan = _plan(ROOT / "examples" / "cpu.toml")
    assert render_apptainer(plan).startswith("Bootstrap: docker\nFrom: python:3.11-slim-bookworm\n")
    daemon = render_apptainer(plan, ApptainerOptions("docker-daemon"))
    assert daemon.startswith("Bootstrap: docker-daemon\nFrom: python:3.11-slim-bookworm\n")
    for b in ("docker-archive", "oci-archive", "localimage"):
        text = render_apptainer(plan, ApptainerOptions(b, "bases/base image.tar"))
        assert text.startswith(f"Bootstrap: {b}\nFrom: bases/base image.tar\n")
        with pytest.raises(InputError, match="needs the path") as e:
            render_apptainer(plan, ApptainerOptions(b))
        assert e.value.exit_code == ExitCode.INPUT and "--from" in (e.value.hint or "")
    assert set(BOOTSTRAPS) == {"docker", "docker-daemon", "docker-archive", "oci-archive", "localimage"}
    with pytest.raises(InputError, match="'#'"):
        render_apptainer(plan, ApptainerOptions("docker", "base#1"))


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"env": (("BAD-NAME", "x"),)}, "not a shell variable name"),
        ({"env": (("A", "two\nlines"),)}, "line break"),
        ({"env": (("A", "{{ arg }}"),)}, "build-argument"),
        ({"copy": ("my file.py",)}, "%files"),
        ({"copy": ("*.py",)}, "%files"),
        ({"command": ("python", "-c", "print(1)\nprint(2)")}, "line break"),
    ],
)
def test_values_that_would_change_the_definitions_meaning_are_refused(changes: dict[str, object], match: str) -> None:
    plan = _with_app(_plan(ROOT / "examples" / "cpu.toml"), **changes)
    with pytest.raises(SpecError, match=match) as e:
        render_apptainer(plan)
    assert e.value.exit_code == ExitCode.SPEC and e.value.hint


def test_sources_never_appear_in_the_definition(tmp_path: Path) -> None:
    spec = tmp_path / "kiln.toml"
    spec.write_text('[image]\nname = "a"\n[torch]\nversion = "2.13.0"\ncuda = "cpu"\n'
                    '[sources]\nindex_url = "https://user:secret@mirror.invalid/simple"\n')
    files = apptainer_files(_plan(spec))
    assert not any("user:secret" in text or "mirror.invalid" in text for text in files.values())


def test_write_context_holds_everything_files_names_and_is_atomic(tmp_path: Path) -> None:
    out = tmp_path / "hpc"
    plan = _plan(ROOT / "examples" / "cpu.toml")
    written = write_apptainer_context(plan, ROOT / "examples", out)
    names = {str(f.relative_to(out)) for f in written}
    assert {DEFFILE, ".kiln/bin/uv", ".kiln/sources.sh", ".kiln/requirements-torch.txt", ".kiln/requirements.txt",
            ".kiln/verify/checks.py", ".kiln/verify/fatbin.py", ".kiln/verify/spec.json",
            "apps/cpu_app.py"} <= names
    assert os.access(out / ".kiln/bin/uv", os.X_OK)
    text = (out / DEFFILE).read_text()
    assert text == render_apptainer(plan)
    for line in filter(None, scriptlets(text)["files"].splitlines()):
        src = line.split()[0]
        assert (out / src).exists(), src
    assert json.loads((out / ".kiln/verify/spec.json").read_text()) == {
        "cuda": None, "extensions": [], "min_driver": None, "python": plan.python, "forward_compat": False}
    # a failing write leaves the previous folder untouched and no temporary folder behind
    spec = tmp_path / "kiln.toml"
    spec.write_text('[image]\nname = "a"\n[torch]\ncuda = "cpu"\n[app]\ncopy = ["missing.py"]\n')
    with pytest.raises(SpecError, match="missing.py"):
        write_apptainer_context(_plan(spec), tmp_path, out)
    assert (out / DEFFILE).read_text() == text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hpc", "kiln.toml"]


def test_cli_render_format_apptainer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from torchkiln.cli import main

    spec = ROOT / "examples" / "cu130-hopper.toml"
    assert main(["render", str(spec), "--format", "apptainer", "--stdout"]) == 0
    assert capsys.readouterr().out == render_apptainer(_plan(spec))
    out = tmp_path / "def"
    assert main(["render", str(spec), "--format", "apptainer", "--bootstrap", "docker-daemon",
                 "-o", str(out), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["deffile"] == str(out / DEFFILE) and data["sif"] == "llm-serve_cu130.sif"
    assert (out / DEFFILE).read_text().startswith("Bootstrap: docker-daemon\n")
    assert main(["render", str(spec), "--format", "apptainer", "--bootstrap", "localimage"]) == int(ExitCode.INPUT)
