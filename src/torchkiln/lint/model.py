"""Dockerfiles and shell scripts as the linter sees them: instructions, stages, shell snippets.

Parsing is done by the ``dockerfile`` package (PyPI ``dockerfile``), which wraps moby/buildkit's
own Go parser, so heredocs (``RUN <<EOF``), ``RUN --mount=...`` flags, line continuations, ``ARG``
before ``FROM`` and the ``# escape=`` directive behave exactly as in ``docker build``.

We tried ``dockerfile-parse`` first: it reads heredoc bodies as instructions (each body line
becomes an instruction named after its first word), does not separate ``--mount``/``--from``
flags from arguments, and keeps comment lines inside continuations. So it is not used.

What this module adds on top of the Go parser (our own code, as no library gives it):

* the parser directives (the Go binding applies ``escape`` but does not return the directives);
* the line where each heredoc body starts (the binding gives the body text only);
* a stage model: which stage is final, which stage each ``FROM`` builds on, what each ``COPY
  --from`` copies from, ``ARG`` defaults substituted into ``FROM``;
* shell snippets with their real line numbers: the text of a ``RUN`` as the shell will see it
  (comment lines inside continuations removed, as BuildKit does), each line mapped back to the
  line of the file, so findings point at the line of the offending command;
* clear errors (:class:`torchkiln.errors.InputError`) for binary, empty or malformed files.

Pure: :func:`parse_dockerfile` and :func:`parse_script` take text; :func:`read_source` is the only
function that touches the file system.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from torchkiln.errors import InputError, KilnError

try:  # a compiled module without type stubs; imported here so that the rest of the CLI works without it
    import dockerfile as _goparser  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - it is a dependency of torchkiln
    _goparser = None

FileKind = Literal["dockerfile", "script", "apptainer"]

#: instructions ``docker build`` knows (``MAINTAINER`` is deprecated but still accepted)
KNOWN_INSTRUCTIONS = frozenset(
    {
        "ADD", "ARG", "CMD", "COPY", "ENTRYPOINT", "ENV", "EXPOSE", "FROM", "HEALTHCHECK", "LABEL",
        "MAINTAINER", "ONBUILD", "RUN", "SHELL", "STOPSIGNAL", "USER", "VOLUME", "WORKDIR",
    }
)  # fmt: skip

_DIRECTIVE = re.compile(r"#\s*([a-zA-Z][a-zA-Z0-9_-]*)\s*=\s*(.*?)\s*$")
_HEREDOC_MARK = re.compile(r"<<(-?)\s*([\"']?)([A-Za-z0-9_.-]+)\2")
_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?::?[-+][^}]*)?\}|([A-Za-z_][A-Za-z0-9_]*))")


@dataclass(frozen=True)
class Heredoc:
    name: str
    content: str
    #: line of the file where the body starts (the line after the one that opened it)
    line: int
    strip_tabs: bool = False


@dataclass(frozen=True)
class Instruction:
    """One Dockerfile instruction, as BuildKit parsed it."""

    keyword: str  # upper case: RUN, COPY, ...
    args: tuple[str, ...]  # exec form: the argv; shell form RUN/CMD: one string
    flags: tuple[str, ...]  # --mount=..., --from=..., --chown=...
    exec_form: bool
    heredocs: tuple[Heredoc, ...]
    line: int  # first line (1-based)
    end_line: int  # last line, heredoc bodies included
    original: str
    stage: int  # index of the stage it belongs to; -1 for ARGs before the first FROM
    sub_keyword: str | None = None  # for ONBUILD

    def flag_values(self, name: str) -> list[str]:
        """Values of ``--name=value`` flags (``flag_values("mount")``)."""
        prefix = f"--{name}="
        out = []
        for f in self.flags:
            if f.startswith(prefix):
                out.append(f[len(prefix) :])
            elif f == f"--{name}":
                out.append("")
        return out

    @property
    def mounts(self) -> tuple[Mount, ...]:
        return tuple(Mount.parse(v) for v in self.flag_values("mount"))

    def cache_mount_targets(self) -> tuple[str, ...]:
        return tuple(m.target for m in self.mounts if m.type == "cache" and m.target)


@dataclass(frozen=True)
class Mount:
    """A ``RUN --mount=...`` specification (``type=cache,target=/root/.cache/uv``)."""

    type: str
    target: str
    options: Mapping[str, str]

    @classmethod
    def parse(cls, spec: str) -> Mount:
        opts: dict[str, str] = {}
        for part in spec.split(","):
            key, _, value = part.partition("=")
            opts[key.strip().lower()] = value.strip()
        target = opts.get("target") or opts.get("dst") or opts.get("destination") or ""
        return cls(type=opts.get("type", "bind"), target=target, options=opts)


@dataclass(frozen=True)
class Stage:
    index: int
    name: str | None  # the ``AS`` name, lower-cased as BuildKit does
    image: str  # as written after FROM
    resolved_image: str | None  # with global ARG defaults substituted; None if unresolvable
    parent: int | None  # index of the stage this one builds on (``FROM builder``)
    from_instruction: Instruction
    instructions: tuple[Instruction, ...]  # after the FROM

    @property
    def line(self) -> int:
        return self.from_instruction.line

    @property
    def label(self) -> str:
        return self.name if self.name else f"#{self.index}"

    def copies_from(self) -> tuple[str, ...]:
        """The ``--from`` references of this stage's COPY/ADD instructions, in order."""
        return tuple(v for i in self.instructions if i.keyword in ("COPY", "ADD") for v in i.flag_values("from"))


