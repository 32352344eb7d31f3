"""Render a plan whose torch is the base image's own (``[torch] source = "image"``). Pure and deterministic.

Stages (runtime last, so a plain ``docker build`` gives the runtime image):

* ``base``        the vendor image as it is (its torch, Python, CUDA, compilers, pip constraints and
                  environment untouched: ``PIP_CONSTRAINT`` is never cleared), plus the spec's apt packages;
* ``extensions``  (when something is compiled) each extension built into a wheel against the image's
                  torch with the image's own nvcc, ``--no-build-isolation``, ``TORCH_CUDA_ARCH_LIST``
                  from the targets, cached like kiln's other builder stages; ``wheels`` holds them alone;
* ``packages``    the spec's pip packages and the extension wheels installed into the image's Python,
                  constrained by the image's constraints file and a pin of its torch (a package that
                  wants another torch fails here, naming itself), then a check that torch's files are
                  the very files the image brought;
* ``dev``         the same as root with a shell (the image is already a development image);
* ``runtime``     the packages stage + the app, non-root by default. No slim stage is made from a
                  development image: ``kiln explain`` says so and names the alternative.

The builder stages reuse ``render/extensions.py``'s helper script (``.kiln/ext/build.sh``) with
``KILN_PY`` set to the image's interpreter.
"""

from __future__ import annotations

import shlex

from torchkiln.contract import UV, image_labels
from torchkiln.plan import BuildPlan
from torchkiln.render import extensions as ext
from torchkiln.render import instructions as ins
from torchkiln.render import reproducible
from torchkiln.render import steps as render_steps

UID = 1000
#: the pin of the image's torch, bound into the install steps (never stored in the image)
PIN = "pin-torch.txt"


def header(plan: BuildPlan) -> list[str]:
    image = plan.torch.image
    assert image is not None
    return [*ins.dockerfile_header(plan),
            f"# torch is the base image's own ({image.facts}): installs are constrained to it, never replace it."]


def stage_base(plan: BuildPlan) -> list[str]:
    image = plan.torch.image
    assert image is not None
    keep = "its torch, Python, CUDA" + (", nvcc" if image.cuda_home else "") + (
        f", {image.constraints}" if image.constraints else "")
    lines = [
        f"# base: {plan.base_image} as it is ({keep} and environment untouched)",
        f"FROM {plan.base_image} AS base",
        *reproducible.add_mount_points(),
        ins.SHELL,
    ]
    if plan.apt_packages:
        lines += ins.apt_install(plan.apt_packages)
    # torch is the image's own: "after torch" is here too
    return lines + render_steps.dockerfile_steps(plan, "system") + render_steps.dockerfile_steps(plan, "torch")


def _constraints(plan: BuildPlan) -> str:
    image = plan.torch.image
    assert image is not None
    own = f" -c {image.constraints}" if image.constraints else ""
    return f"{own} -c /kiln/{PIN}"


def _ext_env(plan: BuildPlan) -> list[tuple[str, str]]:
    tc = plan.toolchain
    image = plan.torch.image
    assert image is not None
    pairs = [("KILN_PY", image.python_exe), ("CCACHE_DIR", "/root/.cache/ccache")]
    if tc is not None and tc.cuda:
        pairs += [
            ("CUDA_HOME", tc.cuda_home),
            ("TORCH_CUDA_ARCH_LIST", plan.arch_list),
            ("TORCH_NVCC_FLAGS", ext.COMPRESS),
            ("NVCC_APPEND_FLAGS", ext.COMPRESS),
        ]
    return pairs


def stage_extensions(plan: BuildPlan) -> list[str]:
    compiled = ext.compiled(plan)
    if not compiled:
        return []
    tc = plan.toolchain
    image = plan.torch.image
    assert image is not None
    what = f"the image's own nvcc (CUDA {tc.cuda})" if tc is not None and tc.cuda else "the host C++ compiler"
    lines = [
        f"# extensions: each built into a wheel against the image's torch with {what}, without build",
        "# isolation, for TORCH_CUDA_ARCH_LIST from the targets; wheels cached by package, torch, CUDA, Python, archs",
        "FROM base AS extensions",
        "ARG MAX_JOBS",
    ]
    if tc is not None and tc.apt:
        lines += ins.apt_install(tc.apt)
    lines += ins.env(_ext_env(plan))
    for e in compiled:
        mounts = [*ins.SOURCE_MOUNTS, *ext._build_mounts()]
        target = e.spec
        if e.path is not None:
            mounts.append(f"type=bind,source={e.path},target={ext._src_target(e)},rw")
            target = ext._src_target(e)
        cmds = [". /kiln/sources.sh", ". /kiln/ext/build.sh"]
        if tc is not None and tc.cuda:
            cmds.append(f"kiln_check_nvcc {tc.cuda}")
        cmds += [*ext._exports(e.env), ext._jobs(e.memory_per_job_gib),
                 f"kiln_wheel {ext.cache_key(plan, e)} {shlex.quote(target)}"]
        title = e.spec if e.path is None else f"{e.name} from {e.path} (build context)"
        lines += [f"# {title}", *ins.run(mounts, cmds)]
    return lines


def stage_wheels(plan: BuildPlan) -> list[str]:
    return ext.wheels_stage() if ext.compiled(plan) else []


