#!/usr/bin/env bash
# From a fresh Debian/Ubuntu machine to the CPU example running in a container, without a registry,
# and to a machine where the test suite (`.venv/bin/python -m pytest`) runs every test it can:
#   1. installs what is missing with apt: python3-venv, debootstrap, docker.io, and the tools the
#      tests use (podman, squashfs-tools and siftool for SIF files, skopeo and stargz-snapshotter for compressed pushes, openssl, qemu-user-static and
#      binfmt-support for arm64 images), and turns on arm64 emulation (binfmt_misc),
#   2. makes .venv and installs torchkiln into it with its test extra, and the CPU torch the tests
#      import (torch==2.13.0, from this machine's package sources),
#   3. starts the Docker daemon if docker is not usable,
#   4. bootstraps an offline base image (kiln base bootstrap: debootstrap + python3, cached by tag),
#   5. builds examples/cpu.toml on it and runs it.
#
# Package sources: the KILN_* variables if any is set (KILN_FIND_LINKS, KILN_INDEX_URL,
# KILN_TORCH_INDEX, KILN_CA_BUNDLE, ...), else this machine's pip configuration. The CPU example
# needs torch 2.13.0+cpu: a wheel folder (KILN_FIND_LINKS) or the CPU torch index (KILN_TORCH_INDEX).
# See docs/build.md. Safe to re-run: every step is skipped or cached when already done.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "1/5 system packages"
need=()
python3 -c "import venv, ensurepip" >/dev/null 2>&1 || need+=(python3-venv)
# docker.io: the engine (BuildKit through DOCKER_BUILDKIT=1); debootstrap: the offline base; podman:
# the second engine the tests build with; squashfs-tools, siftool: SIF files; openssl: the tests' marker CA;
# docker-registry: the real registry (distribution 2.8) the push and cache tests start on 127.0.0.1;
# qemu-user-static, binfmt-support: arm64 (Grace) images built on x86_64 (`kiln build --platform linux/arm64`);
# skopeo, stargz-snapshotter (ctr-remote): `kiln push --compression estargz`
for pkg in docker.io debootstrap podman squashfs-tools siftool openssl ca-certificates docker-registry \
           qemu-user-static binfmt-support skopeo stargz-snapshotter; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}"
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
else
  echo "nothing to install"
fi
# the Debian package starts a registry on :5000 with its own config; the tests start their own
if command -v systemctl >/dev/null 2>&1; then $SUDO systemctl disable --now docker-registry >/dev/null 2>&1 || true; fi

# arm64 emulation: the kernel hands aarch64 programs to qemu once binfmt_misc is mounted and the
# qemu-aarch64 handler (registered by qemu-user-static, with the F flag: it works inside containers)
# is enabled. Idempotent; where it cannot be done (a container without the host's binfmt_misc) it
# says so, and the arm64 tests are skipped with that reason.
binfmt=/proc/sys/fs/binfmt_misc
if [ "$(uname -m)" = aarch64 ]; then
  echo "arm64 emulation: not needed (this machine is aarch64)"
else
  [ -e "$binfmt/status" ] || $SUDO mount -t binfmt_misc binfmt_misc "$binfmt" >/dev/null 2>&1 || true
  if [ ! -e "$binfmt/status" ]; then
    echo "arm64 emulation: binfmt_misc cannot be mounted here (a container? the host must provide it): arm64 builds are unavailable"
  else
    grep -qs '^enabled' "$binfmt/qemu-aarch64" || $SUDO update-binfmts --enable qemu-aarch64 >/dev/null 2>&1 || true
    if grep -qs '^enabled' "$binfmt/qemu-aarch64"; then
      echo "arm64 emulation: qemu-aarch64 enabled ($(grep '^flags' "$binfmt/qemu-aarch64"))"
    else
      echo "arm64 emulation: the qemu-aarch64 handler could not be enabled (update-binfmts --enable qemu-aarch64 failed): arm64 builds are unavailable"
    fi
  fi
fi

step "2/5 torchkiln in .venv (with the test extra and the CPU torch the tests import)"
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# every run, so that a changed pyproject.toml is picked up (quick when nothing changed)
.venv/bin/python -m pip install -q -e '.[test]'
# the release whose CPU build this kind of machine's pip configuration provides (a wheel folder);
# elsewhere pip fetches it from the configured index
.venv/bin/python -c "import torch" >/dev/null 2>&1 || .venv/bin/python -m pip install -q 'torch==2.13.0'
KILN=(.venv/bin/kiln)
"${KILN[@]}" --version

step "3/5 container engine"
# docker itself, not any engine: once podman is installed it would satisfy a plain get_engine()
engine_ok() { .venv/bin/python -c "from torchkiln.engines import get_engine; get_engine('docker')" >/dev/null 2>&1; }
if ! engine_ok; then
  if command -v systemctl >/dev/null 2>&1 && systemctl is-system-running >/dev/null 2>&1; then
    $SUDO systemctl start docker
  else
    echo "starting dockerd in the background (log: /tmp/kiln-dockerd.log)"
    $SUDO sh -c 'setsid dockerd >/tmp/kiln-dockerd.log 2>&1 < /dev/null &'
  fi
  for _ in $(seq 1 60); do engine_ok && break; sleep 1; done
fi
# prints the engine that will be used, or exits with the reason and what to install (exit code 5)
.venv/bin/python -c "from torchkiln.engines import get_engine; i = get_engine('docker').info; print(f'{i.name} {i.server_version} ({i.builder}) at {i.binary}')" \
  || { "${KILN[@]}" build examples/cpu.toml --dry-run; exit 5; }

step "4/5 offline base image"
if [ -n "$SUDO" ]; then
  $SUDO "${KILN[@]}" base bootstrap
else
  "${KILN[@]}" base bootstrap
fi

step "5/5 this machine's settings, then build and run the CPU example"
# what is about this machine (the offline base, where packages come from) goes into the settings file
# (`kiln config`), so every command printed from here on works as it is, with no extra flags
"${KILN[@]}" config set base kiln-base:bookworm
# (no `cmd | grep -q` here: with pipefail, grep's early exit makes the pipeline fail)
kiln_vars=$(env | grep -E '^KILN_(INDEX_URL|EXTRA_INDEX_URL|FIND_LINKS|TORCH_INDEX)=' || true)
pip_config=$(.venv/bin/python -m pip config list 2>/dev/null || true)
if [ -z "$kiln_vars" ] && grep -qE 'index-url|find-links' <<<"$pip_config"; then
  echo "package sources: this machine's pip configuration"
  "${KILN[@]}" config set sources_from_pip true
fi
"${KILN[@]}" config
"${KILN[@]}" build examples/cpu.toml
"${KILN[@]}" run examples/cpu.toml --no-interactive
"${KILN[@]}" run examples/cpu.toml --no-interactive -- python -c "import torch; print('import torch OK:', torch.__version__)"
# the kiln script lives in .venv (not on PATH unless the venv is activated): print what runs as it is
printf '\nDone. Next: edit examples/apps/cpu_app.py and run `.venv/bin/kiln build examples/cpu.toml` again (only the app layer is rebuilt);\n'
printf 'pin every input with `.venv/bin/kiln lock examples/cpu.toml`, then `.venv/bin/kiln build examples/cpu.toml --locked`\n'
printf '(or `source .venv/bin/activate` first, and drop the .venv/bin/).\n'
