"""Reproducible layers: the torch and package steps end with every file they wrote at one fixed time.

Docker 20.10's BuildKit writes each file's mtime into the layer tar as it is on disk, so two builds of
the same spec differ in every layer they write even when the bytes of every file agree: uv stamps the
files it installs with the time of the install, directories get the time of their last change, and
the ``.pyc`` files the warm import writes record their source's mtime. That exporter does not rewrite
timestamps itself (``SOURCE_DATE_EPOCH`` is honoured only by BuildKit 0.11+ / Docker 23+), so the steps
do it: ``SOURCE_DATE_EPOCH`` is a build argument (default 1980-01-01, the oldest time a zip entry can
hold; ``docker build --build-arg SOURCE_DATE_EPOCH=…`` overrides it), and each step touches what it
wrote — everything newer than that time below the paths it writes, which is exactly this step's files,
because the steps before left theirs at that time — so no file of an earlier layer is copied up.

The sources are stamped *before* the warm import, so each ``.pyc`` records the same source mtime; a
``py_compile``/``compileall`` run (``[python] precompile = "all"``) sees ``SOURCE_DATE_EPOCH`` and writes
checked-hash ``.pyc`` files instead. Ownership (root) and file order (BuildKit walks directories in
lexical order) are already fixed.

What the steps cannot fix on Docker 20.10 (measured, examples/cpu.toml built twice with ``--no-cache``:
16,985 entries of the torch layer, 13 differed before these stamps were extended to ``/root`` and the
parent folders, every venv file and ``.pyc`` identical): BuildKit 0.8 creates the files it mounts
(``/kiln/…``, ``/run/secrets/…``, ``/etc/hosts``, ``/etc/resolv.conf``) before a RUN and removes them
after it, so ``/etc``, ``/kiln``, ``/kiln/bin`` and ``/run/secrets`` carry the time the step ended. Those
four folder entries keep the layer digests apart until the exporter rewrites timestamps
(BuildKit 0.13+: ``rewrite-timestamp=true`` with this same ``SOURCE_DATE_EPOCH``).
"""

from __future__ import annotations

from torchkiln.contract import VENV

#: 1980-01-01T00:00:00Z: fixed, and representable in a zip (wheels) unlike 0
DEFAULT_EPOCH = 315532800
ARG = f"ARG SOURCE_DATE_EPOCH={DEFAULT_EPOCH}"
#: where the torch and package steps write: the venv, the constraints, uv's credentials lock under /root
ROOTS = (VENV, "/etc/pip", "/root")
#: folders whose own entry a step changes (a child added or removed), stamped when they exist
PARENTS = ("/tmp", "/opt", "/run")


def stamp(roots: tuple[str, ...] = ROOTS) -> str:
    """The shell command that sets every file below ``roots`` newer than ``SOURCE_DATE_EPOCH`` (and the
    ``PARENTS`` folder entries) to that time, links themselves (``-h``) rather than their targets."""
    when = '"@$SOURCE_DATE_EPOCH"'
    return (f"find {' '.join(roots)} -xdev -newermt {when} -exec touch -h -d {when} {{}} + "
            f"&& touch -c -h -d {when} {' '.join(PARENTS)}")


#: the packages steps' uv cache mount point, made in the torch step so BuildKit need not create it (a
#: folder BuildKit creates for a mount has the time of that step)
MOUNT_POINTS = "/root/.cache/uv"
