#!/bin/sh
# Runs the [gpu] forward_compat entrypoint (torchkiln.resolve.compat.entrypoint_script) against a real
# NVIDIA driver's /proc/driver/nvidia/version: with fake compat libraries newer than the host driver it
# must put them first on the library path, with older ones it must not. Needs only a GPU host.
# Usage: scripts/gpu/check_compat_entrypoint.sh ENTRYPOINT_SCRIPT
set -eu
script=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat /proc/driver/nvidia/version
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
for ver in 999.99.99 100.10.10; do
  rm -rf "$dir/compat"; mkdir -p "$dir/compat"
  touch "$dir/compat/libcuda.so.$ver" "$dir/compat/libcuda.so.1"
  got=$(KILN_CUDA_COMPAT_DIR="$dir/compat" sh "$script" sh -c 'printf %s "${LD_LIBRARY_PATH:-}"')
  echo "compat libcuda $ver -> LD_LIBRARY_PATH='$got'"
  case $ver in
    999.99.99) [ "$got" = "$dir/compat" ] || { echo "FAIL: a newer compat driver was not used"; exit 1; } ;;
    *) [ -z "$got" ] || { echo "FAIL: an older compat driver shadowed the host driver"; exit 1; } ;;
  esac
done
echo OK
