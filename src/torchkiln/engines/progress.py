"""Parsers for the plain-text progress of BuildKit and of podman (buildah).

Both engines print one line at a time; the parsers turn those lines into ``BuildEvent``s (for live
progress) and ``StepRecord``s (for the summary: time per stage, cache hits, the failing step's last
lines). Pure: a parser is fed lines and keeps state, it runs nothing. Written here because neither
engine offers a machine-readable progress stream through the CLI versions we support (Docker 20.10's
classic client has no ``--progress=rawjson``; podman has none).

BuildKit's ``--progress=plain`` format::

    #6 [builder 2/4] RUN uv pip install ...       header: vertex number, [stage i/n], instruction
    #6 0.390 Resolved 10 packages                 a log line of the vertex, with its start offset
    #6 DONE 2.9s  |  #6 CACHED  |  #6 ERROR: ...  the vertex's end

podman's format::

    [2/3] STEP 3/5: RUN uv pip install ...        ([stage i/n] only in multi-stage builds)
    Resolved 10 packages                          output of the current step
    --> Using cache 68917631f0cf...               the step was cached
    --> 68917631f0c                               the step (or stage) finished
    Error: building at STEP "RUN ...": ...        the build failed
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from torchkiln.engines.engine import BuildEvent, StepRecord

_LOG_KEEP = 60  # log lines kept per step (for the failure report)

_BK_HEADER = re.compile(r"^#(?P<id>\d+) \[(?P<label>[^\]]*)\] (?P<name>.*)$")
_BK_UNLABELLED = re.compile(r"^#(?P<id>\d+) (?P<name>(exporting|writing|naming|importing|resolving)\b.*)$")
_BK_DONE = re.compile(r"^#(?P<id>\d+) DONE (?P<secs>[\d.]+)s$")
_BK_CACHED = re.compile(r"^#(?P<id>\d+) CACHED$")
_BK_ERROR = re.compile(r"^#(?P<id>\d+) ERROR:? ?(?P<msg>.*)$")
_BK_LOG = re.compile(r"^#(?P<id>\d+) (?P<offset>\d+\.\d+) (?P<text>.*)$")
_BK_OTHER = re.compile(r"^#(?P<id>\d+) (?P<text>.*)$")
_BK_STAGE = re.compile(r"^(?P<stage>\S+) +\d+/\d+$")  # "torch 10/18", "torch  1/18" (padded)
_BK_SINGLE = re.compile(r"^\d+/\d+$")


class _StepParser:
    """What both parsers keep: the steps by id (in order of appearance), the failing one, and where
    events go."""

    def __init__(self, emit: Callable[[BuildEvent], None] | None = None) -> None:
        self._emit = emit
        self._steps: dict[str, StepRecord] = {}
        self.failed: StepRecord | None = None

    @property
    def steps(self) -> tuple[StepRecord, ...]:
        return tuple(self._steps.values())

    def _event(self, rec: StepRecord, line: str | None = None) -> None:
        if self._emit is not None:
            self._emit(BuildEvent(rec.step, rec.stage, rec.name, rec.status, rec.seconds, line))


class BuildKitProgress(_StepParser):
    """Feed ``--progress=plain`` lines; read ``steps`` (in order of appearance) and ``failed``."""

    def feed(self, line: str) -> None:
        line = line.rstrip("\r\n")
        if not line.startswith("#"):
            return
        m = _BK_HEADER.match(line)
        if m:
            sid = f"#{m['id']}"
            if sid not in self._steps:
                label = m["label"].strip()
                sm = _BK_STAGE.match(label)
                if sm:
                    stage = sm["stage"]
                elif _BK_SINGLE.match(label):
                    stage = "stage-0"
                else:
                    stage = label  # "internal", "auth", …
                rec = StepRecord(sid, stage, m["name"].strip())
                self._steps[sid] = rec
                self._event(rec)
            return
        m = _BK_DONE.match(line)
        if m:
            rec = self._get(m["id"])
            if rec.status != "cached":
                rec.status = "done"
            rec.seconds = float(m["secs"])
            self._event(rec)
            return
        m = _BK_CACHED.match(line)
        if m:
            rec = self._get(m["id"])
            rec.status = "cached"
            rec.seconds = 0.0
            self._event(rec)
            return
        m = _BK_ERROR.match(line)
        if m:
            rec = self._get(m["id"])
            rec.status = "error"
            if m["msg"]:
                rec.log.append(m["msg"])
            if self.failed is None or not self.failed.is_instruction:
                self.failed = rec
            self._event(rec)
            return
        m = _BK_LOG.match(line)
        if m:
            rec = self._get(m["id"])
            self._log(rec, m["text"])
            return
        m = _BK_UNLABELLED.match(line)
        if m and f"#{m['id']}" not in self._steps:
            rec = StepRecord(f"#{m['id']}", "export", m["name"].strip())
            self._steps[rec.step] = rec
            self._event(rec)
            return
        m = _BK_OTHER.match(line)
        if m:
            text = m["text"]
            if text.startswith("sha256:"):
                return
            rec = self._get(m["id"])
            self._log(rec, text)

    def _get(self, num: str) -> StepRecord:
        sid = f"#{num}"
        rec = self._steps.get(sid)
        if rec is None:
            rec = StepRecord(sid, "", "")
            self._steps[sid] = rec
        return rec

    def _log(self, rec: StepRecord, text: str) -> None:
        rec.log.append(text)
        if len(rec.log) > _LOG_KEEP:
            del rec.log[: len(rec.log) - _LOG_KEEP]
        self._event(rec, text)

    def finish(self, ok: bool) -> None:
        """Close steps still marked running (BuildKit prints no DONE for some vertices)."""
        for rec in self._steps.values():
            if rec.status == "running":
                rec.status = "done" if ok else "error"


_PM_STEP = re.compile(r"^(?:\[(?P<stage>\d+)/(?P<stages>\d+)\] )?STEP (?P<n>\d+)/(?P<total>\d+): (?P<name>.*)$")
_PM_COMMIT = re.compile(r"^(?:\[(?P<stage>\d+)/(?P<stages>\d+)\] )?COMMIT\b.*$")
_PM_CACHE = re.compile(r"^--> Using cache (?P<id>[0-9a-f]+)")
_PM_ARROW = re.compile(r"^--> (?P<id>[0-9a-f]+)$")
_PM_ERROR = re.compile(r"^Error: (?P<msg>.*)$")
_PM_FROM_AS = re.compile(r"^FROM\s+\S+(?:\s+AS\s+(?P<name>\S+))?", re.IGNORECASE)


class PodmanProgress(_StepParser):
    """Feed ``podman build`` output lines; step times are measured between lines as they arrive."""

    def __init__(
        self, emit: Callable[[BuildEvent], None] | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__(emit)
        self._clock = clock
        self._stage_names: dict[str, str] = {}
        self._current: StepRecord | None = None
        self._started = 0.0

    def _close(self, status: str) -> None:
        rec = self._current
        if rec is None:
            return
        if rec.status == "running":
            rec.status = "cached" if status == "cached" else ("error" if status == "error" else "done")
            rec.seconds = 0.0 if rec.status == "cached" else self._clock() - self._started
            self._event(rec)
        self._current = None

    def feed(self, line: str) -> None:
        line = line.rstrip("\r\n")
        m = _PM_STEP.match(line)
        if m:
            self._close("done")
            index = m["stage"] or "1"
            name = m["name"].strip()
            if m["n"] == "1":
                fm = _PM_FROM_AS.match(name)
                self._stage_names[index] = (fm["name"] if fm and fm["name"] else f"stage-{int(index) - 1}")
            stage = self._stage_names.get(index, f"stage-{int(index) - 1}")
            rec = StepRecord(f"{index}:{m['n']}", stage, name)
            self._steps[rec.step] = rec
            self._current = rec
            self._started = self._clock()
            self._event(rec)
            return
        m = _PM_CACHE.match(line)
        if m:
            self._close("cached")
            return
        if _PM_ARROW.match(line):
            self._close("done")
            return
        if _PM_COMMIT.match(line):
            self._close("done")
            return
        m = _PM_ERROR.match(line)
        if m:
            failed = self._current
            if failed is None:
                failed = StepRecord("error", "", "build")
                self._steps[failed.step] = failed
            rec = failed
            rec.log.append(line)
            rec.status = "error"
            rec.seconds = self._clock() - self._started
            self.failed = rec
            self._event(rec)
            self._current = None
            return
        if self._current is not None and line.strip():
            rec = self._current
            rec.log.append(line)
            if len(rec.log) > _LOG_KEEP:
                del rec.log[: len(rec.log) - _LOG_KEEP]
            self._event(rec, line)

    def finish(self, ok: bool) -> None:
        self._close("done" if ok else "error")