def stage_packages(plan: BuildPlan) -> list[str]:
    image = plan.torch.image
    assert image is not None
    py = image.python_exe
    torch_dir = f"{image.site}/torch"
    mounts = [reproducible.VENDOR_UV_CACHE_MOUNT if m == ins.UV_CACHE_MOUNT else m for m in ins.SOURCE_MOUNTS]
    mounts += [ins.bind("requirements.txt"), ins.bind(PIN)]
    reqs = ["-r /kiln/requirements.txt"] if plan.pip_packages else []
    if ext.compiled(plan):
        mounts.append(f"type=bind,from=extensions,source={ext.EXT_WHEELS},target=/kiln/ext-wheels")
        reqs.append("/kiln/ext-wheels/*.whl")
    reqs += [shlex.quote(e.prebuilt) for e in ext.prebuilt(plan) if e.prebuilt]
    version = plan.torch.version
    check = (f"{py} -c 'import torch; v = torch.__version__; "
             f"assert v == \"{version}\", \"torch was replaced: \" + v'")
    mark = "/tmp/kiln-packages-mark"
    cmds = [". /kiln/sources.sh", f"export UV_CACHE_DIR={reproducible.VENDOR_UV_CACHE}", f"touch {mark}"]
    if reqs:
        cmds += [
            f"find {torch_dir} -type f -print0 | sort -z | xargs -0 sha256sum > /tmp/kiln-torch.sha256",
            f"{UV} pip install --python {py} --system --break-system-packages{_constraints(plan)} " + " ".join(reqs),
            "sha256sum --quiet -c /tmp/kiln-torch.sha256",
            "rm /tmp/kiln-torch.sha256",
        ]
    # uv locks a system interpreter's environment with a file in /tmp (uv-HASH.lock), left behind
    cmds += [check, f"find /tmp -maxdepth 1 -name 'uv-*.lock' -newer {mark} -delete",
             reproducible.forget_install_times(image.site, mark),
             reproducible.stamp_since(mark, ("/usr/local", "/root", "/etc"))]
    return [
        "# packages: the spec's packages and extension wheels in the image's Python, constrained by the image's",
        "# constraints and a pin of its torch (a package that wants another torch fails here); torch's files are",
        "# checked to be the very files the image brought. What this step wrote gets the time SOURCE_DATE_EPOCH,",
        "# the image's own files are left as they are (render/reproducible.py)",
        "FROM base AS packages",
        ins.SHELL,
        reproducible.ARG,
        *ins.run(mounts, cmds),
        *render_steps.dockerfile_steps(plan, "packages"),
    ]


def _env(plan: BuildPlan) -> list[str]:
    # the base's own ENV stays (no venv, no constraints of ours); every value quoted, PATH too
    return ins.env([*ins.gpu_env(plan), *plan.app.env], unquoted=())


def _app(plan: BuildPlan) -> list[str]:
    chown = "" if plan.app.user == "root" else f"--chown={UID}:{UID} "
    lines = [f"WORKDIR {plan.app.workdir}"]
    for item in plan.app.copy:
        lines.append(f"COPY {chown}{item} {plan.app.workdir.rstrip('/')}/{item.rstrip('/')}")
    return lines


def _user(plan: BuildPlan) -> list[str]:
    if plan.app.user == "root":
        return []
    u = plan.app.user
    # NGC images (Ubuntu 24.04) already have a user 1000 ("ubuntu"): that one is used then; what useradd
    # writes gets SOURCE_DATE_EPOCH (render/reproducible.py)
    return reproducible.stamped_run(
        f"(id -u {UID} >/dev/null 2>&1 || useradd --create-home --uid {UID} --user-group --shell /bin/bash {u})")


def _user_ref(plan: BuildPlan) -> str:
    """USER value: numeric, so that orchestrators can prove the container is not root."""
    return "root" if plan.app.user == "root" else f"{UID}:{UID}"


def stage_dev(plan: BuildPlan) -> list[str]:
    return [
        "# dev: the packages stage with a shell (the base is already a development image: compilers, nvcc)",
        "FROM packages AS dev",
        *_user(plan),
        *_env(plan),
        *ins.labels(image_labels(plan)),
        f"WORKDIR {plan.app.workdir}",
        *render_steps.dockerfile_steps(plan, "app"),
        *ins.run_config(plan, dev=True),
        f"USER {_user_ref(plan)}",
        'CMD ["bash"]',
    ]


def stage_runtime(plan: BuildPlan) -> list[str]:
    image = plan.torch.image
    assert image is not None
    what = ("the base is a development image (nvcc, headers, compilers), kept as it is: no slim stage is made "
            "from it" if image.devel else "the base image as it is")
    return [
        f"# runtime: the packages stage + the app, non-root by default; {what}",
        "FROM packages AS runtime",
        *_user(plan),
        *_env(plan),
        *ins.labels(image_labels(plan)),
        *_app(plan),
        *render_steps.dockerfile_steps(plan, "app"),
        *ins.run_config(plan),
        f"USER {_user_ref(plan)}",
        *ins.start(plan, "python3"),
    ]


def render_vendor_dockerfile(plan: BuildPlan) -> str:
    blocks = [header(plan), stage_base(plan), stage_extensions(plan), stage_wheels(plan), stage_packages(plan),
              stage_dev(plan), stage_runtime(plan)]
    return "\n\n".join("\n".join(b) for b in blocks if b) + "\n"


def vendor_context_files(plan: BuildPlan) -> dict[str, str]:
    files = {
        "Dockerfile": render_vendor_dockerfile(plan),
        ".dockerignore": ins.DOCKERIGNORE,
        f".kiln/{PIN}": f"torch=={plan.torch.version}\n",
        ".kiln/requirements.txt": "".join(f"{p}\n" for p in plan.pip_packages),
        ".kiln/sources.sh": ins.SOURCES_SH,
        reproducible.MOUNT_POINTS_TAR: reproducible.mount_points_tar(),
        ".kiln/wheels/.keep": "",
        **ext.context_files(plan),
    }
    return dict(sorted(files.items()))
