# hpc-container-maker recipe for the benchmark workload: what an hpccm user writes for "torch + a few
# packages + my app" on a base that already has Python and pip.
#
#   hpccm --recipe bench/hpccm_recipe.py --format docker \
#         --userarg base=IMAGE requirements=requirements.txt app=apps/cpu_app.py
#
# (hpccm's --userarg values cannot hold "=", so the pinned packages come from a requirements file)
#
# hpccm renders; it does not build. bench_build.py adds the benchmark's package-source mounts to the
# rendered RUN line (the same secrets every approach gets) and builds it with the same engine.
# ruff: noqa
# mypy: ignore-errors

base = USERARG.get("base", "kiln-base:bookworm")  # noqa: F821 - hpccm injects USERARG
with open(USERARG["requirements"]) as f:  # noqa: F821
    packages = [line.strip() for line in f if line.strip() and not line.startswith("#")]
app = USERARG.get("app", "").split(",") if USERARG.get("app") else []  # noqa: F821
app_dir = USERARG.get("workdir", "/workspace")  # noqa: F821

Stage0 += baseimage(image=base, _distro="ubuntu22")  # noqa: F821 - apt-based, as Debian
Stage0 += pip(packages=packages, pip="pip3", ospackages=[])  # noqa: F821 - pip is in the base already
for path in app:
    Stage0 += copy(src=path, dest=f"{app_dir}/{path}")  # noqa: F821
Stage0 += workdir(directory=app_dir)  # noqa: F821
