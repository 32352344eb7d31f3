"""The project's ``.dockerignore``, honoured when the app (and local extension sources) are copied into a
build context: what it excludes never reaches the context, so never an image (``.env``, data, checkpoints).

Docker's rules (moby's ``patternmatcher``, the reference for ``.dockerignore``), which differ from
``.gitignore``'s: a pattern is matched against the whole path relative to the context's root (``*.pyc``
matches only at the top; ``**/*.pyc`` at any depth); ``*`` and ``?`` never match ``/``; ``**`` matches
any number of folders, none included; a pattern that matches a folder excludes everything under it;
``!pattern`` takes a path back in; the last matching line wins; ``#`` lines and blank lines are skipped;
a leading ``/`` and ``./`` are ignored. Pure: the text is read by the caller.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

IGNORE_FILE = ".dockerignore"


@dataclass(frozen=True)
class _Pattern:
    text: str
    exclusion: bool
    regex: re.Pattern[str]


def _to_regex(pattern: str) -> re.Pattern[str]:
    out = ["^"]
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "*":
            if i + 1 < n and pattern[i + 1] == "*":
                i += 1
                # "**/" at the start or after "/" may match no folder at all
                if i + 1 < n and pattern[i + 1] == "/":
                    i += 1
                    out.append("(?:.*/)?")
                else:
                    out.append(".*")
            else:
                out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            j = pattern.find("]", i + 1)
            if j == -1:
                out.append(re.escape(c))
            else:
                body = pattern[i + 1 : j]
                if body.startswith("!") or body.startswith("^"):
                    body = "^" + body[1:]
                out.append(f"[{body}]")
                i = j
        elif c == "\\" and i + 1 < n:
            i += 1
            out.append(re.escape(pattern[i]))
        else:
            out.append(re.escape(c))
        i += 1
    out.append("$")
    return re.compile("".join(out))


def _clean(pattern: str) -> str:
    p = posixpath.normpath(pattern.strip())
    return p.lstrip("/") if p not in ("/", ".") else ""


@dataclass(frozen=True)
class DockerIgnore:
    """A parsed ``.dockerignore``: ``excluded(path)`` for paths relative to the context's root."""

    patterns: tuple[_Pattern, ...] = ()

    @classmethod
    def parse(cls, text: str) -> DockerIgnore:
        patterns = []
        for raw in text.splitlines():
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            exclusion = line.startswith("!")
            body = _clean(line[1:] if exclusion else line)
            if body:
                patterns.append(_Pattern(body, exclusion, _to_regex(body)))
        return cls(tuple(patterns))

    def __bool__(self) -> bool:
        return bool(self.patterns)

    def excluded(self, path: str) -> bool:
        """Whether ``path`` (relative, ``/``-separated) is left out: the last pattern that matches it or one of
        its parent folders decides."""
        path = posixpath.normpath(path)
        parents = [path]
        while "/" in parents[-1]:
            parents.append(parents[-1].rsplit("/", 1)[0])
        result = False
        for p in self.patterns:
            if any(p.regex.match(candidate) for candidate in parents):
                result = not p.exclusion
        return result
