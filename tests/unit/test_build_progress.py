"""The BuildKit and podman progress parsers, fed output captured from real builds on Docker 20.10 / podman 4.3."""

from __future__ import annotations

import pytest

from torchkiln.engines.engine import BuildEvent, StepRecord
from torchkiln.engines.progress import BuildKitProgress, PodmanProgress

BUILDKIT_OK = """\
#1 [internal] load build definition from Dockerfile
#1 sha256:6211074a0674b204ce8ba15092341450b52e338b9cf75b1efa9ccd0452dcd732
#1 transferring dockerfile: 4.66kB done
#1 DONE 0.1s

#3 [internal] load metadata for docker.io/library/kiln-base:bookworm
#3 DONE 0.0s

#4 [base 1/1] FROM docker.io/library/kiln-base:bookworm
#4 CACHED

#5 [runtime 1/8] RUN useradd --create-home --uid 1000 --user-group --shell /bin/bash kiln
#5 CACHED

#7 [torch 1/1] RUN --mount=type=bind,source=.kiln/bin/uv,target=/kiln/bin/uv    . /kiln/sources.sh  && uv pip install
#7 sha256:2ded35124abddc6fde62e589b3ade4200d9071aa5d042c7a1be73e9c46b8a124
#7 0.323 Using Python 3.11.2 environment at: /opt/venv
#7 12.51 Resolved 10 packages in 612ms
#7 DONE 41.5s

#13 [runtime 8/8] COPY --chown=kiln:kiln apps/cpu_app.py /workspace/apps/cpu_app.py
#13 DONE 0.1s

#14 exporting to image
#14 sha256:e8c613e07b0b7ff33893b694f7759a10d42e180f2b4dc349fb57dc6b71dcab00
#14 exporting layers 6.1s done
#14 writing image sha256:ae9333603722f466c0075d69a3ed225b6f9548fb2e7ff294ee1ffb81503b5526 done
#14 DONE 6.1s
"""

BUILDKIT_FAIL = """\
#4 [base 1/1] FROM docker.io/library/kiln-probe:base
#4 CACHED

#5 [builder 1/1] RUN echo one && echo two 1>&2 && false
#5 sha256:13c891e1785fc9e481dd2ee44e30a8c48e538ef3db9879c288e324af92301757
#5 0.390 one
#5 0.391 two
#5 ERROR: executor failed running [/bin/sh -c echo one && echo two 1>&2 && false]: exit code: 1
------
 > [builder 1/1] RUN echo one && echo two 1>&2 && false:
------
executor failed running [/bin/sh -c echo one && echo two 1>&2 && false]: exit code: 1
"""

PODMAN_OK = """\
[1/2] STEP 1/1: FROM kiln-probe:base AS base
--> e6edc4e9f4d
[2/2] STEP 1/2: FROM e6edc4e9f4d3fb47517a2f026e588a54c84fa0e3127f148668ed08f0797eb497 AS builder
[2/2] STEP 2/2: RUN --mount=type=secret,id=kiln-ca,target=/run/secrets/kiln-ca     ls /run/secrets/
kiln-ca
[2/2] COMMIT
--> 68917631f0c
68917631f0cf7e93ef45a290fea66ee15798cca45f85e63d237ca304ab32945a
"""

PODMAN_CACHED_THEN_FAIL = """\
[1/2] STEP 1/1: FROM kiln-probe:base AS base
--> e6edc4e9f4d
[2/2] STEP 1/3: FROM e6edc4e9f4d3fb47517a2f026e588a54c84fa0e3127f148668ed08f0797eb497 AS builder
[2/2] STEP 2/3: RUN echo cached
--> Using cache 68917631f0cf7e93ef45a290fea66ee15798cca45f85e63d237ca304ab32945a
--> 68917631f0c
[2/2] STEP 3/3: RUN echo one && echo two 1>&2 && false
one
two
Error: building at STEP "RUN echo one && echo two 1>&2 && false": while running runtime: exit status 1
"""


def feed(parser: BuildKitProgress | PodmanProgress, text: str) -> None:
    for line in text.splitlines():
        parser.feed(line)


