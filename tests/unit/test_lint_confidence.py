"""Issue 29: severity means confidence. Where the Dockerfile cannot tell (an NGC release whose pip
configuration is not confirmed, uv's hard-linked cache, an extension pinned to a source whose
pyproject.toml is unknown, a file that may hold secrets), the finding is info and says why; where it
can, the rule keeps its severity. Also the shell reading of issue 29: comments in continued RUNs,
exec-form shell scripts, nested ARG expansions."""

from __future__ import annotations

from torchkiln.lint import LintConfig, lint_text
from torchkiln.lint.model import substitute
from torchkiln.lint.shell import swallowing_comments, tokenize


def _find(text: str, rule: str) -> list[tuple[int, str, str]]:
    return [(f.line, f.severity, f.message) for f in lint_text(text, config=LintConfig()) if f.rule == rule]


def test_ngc_pip_cache_by_release() -> None:
    # 22.02-24.08 ship nvidia-pyindex's pip.conf (no-cache-dir = true); 25.01 onwards none
    for off in ("22.02", "22.12", "23.08", "24.05", "24.08"):
        assert _find(f"FROM nvcr.io/nvidia/pytorch:{off}-py3\nRUN pip install opencv-python\n", "KL002") == []
    for unsure in ("21.08", "24.10"):
        unknown = _find(f"FROM nvcr.io/nvidia/pytorch:{unsure}-py3\nRUN pip install opencv-python\n", "KL002")
        assert [s for _, s, _ in unknown] == ["info"] and "pip config debug" in unknown[0][2]
    caches = _find("FROM nvcr.io/nvidia/pytorch:25.01-py3\nRUN pip install opencv-python\n", "KL002")
    assert [s for _, s, _ in caches] == ["warning"]
    # uv does not read pip's configuration: on any NGC release its cache is uv's business
    uv = _find("FROM nvcr.io/nvidia/pytorch:23.10-py3\nRUN UV_LINK_MODE=copy uv pip install --system opencv-python\n", "KL002")
    assert [s for _, s, _ in uv] == ["warning"]


def test_uv_cache_is_quiet_when_hard_linked_info_for_git_warning_when_copied() -> None:
    base = "FROM python:3.11-slim\nRUN pip install --no-cache-dir uv\n"
    assert _find(base + "RUN uv pip install --system numpy\n", "KL002") == []
    git = _find(base + "RUN uv pip install --system git+https://github.com/example/tool@v1\n", "KL002")
    assert [s for _, s, _ in git] == ["info"] and "repository" in git[0][2]
    assert [s for _, s, _ in _find(base + "RUN uv pip install --system --link-mode copy scipy\n", "KL002")] == [
        "warning"
    ]
    assert _find(base + "RUN --mount=type=cache,target=/root/.cache/uv uv pip install --system numpy\n", "KL002") == []


def test_pinned_extension_isolation_is_info_known_pyproject_is_error() -> None:
    head = (
        "FROM pytorch/pytorch:2.1.2-cuda12.1-cudnn8-devel\n"
        "ENV MAX_JOBS=4 TORCH_CUDA_ARCH_LIST=9.0+PTX NVTE_CUDA_ARCHS=90\n"
    )
    pinned = _find(head + "RUN pip install --no-cache-dir flash-attn==2.5.5\n", "KL009")
    te17 = _find(
        head + "RUN pip install --no-cache-dir git+https://github.com/NVIDIA/TransformerEngine.git@v1.7.0\n", "KL009"
    )
    te_old = _find(
        head + "RUN pip install --no-cache-dir git+https://github.com/NVIDIA/TransformerEngine.git@abc1234\n", "KL009"
    )
    assert [s for _, s, _ in pinned] == ["info"]
    assert [s for _, s, _ in te17] == ["error"]
    assert [s for _, s, _ in te_old] == ["info"]


def test_secret_files_certain_and_uncertain() -> None:
    head = "FROM python:3.11-slim\n"
    assert [s for _, s, _ in _find(head + "COPY deploy-key.json /app/\n", "KL033")] == ["error"]
    assert [s for _, s, _ in _find(head + "COPY .env /app/.env\n", "KL033")] == ["info"]
    assert _find(head + "COPY --from=build /root/.netrc /tmp/x\n", "KL033") == []


