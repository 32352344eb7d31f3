"""Compare two images layer by layer, entry by entry: what keeps their layer digests apart.

    python3 bench/layer_diff.py IMAGE_A IMAGE_B [--engine docker|podman]

Streams ``docker save`` of each image (nothing is written to disk), lists every entry of every layer
(name, mtime, owner, mode, size, sha256 of file content) and, for each pair of layers with the same
entry names, counts the entries whose content, mtime or other metadata differ, with examples.
Used for issue #28's "reproducible layers" (results in docs/reproducible-layers.md).
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import tarfile
from collections import OrderedDict


def layers(engine: str, image: str) -> OrderedDict[str, list[tuple[str, int, str, int, str]]]:
    proc = subprocess.Popen([engine, "save", image], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    out: OrderedDict[str, list[tuple[str, int, str, int, str]]] = OrderedDict()
    with tarfile.open(fileobj=proc.stdout, mode="r|") as outer:
        for m in outer:
            if not m.name.endswith("layer.tar"):
                continue
            rows = out.setdefault(m.name.split("/")[0][:12], [])
            f = outer.extractfile(m)
            assert f is not None
            with tarfile.open(fileobj=f, mode="r|") as inner:
                for e in inner:
                    digest = ""
                    if e.isfile():
                        data = inner.extractfile(e)
                        digest = hashlib.sha256(data.read() if data else b"").hexdigest()[:16]
                    rows.append((e.name, int(e.mtime), f"{e.uid}:{e.gid} {oct(e.mode)} {e.linkname}", e.size, digest))
    proc.wait()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--engine", default="docker")
    args = ap.parse_args()
    la, lb = layers(args.engine, args.a), layers(args.engine, args.b)
    unmatched = dict(lb)
    for ka, ea in la.items():
        kb = next((k for k, eb in unmatched.items() if [e[0] for e in eb] == [e[0] for e in ea]), None)
        if kb is None:
            print(f"{ka}: {len(ea)} entries, no layer of {args.b} has the same names")
            continue
        eb = unmatched.pop(kb)
        if ka == kb:
            print(f"{ka}: {len(ea)} entries, identical layer")
            continue
        content = [x[0] for x, y in zip(ea, eb) if x[4] != y[4]]
        mtime = [x[0] for x, y in zip(ea, eb) if x[1] != y[1]]
        meta = [x[0] for x, y in zip(ea, eb) if (x[2], x[3]) != (y[2], y[3])]
        print(f"{ka} vs {kb}: {len(ea)} entries; content differs in {len(content)}, mtime in {len(mtime)}, "
              f"owner/mode/size in {len(meta)}")
        for what, names in (("content", content), ("metadata", meta)):
            if names:
                print(f"    {what}: " + ", ".join(names[:5]) + (" ..." if len(names) > 5 else ""))
        late = sorted(((x[1], x[0]) for x in ea if not x[0].startswith("opt/venv/")), reverse=True)[:5]
        if late:
            print("    latest mtimes outside /opt/venv: " + ", ".join(f"{n}@{t}" for t, n in late))


if __name__ == "__main__":
    main()