@dataclass(frozen=True)
class Snippet:
    """Shell text with the file line of each of its lines."""

    text: str
    lines: tuple[int, ...]  # lines[i] = line of the file for text line i
    instruction: Instruction | None = None
    #: number of leading words that are not the command (``RUN`` and its flags)
    skip_words: int = 0
    #: a Dockerfile RUN's own lines, which BuildKit joins (backslash-newline removed) before the
    #: shell reads them: a ``#`` comment then runs to the end of the joined command
    joined: bool = False

    def file_line(self, index: int) -> int:
        if not self.lines:
            return 1
        return self.lines[min(index, len(self.lines) - 1)]


@dataclass(frozen=True)
class Dockerfile:
    path: str
    lines: tuple[str, ...]
    directives: Mapping[str, str]
    escape: str
    preamble: tuple[Instruction, ...]  # ARGs before the first FROM
    stages: tuple[Stage, ...]
    global_args: Mapping[str, str | None] = field(default_factory=dict)

    kind: Literal["dockerfile"] = "dockerfile"

    def instructions(self) -> Iterator[Instruction]:
        yield from self.preamble
        for s in self.stages:
            yield s.from_instruction
            yield from s.instructions

    def stage_ref(self, ref: str, before: int | None = None) -> Stage | None:
        """The stage a ``FROM``/``--from`` reference names (by name or index), if any."""
        limit = len(self.stages) if before is None else before
        low = ref.lower()
        for s in self.stages[:limit]:
            if s.name == low:
                return s
        if ref.isdigit() and int(ref) < limit:
            return self.stages[int(ref)]
        return None

    def chain(self, stage: Stage) -> tuple[Stage, ...]:
        """The stage and the stages it builds on, root first."""
        out = [stage]
        cur = stage
        while cur.parent is not None:
            cur = self.stages[cur.parent]
            out.append(cur)
        return tuple(reversed(out))

    def base_image(self, stage: Stage) -> str | None:
        """The external image at the root of a stage's chain (None if it cannot be resolved)."""
        return self.chain(stage)[0].resolved_image

    def final_stage(self, target: str | None = None) -> Stage:
        """The stage ``docker build`` produces: the last one, or ``--target``."""
        if target is None:
            return self.stages[-1]
        s = self.stage_ref(target)
        if s is None:
            names = ", ".join(st.label for st in self.stages)
            raise InputError(
                f"{self.path}: there is no stage named {target!r} (stages: {names})",
                hint="Pass --target with one of the stage names, or leave it out to lint the last stage.",
            )
        return s

    def stage_of(self, ins: Instruction) -> Stage | None:
        return self.stages[ins.stage] if ins.stage >= 0 else None

    def snippet(self, ins: Instruction) -> Snippet | None:
        """The shell text of a shell-form RUN/CMD/ENTRYPOINT header (heredoc bodies excluded)."""
        keyword = ins.sub_keyword or ins.keyword
        if keyword not in ("RUN", "CMD", "ENTRYPOINT") or ins.exec_form:
            if ins.exec_form and keyword in ("RUN", "CMD", "ENTRYPOINT"):
                script = _shell_c_script(ins.args)
                if script is not None:
                    # ["/bin/bash", "-c", "pip install ..."]: the shell runs the script string
                    return Snippet(script, (ins.line,) * (script.count("\n") + 1), ins, 0)
                return Snippet(shlex.join(ins.args), (ins.line,), ins, 0)
            return None
        if self.escape != "\\":
            # A shell does not treat the escape character as a continuation: use the joined text.
            return Snippet(" ".join(ins.args), (ins.line,), ins, 0)
        kept: list[str] = []
        nums: list[int] = []
        last = _header_end(self.lines, ins.line, self.escape) if ins.heredocs else ins.end_line
        for n in range(ins.line, last + 1):
            raw = self.lines[n - 1]
            stripped = raw.strip()
            if n > ins.line and (not stripped or stripped.startswith("#")):
                continue  # BuildKit drops comment and empty lines inside a continuation
            # BuildKit takes `\` followed only by blanks at the end of a line as a continuation too
            kept.append(re.sub(r"\\[ \t]+$", "\\\\", raw))
            nums.append(n)
        skip = 1 + len(ins.flags) + (1 if ins.keyword == "ONBUILD" else 0)
        return Snippet("\n".join(kept), tuple(nums), ins, skip, joined=True)

    def heredoc_snippets(self, ins: Instruction) -> list[Snippet]:
        """Heredoc bodies that a shell runs (``RUN <<EOF`` or ``RUN bash <<EOF``), or scripts
        written by ``COPY <<EOF x.sh``."""
        out: list[Snippet] = []
        if not ins.heredocs:
            return out
        header = " ".join(ins.args).strip()
        for h in ins.heredocs:
            body_is_shell = False
            if ins.keyword == "RUN":
                prog = re.sub(_HEREDOC_MARK, "", header).strip()
                body_is_shell = prog == "" or bool(re.fullmatch(r"(/usr)?(/bin/)?(ba|da)?sh(\s+-[a-z]+)*", prog))
            elif ins.keyword in ("COPY", "ADD"):
                dest = ins.args[-1] if ins.args else ""
                body_is_shell = dest.endswith((".sh", ".bash")) or _shebang_is_shell(h.content)
            if body_is_shell:
                n = h.content.count("\n") or 1
                out.append(Snippet(h.content, tuple(range(h.line, h.line + n)), ins, 0))
        return out


