"""What the rules look at, computed once per file: each RUN with its environment and the
package installs it makes, whether torch is there yet, which stages reach the final image,
whether the image is a training image.

The environment of a RUN is what ``docker build`` gives it: ``ENV`` and ``ARG`` of the stage and
of the stages it builds on, ``--mount=type=secret,env=NAME``, then inside the shell ``export`` and
``NAME=value cmd`` prefixes. A value of ``None`` means "set, value unknown" (``ARG X`` without a
default, filled by ``--build-arg``); an absent name means unset.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Literal

from torchkiln.lint.config import LintConfig
from torchkiln.lint.model import (
    Definition,
    Dockerfile,
    Instruction,
    Script,
    Snippet,
    Source,
    Stage,
    arg_pairs,
    env_pairs,
    substitute,
)
from torchkiln.lint.shell import Command, Guard, Install, evaluate_test, recognize, walk

TORCH_FAMILY = frozenset({"torch", "torchvision", "torchaudio"})
TorchState = Literal["yes", "no", "unknown"]

#: images that ship torch: pytorch/pytorch, NGC's PyTorch, and NVIDIA's Jetson images (l4t-pytorch, l4t-ml)
_TORCH_BASE = re.compile(
    r"(^|/)(l4t-)?(pytorch|torch)[^/:]*(:|$)|nvcr\.io/nvidia/pytorch|/l4t-ml(:|$)"
    # the serving engines' published images, which are built on their pinned torch
    r"|^(docker\.io/)?(vllm/vllm-openai|lmsysorg/sglang|openmmlab/lmdeploy|rocm/vllm)(:|@|$)",
    re.I,
)
#: NGC's PyTorch image; `<registry>/dl/dgx/pytorch` is NVIDIA's internal name for the same build
#: (NVIDIA/DeepLearningExamples' Dockerfiles name gitlab-master.nvidia.com:5005/dl/dgx/pytorch)
NGC_PYTORCH = re.compile(r"^((docker\.io/)?nvcr\.io/nvidia/pytorch|[^/]+/dl/dgx/pytorch)(:|@|$)", re.I)

#: packages whose presence marks a training image (used by KL007)
TRAINING_PACKAGES = frozenset(
    {
        "deepspeed", "accelerate", "lightning", "pytorch-lightning", "megatron-core", "torchtitan",
        "trl", "peft", "nemo-toolkit", "colossalai", "fairscale", "apex", "bitsandbytes",
    }
)  # fmt: skip
_TRAINING_WORDS = re.compile(r"\b(torchrun|deepspeed|accelerate\s+launch|train[a-z_]*\.py|finetun\w*)\b", re.I)

#: CMD/ENTRYPOINT words that mark an image that serves requests (a deployed image, where running
#: as root or shipping the CUDA toolkit is a real cost); dev, CI and training images do not match
_SERVING_WORDS = re.compile(
    r"(\bserve\b|api_server|\bserver\b|uvicorn|gunicorn|launcher\b|tritonserver|torchserve|streamlit|gradio"
    r"|\bflask\b|\bapp\.py|\w[\w.]*[_-]server\b|\bjina\b|rtsp(?!:))",
    re.I,
)
#: packages that compile CUDA code at run time (JIT), so their image needs nvcc (a devel base). vLLM
#: and SGLang JIT-compile FlashInfer and DeepGEMM kernels when a model first needs them: vLLM's own
#: image shipped a -devel final stage up to v0.10 and, since, a -base one to which it adds the CUDA
#: compiler packages that "JIT compilation (FlashInfer, DeepGEMM, EP kernels)" needs (its
#: docker/Dockerfile); a -runtime image has no nvcc for them
JIT_PACKAGES = frozenset({"deepspeed", "flashinfer", "flashinfer-python", "apex", "mamba-ssm", "causal-conv1d",
                          "vllm", "sglang", "deep-gemm", "deep_gemm"})


@dataclass(frozen=True)
class Step:
    """One RUN instruction, analysed."""

    ins: Instruction
    stage: Stage
    snippets: tuple[Snippet, ...]
    env: Mapping[str, str | None]  # before the shell starts
    workdir: str | None
    commands: tuple[tuple[Command, Mapping[str, str | None], str | None], ...]  # cmd, env, cwd
    installs: tuple[Install, ...]

    def cache_targets(self) -> tuple[str, ...]:
        return self.ins.cache_mount_targets()


@dataclass
class Context:
    source: Source
    config: LintConfig
    df: Dockerfile | None = None
    final: Stage | None = None
    final_chain: tuple[Stage, ...] = ()
    steps: list[Step] = field(default_factory=list)
    snippets: list[Snippet] = field(default_factory=list)
    training_evidence: str | None = None
    serving_evidence: str | None = None

    @property
    def is_training(self) -> bool:
        if self.config.training is not None:
            return self.config.training
        return self.training_evidence is not None

    def in_final_chain(self, stage: Stage) -> bool:
        return any(s.index == stage.index for s in self.final_chain)

    def torch_installed_by_dockerfile(self, step: Step) -> bool:
        """Whether a RUN before ``step`` (in its chain) installs torch itself."""
        assert self.df is not None
        chain = {s.index for s in self.df.chain(step.stage)}
        for s in self.steps:
            if s.stage.index in chain and s.ins.line < step.ins.line:
                if any(installs_torch(i) == "yes" for i in s.installs):
                    return True
        return False

    def step_of(self, snippet: Snippet) -> Step | None:
        """The RUN step whose shell text ``snippet`` is (None for CMD, a heredoc file, a script)."""
        return next((st for st in self.steps if snippet.instruction is not None and st.ins is snippet.instruction),
                    None)

    def torch_before(self, step: Step) -> TorchState:
        """Whether torch is installed when ``step`` starts (before its own commands)."""
        assert self.df is not None
        return _torch_state(self, step.stage, step.ins.line, depth=0)


def build_context(source: Source, config: LintConfig) -> Context:
    ctx = Context(source=source, config=config)
    if isinstance(source, Script):
        ctx.snippets.append(source.snippet())
        return ctx
    if isinstance(source, Definition):
        ctx.snippets.extend(source.snippets())
        return ctx
    df = source
    ctx.df = df
    ctx.final = df.final_stage(config.target)
    ctx.final_chain = df.chain(ctx.final)
    for stage in df.stages:
        env: dict[str, str | None] = {}
        workdir: str | None = None
        for anc in df.chain(stage)[:-1]:
            workdir = _apply_env(df, anc.instructions, env, workdir)
        for ins in stage.instructions:
            if ins.keyword == "RUN":
                ctx.steps.append(_step(df, stage, ins, env, workdir))
            elif ins.keyword in ("CMD", "ENTRYPOINT"):
                sn = df.snippet(ins)
                if sn is not None:
                    ctx.snippets.append(sn)
            elif ins.keyword in ("COPY", "ADD"):
                ctx.snippets.extend(df.heredoc_snippets(ins))
            workdir = _apply_env(df, (ins,), env, workdir)
    for step in ctx.steps:
        ctx.snippets.extend(step.snippets)
    ctx.snippets.sort(key=lambda s: s.lines[0] if s.lines else 0)
    ctx.training_evidence = _training_evidence(ctx)
    ctx.serving_evidence = _serving_evidence(ctx)
    return ctx


#: command-line flags that make a program listen for clients (Gradio/webui `--listen`, `--port`,
#: `--server-port`, `--host 0.0.0.0`, gunicorn's `--bind`)
_LISTEN_FLAGS = re.compile(r"(^|\s)--(listen|port|server[-_]port|server[-_]name|host|bind)(\s|=|$)", re.I)
#: programs that are not the image's service even when a port is exposed: shells, Jupyter, sshd
_NOT_A_SERVICE = re.compile(r"^(\S*/)?(bash|sh|zsh|jupyter|jupyter-lab|jupyterlab|sshd|tini|dumb-init)$")
_INIT = re.compile(r"^(\S*/)?(tini|dumb-init)$")
_SHELL = re.compile(r"^(\S*/)?(bash|sh|zsh)$")
#: a script a shell runs (a launch script, not an interactive shell)
_SCRIPT = re.compile(r"\.sh$|^(\./|/)\S+$")
#: ports of dev tools (ssh, Jupyter, TensorBoard, VNC): exposed by dev images, not by a service
_DEV_PORTS = frozenset({"22", "8888", "8889", "6006", "5900", "6080"})


def _serving_evidence(ctx: Context) -> str | None:
    """The final image's CMD/ENTRYPOINT when it starts a server (evidence of a deployed image): a
    server program or word (uvicorn, `serve`, ...), a listening flag (`--listen`, `--port`,
    `--host`, `--bind`, also through an ENV the command expands), or an EXPOSEd port with a
    program that is not a shell, Jupyter or sshd (and no ssh port among them: a workstation users log
    in to), or with a shell that runs a launch script (a port other than ssh's, Jupyter's,
    TensorBoard's or VNC's). tini and dumb-init are looked through."""
    last: Instruction | None = None
    exposed: Instruction | None = None
    env_text: list[str] = []
    for st in ctx.final_chain:
        for ins in st.instructions:
            if ins.keyword in ("CMD", "ENTRYPOINT"):
                last = ins
            elif ins.keyword == "EXPOSE":
                exposed = ins
            elif ins.keyword == "ENV":
                env_text.append(" ".join(ins.args))
    if last is None:
        return None
    text = " ".join(last.args)
    m = _SERVING_WORDS.search(text)
    if m:
        return f"{last.keyword} runs {m.group(0)!r} (line {last.line})"
    words = text.split()
    while words and _INIT.match(words[0]):  # tini -- CMD, dumb-init CMD: the program is what follows
        words = [w for w in words[1:] if w != "--"] if words[1:2] == ["--"] else words[1:]
    if words and _SHELL.match(words[0]):
        script = next((w for w in words[1:] if not w.startswith("-")), "")
        if "-c" not in words[1:] and _SCRIPT.search(script) and exposed is not None and not (
                {a.split("/")[0] for a in exposed.args} & _DEV_PORTS):
            # `bash startup.sh` with a port exposed: a launch script (not an interactive shell)
            return f"EXPOSE {' '.join(exposed.args)} (line {exposed.line}) with {last.keyword} {text[:40]!r}"
    if not words or _NOT_A_SERVICE.match(words[0]):
        return None  # a shell, Jupyter (a dev image) or sshd, whatever ports it listens on
    flags = _LISTEN_FLAGS.search(text) or ("$" in text and _LISTEN_FLAGS.search(" ".join(env_text)))
    if flags:
        return f"{last.keyword} passes {flags.group(0).strip()!r} (line {last.line})"
    if exposed is not None and "22" not in {a.split("/")[0] for a in exposed.args}:
        # (ssh's port beside the others: a remote workstation that users log in to, RunPod-style)
        return f"EXPOSE {' '.join(exposed.args)} (line {exposed.line}) with {last.keyword} {text[:40]!r}"
    return None


def base_ships_torch(image: str | None) -> bool:
    return image is not None and bool(_TORCH_BASE.search(image))


def _apply_env(
    df: Dockerfile, instructions: tuple[Instruction, ...], env: dict[str, str | None], workdir: str | None
) -> str | None:
    for ins in instructions:
        if ins.keyword == "ENV":
            # BuildKit expands $VAR in an ENV value with the ARG/ENV values before it
            for k, val in env_pairs(ins):
                env[k] = (substitute(val, env) if "$" in val else None) or val
        elif ins.keyword == "ARG":
            for k, default in arg_pairs(ins):
                value = default if default is not None else df.global_args.get(k)
                env[k] = (substitute(value, env) if value and "$" in value else None) or value
        elif ins.keyword == "WORKDIR" and ins.args:
            w = ins.args[0]
            workdir = w if w.startswith("/") or workdir is None else workdir.rstrip("/") + "/" + w
    return workdir


def _step(df: Dockerfile, stage: Stage, ins: Instruction, env: Mapping[str, str | None], workdir: str | None) -> Step:
    run_env: dict[str, str | None] = dict(env)
    for m in ins.mounts:
        if m.type == "secret" and m.options.get("env"):
            run_env[m.options["env"]] = None
    snippets: list[Snippet] = []
    header = df.snippet(ins)
    if header is not None:
        snippets.append(header)
    snippets.extend(df.heredoc_snippets(ins))
    cmds: list[tuple[Command, Mapping[str, str | None], str | None]] = []
    installs: list[Install] = []
    for sn in snippets:
        cwd = workdir
        for cmd, cenv in walk(sn, run_env):
            if cmd.name == "cd" and len(cmd.words) > 1:
                target = cmd.words[1].text
                cwd = target if target.startswith("/") or cwd is None else cwd.rstrip("/") + "/" + target
            cmds.append((cmd, cenv, cwd))
            inst = recognize(cmd, cenv)
            if inst is not None:
                installs.append(inst)
    return Step(ins, stage, tuple(snippets), run_env, workdir, tuple(cmds), tuple(installs))


def installs_torch(inst: Install) -> TorchState:
    """Does this install put torch in place? unknown for requirement files, projects, envs."""
    if inst.tool == "apt" or inst.tool == "setup.py":
        return "no"
    names = inst.names
    if names & TORCH_FAMILY or "pytorch" in names:
        return "yes"
    if inst.has("--requirement", "--file") or inst.sub in ("sync", "create") or inst.tool in ("conda", "poetry"):
        return "unknown"
    if any(r.kind in ("path", "unknown") for r in inst.reqs):
        return "unknown"
    return "no"


def _torch_state(ctx: Context, stage: Stage, before_line: int, depth: int) -> TorchState:
    df = ctx.df
    assert df is not None
    if depth > 8:
        return "unknown"
    chain = df.chain(stage)
    base = chain[0].resolved_image
    state: TorchState = "no"
    if base is None:
        state = "unknown"
    elif _TORCH_BASE.search(base):
        return "yes"
    steps = {s.ins.line: s for s in ctx.steps}
    for st in chain:
        for ins in st.instructions:
            if st.index == stage.index and ins.line >= before_line:
                return state
            if ins.keyword == "RUN" and ins.line in steps:
                for inst in steps[ins.line].installs:
                    got = installs_torch(inst)
                    if got == "yes":
                        return "yes"
                    if got == "unknown":
                        state = "unknown"
            elif ins.keyword in ("COPY", "ADD"):
                for ref in ins.flag_values("from"):
                    src = df.stage_ref(ref, before=st.index)
                    if src is None:
                        state = "unknown"
                        continue
                    got = _torch_state(ctx, src, 10**9, depth + 1)
                    if got == "yes":
                        return "yes"
                    if got == "unknown":
                        state = "unknown"
    return state


def _training_evidence(ctx: Context) -> str | None:
    df = ctx.df
    assert df is not None
    for step in ctx.steps:
        for inst in step.installs:
            hits = sorted(inst.names & TRAINING_PACKAGES)
            if not hits and any(r.kind in ("vcs", "path") and "apex" in r.text.lower() for r in inst.reqs):
                hits = ["apex"]
            if hits:
                return f"installs {hits[0]} (line {inst.line})"
    for ins in df.instructions():
        if ins.keyword in ("CMD", "ENTRYPOINT"):
            m = _TRAINING_WORDS.search(" ".join(ins.args))
            if m:
                return f"{ins.keyword} runs {m.group(0)!r} (line {ins.line})"
    for s in df.stages:
        if s.name and "train" in s.name:
            return f"stage {s.name!r} (line {s.line})"
    return None


def iter_commands(ctx: Context) -> Iterator[tuple[Command, Snippet]]:
    """Every shell command of the file (RUN lines, heredoc scripts, CMD/ENTRYPOINT, scripts)."""
    from torchkiln.lint.shell import commands

    for sn in ctx.snippets:
        for c in commands(sn):
            yield c, sn


#: the arguments BuildKit sets itself on every build (Dockerfile reference, "Automatic platform ARGs in
#: the global scope"): their value is the platform's, not known from the file
AUTOMATIC_ARGS = frozenset({"TARGETPLATFORM", "TARGETOS", "TARGETARCH", "TARGETVARIANT", "BUILDPLATFORM",
                            "BUILDOS", "BUILDARCH", "BUILDVARIANT"})
#: commands that do nothing a rule reports on (the tests themselves, messages, `|| true`)
_NOT_A_STEP = frozenset({"[", "[[", "test", "echo", "printf", "true", "false", ":", "exit"})
_VAR_WORD = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?")


def skipped_by_default(ctx: Context) -> dict[int, tuple[Guard, str]]:
    """The RUN lines a build with the Dockerfile's default arguments does not run: every command on
    the line sits in an `if [ ... ]` branch or after a `[ ... ] &&` (or `||`) whose test the values
    of the ARG defaults and ENVs decide against (`ARG USE_GPU` with no default: `[ "$USE_GPU" =
    "True" ]` is false). Each line maps to the guard that skips it and the test's text. A variable
    the shell may set (an assignment, `read`, `for`), a secret's environment, BuildKit's platform
    arguments, or one the file does not declare (a base image's ENV) leaves the test unknown."""
    out: dict[int, tuple[Guard, str]] = {}
    ran: set[int] = set()
    for step in ctx.steps:
        if not any(cmd.guards for cmd, _, _ in step.commands):
            continue
        text = "\n".join(sn.text for sn in step.snippets)
        unknown = set(AUTOMATIC_ARGS) | {m.options["env"] for m in step.ins.mounts
                                         if m.type == "secret" and m.options.get("env")}
        for cmd, env, _cwd in step.commands:
            if not cmd.words or cmd.name in _NOT_A_STEP:
                continue
            skip = next((g for g in cmd.guards if g.test is not None
                         and evaluate_test(g.test, _Reader(env, unknown, text)) is (not g.holds)), None)
            if skip is None:
                ran.add(cmd.line)
            else:
                assert skip.test is not None
                out.setdefault(cmd.line, (skip, " ".join(t.raw for t in skip.test)))
    return {line: v for line, v in out.items() if line not in ran}


@dataclass(frozen=True)
class _Reader:
    """A test's words with the build's default values: a literal as it is, ``$NAME`` an ARG or ENV of
    the file (an ARG with no default: empty); None when not known."""

    env: Mapping[str, str | None]
    unknown: set[str]
    text: str  # the RUN's shell text: a name it assigns, reads or loops over is not known

    def __call__(self, word: str) -> str | None:
        if "$" not in word and "`" not in word:
            return word
        m = _VAR_WORD.fullmatch(word)
        if m is None:
            return None
        name = m.group(1)
        set_here = rf"(^|[\s;&|(]){name}=|\bread\b[^\n;&|]*\b{name}\b|\bfor\s+{name}\b"
        if name in self.unknown or name not in self.env or re.search(set_here, self.text):
            return None
        value = self.env[name]
        if value is None:
            return ""
        return None if "$" in value or "`" in value else value
