"""The image contract: what every image torchkiln renders promises, whichever renderer wrote it.

Paths inside the image (the venv, the constraints file, the build-time staging folder, the verify
bundle), the label keys and values, the names of the build secrets, and how images and ``.sif``
files are named. The Dockerfile and Apptainer renderers, the build and the engines read these from
here, so that the two image formats cannot drift apart. Pure data and pure functions of the plan.
"""

from __future__ import annotations

from torchkiln import __version__
from torchkiln.plan import BuildPlan

#: the virtual environment that holds torch and every package
VENV = "/opt/venv"
#: pins the torch set for every install after the torch step (``pip``/``uv`` read it)
CONSTRAINTS = "/etc/pip/constraint.txt"
#: build-time staging folder (uv, requirement files, wheels, package sources); never in the image
KILN = "/kiln"
UV = f"{KILN}/bin/uv"
#: the verify bundle: the checks module and the spec it checks against (``kiln verify``)
VERIFY_DIR = "/opt/kiln/verify"
VERIFY_SCRIPT = f"{VERIFY_DIR}/checks.py"
VERIFY_SPEC = f"{VERIFY_DIR}/spec.json"

#: the build secrets (BuildKit ``--secret`` ids; files under ``/kiln/secrets`` for Apptainer)
SECRET_UV = "kiln-uv"  # a uv.toml naming the index URLs and wheel folders of the build
SECRET_CA = "kiln-ca"  # a CA bundle (PEM) for TLS-intercepting proxies or private indexes

LABEL_PREFIX = "io.torchkiln"
#: labels of the offline bases ``kiln base bootstrap`` makes (``io.torchkiln.base.python`` …)
BASE_LABEL_PREFIX = f"{LABEL_PREFIX}.base"


def image_labels(plan: BuildPlan) -> dict[str, str]:
    """The labels every image carries, in the order the renderers write them."""
    t = plan.torch
    labels = {
        "org.opencontainers.image.title": plan.image_name,
        "org.opencontainers.image.version": plan.tag,
        "org.opencontainers.image.base.name": plan.base_image,
        f"{LABEL_PREFIX}.version": __version__,
        f"{LABEL_PREFIX}.torch": t.version,
        f"{LABEL_PREFIX}.variant": t.variant,
        f"{LABEL_PREFIX}.python": plan.python,
    }
    if t.image is not None:  # torch is the base image's own
        labels[f"{LABEL_PREFIX}.torch-source"] = "image"
        if t.image.ngc:
            labels[f"{LABEL_PREFIX}.ngc"] = t.image.ngc
    if plan.platform != "linux/amd64":  # amd64 images carry no such label (their image config says it)
        labels[f"{LABEL_PREFIX}.platform"] = plan.platform
    if t.cuda:
        labels[f"{LABEL_PREFIX}.cuda"] = t.cuda
        labels[f"{LABEL_PREFIX}.arch-list"] = plan.arch_list
        if t.wheel_arch_list:  # unknown for a base image's torch that was not read
            labels[f"{LABEL_PREFIX}.wheel-arch-list"] = t.wheel_arch_list
        labels[f"{LABEL_PREFIX}.targets"] = ",".join(f"{x.name}={x.capability}" for x in plan.targets)
        labels[f"{LABEL_PREFIX}.min-driver"] = plan.min_driver or ""
        if plan.cuda_compat:  # [gpu] forward_compat: the runtime carries cuda-compat, switched on at start
            labels[f"{LABEL_PREFIX}.cuda-compat"] = plan.cuda_compat
        if plan.prune is not None:  # what `kiln prune` cut in the build (the SBOM carries the labels too)
            labels[f"{LABEL_PREFIX}.pruned"] = ",".join(plan.prune.what)
            labels[f"{LABEL_PREFIX}.pruned-to"] = ",".join(plan.prune.targets) + ("+ptx" if plan.prune.ptx else "")
    return labels


def verify_spec(plan: BuildPlan) -> dict[str, object]:
    """The verify bundle's ``spec.json``: what ``checks.py --spec-json`` checks the image against."""
    return {
        "cuda": plan.torch.cuda,
        "min_driver": plan.min_driver,
        "python": plan.python,
        "forward_compat": bool(plan.cuda_compat),
        "extensions": [{"name": e.name, "import": e.import_name} for e in plan.extensions],
    }


def image_ref(plan: BuildPlan, target: str = "runtime", tag: str | None = None) -> str:
    """The reference a build of ``target`` is tagged with (dev images get a ``-dev`` tag suffix)."""
    if tag:
        return tag
    return plan.image_ref if target == "runtime" else f"{plan.image_name}:{plan.tag}-{target}"


def sif_name(plan: BuildPlan) -> str:
    """The default file name of a ``.sif`` image: ``trainer-a100_2024.11.sif``."""
    return f"{plan.image_name.rsplit('/', 1)[-1]}_{plan.tag}.sif"