@dataclass(frozen=True)
class Script:
    path: str
    lines: tuple[str, ...]
    kind: Literal["script"] = "script"

    def snippet(self) -> Snippet:
        return Snippet("\n".join(self.lines), tuple(range(1, len(self.lines) + 1)), None, 0)


@dataclass(frozen=True)
class Section:
    """One ``%name`` section of an Apptainer/Singularity definition file."""

    name: str  # lower case, without the %
    args: str
    line: int  # the line of the %name header
    body: tuple[str, ...]


#: sections whose body a shell runs (or sources, for %environment)
SHELL_SECTIONS = frozenset({"setup", "post", "environment", "runscript", "startscript", "test"})


@dataclass(frozen=True)
class Definition:
    """An Apptainer/Singularity definition file: a ``Key: value`` header, then ``%sections``."""

    path: str
    lines: tuple[str, ...]
    header: Mapping[str, str]
    sections: tuple[Section, ...]
    kind: Literal["apptainer"] = "apptainer"

    def snippets(self) -> list[Snippet]:
        return [
            Snippet("\n".join(s.body), tuple(range(s.line + 1, s.line + 1 + max(len(s.body), 1))), None, 0)
            for s in self.sections
            if s.name in SHELL_SECTIONS and s.body
        ]


Source = Dockerfile | Script | Definition


# ---------------------------------------------------------------------------------------------
# parsing


