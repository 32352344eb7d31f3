"""``requirements*.txt`` files read as pip reads them: ``-r``/``-c`` includes, ``--hash``, index options.

Pure text processing (the only I/O is reading the files the includes name, confined to the project's
folder). What pip and uv accept in such a file and what torchkiln does with it:

* requirement lines (PEP 508), with ``--hash=sha256:...`` options: kept whole, hashes and markers included;
* ``-r FILE`` / ``--requirement FILE``: read in place; ``-c FILE`` / ``--constraint FILE``: its lines
  become constraints of the project's install;
* ``-i/--index-url``, ``--extra-index-url``, ``-f/--find-links``: a PyTorch index
  (``https://download.pytorch.org/whl/<variant>``) tells which torch variant the file means; any
  other index is refused with the fix (package sources are build settings, passed as secrets, never
  written into an image's recipe);
* ``-e``/a local path: ``.`` (the project itself) is the project's own wheel; anything else is refused;
* ``--no-binary``/``--only-binary``/``--prefer-binary``/``--pre``/``--no-index`` and the like: ignored
  with a note (uv's defaults apply).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from torchkiln.errors import SpecError

#: PyTorch's own wheel indexes: https://download.pytorch.org/whl/cu128 (and the nightly/test ones)
PYTORCH_INDEX = re.compile(r"^https?://download\.pytorch\.org/whl/(?:nightly/|test/)?(?P<variant>cpu|cu\d{3}|rocm[\d.]+|xpu)/?$")

_IGNORED_OPTIONS = ("--no-binary", "--only-binary", "--prefer-binary", "--pre", "--no-index", "--trusted-host",
                    "--use-feature", "--config-settings", "--global-option", "--no-deps")


@dataclass(frozen=True)
class RequirementLine:
    """One requirement as the file gives it: ``line`` is what uv reads (hashes and markers kept)."""

    name: str  # canonical name
    line: str  # "numpy==2.3.5 ; python_version >= '3.11' --hash=sha256:..."
    where: str  # "requirements.txt:3"
    hashed: bool

    @property
    def requirement(self) -> Requirement:
        return Requirement(self.line.split(" --hash", 1)[0])


@dataclass
class RequirementsRead:
    requirements: list[RequirementLine] = field(default_factory=list)
    constraints: list[str] = field(default_factory=list)
    indexes: list[tuple[str, str]] = field(default_factory=list)  # (url, where) of PyTorch indexes
    self_install: bool = False  # "." / "-e ." : the project itself
    #: other local packages (a uv workspace member, "./libs/common"): (their folder, where they were named)
    locals: list[tuple[Path, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Lines with continuations joined and comments removed, with the number of their first line."""
    out: list[tuple[int, str]] = []
    buf, start = "", 0
    for n, raw in enumerate(text.splitlines(), 1):
        line = re.sub(r"(^|\s)#.*$", "", raw).rstrip()
        if not buf:
            start = n
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        if buf.strip():
            out.append((start, buf.strip()))
        buf = ""
    if buf.strip():
        out.append((start, buf.strip()))
    return out


def _split_option(line: str) -> tuple[str, str]:
    """``--index-url=X`` / ``--index-url X`` / ``-iX`` -> (option, value)."""
    m = re.match(r"^(-[a-zA-Z]|--[a-z-]+)(?:=|\s+)?(.*)$", line)
    assert m is not None
    return m.group(1), m.group(2).strip()


_LONG = {"-r": "--requirement", "-c": "--constraint", "-i": "--index-url", "-f": "--find-links", "-e": "--editable"}


def read_requirements(path: Path, root: Path, *, bound: Path | None = None, _seen: frozenset[Path] = frozenset(),
                      _into: RequirementsRead | None = None, _constraint: bool = False) -> RequirementsRead:
    """Read ``path`` (and what it includes) into requirement lines, constraints and PyTorch indexes.

    ``root`` is the project's folder (``.`` in a file means the project itself); includes may name
    files anywhere under ``bound`` (the spec's folder: a monorepo's shared requirement files).
    """
    out = _into if _into is not None else RequirementsRead()
    bound = bound or root
    rel = _relative(path, root)
    if path.resolve() in _seen:
        raise SpecError(f"{rel} includes itself (through -r/-c).", hint="Remove the circular -r/-c include.")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(f"{rel}: no such requirements file.",
                        hint="Fix the file name in [project] requirements or in the -r/-c line naming it.") from None
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError(f"{rel} cannot be read ({e}).", hint="A requirements file must be UTF-8 text.") from None
    return parse_requirements(text, rel, path.parent, root, bound=bound, _seen=_seen | {path.resolve()}, _into=out,
                              _constraint=_constraint)