def test_comment_in_continued_run_swallows_the_rest_only_in_a_dockerfile() -> None:
    text = "RUN pip install a # note \\\n    && pip install b"
    assert swallowing_comments(text) == ((0, 1),)
    joined = [t.text for t in tokenize(text, True) if t.kind == "word"]
    script = [t.text for t in tokenize(text, False) if t.kind == "word"]
    assert "b" not in joined and "b" in script  # a shell script ends the comment at its line
    # a full-line comment inside the continuation is dropped by BuildKit before the shell runs
    df = "FROM python:3.11-slim\nRUN pip install --no-cache-dir a \\\n    # note\n    && pip install b\n"
    assert _find(df, "KL030") == [] and [ln for ln, _, _ in _find(df, "KL002")] == [4]


def test_nested_arg_expansion_like_buildkit() -> None:
    assert substitute('${R:+"${R}/"}img:${T}', {"R": "", "T": "1"}) == "img:1"
    assert substitute('${R:+"${R}/"}img:${T}', {"R": "ghcr.io/x", "T": "1"}) == "ghcr.io/x/img:1"
    assert substitute("${R-dflt}", {"R": ""}) == ""
    assert substitute("${R:-dflt}", {"R": ""}) == "dflt"
    assert substitute("${MISSING}", {}) is None


def test_exec_form_shell_script_is_read() -> None:
    df = 'FROM python:3.11-slim\nRUN ["/bin/bash", "-o", "pipefail", "-c", "pip install transformers | tee log"]\n'
    assert [ln for ln, _, _ in _find(df, "KL002")] == [2]


def test_sdist_isolation_depends_on_pip_unless_pip_was_upgraded() -> None:
    head = "FROM pytorch/pytorch:2.1.2-cuda12.1-cudnn8-devel\nENV MAX_JOBS=4\n"
    plain = _find(head + "RUN pip install --no-cache-dir flash-attn\n", "KL009")
    upgraded = _find(head + "RUN pip install --no-cache-dir -U pip && pip install --no-cache-dir flash-attn\n", "KL009")
    uv = _find(head + "RUN uv pip install --system --no-cache flash-attn\n", "KL009")
    assert [s for _, s, _ in plain] == ["info"] and "sdist has no pyproject.toml" in plain[0][2]
    assert [s for _, s, _ in upgraded] == ["error"]
    assert [s for _, s, _ in uv] == ["error"]


def test_backslash_with_trailing_blanks_continues_like_buildkit() -> None:
    df = "FROM python:3.11-slim\nRUN pip install --no-cache-dir numpy \\ \n    requests\nUSER 1:1\n"
    from torchkiln.lint.model import parse_dockerfile
    from torchkiln.lint.shell import commands

    d = parse_dockerfile(df)
    run = next(i for i in d.instructions() if i.keyword == "RUN")
    sn = d.snippet(run)
    assert sn is not None
    assert [c.argv for c in commands(sn)] == [("pip", "install", "--no-cache-dir", "numpy", "requests")]


def test_a_cache_is_weighed_by_its_size_trivial_unreported_small_info_large_warning() -> None:
    # sizes from knowledge/wheels.toml (PyPI's files): ninja + packaging ~0.3 MB, pip's own ~3 MB
    assert _find("FROM python:3.11-slim\nRUN pip install ninja packaging\n", "KL002") == []
    upgrade = _find("FROM python:3.11-slim\nRUN pip install -U pip setuptools wheel && pip install scipy\n", "KL002")
    assert [s for _, s, _ in upgrade] == ["warning"] and "scipy ~" in upgrade[0][2]
    uv = _find("FROM python:3.11-slim\nRUN pip install uv\n", "KL002")
    assert [s for _, s, _ in uv] == ["info"] and "uv ~" in uv[0][2] and "small next to an image" in uv[0][2]
    torch = _find("FROM python:3.11-slim\nRUN pip install torch\n", "KL002")
    assert [s for _, s, _ in torch] == ["warning"] and " GB with dependencies; torch ~" in torch[0][2]
    # what the table cannot weigh stays a warning: an extra, a requirements file, another index, an sdist
    for cmd in ('pip install "requests[socks]"', "pip install ninja -r req.txt",
                "pip install ninja --index-url https://download.pytorch.org/whl/cu124", "pip install flash-attn",
                "pip install some-package-nobody-knows"):
        assert [s for _, s, _ in _find(f"FROM python:3.11-slim\nRUN {cmd}\n", "KL002")] == ["warning"], cmd
    # on an NGC release whose pip keeps no cache, nothing at all
    assert _find("FROM nvcr.io/nvidia/pytorch:23.10-py3\nRUN pip install -U pip\n", "KL002") == []