#: a shell heredoc written `<< 'EOF'` at the end of an instruction: BuildKit reads a heredoc only
#: from a word that starts with `<<` and names its delimiter (`<<EOF`, `<<-'EOF'`), so with the space
#: the body lines are instructions to it (moby/buildkit frontend/dockerfile/parser, ParseHeredoc)
_SPACED_HEREDOC = re.compile(r"<<(-?)\s+(['\"]?)([A-Za-z_]\w*)\2\s*$")


#: BuildKit's own Dockerfile frontends (`# syntax=docker/dockerfile:1.7`, the -upstream and labs builds)
_OWN_FRONTEND = re.compile(r"^(docker\.io/)?docker/dockerfile(-upstream)?(:[\w.-]+)?(@sha256:[0-9a-f]+)?$", re.I)


#: how a frontend's own instruction is written: an upper-case word, maybe with a mark (`INCLUDE+`)
_FRONTEND_WORD = re.compile(r"^[A-Z][A-Z0-9_]*[+!]?$")


def _third_party_frontend(directives: dict[str, str]) -> bool:
    """The file names a frontend other than BuildKit's Dockerfile one (`# syntax = edrevo/dockerfile-plus`),
    which reads instructions of its own before it hands the rest to the Dockerfile frontend."""
    syntax = directives.get("syntax", "").strip()
    return bool(syntax) and not _OWN_FRONTEND.match(syntax)