def parse_requirements(text: str, name: str, base: Path, root: Path, *, bound: Path | None = None,
                       _seen: frozenset[Path] = frozenset(), _into: RequirementsRead | None = None,
                       _constraint: bool = False) -> RequirementsRead:
    """Requirements text (``name`` for messages, paths in it relative to ``base``), as ``read_requirements``."""
    out = _into if _into is not None else RequirementsRead()
    bound = bound or root
    seen = _seen
    for n, line in _logical_lines(text):
        where = f"{name}:{n}"
        if line.startswith("-") and not line.startswith("--hash"):
            opt, value = _split_option(line)
            opt = _LONG.get(opt, opt)
            if opt in ("--requirement", "--constraint"):
                inc = (base / value).resolve()
                if not inc.is_relative_to(bound.resolve()):
                    raise SpecError(f"{where}: {opt} {value} names a file outside {bound}, the folder of the spec.",
                                    hint="Keep included requirement files inside the folder that holds the spec.")
                read_requirements(inc, root, bound=bound, _seen=seen, _into=out,
                                  _constraint=_constraint or opt == "--constraint")
                continue
            if opt in ("--index-url", "--extra-index-url", "--find-links"):
                if PYTORCH_INDEX.match(value):
                    out.indexes.append((value.rstrip("/"), where))
                    continue
                raise SpecError(
                    f"{where}: {opt} {value}: torchkiln does not take package sources from a requirements file "
                    "(only PyTorch's own indexes, which say the torch variant).",
                    hint="Remove the line and give the index to the build instead: [sources] index_url / "
                    "extra_index_urls in kiln.toml, KILN_INDEX_URL / KILN_EXTRA_INDEX_URL, or --index-url / "
                    "--extra-index-url (passed as a build secret, never written into the image).",
                )
            if opt == "--editable":
                vcs = re.match(r"^(git|hg|svn|bzr)\+\S+?#(?:.*&)?egg=(?P<name>[A-Za-z0-9._-]+)", value)
                if vcs:  # -e git+https://...#egg=name: installed (not editable) from the repository
                    url = value.split("#", 1)[0]
                    name = vcs.group("name")
                    out.requirements.append(RequirementLine(canonicalize_name(name), f"{name} @ {url}", where, False))
                    continue
                _local(value, where, out, root, base, bound)
                continue
            if opt in _IGNORED_OPTIONS:
                out.notes.append(f"{where}: {opt} is ignored (uv's defaults apply)")
                continue
            raise SpecError(f"{where}: the option {opt} is not supported in a requirements file here.",
                            hint="Remove it; requirement lines, -r, -c, --hash and PyTorch index URLs are read.")
        if _is_local(line):
            _local(line, where, out, root, base, bound)
            continue
        req_text, hashes = _hashes(line, where)
        try:
            req = Requirement(req_text)
        except InvalidRequirement as e:
            raise SpecError(f"{where}: {req_text!r} is not a valid requirement ({e}).",
                            hint="Fix the line (PEP 508: name, extras, version specifier, ; markers).") from None
        if req.url and req.url.startswith("file:"):
            _local(req.url, where, out, root, base, bound)
            continue
        if _constraint:
            out.constraints.append(req_text)
            continue
        full = req_text + "".join(f" --hash={h}" for h in hashes)
        out.requirements.append(RequirementLine(canonicalize_name(req.name), full, where, bool(hashes)))
    return out


def _hashes(line: str, where: str) -> tuple[str, list[str]]:
    """Split ``--hash=sha256:...`` options (``=`` or a space) off a requirement line; quotes in markers stay."""
    pattern = re.compile(r"\s--hash(?:=|\s+)(\S+)")
    hashes = pattern.findall(" " + line)
    req = pattern.sub("", " " + line).strip()
    bad = [h for h in hashes if not re.fullmatch(r"(sha256|sha384|sha512|md5):[0-9a-fA-F]+", h)]
    if bad:
        raise SpecError(f"{where}: {bad[0]!r} is not a hash such as sha256:<hex>.", hint="Fix the --hash option.")
    return re.sub(r"\s+", " ", req), hashes


def _is_local(line: str) -> bool:
    return line in (".", "./") or line.startswith(("./", "../", "/", "file:")) or line.startswith(".[")


def _local(value: str, where: str, out: RequirementsRead, root: Path, base: Path, bound: Path | None = None) -> None:
    target = value.removeprefix("file://").removeprefix("file:").split("[", 1)[0].split("#", 1)[0].strip()
    resolved = (base / target).resolve() if target else base.resolve()
    if resolved == root.resolve():
        out.self_install = True
        return
    top = (bound or root).resolve()
    if (resolved == top or top in resolved.parents) and resolved.is_dir() and any(
            (resolved / f).is_file() for f in ("pyproject.toml", "setup.py", "setup.cfg")):
        if resolved not in [p for p, _ in out.locals]:
            out.locals.append((resolved, where))
        return
    raise SpecError(
        f"{where}: {value} is a local path requirement that is not a package folder inside {top} (the folder of the "
        "spec, which the build context carries).",
        hint="Name a folder with a pyproject.toml or setup.py inside the spec's folder (put the spec at the top of "
        "the repository and point [project] path at the project), or depend on a released version instead.",
    )


def _relative(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(path)
