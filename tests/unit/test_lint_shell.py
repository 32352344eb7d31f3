"""The small shell reader the rules stand on: words, operators, commands, environments, installs."""

from __future__ import annotations

from torchkiln.lint.model import Snippet
from torchkiln.lint.shell import commands, parse_req, recognize, tokenize, walk


def snip(text: str) -> Snippet:
    return Snippet(text, tuple(range(1, text.count("\n") + 2)))


def test_quotes_escapes_and_substitutions_stay_in_one_word() -> None:
    toks = [t.text for t in tokenize("""echo "a b" 'c;d' e\\ f $(date +%s) ${X:-y} `id -u`""")]
    assert toks == ["echo", "a b", "c;d", "e f", "$(date +%s)", "${X:-y}", "`id -u`"]


def test_operators_and_adjacency() -> None:
    toks = tokenize("A=8.0;9.0 && b || c | d; e &")
    kinds = [(t.kind, t.text) for t in toks]
    assert kinds[:3] == [("word", "A=8.0"), ("op", ";"), ("word", "9.0")]
    assert toks[0].end == toks[1].start and toks[1].end == toks[2].start
    assert [t.text for t in toks if t.kind == "op"] == [";", "&&", "||", "|", ";", "&"]


def test_comments_redirections_and_heredoc_bodies_are_not_commands() -> None:
    text = "cat > /etc/x.conf <<EOF # write config\npip install nope\nEOF\ncurl -o f url 2>/dev/null # fetch\n"
    got = [(c.line, c.argv) for c in commands(snip(text))]
    assert got == [(1, ("cat",)), (4, ("curl", "-o", "f", "url"))]


def test_prefixes_wrappers_and_keywords() -> None:
    text = "if true; then sudo -E -u app env MAX_JOBS=4 FOO=1 pip install x; fi\nexec nohup python -m app"
    cmds = commands(snip(text))
    assert [c.argv for c in cmds] == [("true",), ("pip", "install", "x"), ("python", "-m", "app")]
    assert cmds[1].assigned() == {"MAX_JOBS": "4", "FOO": "1"}


def test_environment_follows_exports_not_plain_assignments() -> None:
    text = "export A=1 B\nC=3\nD=4 run\nunset A\nlast"
    envs = [(c.argv, env) for c, env in walk(snip(text), {"BASE": None})]
    assert envs[2] == (("run",), {"BASE": None, "A": "1", "B": None, "D": "4"})
    assert envs[-1] == (("last",), {"BASE": None, "B": None})


def test_continuation_lines_keep_line_numbers() -> None:
    text = "apt-get update && \\\n    apt-get install -y git \\\n    && rm -rf /var/lib/apt/lists/*"
    assert [(c.line, c.name) for c in commands(snip(text))] == [(1, "apt-get"), (2, "apt-get"), (3, "rm")]


def test_recognize_pip_uv_apt_conda_setup_py() -> None:
    def rec(text: str):  # type: ignore[no-untyped-def]
        (cmd,) = commands(snip(text))
        return recognize(cmd, {})

    pip = rec("python3.11 -m pip install -U --no-cache-dir -r req.txt -c cons.txt 'flash-attn==2.8.3' -e ./pkg")
    assert pip.tool == "pip" and pip.sub == "install"
    assert pip.has("--upgrade", "--no-cache-dir") and pip.values("--requirement") == ("req.txt",)
    assert pip.values("--constraint") == ("cons.txt",)
    assert [(r.kind, r.name) for r in pip.reqs] == [("name", "flash-attn"), ("path", None)]
    uv = rec("/kiln/bin/uv pip install --python /opt/venv/bin/python --no-build-isolation torch==2.5.1")
    assert (uv.tool, uv.sub, uv.names) == ("uv", "install", {"torch"})
    assert uv.values("--python") == ("/opt/venv/bin/python",)
    assert rec("uv sync --frozen --no-install-project").sub == "sync"
    apt = rec("apt-get install -y --no-install-recommends git curl")
    assert apt.tool == "apt" and apt.names == {"git", "curl"}
    assert rec("conda install -y pytorch=2.5.1 -c pytorch").names == {"pytorch"}
    assert rec("python setup.py bdist_wheel --cuda_ext").sub == "bdist_wheel"
    assert rec("pip list") is None and rec("python -c 'import torch'") is None


def test_requirement_kinds() -> None:
    assert parse_req("git+https://github.com/NVIDIA/apex#egg=apex").kind == "vcs"
    assert parse_req("git+https://github.com/NVIDIA/apex#egg=apex").name == "apex"
    assert parse_req("xformers @ git+https://github.com/facebookresearch/xformers").kind == "vcs"
    assert parse_req("https://host/flash_attn-2.8.3-cp311-cp311-linux_x86_64.whl").name == "flash-attn"
    assert parse_req("/wheels/flash_attn-2.8.3-cp311-cp311-linux_x86_64.whl").kind == "wheel"
    assert parse_req(".").kind == "path" and parse_req("../apex").kind == "path"
    assert parse_req("Flash_Attn[full]>=2.6").name == "flash-attn"
    assert parse_req("${PKG}").kind == "unknown"