def parse_dockerfile(text: str, path: str = "Dockerfile") -> Dockerfile:
    """Parse Dockerfile text. Raises :class:`InputError` on anything ``docker build`` rejects."""
    _check_text(text, path)
    lines = tuple(text.splitlines())
    directives = _directives(lines)
    escape = directives.get("escape", "\\")
    if escape not in ("\\", "`"):
        raise InputError(
            f"{path}:1: the escape directive must be '\\' or '`', not {escape!r}",
            hint="Fix or remove the '# escape=' line at the top of the file.",
        )
    if _goparser is None:  # pragma: no cover
        raise KilnError(
            "kiln lint needs the 'dockerfile' package (BuildKit's Dockerfile parser), which is not installed.",
            hint="pip install dockerfile",
        )
    try:
        commands = _goparser.parse_string(text)
    except _goparser.GoParseError as e:
        msg = str(e)
        if "heredoc" in msg:
            _check_heredocs(lines, path, escape)  # raises with the line that opened it
        if "no instructions" in msg:
            raise InputError(
                f"{path}: the file has no instructions (it is empty or only comments)",
                hint="Lint a Dockerfile that has at least a FROM line.",
            ) from None
        raise InputError(
            f"{path}: BuildKit's parser rejects this file: {msg}",
            hint="Fix the syntax; `docker build` would fail the same way.",
        ) from None

    preamble: list[Instruction] = []
    stages: list[Stage] = []
    current: list[Instruction] = []
    global_args: dict[str, str | None] = {}
    pending_from: Instruction | None = None

    def close_stage() -> None:
        if pending_from is None:
            return
        stages.append(_make_stage(len(stages), pending_from, tuple(current), stages, global_args, path))

    previous = None
    foreign: InputError | None = None  # the first instruction of a third-party frontend
    for c in commands:
        if not c.cmd:
            raise InputError(
                f"{path}:{c.start_line}: a line continuation ({escape!r}) with no instruction after it",
                hint=f"Remove the stray {escape!r} or finish the instruction.",
            )
        keyword = c.cmd.upper()
        if (keyword not in KNOWN_INSTRUCTIONS and _third_party_frontend(directives)
                and _FRONTEND_WORD.match(c.cmd)):
            # the frontend defines it (dockerfile-plus's INCLUDE+ pastes in another file, stages and
            # all): what the build sees is not this text, so no finding on it could be trusted. A word
            # no frontend would define (`&&` after a missing backslash) is still reported first.
            foreign = foreign or InputError(
                f"{path}:{c.start_line}: {c.cmd!r} is an instruction of the frontend the file's `# syntax=` "
                f"line names ({directives['syntax'].strip()}), not of Dockerfile: kiln lint reads Dockerfile "
                "syntax only, and cannot tell what that instruction adds to the build",
                hint="Lint the Dockerfile that frontend produces (for dockerfile-plus: this file with each "
                     "INCLUDE+ replaced by the text of the file it includes).",
            )
            continue
        if keyword not in KNOWN_INSTRUCTIONS:
            spaced = _SPACED_HEREDOC.search(lines[previous.end_line - 1]) if previous is not None else None
            if spaced:
                raise InputError(
                    f"{path}:{c.start_line}: unknown instruction {c.cmd!r}: the line before it ends with "
                    f"`{spaced.group(0).strip()}`, which BuildKit does not read as a heredoc (a space after `<<`), "
                    "so the heredoc's body is read as instructions and `docker build` fails here too",
                    hint="Write it without the space: "
                         f"`<<{spaced.group(1)}{spaced.group(2)}{spaced.group(3)}{spaced.group(2)}`.",
                )
            if c.cmd.startswith(("&&", "||", "|", ";")) and previous is not None:
                # `... -g` then `&& rm ...`: the line before lost its backslash, so its RUN ended there
                raise InputError(
                    f"{path}:{c.start_line}: unknown instruction {c.cmd!r}: line {previous.end_line} ends without "
                    f"`{escape}`, so the command on it ends its {previous.cmd.upper()} and this line starts a new "
                    "instruction; `docker build` fails here too",
                    hint=f"End line {previous.end_line} with ` {escape}` to continue the command.",
                )
            raise InputError(
                f"{path}:{c.start_line}: unknown instruction {c.cmd!r}",
                hint="Check the spelling; if this is not a Dockerfile, lint it as a script (name it *.sh).",
            )
        previous = c
        stage_index = len(stages) if pending_from is not None else -1
        if keyword == "FROM":
            close_stage()
            stage_index = len(stages)
        ins = Instruction(
            keyword=keyword,
            args=tuple(c.value),
            flags=tuple(c.flags),
            exec_form=bool(c.json),
            heredocs=_heredocs(c, lines, escape),
            line=c.start_line,
            end_line=c.end_line,
            original=c.original,
            stage=stage_index,
            sub_keyword=c.sub_cmd.upper() if c.sub_cmd else None,
        )
        if keyword == "FROM":
            pending_from = ins
            current = []
        elif pending_from is None:
            if keyword != "ARG":
                raise InputError(
                    f"{path}:{ins.line}: {keyword} before the first FROM (only ARG may come before FROM)",
                    hint="Start the Dockerfile with FROM (optionally preceded by ARG lines).",
                )
            preamble.append(ins)
            for name, value in arg_pairs(ins):
                # a default may name an earlier ARG (ARG BASE=cuda:${CUDA}-devel): expand it now
                global_args[name] = substitute(value, global_args) if value is not None else None
        else:
            current.append(ins)
    close_stage()
    if foreign is not None:
        raise foreign
    if not stages:
        raise InputError(f"{path}: the file has no FROM instruction", hint="A Dockerfile needs a FROM line.")
    return Dockerfile(
        path=path,
        lines=lines,
        directives=directives,
        escape=escape,
        preamble=tuple(preamble),
        stages=tuple(stages),
        global_args=global_args,
    )


def parse_script(text: str, path: str = "script.sh") -> Script:
    _check_text(text, path)
    if not text.strip():
        raise InputError(f"{path}: the script is empty", hint="Lint a non-empty shell script.")
    return Script(path=path, lines=tuple(text.splitlines()))


_SECTION = re.compile(r"^%([A-Za-z]+)\b\s*(.*)$")
_HEADER = re.compile(r"^([A-Za-z][A-Za-z0-9_-]*)\s*:\s*(.*)$")


