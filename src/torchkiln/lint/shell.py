"""Just enough shell to lint ``RUN`` lines and scripts: words, operators, simple commands, and
what a ``pip``/``uv``/``apt-get``/``setup.py`` command does.

Our own small tokenizer: ``shlex`` (stdlib) splits words but loses the line of each word and
whether two words touched (``A=8.0;9.0`` vs ``A=8.0; 9.0``), which the rules need; a full bash
grammar is not needed. Handled: single/double quotes, backslash escapes and line continuations,
``$(...)``/backticks/``${...}`` kept inside a word, comments, the operators ``&& || ; | & ( )``,
redirections (their target word is dropped), and here-document bodies (skipped: they are data).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Literal

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from torchkiln.lint.model import Snippet, _shell_c_script

TokenKind = Literal["word", "op", "redir"]

_OPS = ("&&", "||", ";;", "|&", ";", "|", "&", "(", ")")
_REDIRS = ("<<<", "<<-", "<<", ">>", ">&", "<&", "&>>", "&>", ">|", "<>", ">", "<")
_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)


@dataclass(frozen=True)
class Token:
    kind: TokenKind
    text: str  # the value: quotes removed, escapes resolved
    raw: str  # as written
    index: int  # text line index inside the snippet
    start: int  # offset in the snippet text
    end: int
    quoted: bool = False


@lru_cache(maxsize=4096)
def tokenize(text: str, joined: bool = False) -> tuple[Token, ...]:
    """Split shell text into words, operators and redirections (with a newline operator).

    ``joined``: the text is a Dockerfile RUN whose lines BuildKit joins before the shell sees them
    (a backslash-newline is removed), so a ``#`` comment runs to the end of the joined command and
    swallows the continuation lines after it; in a script a comment ends at its own line."""
    return tuple(_tokenize(text, joined))


@lru_cache(maxsize=4096)
def swallowing_comments(text: str) -> tuple[tuple[int, int], ...]:
    """In a Dockerfile RUN (joined text): each ``#`` comment that a line continuation extends over
    later lines that hold more shell text, as (line index of the comment, last line index it
    hides). Those lines are part of the comment for the shell: their commands never run."""
    found: list[tuple[int, int]] = []
    _tokenize(text, True, found)
    return tuple(found)


def _tokenize(text: str, joined: bool = False, swallowed: list[tuple[int, int]] | None = None) -> list[Token]:
    toks: list[Token] = []
    i, n = 0, len(text)
    line = 0
    pending_heredocs: list[tuple[str, bool]] = []

    while i < n:
        ch = text[i]
        if ch in " \t\r":
            i += 1
            continue
        if ch == "\\" and i + 1 < n and text[i + 1] == "\n":
            i += 2
            line += 1
            continue
        if ch == "\n":
            toks.append(Token("op", "\n", "\n", line, i, i + 1))
            i += 1
            line += 1
            if pending_heredocs:
                i, skipped = _skip_heredocs(text, i, pending_heredocs)
                line += skipped
                pending_heredocs = []
            continue
        if ch == "#":
            start_line, hides = line, False
            while i < n:
                if text[i] == "\n":
                    if not (joined and i > 0 and text[i - 1] == "\\"):
                        break
                    line += 1  # BuildKit removed this backslash-newline: the comment goes on
                elif line > start_line and text[i] not in " \t\\":
                    hides = True
                i += 1
            if hides and swallowed is not None:
                swallowed.append((start_line, line))
            continue
        op = next((o for o in _REDIRS if text.startswith(o, i)), None) if ch in "<>&" else None
        if op is not None:
            toks.append(Token("redir", op, op, line, i, i + len(op)))
            i += len(op)
            if op in ("<<", "<<-"):  # the next word is a here-document delimiter
                j = _skip_blank(text, i)
                word, i2, quoted, nl = _read_word(text, j)
                if word:
                    pending_heredocs.append((word, op == "<<-"))
                    toks.append(Token("word", word, text[j:i2], line, j, i2, quoted))
                    line += nl
                    i = i2
            continue
        op = next((o for o in _OPS if text.startswith(o, i)), None) if ch in "&|;()" else None
        if op is not None:
            toks.append(Token("op", op, op, line, i, i + len(op)))
            i += len(op)
            continue
        start = i
        word, i, quoted, nl = _read_word(text, i)
        # "2>" and "2>&1": a number touching a redirection is part of it
        if word.isdigit() and not quoted and i < n and text[i] in "<>":
            continue
        toks.append(Token("word", word, text[start:i], line, start, i, quoted))
        line += nl
    return toks


def _skip_blank(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t":
        i += 1
    return i


def _skip_heredocs(text: str, i: int, docs: Sequence[tuple[str, bool]]) -> tuple[int, int]:
    lines = 0
    for delim, strip_tabs in docs:
        while i < len(text):
            end = text.find("\n", i)
            if end < 0:
                end = len(text)
            body_line = text[i:end]
            i = end + 1
            lines += 1
            if (body_line.lstrip("\t") if strip_tabs else body_line) == delim:
                break
    return min(i, len(text)), lines


def _read_word(text: str, i: int) -> tuple[str, int, bool, int]:
    """Read one word from ``i``; returns (value, end, quoted, newlines inside)."""
    out: list[str] = []
    n = len(text)
    quoted = False
    newlines = 0
    while i < n:
        ch = text[i]
        if ch in " \t\r\n;&|()<>":
            break
        if ch == "\\":
            if i + 1 < n:
                if text[i + 1] == "\n":
                    newlines += 1
                else:
                    out.append(text[i + 1])
                i += 2
            else:
                i += 1
            continue
        if ch == "'":
            end = text.find("'", i + 1)
            end = n if end < 0 else end
            out.append(text[i + 1 : end])
            newlines += text.count("\n", i, end)
            quoted = True
            i = end + 1
            continue
        if ch == '"':
            j = i + 1
            while j < n and text[j] != '"':
                if text[j] == "\\" and j + 1 < n and text[j + 1] in '"\\$`\n':
                    if text[j + 1] != "\n":
                        out.append(text[j + 1])
                    j += 2
                    continue
                out.append(text[j])
                j += 1
            newlines += text.count("\n", i, j)
            quoted = True
            i = j + 1
            continue
        if ch == "$" and i + 1 < n and text[i + 1] in "({":
            close = ")" if text[i + 1] == "(" else "}"
            j = _match(text, i + 1, text[i + 1], close)
            out.append(text[i:j])
            newlines += text.count("\n", i, j)
            i = j
            continue
        if ch == "`":
            end = text.find("`", i + 1)
            end = n if end < 0 else end + 1
            out.append(text[i:end])
            i = end
            continue
        out.append(ch)
        i += 1
    return "".join(out), i, quoted, newlines


def _match(text: str, i: int, open_: str, close: str) -> int:
    depth = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c == open_:
            depth += 1
        elif c == close:
            depth -= 1
            if depth == 0:
                return i + 1
        elif c in "'\"":
            end = text.find(c, i + 1)
            i = n if end < 0 else end
        i += 1
    return n


# ---------------------------------------------------------------------------------------------
# commands

_PREFIX_WORDS = frozenset({"if", "then", "else", "elif", "do", "while", "until", "!", "{", "}", "time"})
_SKIP_COMMANDS = frozenset({"fi", "done", "esac", "for", "case", "in"})


@dataclass(frozen=True)
class Guard:
    """A condition a command runs under: the branch of an ``if [ ... ]`` (``holds``: the then branch;
    not: the else branch), or the test before ``&&`` / ``||`` in its and-or list. ``test`` is the
    test command's words (``[ "$X" = 1 ]``, ``test -n "$X"``, ``[[ ... ]]``); None for a condition
    that is not one such test (an ``elif``, a command's exit status)."""

    test: tuple[Token, ...] | None
    holds: bool


@dataclass(frozen=True)
class Command:
    """One simple command: ``A=1 B=2 sudo -E pip install x`` → assignments A, B; words pip ..."""

    words: tuple[Token, ...]
    assignments: tuple[Token, ...]
    line: int  # line of the file
    snippet: Snippet | None = None
    #: the conditions it runs under, outermost first
    guards: tuple[Guard, ...] = ()
    #: the operator after it in its snippet (`&&`, `||`, `;`, `|`, `&`, or "\n" for a newline), "" at the end
    op_after: str = ""

    @property
    def argv(self) -> tuple[str, ...]:
        return tuple(t.text for t in self.words)

    @property
    def name(self) -> str:
        return self.argv[0].rsplit("/", 1)[-1] if self.words else ""

    def assigned(self) -> dict[str, str]:
        return dict(split_assignment(t.text) for t in self.assignments)  # type: ignore[misc]


def split_assignment(word: str) -> tuple[str, str] | None:
    m = _ASSIGN.match(word)
    return (m.group(1), m.group(2)) if m else None


@lru_cache(maxsize=4096)
def commands(snippet: Snippet) -> tuple[Command, ...]:
    """The simple commands of a snippet, in order (leading ``RUN`` and flags skipped)."""
    return tuple(_commands(snippet))


def _commands(snippet: Snippet) -> list[Command]:
    toks = list(tokenize(snippet.text, snippet.joined))
    # drop the instruction keyword and its flags
    skip = snippet.skip_words
    while skip and toks and toks[0].kind == "word":
        toks.pop(0)
        skip -= 1
    raw: list[tuple[list[Token], str]] = []  # each simple command's words and the operator after it
    cur: list[Token] = []
    drop_next = False
    for t in toks:
        if t.kind == "redir":
            drop_next = True
            continue
        if t.kind == "op":
            drop_next = False
            raw.append((cur, t.text))
            cur = []
            continue
        if drop_next:
            drop_next = False
            continue
        cur.append(t)
    raw.append((cur, ""))
    out: list[Command] = []
    guarded: list[Command] = []
    tracker = _GuardTracker()
    for words, op in raw:
        guards = tracker.enter(words, op)
        if words:
            made = [replace(c, op_after=op) for c in _make_command(words, snippet)]
            out.extend(made)
            guarded.extend(replace(c, guards=guards) if guards else c for c in made)
    # an `if` or loop left open is a syntax error (KL028): its branches are not known
    return out if tracker.frames else guarded


_TEST_COMMANDS = ("[", "[[", "test")


class _GuardTracker:
    """Follows ``if``/``then``/``else``/``fi``, loops, ``case`` and ``&&``/``||`` over the simple
    commands of a snippet, for the conditions each runs under (see :class:`Guard`)."""

    def __init__(self) -> None:
        # open compound commands: [kind, test, state]; kind "if" | "loop" | "case", state for an if:
        # "cond" (reading its condition), "then", "else"; test: the if's test words, None if unknown
        self.frames: list[list[object]] = []
        self.pending: list[Guard] = []  # from `[ ... ] &&` earlier in the and-or list
        self.or_seen = False  # the and-or list so far has a `||`
        self.conds = 0  # simple commands read in the current if condition

    def enter(self, words: list[Token], op: str) -> tuple[Guard, ...]:
        i = 0
        while i < len(words) and not words[i].quoted and words[i].text in _COMPOUND_WORDS:
            self._keyword(words[i].text)
            i += 1
        body = words[i:]
        frame = self.frames[-1] if self.frames else None
        is_test = bool(body) and body[0].text in _TEST_COMMANDS and not body[0].quoted
        if frame is not None and frame[0] == "if" and frame[2] == "cond" and body:
            self.conds += 1
            frame[1] = tuple(body) if is_test and self.conds == 1 and op in (";", "\n") else None
        guards = [Guard(f[1], f[2] == "then")  # type: ignore[arg-type]
                  for f in self.frames if f[0] == "if" and f[2] != "cond"]
        guards.extend(self.pending)
        if op == "&&":
            # what follows in this and-or list runs when the list so far succeeded: each test of a
            # chain of `&&`; after a `||` that is not followed
            if self.or_seen:
                self.pending = [Guard(None, True)]
            else:
                self.pending = [*self.pending, Guard(tuple(body) if is_test else None, True)]
        elif op == "||":
            # ... or failed: a lone test failed; anything else is not followed
            alone = is_test and not self.pending and not self.or_seen
            self.pending = [Guard(tuple(body) if alone else None, False)]
            self.or_seen = True
        elif op != "|":
            self.pending, self.or_seen = [], False
        return tuple(guards)

    def _keyword(self, kw: str) -> None:
        top = self.frames[-1] if self.frames else None
        if kw == "if":
            self.frames.append(["if", None, "cond"])
            self.conds = 0
        elif top is not None and top[0] == "if" and kw in ("then", "else", "elif"):
            if kw == "elif":  # later branches run under the earlier tests' failure too: not followed
                top[1], top[2] = None, "cond"
                self.conds = 2
            else:
                top[2] = kw
        elif kw == "fi" and top is not None and top[0] == "if":
            self.frames.pop()
        elif kw in ("for", "while", "until", "select"):
            self.frames.append(["loop", None, "body"])
        elif kw == "case":
            self.frames.append(["case", None, "body"])
        elif top is not None and (kw, top[0]) in (("done", "loop"), ("esac", "case")):
            self.frames.pop()


_COMPOUND_WORDS = frozenset({"if", "then", "else", "elif", "fi", "for", "while", "until", "select", "do", "done",
                             "case", "esac", "!", "{", "}", "time"})


def evaluate_test(test: Sequence[Token], value: Callable[[str], str | None]) -> bool | None:
    """What a test command (``[ "$X" = 1 ]``, ``test -n "$X"``, ``[[ $X == y ]]``) gives, with
    ``value`` reading each word (None: unknown); None when the test or a word is not known."""
    args = list(test)
    if not args:
        return None
    first = args[0].text
    if first == "[" and args[-1].text == "]" or first == "[[" and args[-1].text == "]]":
        args = args[1:-1]
    elif first == "test":
        args = args[1:]
    else:
        return None
    negate = False
    if args and args[0].text == "!" and not args[0].quoted:
        negate, args = True, args[1:]
    texts = [a.text for a in args]
    result: bool | None = None
    if len(args) == 1:
        v = value(texts[0])
        result = None if v is None else v != ""
    elif len(args) == 2 and texts[0] in ("-n", "-z") and not args[0].quoted:
        v = value(texts[1])
        result = None if v is None else (v != "") == (texts[0] == "-n")
    elif len(args) == 3 and texts[1] in ("=", "==", "!=") and not args[1].quoted:
        a, b = value(texts[0]), value(texts[2])
        if a is None or b is None or (first == "[[" and not args[2].quoted and any(c in texts[2] for c in "*?[")):
            return None  # unknown, or a [[ ]] pattern
        result = (a == b) == (texts[1] != "!=")
    if result is None:
        return None
    return not result if negate else result


def _make_command(words: list[Token], snippet: Snippet) -> list[Command]:
    i = 0
    while i < len(words) and words[i].text in _PREFIX_WORDS and not words[i].quoted:
        i += 1
    assigns: list[Token] = []
    while i < len(words) and _ASSIGN.match(words[i].raw):
        assigns.append(words[i])
        i += 1
    # wrappers that run the rest: sudo [-opts], env [-opts] [A=B...], exec, nohup, command, nice,
    # poetry/pipenv run, conda/mamba/micromamba run [-n ENV]
    while i < len(words):
        w = words[i].text.rsplit("/", 1)[-1]
        if w in ("sudo", "exec", "nohup", "command", "nice", "eatmydata", "xargs", "stdbuf"):
            i += 1
            while i < len(words) and words[i].text.startswith("-"):
                takes = w == "sudo" and words[i].text in ("-u", "-g", "-C", "-D", "-h", "-p", "-U")
                i += 2 if takes else 1
            continue
        if w in ("poetry", "pipenv") and i + 1 < len(words) and words[i + 1].text == "run":
            i += 2  # `poetry run pip install ...` runs pip in the project's environment
            continue
        if w in ("conda", "mamba", "micromamba") and i + 1 < len(words) and words[i + 1].text == "run":
            i += 2
            while i < len(words) and words[i].text.startswith("-"):
                takes = words[i].text in ("-n", "--name", "-p", "--prefix", "--cwd")
                i += 2 if takes else 1
            continue
        if w == "env":
            i += 1
            while i < len(words) and (words[i].text.startswith("-") or _ASSIGN.match(words[i].raw)):
                if _ASSIGN.match(words[i].raw):
                    assigns.append(words[i])
                i += 1
            continue
        break
    rest = tuple(words[i:])
    if rest and rest[0].text in _SKIP_COMMANDS:
        return []
    script = _shell_c_script([t.text for t in rest]) if len(rest) >= 3 else None
    if script is not None and not assigns:
        # `bash -c "pip install ... && ..."` in a shell-form RUN: the commands are those of the script,
        # each on the line of the bash command
        line = snippet.file_line(rest[0].index)
        return list(commands(Snippet(script, (line,) * (script.count("\n") + 1), snippet.instruction, 0)))
    first = rest[0] if rest else (assigns[0] if assigns else words[0])
    return [Command(rest, tuple(assigns), snippet.file_line(first.index), snippet)]


@dataclass
class ShellEnv:
    """Variables a shell exports to the commands it runs, as a snippet goes on."""

    exported: dict[str, str | None] = field(default_factory=dict)

    def apply(self, cmd: Command) -> None:
        if cmd.name in ("export", "declare", "typeset", "readonly") and cmd.words:
            for t in cmd.words[1:]:
                pair = split_assignment(t.text)
                if pair:
                    self.exported[pair[0]] = pair[1]
                elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", t.text):
                    self.exported.setdefault(t.text, None)
        elif cmd.name == "unset":
            for t in cmd.words[1:]:
                self.exported.pop(t.text, None)

    def for_command(self, cmd: Command) -> dict[str, str | None]:
        env: dict[str, str | None] = dict(self.exported)
        env.update(cmd.assigned())
        return env


def walk(
    snippet: Snippet, initial: Mapping[str, str | None] | None = None
) -> Iterator[tuple[Command, dict[str, str | None]]]:
    """Each command of a snippet with the environment it runs in (``initial`` + exports + prefix)."""
    env = ShellEnv(dict(initial or {}))
    for cmd in commands(snippet):
        yield cmd, env.for_command(cmd)
        env.apply(cmd)


# ---------------------------------------------------------------------------------------------
# package installers

ReqKind = Literal["name", "path", "vcs", "url", "wheel", "unknown"]


@dataclass(frozen=True)
class Req:
    text: str
    kind: ReqKind
    name: str | None  # canonical project name when known


def parse_req(text: str, editable: bool = False) -> Req:
    t = text.strip()
    if t.startswith(("git+", "hg+", "svn+", "bzr+")):
        return Req(t, "vcs", _egg_name(t))
    if re.match(r"^[a-z]+://", t):
        if t.endswith(".whl"):
            return Req(t, "wheel", _wheel_name(t))
        return Req(t, "url", _egg_name(t))
    if t.endswith(".whl"):
        return Req(t, "wheel", _wheel_name(t))
    if (
        editable
        or t in (".", "..")
        or t.startswith(("./", "../", "/", "~"))
        or ("/" in t and " @ " not in t and "@" not in t)
    ):
        return Req(t, "path", None)
    if "$" in t:
        return Req(t, "unknown", None)
    try:
        r = Requirement(t)
    except InvalidRequirement:
        return Req(t, "unknown", None)
    name = canonicalize_name(r.name)
    if r.url:
        return Req(t, "vcs" if "+" in r.url.split("://", 1)[0] else "url", name)
    return Req(t, "name", name)


def _egg_name(url: str) -> str | None:
    m = re.search(r"[#&]egg=([A-Za-z0-9_.-]+)", url)
    return canonicalize_name(m.group(1)) if m else None


def _wheel_name(url: str) -> str | None:
    base = url.rsplit("/", 1)[-1]
    return canonicalize_name(base.split("-", 1)[0]) if "-" in base else None


InstallTool = Literal["pip", "uv", "conda", "apt", "setup.py", "dnf", "apk", "poetry"]

# pip / uv options that take a value (long names; short ones are mapped first)
_VALUE_OPTS = frozenset(
    {
        "--requirement", "--constraint", "--constraints", "--editable", "--index-url", "--extra-index-url",
        "--find-links", "--target", "--prefix", "--root", "--src", "--upgrade-strategy", "--progress-bar",
        "--cache-dir", "--log", "--python", "--python-version", "--platform", "--implementation", "--abi",
        "--no-binary", "--only-binary", "--config-settings", "--global-option", "--build-option",
        "--install-option", "--index", "--default-index", "--extra", "--group", "--torch-backend",
        "--build-constraints", "--build-constraint", "--overrides", "--override", "--prerelease",
        "--resolution", "--exclude-newer", "--link-mode", "--keyring-provider", "--reinstall-package",
        "--no-build-isolation-package", "--refresh-package", "--no-install-package", "--only-install-package",
        "--no-sources-package", "--upgrade-package", "--index-strategy",
        "--trusted-host", "--proxy", "--retries", "--timeout", "--exists-action", "--cert", "--client-cert",
        "--report", "--python-platform", "--directory", "--project", "--package", "--no-binary-package",
        "--no-build-package", "--config-file", "--cache", "--name", "--prefix-dir", "--channel", "--file",
    }
)  # fmt: skip
#: pip's general options that take a value (`pip --cache-dir DIR install ...`)
_PIP_GENERAL_VALUE_OPTS = frozenset(
    {"--cache-dir", "--log", "--proxy", "--retries", "--timeout", "--exists-action", "--trusted-host", "--cert",
     "--client-cert", "--python", "--keyring-provider", "--use-feature", "--use-deprecated", "--log-file"}
)  # fmt: skip
_SHORT = {
    "-r": "--requirement", "-c": "--constraint", "-e": "--editable", "-i": "--index-url",
    "-f": "--find-links", "-t": "--target", "-U": "--upgrade", "-n": "--no-cache", "-p": "--python",
    "-P": "--upgrade-package", "-b": "--build-constraints", "-C": "--config-settings", "-q": "--quiet",
    "-v": "--verbose", "-y": "--yes", "-I": "--ignore-installed",
}  # fmt: skip


@dataclass(frozen=True)
class Install:
    """A package install or build: ``pip install``, ``uv pip install``, ``uv sync``, ``apt-get
    install``, ``conda install``, ``python setup.py install``..."""

    tool: InstallTool
    sub: str  # install / wheel / sync / add / build_ext / bdist_wheel / develop
    command: Command
    options: Mapping[str, tuple[str, ...]]
    reqs: tuple[Req, ...]
    env: Mapping[str, str | None]

    def has(self, *names: str) -> bool:
        return any(n in self.options for n in names)

    def values(self, *names: str) -> tuple[str, ...]:
        return tuple(v for n in names for v in self.options.get(n, ()))

    @property
    def line(self) -> int:
        return self.command.line

    @property
    def names(self) -> set[str]:
        return {r.name for r in self.reqs if r.name}


#: uv's global options that take a value (uv CLI reference, "Global options"); the others are flags
_UV_GLOBAL_VALUE_OPTS = frozenset(
    {"--directory", "--project", "--cache-dir", "--config-file", "--color", "--python-preference",
     "--allow-insecure-host", "--trusted-host"}
)  # fmt: skip


def uv_global_options(args: list[str]) -> int:
    """How many of ``args`` (uv's arguments) are global options before the subcommand:
    `uv --managed-python pip install`, `uv -q --no-cache sync`, `uv --directory /app sync`."""
    i = 0
    while i < len(args) and args[i].startswith("-"):
        i += 2 if args[i] in _UV_GLOBAL_VALUE_OPTS else 1
    return min(i, len(args))


_PYTHON = re.compile(r"python(\d(\.\d+)?)?")


def module_argv(argv: Sequence[str]) -> list[str]:
    """`python -m pip ...` (python3.11, python -m uv) as the `pip ...` it runs; any other argv as is."""
    if (len(argv) >= 3 and _PYTHON.fullmatch(argv[0].rsplit("/", 1)[-1])
            and argv[1] == "-m" and argv[2] in ("pip", "uv")):
        return list(argv[2:])
    return list(argv)


def recognize(cmd: Command, env: Mapping[str, str | None]) -> Install | None:
    """Recognize a package install/build command; None for anything else."""
    argv = list(cmd.argv)
    if not argv:
        return None
    prog = argv[0].rsplit("/", 1)[-1]
    if _PYTHON.fullmatch(prog):
        if (run := module_argv(argv)) != argv:
            argv = run
            prog = argv[0]
        elif len(argv) >= 3 and argv[1].endswith("setup.py"):
            subs = [a for a in argv[2:] if not a.startswith("-")]
            # `setup.py build develop`, `build_ext install`: the command that installs is what counts
            sub = next((a for a in subs if a in ("install", "develop")), subs[0] if subs else "")
            if sub in ("install", "develop", "build", "build_ext", "bdist_wheel", "bdist_egg"):
                return Install("setup.py", sub, cmd, _opts(argv[2:])[0], (), env)
            return None
        else:
            return None
    if re.fullmatch(r"pip(\d(\.\d+)?)?", prog):
        # pip's general options may come before the command: `pip --no-cache-dir install torch`
        # (pip's own parser takes them anywhere; pip/_internal/cli/main_parser.py)
        sub_at = 1
        while sub_at < len(argv) and argv[sub_at].startswith("-"):
            sub_at += 2 if argv[sub_at] in _PIP_GENERAL_VALUE_OPTS else 1
        if len(argv) > sub_at and argv[sub_at] in ("install", "wheel", "download"):
            opts, pos = _opts([*argv[1:sub_at], *argv[sub_at + 1 :]])
            # pip's option parser (optparse) accepts any unambiguous prefix of a long option:
            # `--no-cache` is `--no-cache-dir` (pip/_internal/cli/cmdoptions.py; Python optparse docs)
            if "--no-cache" in opts:
                opts.setdefault("--no-cache-dir", opts.pop("--no-cache"))
            return Install("pip", argv[sub_at], cmd, opts, _reqs(opts, pos), env)
        return None
    if prog == "poetry" and len(argv) >= 2 and argv[1] in ("install", "add", "sync", "update"):
        # Poetry downloads into its own cache (~/.cache/pypoetry) and copies into the environment
        opts, pos = _opts(argv[2:])
        reqs = _reqs(opts, pos) if argv[1] == "add" else ()
        return Install("poetry", argv[1], cmd, opts, reqs, env)
    if prog == "mim" and len(argv) >= 2 and argv[1] == "install":
        # OpenMMLab's `mim install` runs `pip install` with the same arguments (plus a find-links)
        opts, pos = _opts(argv[2:])
        return Install("pip", "install", cmd, opts, _reqs(opts, pos), env)
    if prog == "uv":
        rest = argv[1 + uv_global_options(argv[1:]) :]
        if rest[:2] in (["pip", "install"], ["pip", "sync"]):
            opts, pos = _opts(rest[2:])
            return Install("uv", rest[1], cmd, _uv_aliases(opts), _reqs(opts, pos), env)
        if rest[:1] in (["sync"], ["add"]):
            opts, pos = _opts(rest[1:])
            return Install("uv", rest[0], cmd, _uv_aliases(opts), _reqs(opts, pos), env)
        return None
    if prog in ("apt-get", "apt", "aptitude") and "install" in argv[1:]:
        opts, pos = _opts(argv[1:])
        pkgs = tuple(Req(p, "name", p) for p in pos if p != "install")
        return Install("apt", "install", cmd, opts, pkgs, env)
    if prog in ("dnf", "yum", "microdnf", "tdnf") and "install" in argv[1:]:
        opts, pos = _opts(argv[1:])
        pkgs = tuple(Req(p, "name", p) for p in pos if p != "install")
        return Install("dnf", prog, cmd, opts, pkgs, env)
    if prog == "apk" and "add" in argv[1:]:
        opts, pos = _opts(argv[1:])
        pkgs = tuple(Req(p, "name", p) for p in pos if p != "add")
        return Install("apk", "add", cmd, opts, pkgs, env)
    if prog in ("conda", "mamba", "micromamba") and len(argv) >= 2 and argv[1] in ("install", "create"):
        opts, pos = _opts(argv[2:])
        pkgs = tuple(Req(p, "name", canonicalize_name(re.split(r"[=<>!]", p, maxsplit=1)[0])) for p in pos)
        return Install("conda", argv[1], cmd, opts, pkgs, env)
    return None


def _uv_aliases(opts: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
    """uv accepts pip's spelling `--no-cache-dir` as an alias of `--no-cache` (uv's CLI reference,
    'uv pip install --no-cache': "alias: --no-cache-dir"); `-n` is its short form."""
    if "--no-cache-dir" in opts and "--no-cache" not in opts:
        opts = {**opts, "--no-cache": opts["--no-cache-dir"]}
    return opts


def _opts(args: Sequence[str]) -> tuple[dict[str, tuple[str, ...]], list[str]]:
    opts: dict[str, list[str]] = {}
    pos: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            pos.extend(args[i + 1 :])
            break
        if a.startswith("--"):
            name, eq, value = a.partition("=")
            if eq:
                opts.setdefault(name, []).append(value)
            elif name in _VALUE_OPTS and i + 1 < len(args):
                opts.setdefault(name, []).append(args[i + 1])
                i += 1
            else:
                opts.setdefault(name, [])
        elif a.startswith("-") and len(a) >= 2:
            short, attached = a[:2], a[2:]
            name = _SHORT.get(short, short)
            if name in _VALUE_OPTS:
                if attached:
                    opts.setdefault(name, []).append(attached.lstrip("="))
                elif i + 1 < len(args):
                    opts.setdefault(name, []).append(args[i + 1])
                    i += 1
            else:
                # bundled flags such as -qU
                for c in a[1:]:
                    opts.setdefault(_SHORT.get("-" + c, "-" + c), [])
        else:
            pos.append(a)
        i += 1
    return {k: tuple(v) for k, v in opts.items()}, pos


def _reqs(opts: Mapping[str, Sequence[str]], pos: Iterable[str]) -> tuple[Req, ...]:
    out = [parse_req(p) for p in pos]
    out += [parse_req(e, editable=True) for e in opts.get("--editable", ())]
    return tuple(out)
