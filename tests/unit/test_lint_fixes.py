"""A finding's fix fits the image it is for: no option the image's own tools lack."""

from __future__ import annotations

from torchkiln.lint import LintConfig, lint_text


def _by_rule(text: str) -> dict[str, list]:
    out: dict[str, list] = {}
    for f in lint_text(text, config=LintConfig()):
        out.setdefault(f.rule, []).append(f)
    return out


def test_setup_py_install_on_a_pip_9_distribution_offers_a_fix_that_pip_has() -> None:
    # JetPack 4 (L4T R32) is Ubuntu 18.04, whose python3-pip is 9.0.1: no --no-build-isolation (pip 10)
    text = ("FROM nvcr.io/nvidia/l4t-base:r32.7.1\n"
            "RUN apt-get update && apt-get install -y --no-install-recommends python3-pip git && rm -rf /var/lib/apt/lists/*\n"
            "RUN git clone --branch v0.11.1 https://github.com/pytorch/vision torchvision && cd torchvision && python3 setup.py install\n"
            "USER 1000\n")
    (f,) = _by_rule(text)["KL026"]
    assert "pip3 install ." in f.fix and "--no-build-isolation" in f.fix and "pip 10" in f.fix
    # after an upgrade of pip, or on a newer Ubuntu, the rule's own fix
    upgraded = text.replace("RUN git clone", "RUN pip3 install --no-cache-dir --upgrade pip\nRUN git clone")
    (g,) = _by_rule(upgraded)["KL026"]
    assert g.fix.startswith("Build a wheel and install it: `pip install --no-build-isolation .`")
