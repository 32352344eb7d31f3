"""The first-run record: the files a first run reads, in ctr-remote's record format.

``kiln verify IMAGE --record-first-run FILE`` writes it; ``kiln push IMAGE --compression estargz
--first-run FILE`` hands it to ``ctr-remote images convert --estargz-record-in FILE``, which puts
those files first in each layer, before a ``.prefetch.landmark`` entry, so that the stargz
snapshotter prefetches them when a container starts.

The format is stargz-snapshotter's ``recorder.Entry`` stream (what ``ctr-remote images optimize
--record-out`` writes): one JSON object per line, ``{"path": "/abs/path"}``; ctr-remote reads any
whitespace-separated JSON objects, cleans each path (the leading slash is optional) and keeps the
first occurrence. A record is pure data: writing it is ``render_record``, reading and validating it
``parse_record`` / ``read_record``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from torchkiln.errors import InputError, KilnError

#: a record of torch + CUDA holds a few thousand lines; anything near this is not a record
MAX_RECORD_BYTES = 64 * 1024 * 1024


def render_record(paths: Iterable[str]) -> str:
    """One ``{"path": P}`` line per path, first occurrence kept, in order."""
    return "".join(json.dumps({"path": p}) + "\n" for p in dict.fromkeys(paths))


def parse_record(text: str, source: str) -> list[str]:
    """The paths of a record (in order, deduplicated); ``InputError`` naming the first bad entry."""
    hint = (f"Record it again with `kiln verify IMAGE --record-first-run {source}`, or write one JSON object "
            'a line: {"path": "/usr/lib/libfoo.so"}.')
    decoder = json.JSONDecoder()
    paths: dict[str, None] = {}
    pos, n, line = 0, len(text), 1
    while True:
        while pos < n and text[pos] in " \t\r\n":
            line += text[pos] == "\n"
            pos += 1
        if pos >= n:
            break
        try:
            value, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as e:
            raise InputError(f"the first-run record {source} is not JSON at line {line}: {e.msg}.", hint=hint) from None
        path = value.get("path") if isinstance(value, dict) else None
        if not isinstance(path, str) or not path.strip() or "\x00" in path:
            raise InputError(f'the first-run record {source} has an entry without a "path" string at line {line}: '
                             f"{json.dumps(value)[:120]}.", hint=hint)
        paths.setdefault(path, None)
        line += text.count("\n", pos, end)
        pos = end
    if not paths:
        raise InputError(f"the first-run record {source} names no file.", hint=hint)
    return list(paths)


def read_record(path: Path) -> list[str]:
    """Read and validate the record at ``path``: a missing, unreadable or malformed file is ``InputError``."""
    from torchkiln import fsio

    def error(message: str, hint: str) -> KilnError:
        return InputError(message, hint=hint)

    try:
        text = fsio.read_text(path, what="first-run record", limit=MAX_RECORD_BYTES, error=error)
    except OSError as e:
        raise InputError(f"the first-run record {path} cannot be read: {e.strerror or e}.",
                         hint="Record one with `kiln verify IMAGE --record-first-run FILE`, or check the path.",
                         ) from None
    return parse_record(text, str(path))


def write_record(path: Path, paths: Iterable[str]) -> Path:
    """Write the record atomically (the old file, or the whole new one; never a part)."""
    from torchkiln import fsio

    return fsio.write_atomic(path, render_record(paths), what="first-run record")
