"""Apptainer/Singularity definitions: sections read as shell, and the bug hpccm really renders."""

from __future__ import annotations

import pytest

from torchkiln.errors import InputError
from torchkiln.lint import lint_text
from torchkiln.lint.model import parse_definition

DEF = """\
Bootstrap: docker
From: nvidia/cuda:12.4.1-runtime-ubuntu22.04

%files
    app.py /opt/app.py

%environment
    export LC_ALL=C.UTF-8

%post
    apt-get update
    apt-get install -y python3

%runscript
    exec python3 /opt/app.py "$@"
"""


def test_header_and_sections() -> None:
    d = parse_definition(DEF, "app.def")
    assert d.header == {"bootstrap": "docker", "from": "nvidia/cuda:12.4.1-runtime-ubuntu22.04"}
    assert [(s.name, s.line) for s in d.sections] == [("files", 4), ("environment", 7), ("post", 10), ("runscript", 14)]
    # %files is not shell; the others are, with their file lines
    assert [sn.lines[0] for sn in d.snippets()] == [8, 11, 15]


def test_not_a_definition() -> None:
    with pytest.raises(InputError, match="no 'Bootstrap:' header"):
        parse_definition("From: x\n%post\n  true\n")
    with pytest.raises(InputError, match=":1: not a 'Key: value' header"):
        parse_definition("FROM python:3.11\n")


def test_hpccm_rendered_recipe_is_caught() -> None:
    """hpccm writes `export TORCH_CUDA_ARCH_LIST=8.0;9.0` unquoted into Singularity recipes."""
    hpccm = pytest.importorskip("hpccm")
    from hpccm.primitives import baseimage, environment, shell

    hpccm.config.set_container_format("singularity")
    try:
        parts = [
            baseimage(image="nvcr.io/nvidia/pytorch:24.05-py3"),
            environment(variables={"TORCH_CUDA_ARCH_LIST": "8.0;9.0+PTX", "MAX_JOBS": "4"}),
            shell(commands=["pip install --no-build-isolation flash-attn==2.7.4.post1"]),
        ]
        recipe = "\n".join(str(p) for p in parts) + "\n"
    finally:
        hpccm.config.set_container_format("docker")
    findings = lint_text(recipe, "hpccm.def", kind="apptainer")
    lines = recipe.splitlines()
    assert {f.rule for f in findings} == {"KL014"}
    for f in findings:
        assert lines[f.line - 1].strip() == "export TORCH_CUDA_ARCH_LIST=8.0;9.0+PTX"
    # the same recipe as a Dockerfile: hpccm quotes nothing there either, but ENV is not a shell
    hpccm.config.set_container_format("docker")
    dockerfile = "\n".join(str(p) for p in parts) + "\n"
    assert "KL014" not in {f.rule for f in lint_text(dockerfile)}
