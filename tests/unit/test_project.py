"""[project]: reading pyproject.toml, uv.lock and requirements files (tests/fixtures/projects), the project's
torch resolved against the targets, [tool.kiln] as the spec's home, and the rendered project stages."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from torchkiln.errors import ExitCode, ResolveError, SpecError
from torchkiln.knowledge import load_knowledge
from torchkiln.load import load_plan, read_project_of
from torchkiln.project import read_project
from torchkiln.project.requirements import read_requirements
from torchkiln.render import context_files, render_dockerfile
from torchkiln.resolve import resolve
from torchkiln.spec import load_spec, parse_spec, spec_home, spec_notes

ROOT = Path(__file__).parents[2]
PROJECTS = ROOT / "tests" / "fixtures" / "projects"
GOLDEN = ROOT / "tests" / "golden" / "project"
BUILDABLE = ("uvlock-src", "requirements-train", "extras-groups", "cpp-ext", "monorepo", "pep723-script")


# -- reading ---------------------------------------------------------------------------------------


def test_uv_lock_is_exported_whole_with_hashes_and_torch_closure_split_off() -> None:
    facts = read_project(PROJECTS / "uvlock-src")
    assert facts.source == "uv.lock" and facts.files == ("pyproject.toml", "uv.lock")
    assert facts.name == "tinyproj" and facts.package and not facts.compiled
    assert facts.build_requires == ("hatchling",)
    assert [r.name for r in facts.requirements] == ["numpy", "six"]  # no tqdm (extra), no pytest (group)
    closure = {r.name for r in facts.torch_requirements}
    assert {"torch", "filelock", "sympy", "jinja2", "markupsafe"} <= closure and "numpy" not in closure
    assert facts.hashed and all("--hash=sha256:" in r.line for r in facts.requirements)
    assert facts.torch is not None and (facts.torch.version, facts.torch.local, facts.torch.cuda) == (
        "2.13.0", "cpu", "cpu")
    assert facts.torch.index == "https://download.pytorch.org/whl/cpu"
    assert facts.torch.where.startswith("uv.lock: torch 2.13.0+cpu")


def test_uv_lock_extras_and_groups_are_exported() -> None:
    facts = read_project(PROJECTS / "uvlock-src", extras=("fancy",), groups=("dev",))
    names = {r.name for r in facts.requirements}
    assert {"tqdm", "pytest", "numpy", "six"} <= names


def test_uv_lock_unknown_extra_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match="uv could not export"):
        read_project(PROJECTS / "uvlock-src", extras=("nope",))


def test_requirements_with_includes_constraints_and_a_pytorch_index() -> None:
    facts = read_project(PROJECTS / "requirements-train")
    assert facts.source == "requirements" and not facts.package
    assert [r.name for r in facts.requirements] == ["numpy", "six"]
    assert facts.requirements[0].where == "requirements-base.txt:1"
    assert facts.constraints == ("numpy<3",)
    assert facts.torch is not None and facts.torch.cuda == "cpu" and facts.torch.version == "2.13.0"
    assert "requirements.txt:3" in facts.torch.where
    assert "train.py" in facts.entries and "kiln.toml" not in facts.entries


def test_pyproject_extras_groups_self_reference_and_include_group() -> None:
    facts = read_project(PROJECTS / "extras-groups", extras=("fast",), groups=("train",))
    assert facts.source == "pyproject"
    assert [r.name for r in facts.requirements] == ["six", "numpy", "pyyaml", "iniconfig"]
    assert facts.torch is None and facts.torch_wanted[0][0] == "torch>=2.10"
    every = read_project(PROJECTS / "extras-groups", extras=("all",))
    assert {r.name for r in every.requirements} == {"six", "numpy", "tqdm"}
    with pytest.raises(SpecError, match="extra 'fastest'.*it has: all, fast, viz"):
        read_project(PROJECTS / "extras-groups", extras=("fastest",))
    with pytest.raises(SpecError, match="dependency group 'docs'"):
        read_project(PROJECTS / "extras-groups", groups=("docs",))


def test_in_tree_cpp_extension_is_compiled_against_torch() -> None:
    facts = read_project(PROJECTS / "cpp-ext")
    assert facts.package and facts.compiled and "torch" in facts.build_requires
    assert facts.requirements == ()  # torch is the only dependency: the torch layer's


def test_monorepo_subfolder_is_the_project() -> None:
    spec = load_spec(PROJECTS / "monorepo")
    facts = read_project_of(spec, PROJECTS / "monorepo")
    assert facts is not None and facts.root == "services/trainer" and facts.name == "trainer"
    assert facts.files == ("services/trainer/pyproject.toml",)
    assert facts.entries == ("pyproject.toml", "trainer")
    # its workspace dependency is a local package, built beside it; its own dependencies are read
    assert facts.locals == (("libs/common", ("pyproject.toml", "src")),)
    assert [r.name for r in facts.requirements] == ["six"]


def test_pep723_script_metadata_is_the_project() -> None:
    spec = load_spec(PROJECTS / "pep723-script")
    facts = read_project_of(spec, PROJECTS / "pep723-script")
    assert facts is not None and facts.source == "script" and facts.files == ("train.py",)
    assert [r.name for r in facts.requirements] == ["six"] and facts.torch_wanted[0][0] == "torch>=2.10"
    assert facts.requires_python == ">=3.10" and not facts.package
    plan = load_plan(PROJECTS / "pep723-script")[1]
    assert plan.app.command == ("python", "train.py") and plan.torch.variant == "cpu"


def test_requirements_parser(tmp_path: Path) -> None:
    (tmp_path / "r.txt").write_text(
        "six==1.17.0 \\\n    --hash=sha256:4721f391ed90541fddacab5acf947aa0d3dc7d27b2e1e8eda2be8970586c3274\n"
        "numpy>=2 ; python_version >= '3.11'  # comment\n-e .\n--prefer-binary\n")
    read = read_requirements(tmp_path / "r.txt", tmp_path)
    assert [r.hashed for r in read.requirements] == [True, False]
    assert read.requirements[1].line == "numpy>=2 ; python_version >= '3.11'"
    assert read.self_install and read.notes
    (tmp_path / "bad.txt").write_text("--index-url https://example.org/simple\nsix\n")
    with pytest.raises(SpecError, match="bad.txt:1: --index-url.*") as e:
        read_requirements(tmp_path / "bad.txt", tmp_path)
    assert "[sources]" in e.value.hint
    (tmp_path / "local.txt").write_text("./vendor/lib\n")
    with pytest.raises(SpecError, match="not a package folder"):
        read_requirements(tmp_path / "local.txt", tmp_path)
    (tmp_path / "vendor" / "lib").mkdir(parents=True)
    (tmp_path / "vendor" / "lib" / "setup.py").write_text("")
    assert read_requirements(tmp_path / "local.txt", tmp_path).locals[0][0] == tmp_path / "vendor" / "lib"
    (tmp_path / "loop.txt").write_text("-r loop.txt\n")
    with pytest.raises(SpecError, match="includes itself"):
        read_requirements(tmp_path / "loop.txt", tmp_path)
    (tmp_path / "hash.txt").write_text("six==1 --hash=sha256:xyz\n")
    with pytest.raises(SpecError, match="not a hash"):
        read_requirements(tmp_path / "hash.txt", tmp_path)


# -- the spec's home ---------------------------------------------------------------------------------


def test_tool_kiln_is_a_home_of_the_spec_and_implies_the_project() -> None:
    assert spec_home(PROJECTS / "uvlock-src") == (PROJECTS / "uvlock-src" / "pyproject.toml", "tool.kiln")
    spec = load_spec(PROJECTS / "uvlock-src")
    assert spec.image.name == "kiln-fixtures/tinyproj" and spec.project is not None
    assert spec.app.command == ["tinyproj"]
    assert load_spec(PROJECTS / "uvlock-src" / "pyproject.toml") == spec


def test_tool_kiln_errors_name_the_table(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n[tool.kiln.torch]\nverison = "2.5.1"\n')
    with pytest.raises(SpecError, match=r"\[tool.kiln\].*'verison'"):
        load_spec(tmp_path)


def test_kiln_toml_wins_over_tool_kiln_and_says_so(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n[tool.kiln.image]\nname = "from-pyproject"\n')
    (tmp_path / "kiln.toml").write_text('[image]\nname = "from-kiln-toml"\n')
    assert load_spec(tmp_path).image.name == "from-kiln-toml"
    assert "kiln.toml wins" in spec_notes(tmp_path)[0]


def test_a_project_folder_without_a_spec_is_built_as_it_is(tmp_path: Path) -> None:
    (tmp_path / "requirements.txt").write_text("six\n")
    (tmp_path / "train.py").write_text("print('hi')\n")
    assert spec_home(tmp_path)[1] == "implicit"
    spec = load_spec(tmp_path)
    assert spec.project is not None and spec.image.name == tmp_path.name.lower().replace("_", "-")
    assert "no kiln.toml" in spec_notes(tmp_path)[0]


def test_image_name_defaults_to_the_project_name(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "My_Model"\n')
    (tmp_path / "kiln.toml").write_text("[project]\n")
    assert load_spec(tmp_path).image.name == "my-model"


@pytest.mark.parametrize("item", ["./mylib", "../lib", "/abs/lib", "file:./lib", "dist/x-1.0-py3-none-any.whl"])
def test_a_local_path_in_pip_points_to_project(item: str) -> None:
    with pytest.raises(SpecError, match=r"local path.*\[project\]") as e:
        parse_spec({"image": {"name": "a"}, "packages": {"pip": [item]}})
    assert e.value.exit_code == ExitCode.SPEC


def test_a_url_requirement_is_not_a_local_path() -> None:
    parse_spec({"image": {"name": "a"}, "packages": {"pip": ["x @ https://example.org/x-1.0-py3-none-any.whl"]}})


@pytest.mark.parametrize("bad", [{"path": "../x"}, {"path": "/x"}, {"extras": ["a b"]}, {"tool": 1}])
def test_project_table_is_strict(bad: dict) -> None:
    with pytest.raises(SpecError, match=r"\[project\]"):
        parse_spec({"image": {"name": "a"}, "project": bad})


# -- torch from the project ----------------------------------------------------------------------------


def test_lock_torch_without_kernels_for_a_target_is_refused_naming_the_lock_entry() -> None:
    with pytest.raises(ResolveError) as e:
        load_plan(PROJECTS / "uvlock-cu126")
    err = e.value
    assert err.exit_code == ExitCode.RESOLVE
    assert err.message.startswith("uv.lock: torch 2.7.1+cu126 from https://download.pytorch.org/whl/cu126")
    assert "no kernel image for B200" in err.message
    assert "lock the project with torch 2.7.1+cu128" in err.hint  # a torch fix is said as a re-lock
    # the spec fixes resolve with the lock as it is
    assert err.fixes == ({"gpu": {"targets": ["H100"]}},)
    spec = load_spec(PROJECTS / "uvlock-cu126")
    facts = read_project_of(spec, PROJECTS / "uvlock-cu126")
    fixed = spec.model_copy(update={"gpu": spec.gpu.model_copy(update={"targets": ["H100"]})})
    assert resolve(fixed, load_knowledge(), project=facts).torch.requirement == "torch==2.7.1+cu126"
    # and the re-lock the hint offers resolves too
    assert facts is not None and facts.torch is not None
    relocked = dataclasses.replace(facts, torch=dataclasses.replace(facts.torch, local="cu128", index=""))
    plan = resolve(spec, load_knowledge(), project=relocked)
    assert plan.torch.requirement == "torch==2.7.1+cu128" and all(t.covered for t in plan.targets)


def test_project_torch_against_the_spec_torch() -> None:
    spec = load_spec(PROJECTS / "requirements-train")
    facts = read_project_of(spec, PROJECTS / "requirements-train")
    kb = load_knowledge()
    other = spec.model_copy(update={"torch": spec.torch.model_copy(update={"version": "2.12.0"})})
    with pytest.raises(ResolveError, match=r"requirements.txt:3.*pins torch 2.13.0, but \[torch\] version"):
        resolve(other, kb, project=facts)
    gpu = spec.model_copy(update={"torch": spec.torch.model_copy(update={"cuda": "12.8"})})
    with pytest.raises(ResolveError, match=r"cpu build of torch, but \[torch\] cuda"):
        resolve(gpu, kb, project=facts)


def test_unpinned_torch_requirement_constrains_and_a_conflict_names_the_dependency() -> None:
    spec = load_spec(PROJECTS / "extras-groups")
    facts = read_project_of(spec, PROJECTS / "extras-groups")
    kb = load_knowledge()
    assert resolve(spec, kb, project=facts).torch.version == "2.13.0"
    old = spec.model_copy(update={"torch": spec.torch.model_copy(update={"version": "2.9.1"})})
    with pytest.raises(ResolveError, match=r"pyproject.toml \[project\] dependencies requires torch>=2.10"):
        resolve(old, kb, project=facts)
    free = spec.model_copy(update={"torch": spec.torch.model_copy(update={"version": ""})})
    assert resolve(free, kb, project=facts).torch.version == kb.all_patches()[0]


def test_a_companion_built_for_another_torch_is_named(tmp_path: Path) -> None:
    (tmp_path / "requirements.txt").write_text("torchvision==0.20.1\n")
    (tmp_path / "kiln.toml").write_text('[image]\nname = "a"\n[torch]\nversion = "2.13.0"\ncuda = "cpu"\n[project]\n')
    with pytest.raises(ResolveError, match=r"requirements.txt:1: torchvision==0.20.1 is built for torch 2.5.1"):
        load_plan(tmp_path)


# -- rendering -----------------------------------------------------------------------------------------


def _plan(name: str):
    return load_plan(PROJECTS / name)[1]


@pytest.mark.parametrize("name", BUILDABLE)
def test_project_dockerfile_matches_golden(name: str) -> None:
    text = render_dockerfile(_plan(name))
    golden = GOLDEN / f"{name}.Dockerfile"
    if os.environ.get("KILN_UPDATE_GOLDENS") == "1":
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert golden.exists(), f"no golden file for {name}: run with KILN_UPDATE_GOLDENS=1"
    assert text == golden.read_text()


@pytest.mark.parametrize("name", ("uvlock-src", "requirements-train", "cpp-ext"))
def test_project_definition_matches_golden(name: str) -> None:
    from torchkiln.render.apptainer import render_apptainer

    text = render_apptainer(_plan(name))
    golden = GOLDEN / f"{name}.def"
    if os.environ.get("KILN_UPDATE_GOLDENS") == "1":
        golden.write_text(text)
    assert text == golden.read_text()
    assert "/kiln/project" in text


def test_lock_render_installs_each_package_hashed_without_resolving_and_the_wheel_last() -> None:
    plan = _plan("uvlock-src")
    files = context_files(plan)
    assert "--hash=sha256:" in files[".kiln/requirements-torch.txt"]
    assert files[".kiln/requirements-torch.txt"].startswith("filelock==")
    assert files[".kiln/project/000-numpy.txt"].startswith("numpy==2.4.6")
    text = render_dockerfile(plan)
    assert "--require-hashes -r /kiln/requirements-torch.txt" in text
    assert "--no-deps --require-hashes -c /etc/pip/constraint.txt -r /kiln/project/000-numpy.txt" in text
    runtime = text[text.index("FROM project-deps AS runtime"):]
    install = runtime.index("/kiln/project-wheel/*.whl")
    assert install < runtime.index("ENV PATH") and "--no-deps" in runtime[:install + 30]


def test_requirements_project_copies_its_files_and_builds_no_wheel() -> None:
    plan = _plan("requirements-train")
    text = render_dockerfile(plan)
    assert "project-build" not in text
    assert "COPY --chown=kiln:kiln .kiln/project-src/ /workspace/" in text
    assert "-c /kiln/project/constraints.txt" in text
    from torchkiln.render.project import context_copies

    copies = context_copies(plan)
    assert ".kiln/project-src/train.py" in copies and ".kiln/project-src/kiln.toml" not in copies


def test_compiled_project_builds_with_a_compiler_and_torch_installed() -> None:
    text = render_dockerfile(_plan("cpp-ext"))
    build = text[text.index("AS project-build"):text.index("AS project-layer")]
    assert "build-essential" in build and "'setuptools>=61' torch" in build and "--no-build-isolation" in build


def test_monorepo_context_carries_only_the_subfolder() -> None:
    from torchkiln.render.project import context_copies

    plan = _plan("monorepo")
    copies = context_copies(plan)
    assert copies == {".kiln/project-src/pyproject.toml": "services/trainer/pyproject.toml",
                      ".kiln/project-src/trainer": "services/trainer/trainer",
                      ".kiln/project-local/libs-common/pyproject.toml": "libs/common/pyproject.toml",
                      ".kiln/project-local/libs-common/src": "libs/common/src"}
    build = render_dockerfile(plan).split("AS project-build", 1)[1]
    assert build.index("/kiln/project-local/libs-common") < build.index("/kiln/project-src")


def test_project_plan_is_in_the_json() -> None:
    d = _plan("uvlock-src").to_dict()
    assert d["project"]["source"] == "uv.lock" and d["project"]["torch_from"].startswith("uv.lock: torch")


def test_project_python_version_and_requires_python(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\nversion = "1"\nrequires-python = ">=3.12"\n')
    (tmp_path / "kiln.toml").write_text('[image]\nname = "a"\n[torch]\ncuda = "cpu"\n[python]\nversion = "3.11"\n'
                                        '[project]\n')
    with pytest.raises(ResolveError, match=r"requires Python >=3.12.*image's Python is 3.11"):
        load_plan(tmp_path)
    (tmp_path / "kiln.toml").write_text('[image]\nname = "a"\n[torch]\ncuda = "cpu"\n[project]\n')
    assert load_plan(tmp_path)[1].python == "3.13"  # the newest the project allows
    (tmp_path / ".python-version").write_text("3.12\n")
    assert load_plan(tmp_path)[1].python == "3.12"


def test_unpinned_torch_takes_the_variant_of_the_named_pytorch_index(tmp_path: Path) -> None:
    (tmp_path / "requirements.txt").write_text("--extra-index-url https://download.pytorch.org/whl/cpu\ntorch>=2.10\n")
    (tmp_path / "kiln.toml").write_text('[image]\nname = "a"\n[project]\n')
    plan = load_plan(tmp_path)[1]
    assert plan.torch.variant == "cpu" and plan.torch.version == load_knowledge().all_patches()[0]


def test_the_project_torch_index_is_the_fallback_source_only() -> None:
    from torchkiln.building.sources import SourceLayer, resolve_sources

    plan = _plan("uvlock-src")
    assert plan.sources.project_torch_index == "https://download.pytorch.org/whl/cpu"
    alone = resolve_sources(flags=SourceLayer("flag"), env={}, plan_sources=plan.sources, spec_dir=PROJECTS)
    assert alone.torch_index == "https://download.pytorch.org/whl/cpu" and ("torch_index", "project") in alone.origins
    mirrored = resolve_sources(flags=SourceLayer("flag", find_links=("/srv/wheels",)), env={},
                               plan_sources=plan.sources, spec_dir=PROJECTS)
    assert mirrored.torch_index is None


def test_git_dependencies_get_git_and_editable_vcs_lines_are_read(tmp_path: Path) -> None:
    (tmp_path / "requirements.txt").write_text("-e git+https://example.org/org/lib.git@v1#egg=lib\nsix\n")
    (tmp_path / "kiln.toml").write_text('[image]\nname = "a"\n[torch]\ncuda = "cpu"\n[project]\n')
    plan = load_plan(tmp_path)[1]
    assert plan.project is not None and plan.project.requirements[0] == "lib @ git+https://example.org/org/lib.git@v1"
    deps = render_dockerfile(plan).split("AS project-deps", 1)[1]
    assert "apt-get install -y --no-install-recommends git ca-certificates" in deps.split("uv pip install")[0]


def test_ignored_files_stay_out_of_the_context(tmp_path: Path) -> None:
    from torchkiln.project import project_entries

    for name in ("train.py", "data", "wandb", ".venv", "ckpt.pt", "build"):
        (tmp_path / name).mkdir() if "." not in name or name == ".venv" else (tmp_path / name).write_text("x")
    (tmp_path / ".gitignore").write_text("/data/\nwandb\n*.pt\n!keep.pt\n")
    (tmp_path / "datasets").symlink_to("/tmp")  # a link out of the project: not carried
    assert project_entries(tmp_path) == (".gitignore", "train.py")


@pytest.mark.parametrize("name", BUILDABLE)
def test_project_dockerfiles_are_lint_clean(name: str, tmp_path: Path) -> None:
    import subprocess
    import sys

    df = tmp_path / "Dockerfile"
    df.write_text(render_dockerfile(_plan(name)))
    r = subprocess.run([sys.executable, "-m", "torchkiln", "lint", str(df)], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert r.returncode == 0 and "0 error(s), 0 warning(s)" in r.stdout + r.stderr, r.stdout + r.stderr


def test_a_lock_forked_by_platform_gives_the_linux_torch() -> None:
    facts = read_project(PROJECTS / "uvlock-forked")
    assert facts.torch is not None and (facts.torch.version, facts.torch.local) == ("2.7.1", "cu128")
    assert [r.line.split(" --hash")[0] for r in facts.torch_requirements] == [
        "torch==2.7.1+cu128 ; sys_platform == 'linux'"]
    plan = load_plan(PROJECTS / "uvlock-forked")[1]
    assert plan.torch.requirement == "torch==2.7.1+cu128" and plan.targets[0].covered
    assert "sha256:2222" in context_files(plan)[".kiln/requirements-torch.txt"]


def test_uv_git_and_url_sources_become_direct_references(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "p"\nversion = "1"\ndependencies = ["lib[x]>=1", "tool"]\n'
        '[tool.uv.sources]\nlib = { git = "https://example.org/org/lib", tag = "v1" }\n'
        'tool = { url = "https://example.org/tool-1.0-py3-none-any.whl" }\n')
    facts = read_project(tmp_path)
    assert [r.line for r in facts.requirements] == [
        "lib[x] @ git+https://example.org/org/lib@v1", "tool @ https://example.org/tool-1.0-py3-none-any.whl"]


def test_a_pyproject_without_tool_kiln_given_as_a_file_is_its_project(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "plain"\nversion = "1"\n')
    spec = load_spec(tmp_path / "pyproject.toml")
    assert spec.project is not None and spec.image.name == "plain"