def test_what_the_image_has_is_not_downloaded_again_unless_a_package_is_built_for_another_torch() -> None:
    head = "FROM python:3.11-slim\nRUN pip install --no-cache-dir torch torchvision opencv-python\n"
    # timm's torch, torchvision and numpy are there: its own wheel and huggingface-hub's set, ~10 MB
    assert [s for _, s, _ in _find(head + "RUN pip install timm\n", "KL002")] == ["info"]
    assert _find(head + "RUN pip install einops\n", "KL002") == []
    # xformers and torchvision are built against one torch release: pip may replace the image's
    assert [s for _, s, _ in _find(head + "RUN pip install xformers\n", "KL002")] == ["warning"]
    assert [s for _, s, _ in _find(head + "RUN pip install torchaudio\n", "KL002")] == ["warning"]
    # --force-reinstall downloads everything again
    assert [s for _, s, _ in _find(head + "RUN pip install --force-reinstall timm\n", "KL002")] == ["warning"]


def test_bare_packages_a_pytorch_image_has_are_already_satisfied() -> None:
    base = "FROM pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime\n"
    assert _find(base + "RUN pip install numpy pillow\n", "KL002") == []
    assert [s for _, s, _ in _find(base + "RUN pip install -U numpy\n", "KL002")] == ["info"]  # ~16 MB


def test_an_unquoted_lower_bound_is_info_only_when_its_own_command_upgrades() -> None:
    head = "FROM myorg/base:1\n"  # a project's image: an older packaging may be installed
    assert [s for _, s, _ in _find(head + "RUN pip install -U packaging>=24.0\n", "KL029")] == ["info"]
    # the -U of the next command does not upgrade this one
    found = _find(head + "RUN pip install packaging>=24.0 && pip install -U wheel\n", "KL029")
    assert [s for _, s, _ in found] == ["warning"]
    assert [s for _, s, _ in _find(head + "RUN pip install numpy<=2.0\n", "KL029")] == ["error"]


def test_an_unquoted_lower_bound_is_info_when_nothing_installed_the_package_before() -> None:
    """On a bare image pip takes the newest release, which meets the bound; the bound matters when an
    older release can be there: installed by name earlier, by apt, by a requirements file, or by the
    base (setuptools in python:3.X, numpy in pytorch/pytorch, anything in NGC's image)."""
    head = "FROM python:3.11-slim\n"
    sev = lambda text: [s for _, s, _ in _find(text, "KL029")]  # noqa: E731
    assert sev(head + "RUN pip install numpy>=1.24\n") == ["info"]
    assert sev(head + "RUN pip install numpy==1.21\nRUN pip install numpy>=1.24\n") == ["warning"]
    assert sev(head + "RUN pip install -r requirements.txt\nRUN pip install numpy>=1.24\n") == ["warning"]
    assert sev(head + "RUN pip install setuptools>=70\n") == ["warning"]
    apt = "FROM ubuntu:22.04\nRUN apt-get update && apt-get install -y python3-pip python3-numpy\n"
    assert sev(apt + "RUN pip install numpy>=1.24\n") == ["warning"]
    assert sev(apt.replace(" python3-numpy", "") + "RUN pip install numpy>=1.24\n") == ["info"]
    assert sev("FROM pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime\nRUN pip install numpy>=1.24\n") == ["warning"]
    assert sev("FROM nvcr.io/nvidia/pytorch:24.08-py3\nRUN pip install einops>=0.8\n") == ["warning"]
    assert sev(head + "RUN conda install numpy>=1.24\n") == ["warning"]
