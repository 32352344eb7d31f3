"""[[steps]] (the escape hatch) and the app's expose / entrypoint / healthcheck / .dockerignore (#27)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from torchkiln.building.context import dockerfile_context
from torchkiln.building.dockerignore import DockerIgnore
from torchkiln.building.execute import step_secret_values, write_step_secrets
from torchkiln.building.invocation import BuildOptions, plan_build
from torchkiln.building.sources import Sources
from torchkiln.engines import DockerEngine
from torchkiln.engines.engine import EngineInfo
from torchkiln.errors import InputError, SpecError
from torchkiln.knowledge import load_knowledge
from torchkiln.lint.steps import check_steps, review_steps
from torchkiln.load import load_plan
from torchkiln.render import render_dockerfile
from torchkiln.render.apptainer import render_apptainer
from torchkiln.resolve import resolve
from torchkiln.runner import Runner
from torchkiln.spec import parse_spec, step_commands

ROOT = Path(__file__).parents[2]


def _plan(**tables):
    data = {"image": {"name": "acme/x"}, "torch": {"version": "2.13.0", "cuda": "cpu"}, **tables}
    return resolve(parse_spec(data), load_knowledge())


def _step(after: str, run, **kw):
    return {"after": after, "run": run, **kw}


# -- the spec ----------------------------------------------------------------------------------------


def test_run_text_is_split_like_a_dockerfile() -> None:
    assert step_commands("a \\\n  --flag\n\n# note\nb") == ["a --flag", "b"]
    assert step_commands(["a", " ", "b"]) == ["a", "b"]


@pytest.mark.parametrize("step, match", [
    ({"after": "later", "run": "x"}, "steps\\[1\\]"),
    ({"after": "app", "run": "  \n# only a comment"}, "names no command"),
    ({"after": "app", "run": "x", "cache": ["relative/dir"]}, "absolute folder"),
    ({"after": "app", "run": "x", "secrets": ["hf-token"]}, "not an environment variable name"),
    ({"after": "app", "run": "x", "bogus": 1}, "unknown key 'bogus' in \\[steps\\[1\\]\\]"),
    ({"after": "app", "run": "curl https://user:tok3n@example.org/x"}, "credential"),
])
def test_bad_steps_are_spec_errors(step, match) -> None:
    with pytest.raises(SpecError, match=match):
        parse_spec({"image": {"name": "a"}, "steps": [step]})


# -- rendering ---------------------------------------------------------------------------------------


def test_steps_render_in_order_at_their_points() -> None:
    plan = _plan(packages={"pip": ["six"]}, steps=[
        _step("app", "echo app"), _step("system", "echo system"), _step("packages", "echo packages"),
        _step("torch", "echo torch", env={"A": "b c"}, cache=["/root/.cache/x"], secrets=["HF_TOKEN"]),
    ])
    text = render_dockerfile(plan)
    stage_of = {}
    stage = ""
    for line in text.splitlines():
        if line.startswith("FROM "):
            stage = line.split()[-1]
        for word in ("system", "torch", "packages", "app"):
            if line.endswith(f"&& echo {word}") or line == f"RUN echo {word}":
                stage_of.setdefault(word, []).append(stage)
    assert stage_of == {"system": ["base"], "torch": ["torch"], "packages": ["packages"], "app": ["dev", "runtime"]}
    torch_step = text[text.index("# step 4 (after torch)"):].split("\n\n")[0]
    assert "--mount=type=cache,target=/root/.cache/x" in torch_step
    assert "--mount=type=secret,id=HF_TOKEN,target=/run/secrets/HF_TOKEN" in torch_step
    assert "export PATH=\"/opt/venv/bin:/kiln/bin:$PATH\" VIRTUAL_ENV=/opt/venv" in torch_step
    assert "A='b c'" in torch_step
    # the app step runs as root, and the runtime user is set after it
    runtime = text[text.index("AS runtime"):]
    assert runtime.index("echo app") < runtime.index("USER 1000:1000")


def test_packages_steps_without_packages_go_to_the_torch_stage() -> None:
    text = render_dockerfile(_plan(steps=[_step("packages", "echo hi")]))
    assert "AS packages" not in text
    assert text.index("echo hi") < text.index("AS dev")


def test_apptainer_definition_has_the_steps_and_refuses_secrets() -> None:
    plan = _plan(steps=[_step("system", "echo one"), _step("app", ["echo two", "echo three"], cache=["/c"])])
    text = render_apptainer(plan)
    post = text[text.index("%post"):text.index("%runscript")]
    assert post.index("bash -o pipefail -c 'echo one'") < post.index("uv venv")
    assert "bash -o pipefail -c 'cd /workspace && echo two && echo three'" in post
    assert "rm -rf /c" in post
    with pytest.raises(SpecError, match="build secrets .HF_TOKEN."):
        render_apptainer(_plan(steps=[_step("app", "x", secrets=["HF_TOKEN"])]))


def test_vendor_plan_renders_steps() -> None:
    _s, plan, _d = load_plan(ROOT / "examples" / "ngc.toml", facts=lambda image: None)
    plan = dataclasses.replace(plan, steps=_plan(steps=[_step("torch", "echo t"), _step("packages", "echo p"),
                                                        _step("app", "echo a")]).steps)
    text = render_dockerfile(plan)
    assert text.index("echo t") < text.index("AS packages") < text.index("echo p") < text.index("AS runtime")
    assert 'export PATH="/kiln/bin:$PATH"' in text and "VIRTUAL_ENV" not in text


def test_app_expose_entrypoint_healthcheck() -> None:
    plan = _plan(app={"entrypoint": ["python", "serve.py"], "command": ["--port", "8000"], "expose": [8000, 22, 8000],
                      "healthcheck": {"command": ["curl", "-f", "http://localhost:8000/"], "interval": "5s"}})
    runtime = render_dockerfile(plan).split("AS runtime", 1)[1]
    assert "EXPOSE 22 8000" in runtime
    assert ('HEALTHCHECK --interval=5s --timeout=30s --retries=3 CMD ["curl", "-f", '
            '"http://localhost:8000/"]') in runtime
    assert runtime.rstrip().endswith('ENTRYPOINT ["python", "serve.py"]\nCMD ["--port", "8000"]')
    dev = render_dockerfile(plan).split("AS dev", 1)[1].split("AS runtime")[0]
    assert "HEALTHCHECK" not in dev and "ENTRYPOINT" not in dev
    assert 'CMD ["python", "serve.py", "--port", "8000"]' in dev
    run = render_apptainer(plan).split("%runscript", 1)[1]
    assert "exec python serve.py --port 8000" in run and 'exec python serve.py "$@"' in run
    with pytest.raises(SpecError, match="duration"):
        parse_spec({"image": {"name": "a"}, "app": {"healthcheck": {"command": ["x"], "interval": "soon"}}})
    with pytest.raises(SpecError, match="not a port"):
        parse_spec({"image": {"name": "a"}, "app": {"expose": [70000]}})


# -- the lint at resolve time ------------------------------------------------------------------------


def test_a_step_that_keeps_a_pip_cache_or_replaces_torch_is_reported() -> None:
    plan = _plan(steps=[_step("system", "pip install transformers"), _step("packages", "uv pip install torch==2.4.0")])
    found = review_steps(plan)
    rules = {(f.step.index, f.rule.split()[0]) for f in found}
    assert (1, "KL002") in rules and (2, "torch-replaced") in rules
    checked = check_steps(plan)
    assert any(w.startswith("[[steps]] 1 (system): KL002") for w in checked.warnings)


def test_an_extension_build_without_arch_list_is_reported_in_a_cuda_plan() -> None:
    data = {"image": {"name": "a"}, "torch": {"version": "2.13.0", "cuda": "12.6"}, "gpu": {"targets": ["A100"]}}
    step = {"after": "packages", "run": "uv pip install --no-build-isolation flash-attn==2.7.4.post1"}
    plan = resolve(parse_spec({**data, "steps": [step]}), load_knowledge())
    assert [f.rule for f in review_steps(plan)] == ["extension-without-arch-list"]
    with_list = {**step, "env": {"TORCH_CUDA_ARCH_LIST": "8.0+PTX"}}
    fixed = resolve(parse_spec({**data, "steps": [with_list]}), load_knowledge())
    assert review_steps(fixed) == []


def test_a_certain_finding_refuses_the_spec_a_likely_one_warns() -> None:
    # an unquoted <= makes the shell read a file named '=4.40' that does not exist: the step fails
    with pytest.raises(SpecError, match=r"\[\[steps\]\] 1 \(packages\): KL029"):
        check_steps(_plan(steps=[_step("packages", "uv pip install transformers<=4.40")]))
    # an unquoted >= loses the lower bound: the step runs, with a warning in the plan
    plan = check_steps(_plan(steps=[_step("packages", "uv pip install transformers>=4.0")]))
    assert any("KL029" in w and "lower bound is lost" in w for w in plan.warnings)


def test_examples_with_steps_lint_clean() -> None:
    _s, plan, _d = load_plan(ROOT / "examples" / "cpu-steps.toml")
    assert len(plan.steps) == 4 and not plan.warnings


# -- secrets at build time ---------------------------------------------------------------------------


def test_step_secrets_are_build_secrets_read_from_the_environment(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    plan = _plan(steps=[_step("app", "cat /run/secrets/HF_TOKEN >/dev/null", secrets=["HF_TOKEN"])])
    engine = DockerEngine(EngineInfo("docker", "/usr/bin/docker", "27.3.1", "27.3.1", "buildx"), Runner())
    inv = plan_build(plan, tmp_path, BuildOptions(context_dir=tmp_path / "ctx"), engine, Sources(), cwd=tmp_path)
    path = inv.secrets["HF_TOKEN"]
    assert f"id=HF_TOKEN,src={path}" in " ".join(inv.command.argv)
    with pytest.raises(InputError, match="HF_TOKEN"):
        step_secret_values({"HF_TOKEN": path}, {})
    write_step_secrets({"HF_TOKEN": tmp_path / "s" / "step-HF_TOKEN"}, {"HF_TOKEN": "hf_x"})
    written = tmp_path / "s" / "step-HF_TOKEN"
    assert written.read_text() == "hf_x" and oct(written.stat().st_mode & 0o777) == "0o600"


# -- .dockerignore -----------------------------------------------------------------------------------


@pytest.mark.parametrize("patterns, path, out", [
    ("*.pyc", "a.pyc", True),
    ("*.pyc", "src/a.pyc", False),  # docker: matched from the root, unlike .gitignore
    ("**/*.pyc", "src/deep/a.pyc", True),
    ("data", "data/x/y.bin", True),
    ("data\n!data/keep.txt", "data/keep.txt", False),
    ("/secrets/*.env", "secrets/prod.env", True),
    ("src/**/test_*", "src/test_a.py", True),
    ("a?c", "abc", True),
    ("a?c", "a/c", False),
    ("# comment\n\n", "x", False),
])
def test_dockerignore_follows_dockers_rules(patterns: str, path: str, out: bool) -> None:
    assert DockerIgnore.parse(patterns).excluded(path) is out


def test_dockerignore_is_honoured_when_the_app_is_copied(tmp_path: Path) -> None:
    (tmp_path / "src" / "data").mkdir(parents=True)
    (tmp_path / "src" / "app.py").write_text("print(1)\n")
    (tmp_path / "src" / ".env").write_text("TOKEN=x\n")
    (tmp_path / "src" / "data" / "big.bin").write_text("0" * 10)
    (tmp_path / "src" / "data" / "keep.txt").write_text("k")
    (tmp_path / ".dockerignore").write_text("**/.env\nsrc/data\n!src/data/keep.txt\n")
    plan = _plan(app={"copy": ["src"]})
    ctx = dockerfile_context(plan, tmp_path)
    ctx.write(tmp_path / "out")
    got = sorted(p.relative_to(tmp_path / "out" / "src").as_posix() for p in (tmp_path / "out" / "src").rglob("*")
                 if p.is_file())
    assert got == ["app.py", "data/keep.txt"]
    (tmp_path / ".dockerignore").write_text("src\n")
    with pytest.raises(SpecError, match="\\[app\\] copy names 'src', which .* excludes"):
        dockerfile_context(plan, tmp_path)


def test_resolve_explain_and_build_show_the_step_findings(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from torchkiln.cli import main

    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    spec = tmp_path / "kiln.toml"
    spec.write_text('[image]\nname = "acme/x"\n[torch]\nversion = "2.13.0"\ncuda = "cpu"\n'
                    '[[steps]]\nafter = "system"\nrun = "pip install transformers"\n')
    assert main(["resolve", str(spec)]) == 0
    assert "[[steps]] 1 (system): KL002" in capsys.readouterr().out
    assert main(["explain", str(spec), "--json"]) == 0
    assert any("KL002" in w for w in json.loads(capsys.readouterr().out)["warnings"])
    # kiln build prints the invocation's warnings before it builds (and --dry-run --json lists them)
    engine = DockerEngine(EngineInfo("docker", "/usr/bin/docker", "27.3.1", "27.3.1", "buildx"), Runner())
    _s, plan, spec_dir = load_plan(spec)
    inv = plan_build(plan, spec_dir, BuildOptions(context_dir=tmp_path / "ctx"), engine, Sources(), cwd=tmp_path)
    assert any(w.startswith("[[steps]] 1 (system): KL002") for w in inv.warnings)
    assert inv.to_dict()["warnings"] == list(inv.warnings)


def test_an_app_entrypoint_runs_behind_the_forward_compatibility_entrypoint() -> None:
    from torchkiln.resolve.compat import ENTRYPOINT

    data = {"image": {"name": "a"}, "torch": {"version": "2.13.0", "cuda": "12.6"}, "gpu": {"targets": ["A100"]},
            "app": {"entrypoint": ["python", "serve.py"]}}
    plan = resolve(parse_spec(data), load_knowledge())
    plan = dataclasses.replace(plan, cuda_compat="nvcr.io/nvidia/cuda:12.6.3-base-ubuntu22.04")
    runtime = render_dockerfile(plan).split("AS runtime", 1)[1]
    assert runtime.rstrip().endswith(f'ENTRYPOINT ["{ENTRYPOINT}", "python", "serve.py"]\nCMD []')
