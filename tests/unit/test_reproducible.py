"""render/reproducible.py: the mount-point tar and the tmpfs mounts that keep BuildKit's mount points out of layers."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

from torchkiln.render import reproducible
from torchkiln.render.instructions import run


def test_the_mount_point_tar_is_the_same_bytes_every_time_and_holds_only_root_owned_entries_at_the_epoch() -> None:
    text = reproducible.mount_points_tar()
    assert text == reproducible.mount_points_tar()
    data = text.encode("ascii")  # travels as a text file of the context: must be ASCII
    assert len(data) % 512 == 0
    members = tarfile.open(fileobj=io.BytesIO(data)).getmembers()
    assert [m.name for m in members] == ["etc", "etc/hosts", "etc/resolv.conf", "kiln", "run", "run/secrets"]
    assert {m.mtime for m in members} == {reproducible.DEFAULT_EPOCH}
    assert {(m.uid, m.gid) for m in members} == {(0, 0)}
    hosts = tarfile.open(fileobj=io.BytesIO(data)).extractfile("etc/hosts")
    assert hosts is not None and b"127.0.0.1\tlocalhost" in hosts.read()


def test_a_run_with_mounts_below_kiln_or_the_secrets_mounts_a_tmpfs_there_first() -> None:
    lines = run(["type=bind,source=.kiln/bin/uv,target=/kiln/bin/uv", "type=secret,id=a,target=/run/secrets/a"],
                ["true"])
    assert lines[0] == "RUN --mount=type=tmpfs,target=/kiln \\"
    assert lines[1] == "    --mount=type=tmpfs,target=/run/secrets \\"
    only_cache = run(["type=cache,target=/var/cache/apt"], ["true"])
    assert "tmpfs" not in "\n".join(only_cache)
    # a target that merely starts with the same letters is not below /kiln
    assert "tmpfs" not in "\n".join(run(["type=bind,source=x,target=/kilnx/y"], ["true"]))


def test_every_rendered_dockerfile_adds_the_mount_points_and_every_kiln_mount_is_under_a_tmpfs() -> None:
    goldens = sorted((Path(__file__).parents[1] / "golden").rglob("*.Dockerfile"))
    assert len(goldens) >= 10
    for golden in goldens:
        text = golden.read_text()
        assert f"ADD {reproducible.MOUNT_POINTS_TAR} /" in text, golden.name
        for step in text.split("\nRUN ")[1:]:
            head = step.split("\n\n", 1)[0]
            if "target=/kiln/" in head:
                assert "--mount=type=tmpfs,target=/kiln " in "RUN " + head, (golden.name, head[:200])
            if "target=/run/secrets/" in head:
                assert "--mount=type=tmpfs,target=/run/secrets " in "RUN " + head, (golden.name, head[:200])


def test_the_runtime_user_is_stamped_from_a_mark_and_the_mark_is_removed() -> None:
    cmd = reproducible.stamp_since("/tmp/m")
    assert cmd.startswith("find /etc /home /var -xdev -newer /tmp/m -exec touch -h -d")
    assert "rm -f /tmp/m" in cmd and cmd.endswith('touch -h -d "@$SOURCE_DATE_EPOCH" /tmp')
