#!/usr/bin/env bash
# The custom CUDA extension of examples/custom-ext.toml on a real GPU, without a container engine:
# builds examples/ext/my_op against the host's own torch the way torchkiln's extensions stage does
# (pip --no-build-isolation, TORCH_CUDA_ARCH_LIST="8.0;9.0+PTX", compressed fat binaries, offline),
# lists the device code of the built .so with torchkiln's own fat-binary reader (and cuobjdump when
# present), runs the kernel against torch's own arithmetic from SASS and again with the driver
# JIT-compiling the PTX, and prints PASS or FAIL.
#
#   scripts/gpu/run_custom_ext.sh [OUTDIR]      # OUTDIR defaults to $OUT (the device tool's folder)
#
# Needs: python3 with torch (CUDA build) and setuptools, nvcc of torch's CUDA major, one GPU.
# Takes about a minute on a many-core machine; nothing is installed into the host environment.
set -uo pipefail
out=${1:-${OUT:-/tmp/kiln-custom-ext-out}}
py=${PYTHON:-python3}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
mkdir -p "$out"
exec > >(tee -a "$out/custom-ext.log") 2>&1
export PYTHONUNBUFFERED=1

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

echo "== machine"
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader || fail "nvidia-smi failed"
"$py" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)' || fail "no torch"
nvcc --version | tail -2 || fail "no nvcc on PATH"

echo "== build (pip wheel --no-build-isolation, offline)"
cp -r "$repo/examples/ext/my_op" "$work/src"
export TORCH_CUDA_ARCH_LIST="8.0;9.0+PTX"
export NVCC_APPEND_FLAGS="-Xfatbin -compress-all"
export MAX_JOBS=${MAX_JOBS:-$(nproc)}
export CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")}
start=$(date +%s)
"$py" -m pip wheel --no-build-isolation --no-deps --no-index --disable-pip-version-check -w "$work/dist" \
    "$work/src" || fail "the extension did not build"
"$py" -m pip install --no-deps --no-index --disable-pip-version-check --target "$work/site" "$work"/dist/*.whl \
    || fail "the wheel did not install"
echo "built in $(( $(date +%s) - start )) s: $(cd "$work/dist" && ls -- *.whl)"
so=$(ls "$work"/site/my_op/_C*.so)

echo "== device code in $(basename "$so") (torchkiln's fat-binary reader)"
# fatbin.py is stdlib-only by design: load that one file, not the torchkiln package.
"$py" - "$repo/src/torchkiln/inspect/fatbin.py" "$so" <<'PY' | tee "$work/listing.txt"
import importlib.util, sys
spec = importlib.util.spec_from_file_location("kiln_fatbin", sys.argv[1])
fatbin = importlib.util.module_from_spec(spec)
sys.modules["kiln_fatbin"] = fatbin
spec.loader.exec_module(fatbin)
entries = fatbin.list_entries(sys.argv[2])
for line in fatbin.cuobjdump_lines(entries, "my_op.so"):
    print(line)
got = sorted({(e.kind, e.sm) for e in entries})
want = [("ptx", 90), ("sass", 80), ("sass", 90)]
print("archs:", got, "OK" if got == want else f"UNEXPECTED (want {want})")
PY
if command -v cuobjdump >/dev/null; then
    echo "\$ cuobjdump --list-elf --list-ptx $(basename "$so")"
    cuobjdump --list-elf --list-ptx "$so"
fi
grep -q "OK$" "$work/listing.txt" || fail "the .so does not hold exactly sm_80, sm_90 and compute_90"

check='
import json, sys, torch, my_op
dev = torch.cuda.get_device_name(0)
cap = torch.cuda.get_device_capability(0)
worst = 0.0
for n in (0, 1, 255, 257, 1 << 20, (1 << 24) + 3):
    g = torch.Generator(device="cuda").manual_seed(n)
    x = torch.randn(n, device="cuda", generator=g)
    y = torch.randn(n, device="cuda", generator=g)
    out = my_op.axpby(x, y, 2.5, -0.75)
    ref = 2.5 * x - 0.75 * y
    torch.testing.assert_close(out, ref, rtol=1e-6, atol=1e-6)
    if n:
        worst = max(worst, (out - ref).abs().max().item())
x = torch.randn(64, 33, device="cuda").t()
y = torch.randn(33, 64, device="cuda")
torch.testing.assert_close(my_op.axpby(x, y, 1.0, 1.0), x + y)
print(json.dumps({"device": dev, "capability": cap, "max_abs_error": worst, "mode": sys.argv[1]}))
'
echo "== kernel vs torch (SASS sm_90 on this GPU)"
PYTHONPATH="$work/site" "$py" -c "$check" sass | tee "$out/custom-ext-sass.json" || fail "wrong result from SASS"
# Forward compatibility through PTX: CUDA_FORCE_PTX_JIT cannot be used for this, because torch's
# own cu13x wheels ship no PTX (measured), so forcing JIT breaks torch's kernels, not ours. Instead
# build a second wheel for "8.0+PTX" only: sm_80 SASS cannot run on a 9.x device (other major), so
# the only way my_op's kernel runs on this GPU is the driver JIT-compiling its compute_80 PTX.
echo "== rebuild for 8.0+PTX only (no SASS this GPU can run)"
export TORCH_CUDA_ARCH_LIST="8.0+PTX"
rm -rf "$work/src/build" "$work/dist80" "$work/site80"
"$py" -m pip wheel --no-build-isolation --no-deps --no-index --disable-pip-version-check -w "$work/dist80" \
    "$work/src" >/dev/null || fail "the 8.0+PTX extension did not build"
"$py" -m pip install --no-deps --no-index --disable-pip-version-check --target "$work/site80" "$work"/dist80/*.whl \
    >/dev/null || fail "the 8.0+PTX wheel did not install"
so80=$(ls "$work"/site80/my_op/_C*.so)
"$py" - "$repo/src/torchkiln/inspect/fatbin.py" "$so80" <<'PY' | tee "$work/listing80.txt"
import importlib.util, sys
spec = importlib.util.spec_from_file_location("kiln_fatbin", sys.argv[1])
fatbin = importlib.util.module_from_spec(spec)
sys.modules["kiln_fatbin"] = fatbin
spec.loader.exec_module(fatbin)
got = sorted({(e.kind, e.sm) for e in fatbin.list_entries(sys.argv[2])})
print("archs:", got, "OK" if got == [("ptx", 80), ("sass", 80)] else "UNEXPECTED")
PY
grep -q "OK$" "$work/listing80.txt" || fail "the 8.0+PTX .so does not hold exactly sm_80 and compute_80"
echo "== kernel vs torch (driver JIT of the compute_80 PTX on this GPU)"
PYTHONPATH="$work/site80" "$py" -c "$check" ptx-jit | tee "$out/custom-ext-ptx.json" \
    || fail "wrong result from the JIT-compiled PTX"
if "$py" -c 'import pytest' 2>/dev/null; then
    echo "== the extension's own tests"
    PYTHONPATH="$work/site" "$py" -m pytest -q -p no:cacheprovider "$work/src/tests" || fail "tests/test_my_op.py failed"
fi
echo "PASS: my_op built for 8.0;9.0+PTX holds exactly sm_80 + sm_90 SASS and compute_90 PTX and matches torch; built for 8.0+PTX it runs on this GPU through the driver JIT of compute_80 PTX"