def parse_definition(text: str, path: str = "image.def") -> Definition:
    """Parse an Apptainer definition. Our own small reader: the format is a header of
    ``Key: value`` lines and ``%section`` blocks (apptainer's ``pkg/build/types/parser``); no
    Python library reads it."""
    _check_text(text, path)
    lines = tuple(text.splitlines())
    header: dict[str, str] = {}
    sections: list[Section] = []
    cur: tuple[str, str, int] | None = None
    body: list[str] = []
    for n, raw in enumerate(lines, start=1):
        m = _SECTION.match(raw)
        if m:
            if cur is not None:
                sections.append(Section(cur[0], cur[1], cur[2], tuple(body)))
            cur, body = (m.group(1).lower(), m.group(2), n), []
            continue
        if cur is not None:
            body.append(raw)
            continue
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        h = _HEADER.match(stripped)
        if h is None:
            raise InputError(
                f"{path}:{n}: not a 'Key: value' header line before the first %section: {stripped[:60]!r}",
                hint="An Apptainer definition starts with 'Bootstrap: ...' and 'From: ...' lines.",
            )
        header[h.group(1).lower()] = h.group(2).strip()
    if cur is not None:
        sections.append(Section(cur[0], cur[1], cur[2], tuple(body)))
    if "bootstrap" not in header:
        raise InputError(
            f"{path}: no 'Bootstrap:' header, so this is not an Apptainer/Singularity definition",
            hint="Start the file with 'Bootstrap: docker' (and 'From: image'), or lint it as a Dockerfile.",
        )
    return Definition(path=path, lines=lines, header=header, sections=tuple(sections))


