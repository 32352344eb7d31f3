#!/usr/bin/env bash
# `kiln verify --here` on the GPU machine, without torchkiln installed: checks.py runs straight
# from the source tree (it needs only the stdlib and torch; it finds ../inspect/fatbin.py itself).
#
#   scripts/gpu/verify_on_gpu.sh full  [OUTDIR]   # report + plain bf16 benchmark + sm_80-only fixture
#   scripts/gpu/verify_on_gpu.sh quick [OUTDIR]   # report + plain bf16 benchmark (multi-GPU runs)
#
# OUTDIR defaults to $OUT (the device tool's output folder). Writes verify.json, bench-bf16.json,
# and for "full" also verify-fixture.json and launch.jsonl; log.txt holds everything printed.
set -uo pipefail
mode=${1:-full}
out=${2:-${OUT:-/tmp/kiln-verify-out}}
py=${PYTHON:-python3}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
checks="$repo/src/torchkiln/verify/checks.py"
mkdir -p "$out"
export PYTHONUNBUFFERED=1
# The multi-GPU machines forbid NVLink multicast (it can take a shared host's GPUs down): keep it off.
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0} TORCH_SYMM_MEM_DISABLE_MULTICAST=${TORCH_SYMM_MEM_DISABLE_MULTICAST:-1}
export NVSHMEM_DISABLE_NVLS=${NVSHMEM_DISABLE_NVLS:-1}
exec > >(tee -a "$out/log.txt") 2>&1

echo "== machine"
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv
"$py" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, "GPUs", torch.cuda.device_count())'

echo "== checks.py --json (the whole report)"
"$py" "$checks" --json >"$out/verify.json"
echo "checks.py exit code: $?"

echo "== plain torch bf16 benchmark"
"$py" "$here/bench_bf16.py" 8192 20 | tee "$out/bench-bf16.json"

if [[ $mode == full ]]; then
    echo "== the deliberately wrong case: a CUDA library built for sm_80 only (no PTX), and a control for sm_90"
    fx=$(mktemp -d)
    mkdir -p "$fx/sm80" "$fx/sm90"
    "$here/build_fixture.sh" "$fx/sm80" libkiln_sm80_only.so arch=compute_80,code=sm_80
    "$here/build_fixture.sh" "$fx/sm90" libkiln_sm90.so arch=compute_90,code=sm_90
    for lib in "$fx/sm80/libkiln_sm80_only.so" "$fx/sm90/libkiln_sm90.so"; do
        echo "\$ cuobjdump --list-elf --list-ptx $(basename "$lib")"
        cuobjdump --list-elf --list-ptx "$lib" || true
    done
    # The report comes first: no process has loaded either library or launched their kernels yet.
    "$py" "$checks" --json --scan "$fx/sm80" --scan "$fx/sm90" --only arch_torch,arch_extensions \
        >"$out/verify-fixture.json"
    echo "checks.py (fixture) exit code: $?"
    # Only now launch the kernels, to show the report was right.
    "$py" "$here/launch_fixture.py" "$fx/sm80/libkiln_sm80_only.so" | tee -a "$out/launch.jsonl"
    "$py" "$here/launch_fixture.py" "$fx/sm90/libkiln_sm90.so" | tee -a "$out/launch.jsonl"
fi

echo
"$py" "$here/summarize.py" "$out"