def test_buildkit_steps_stages_cache_and_times() -> None:
    events: list[BuildEvent] = []
    p = BuildKitProgress(events.append)
    feed(p, BUILDKIT_OK)
    p.finish(True)
    by_id = {s.step: s for s in p.steps}
    assert by_id["#1"].stage == "internal" and not by_id["#1"].is_instruction
    assert by_id["#4"].stage == "base" and by_id["#4"].status == "cached"
    assert by_id["#5"].stage == "runtime" and by_id["#5"].status == "cached"
    torch = by_id["#7"]
    assert torch.stage == "torch" and torch.status == "done" and torch.seconds == 41.5
    assert torch.log == ["Using Python 3.11.2 environment at: /opt/venv", "Resolved 10 packages in 612ms"]
    assert torch.title == "RUN . /kiln/sources.sh && uv pip install"
    assert "--mount" not in torch.title
    assert by_id["#14"].stage == "export" and by_id["#14"].seconds == 6.1
    assert p.failed is None
    # one event per start, per log line and per end
    assert [e.status for e in events if e.step == "#7"] == ["running", "running", "running", "done"]
    assert events[-1].status == "done" and events[-1].step == "#14"


def test_buildkit_failure_keeps_the_failing_step_and_its_lines() -> None:
    p = BuildKitProgress()
    feed(p, BUILDKIT_FAIL)
    p.finish(False)
    assert p.failed is not None
    assert p.failed.stage == "builder"
    assert p.failed.status == "error"
    assert p.failed.log[:2] == ["one", "two"]
    assert "exit code: 1" in p.failed.log[-1]


def test_buildkit_single_stage_label() -> None:
    p = BuildKitProgress()
    p.feed("#5 [2/3] RUN pip install torch")
    p.feed("#5 DONE 1.0s")
    assert p.steps[0].stage == "stage-0"


def test_podman_stages_named_from_from_lines() -> None:
    ticks = iter([0.0, 1.0, 1.5, 4.0, 4.5, 10.0])
    p = PodmanProgress(clock=lambda: next(ticks))
    feed(p, PODMAN_OK)
    p.finish(True)
    steps = p.steps
    assert [(s.stage, s.status) for s in steps] == [("base", "done"), ("builder", "done"), ("builder", "done")]
    assert steps[2].log == ["kiln-ca"]
    assert steps[2].seconds is not None and steps[2].seconds > 0
    assert p.failed is None


def test_podman_cache_and_failure() -> None:
    p = PodmanProgress()
    feed(p, PODMAN_CACHED_THEN_FAIL)
    p.finish(False)
    statuses = [(s.name, s.status) for s in p.steps]
    assert ("RUN echo cached", "cached") in statuses
    assert p.failed is not None
    assert p.failed.name.startswith("RUN echo one")
    assert p.failed.log[:2] == ["one", "two"]
    assert p.failed.log[-1].startswith("Error: building at STEP")


def test_podman_single_stage() -> None:
    p = PodmanProgress()
    feed(p, "STEP 1/2: FROM kiln-base:bookworm\nSTEP 2/2: RUN true\n--> abc123\n")
    p.finish(True)
    assert [s.stage for s in p.steps] == ["stage-0", "stage-0"]


@pytest.mark.parametrize(("instruction", "label"), [
    ("RUN /bin/bash -o pipefail -c . /kiln/sources.sh     && export UV_CACHE_DIR=/tmp/kiln-uv     && "
     "/kiln/bin/uv pip install --python /opt/venv/bin/python -c /etc/pip/constraint.txt einops", "install einops"),
    ("RUN --mount=type=bind,source=.kiln/bin/uv,target=/kiln/bin/uv /kiln/bin/uv pip install --python "
     "/opt/venv/bin/python -r /kiln/requirements-torch.txt && /kiln/bin/uv pip freeze",
     "install -r requirements-torch.txt"),
    ("RUN apt-get update && apt-get install -y --no-install-recommends libgl1 && rm -rf /var/lib/apt/lists/*",
     "apt install libgl1"),
    ("RUN useradd --create-home kiln", "RUN useradd --create-home kiln"),
])
def test_install_steps_are_labelled_with_what_they_install(instruction: str, label: str) -> None:
    assert StepRecord("#1", "packages", instruction).label == label


def test_a_stage_of_ten_or_more_steps_is_one_stage_though_buildkit_pads_its_step_numbers() -> None:
    # BuildKit 0.8 writes "[torch  1/18]" (padded to the width of 18) and "[torch 10/18]"
    lines = []
    for i in (1, 9, 10, 18):
        lines += [f"#{i + 3} [torch {i:>2}/18] RUN step {i}", f"#{i + 3} DONE 0.{i}s", ""]
    parser = BuildKitProgress(None)
    for line in lines:
        parser.feed(line)
    parser.finish(True)
    assert {r.stage for r in parser.steps} == {"torch"}
    assert len(parser.steps) == 4