def read_source(path: Path, kind: FileKind | None = None, display: str | None = None) -> Source:
    """Read and parse one file. ``kind`` None: guess from the name and the first line."""
    name = display or str(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{name}: no such file", hint="Check the path.") from None
    except IsADirectoryError:
        raise InputError(f"{name} is a directory", hint="Pass files, or a folder to search.") from None
    except OSError as e:
        raise InputError(f"{name}: cannot be read ({e.strerror})", hint="Check its permissions.") from None
    text = decode(data, name)
    if kind is None:
        kind = guess_kind(path, text)
    if kind == "script":
        return parse_script(text, name)
    if kind == "apptainer":
        return parse_definition(text, name)
    return parse_dockerfile(text, name)


def decode(data: bytes, name: str) -> str:
    """Bytes → text; binary data gives a clear :class:`InputError`."""
    if b"\x00" in data[:8192]:
        raise InputError(
            f"{name}: this is a binary file, not a Dockerfile (it contains NUL bytes)",
            hint="Pass the Dockerfile (a text file), not a build output or an image.",
        )
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise InputError(
            f"{name}:{line}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})",
            hint="Dockerfiles are read as UTF-8: re-encode the file, or pass the right one.",
        ) from None


DOCKERFILE_NAME = re.compile(r"(?i)^(dockerfile|containerfile)([._-].*)?$|.*\.(dockerfile|containerfile)$")
SCRIPT_SUFFIXES = (".sh", ".bash")
DEFINITION_NAME = re.compile(r"(?i)^(singularity|apptainer)([._-].*)?$|.*\.def$")


def guess_kind(path: Path, text: str) -> FileKind:
    first = next((ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")), "")
    if DEFINITION_NAME.match(path.name) or re.match(r"(?i)bootstrap\s*:", first):
        return "apptainer"
    if path.name.endswith(SCRIPT_SUFFIXES) and not DOCKERFILE_NAME.match(path.name):
        return "script"
    if not DOCKERFILE_NAME.match(path.name) and _shebang_is_shell(text):
        return "script"
    return "dockerfile"


# ---------------------------------------------------------------------------------------------
# helpers


def arg_pairs(ins: Instruction) -> list[tuple[str, str | None]]:
    """``ARG A B=2`` → [("A", None), ("B", "2")] (quotes removed)."""
    out: list[tuple[str, str | None]] = []
    for item in ins.args:
        name, eq, value = item.partition("=")
        out.append((name, unquote(value) if eq else None))
    return out


def env_pairs(ins: Instruction) -> list[tuple[str, str]]:
    """``ENV A=1 B="x y"`` → [("A", "1"), ("B", "x y")]. The Go parser gives key, value, ..."""
    vals = ins.args
    return [(vals[i], unquote(vals[i + 1])) for i in range(0, len(vals) - 1, 2)]


def unquote(value: str) -> str:
    """Remove Dockerfile word quoting (``"x y"`` → ``x y``, ``a\\ b`` → ``a b``); keep ``$VAR``."""
    if not any(ch in value for ch in "\"'\\"):
        return value
    try:
        parts = shlex.split(value, posix=True)
    except ValueError:
        return value
    return " ".join(parts)


def substitute(text: str, values: Mapping[str, str | None]) -> str | None:
    """Expand ``$NAME``, ``${NAME}``, ``${NAME:-word}``, ``${NAME-word}``, ``${NAME:+word}`` and
    ``${NAME+word}`` as BuildKit's word lexer does, with nested expansions inside ``word`` (``${A:+"${A}/"}``)
    and quotes inside ``word`` removed; None if a value that matters is unknown. A name without a
    value (an ARG with no default) counts as unset."""
    out, ok = _expand(text, values, 0, len(text))
    return out if ok else None


def _expand(text: str, values: Mapping[str, str | None], i: int, end: int) -> tuple[str, bool]:
    out: list[str] = []
    ok = True
    while i < end:
        ch = text[i]
        if ch == "\\" and i + 1 < end:
            out.append(text[i : i + 2])
            i += 2
            continue
        if ch != "$" or i + 1 >= end:
            out.append(ch)
            i += 1
            continue
        m = re.compile(r"[A-Za-z_][A-Za-z0-9_]*").match(text, i + 1, end)
        if m:  # $NAME
            v = values.get(m.group(0))
            if v is None:
                ok = False
                out.append(m.group(0).join(("${", "}")))
            else:
                out.append(v)
            i = m.end()
            continue
        if text[i + 1] != "{":
            out.append(ch)
            i += 1
            continue
        m = re.compile(r"[A-Za-z_][A-Za-z0-9_]*").match(text, i + 2, end)
        close = _closing_brace(text, i + 2, end)
        if not m or close < 0:
            out.append(ch)
            i += 1
            continue
        name, j = m.group(0), m.end()
        op = ""
        for cand in (":-", ":+", "-", "+"):
            if text.startswith(cand, j):
                op, j = cand, j + len(cand)
                break
        v = values.get(name)
        if not op:
            if j != close:  # ${NAME:?msg}, ${NAME#pat}...: not followed
                out.append(text[i : close + 1])
                ok = False
            elif v is None:
                out.append(text[i : close + 1])
                ok = False
            else:
                out.append(v)
            i = close + 1
            continue
        word, word_ok = _expand(text, values, j, close)
        word = word.replace('"', "").replace("'", "")
        is_set, non_empty = v is not None, bool(v)
        if op == ":-":
            out.append(v if non_empty else word)  # type: ignore[arg-type]
            ok = ok and (non_empty or word_ok)
        elif op == "-":
            out.append(v if is_set else word)  # type: ignore[arg-type]
            ok = ok and (is_set or word_ok)
        elif op == ":+":
            out.append(word if non_empty else "")
            ok = ok and (not non_empty or word_ok)
        else:  # "+"
            out.append(word if is_set else "")
            ok = ok and (not is_set or word_ok)
        i = close + 1
    return "".join(out), ok


def _closing_brace(text: str, i: int, end: int) -> int:
    """The index of the ``}`` that closes a ``${`` whose name starts at ``i`` (nesting counted)."""
    depth = 1
    while i < end:
        if text.startswith("${", i):
            depth += 1
            i += 2
            continue
        if text[i] == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


_SHELL_PROGRAM = re.compile(r"(/usr)?(/bin/)?(ba|da|z)?sh")


def _shell_c_script(argv: Sequence[str]) -> str | None:
    """The script of an exec-form ``["/bin/bash", "-c", "script"]`` (flags like ``-ec``, ``-lc``,
    ``-o pipefail -c`` allowed before it), else None."""
    if len(argv) < 3 or not _SHELL_PROGRAM.fullmatch(argv[0]):
        return None
    i = 1
    while i < len(argv) - 1:
        a = argv[i]
        if a in ("-o", "+o") and i + 2 < len(argv):
            i += 2
            continue
        if re.fullmatch(r"[-+][a-zA-Z]+", a):
            if "c" in a[1:]:
                return argv[i + 1]
            i += 1
            continue
        return None
    return None


def _make_stage(
    index: int,
    from_ins: Instruction,
    body: tuple[Instruction, ...],
    earlier: Sequence[Stage],
    global_args: Mapping[str, str | None],
    path: str,
) -> Stage:
    words = list(from_ins.args)
    if not words:
        raise InputError(f"{path}:{from_ins.line}: FROM without an image", hint="Write FROM <image>[:tag].")
    image = words[0]
    name = None
    if len(words) >= 3 and words[1].lower() == "as":
        name = words[2].lower()
    resolved = substitute(image, global_args)
    parent = None
    if resolved is not None:
        for s in earlier:
            if s.name is not None and s.name == resolved.lower():
                parent = s.index
    return Stage(
        index=index,
        name=name,
        image=image,
        resolved_image=resolved,
        parent=parent,
        from_instruction=from_ins,
        instructions=body,
    )


def _directives(lines: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for raw in lines:
        m = _DIRECTIVE.fullmatch(raw.strip()) if raw.strip().startswith("#") else None
        if not m:
            break
        key = m.group(1).lower()
        if key in out:
            break  # a repeated directive is treated as a comment by BuildKit
        out[key] = m.group(2)
    return out


def _header_end(lines: Sequence[str], start: int, escape: str) -> int:
    """Last line of an instruction's logical line (before any heredoc body)."""
    n = start
    while n <= len(lines) and lines[n - 1].rstrip().endswith(escape):
        n += 1
        while n <= len(lines) and lines[n - 1].strip().startswith("#"):
            n += 1
    return min(n, len(lines))


def _heredocs(c: Any, lines: Sequence[str], escape: str) -> tuple[Heredoc, ...]:
    if not c.heredocs:
        return ()
    header = "\n".join(lines[c.start_line - 1 : _header_end(lines, c.start_line, escape)])
    strip = {m.group(3): m.group(1) == "-" for m in _HEREDOC_MARK.finditer(header)}
    body = _header_end(lines, c.start_line, escape) + 1
    out = []
    for h in c.heredocs:
        out.append(Heredoc(h.name, h.content, body, strip.get(h.name, False)))
        body += h.content.count("\n") + 1  # the body lines and the terminator
    return tuple(out)


def _check_heredocs(lines: Sequence[str], path: str, escape: str) -> None:
    """Find an unterminated heredoc ourselves, to say which line opened it.

    The Go parser only says "unterminated heredoc"; we walk the lines the way it does: an
    instruction line (not a comment) that has ``<<NAME`` markers opens bodies that end at a line
    equal to NAME (leading tabs removed for ``<<-``).
    """
    i = 0
    n = len(lines)
    while i < n:
        raw = lines[i]
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            i += 1
            continue
        start = i
        # the logical line: follow continuations
        while i < n and lines[i].rstrip().endswith(escape):
            i += 1
        header = "\n".join(lines[start : i + 1])
        keyword = header.split(None, 1)[0].upper() if header.split() else ""
        marks = list(_HEREDOC_MARK.finditer(header)) if keyword in ("RUN", "COPY", "ADD", "ONBUILD") else []
        i += 1
        for m in marks:
            name, dash = m.group(3), m.group(1) == "-"
            while i < n:
                body_line = lines[i].lstrip("\t") if dash else lines[i]
                i += 1
                if body_line == name:
                    break
            else:
                line_no = start + 1 + header[: m.start()].count("\n")
                raise InputError(
                    f"{path}:{line_no}: heredoc <<{name} is never closed (no line '{name}' follows)",
                    hint=f"End the heredoc with a line that holds only {name}.",
                )


def _check_text(text: str, path: str) -> None:
    if "\x00" in text:
        raise InputError(
            f"{path}: this is a binary file, not a Dockerfile (it contains NUL bytes)",
            hint="Pass the Dockerfile (a text file), not a build output or an image.",
        )
    if not text.strip():
        raise InputError(
            f"{path}: the file is empty",
            hint="Lint a Dockerfile that has at least a FROM line.",
        )


def _shebang_is_shell(text: str) -> bool:
    first = text.split("\n", 1)[0]
    return bool(re.match(r"#!\s*(/usr)?/bin/(env\s+)?(ba|da|z)?sh\b", first))
