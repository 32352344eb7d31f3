#!/usr/bin/env bash
# Prove `kiln prune` on a real GPU (no container engine there): prune a copy of the installed torch
# and two compiled extensions to this GPU's architecture, then check that nothing changed but size.
#
#   scripts/gpu/prune_on_gpu.sh [OUTDIR]      # OUTDIR defaults to $OUT (the device tool's folder)
#
# 1. copies the host's torch/ to a scratch folder (nvidia/ is linked, not copied: torch's RPATH
#    $ORIGIN/../../nvidia finds the same, unmodified NVIDIA libraries) and prunes the copy with
#    src/torchkiln/inspect/prune.py (stdlib-only, run as a script exactly as the Dockerfile runs it);
#    NVIDIA's libraries are only measured (--dry-run), never modified;
# 2. cuobjdump lists the pruned libraries (NVIDIA's own reader must accept them);
# 3. checks.py (`kiln verify --here`) with the pruned torch first on PYTHONPATH;
# 4. scripts/gpu/op_sweep.py with the unpruned and the pruned torch: every result bit for bit;
# 5. import torch + first kernel, 5 times each, alternating;
# 6. kiln_fixture.cu built for sm_80/sm_90/sm_90a/compute_90/sm_100/sm_120 and examples/ext/my_op
#    built for "8.0;9.0;10.0+PTX", pruned (the .so, and my_op's wheel with its RECORD), launched;
# 7. gzip -6 of torch's big libraries before and after (what a registry stores and a node pulls).
set -uo pipefail
out=${1:-${OUT:-/tmp/kiln-prune-out}}
py=${PYTHON:-python3}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
prune="$repo/src/torchkiln/inspect/prune.py"
mkdir -p "$out"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
exec > >(tee -a "$out/prune-log.txt") 2>&1
now() { date +%s.%N; }
# PARTS picks steps (default: all): torch verify sweep import ext1 ext2 gzip
PARTS=${PARTS:-torch verify sweep import ext1 ext2 gzip}
want() { [[ " $PARTS " == *" $1 "* ]]; }

echo "== machine"
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader
cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1)
site=$("$py" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
"$py" -c 'import torch; print("torch", torch.__version__, torch.cuda.get_arch_list())'
echo "site-packages: $site; target: $cap"

work=/tmp/kiln-prune
rm -rf "$work"; mkdir -p "$work/tp"
cp -a "$site/torch" "$work/tp/torch"
ln -s "$site/nvidia" "$work/tp/nvidia"
rm -rf "$work/tp/torch/__pycache__"

echo "== gzip -6 of the unpruned libraries (background)"
gz=()
if want gzip; then
    for lib in libtorch_cuda.so libtorch_cuda_linalg.so libtorch_nvshmem.so; do
        (printf '%s before %s\n' "$lib" "$(gzip -6 -c "$site/torch/lib/$lib" | wc -c)" >>"$work/gzip.txt") &
        gz+=($!)
    done
fi

echo "== prune the copy of torch to $cap"
t0=$(now)
"$py" "$prune" --targets "$cap" --json "$work/tp/torch" >"$out/prune-torch.json" || echo "PRUNE FAILED"
t1=$(now)
echo "pruned in $("$py" -c "print(round($t1 - $t0, 2))") s"
"$py" - "$out/prune-torch.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for f in d["files"]:
    if f["status"] != "unchanged" or f["entries_before"]:
        print(f'{f["status"]:9} {f["size_before"]/2**20:9.1f} MiB -> {f["size_after"]/2**20:9.1f} MiB  '
              f'entries {f["entries_before"]} -> {f["entries_after"]}  {f["path"].split("/torch/")[-1]}  {f["note"]}')
print(d["summary"])
PY
want torch && {
echo "== NVIDIA's libraries: measured only (never modified)"
"$py" "$prune" --targets "$cap" --json --dry-run "$site/nvidia" >"$out/prune-nvidia.json"
"$py" -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['summary'])" "$out/prune-nvidia.json"

echo "== cuobjdump on the pruned libraries"
for lib in libtorch_cuda.so libtorch_cuda_linalg.so libtorch_nvshmem.so; do
    before=$(cuobjdump --list-elf --list-ptx "$site/torch/lib/$lib" 2>&1 | grep -c -E '^(ELF|PTX) file')
    after=$(cuobjdump --list-elf --list-ptx "$work/tp/torch/lib/$lib" 2>&1 | grep -c -E '^(ELF|PTX) file')
    archs=$(cuobjdump --list-elf --list-ptx "$work/tp/torch/lib/$lib" 2>&1 | grep -o -E 'sm_[0-9]+[af]?\.(cubin|ptx)' | sort | uniq -c | tr '\n' ' ')
    echo "$lib: cuobjdump entries $before -> $after; after: $archs"
    readelf -lW "$work/tp/torch/lib/$lib" >/dev/null 2>"$work/readelf.err"; [[ -s $work/readelf.err ]] && cat "$work/readelf.err"
done

}
want verify && {
echo "== kiln verify --here (checks.py) with the pruned torch"
PYTHONPATH="$work/tp" "$py" "$repo/src/torchkiln/verify/checks.py" --json >"$out/verify-pruned.json"
echo "checks.py exit code: $?"
"$py" - "$out/verify-pruned.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
checks = d.get("checks", d.get("results", []))
from collections import Counter
print(d.get("status"), d.get("summary"))
for c in checks:
    print(f'  {c.get("status"):5} {c.get("name")}: {str(c.get("reason"))[:160]}')
PY

}
want sweep && {
echo "== op sweep: unpruned vs pruned"
cd "$work"
"$py" "$here/op_sweep.py" run "$work/unpruned.pt"
PYTHONPATH="$work/tp" "$py" "$here/op_sweep.py" run "$work/pruned.pt"
"$py" "$here/op_sweep.py" compare "$work/unpruned.pt" "$work/pruned.pt" >"$out/op-sweep.jsonl"
echo "op sweep exit code: $?"; tail -1 "$out/op-sweep.jsonl"; grep '"identical": false' "$out/op-sweep.jsonl" || true

}
want import && {
echo "== import torch + first kernel (s), alternating"
first='import time; t=time.perf_counter(); import torch; x=torch.ones(1024, device="cuda"); (x*2).sum().item(); print(round(time.perf_counter()-t, 3), torch.__file__)'
for i in 1 2 3 4 5; do
    echo "unpruned $("$py" -c "$first")"
    echo "pruned   $(PYTHONPATH="$work/tp" "$py" -c "$first")"
done

}
want ext1 && {
echo "== extension 1: kiln_fixture.cu, six targets, pruned to $cap"
fx="$work/fx"; mkdir -p "$fx"
"$here/build_fixture.sh" "$fx" libkiln_multi.so arch=compute_80,code=sm_80 arch=compute_90,code=sm_90 \
    arch=compute_90a,code=sm_90a arch=compute_90,code=compute_90 arch=compute_100,code=sm_100 arch=compute_120,code=sm_120
cp "$fx/libkiln_multi.so" "$fx/libkiln_pruned.so"; cp "$fx/libkiln_multi.so" "$fx/libkiln_pruned_ptx.so"
"$py" "$prune" --targets "$cap" "$fx/libkiln_pruned.so"
"$py" "$prune" --targets "$cap" --ptx "$fx/libkiln_pruned_ptx.so"
for lib in libkiln_multi.so libkiln_pruned.so libkiln_pruned_ptx.so; do
    echo "$lib $(stat -c %s "$fx/$lib") bytes: $(cuobjdump --list-elf --list-ptx "$fx/$lib" | grep -o -E 'sm_[0-9]+[af]?\.(cubin|ptx)' | tr '\n' ' ')"
    "$py" "$here/launch_fixture.py" "$fx/$lib" | tee -a "$out/prune-launch.jsonl"
done

}
want ext2 && {
echo "== extension 2: examples/ext/my_op built for 8.0;9.0;10.0+PTX, its wheel pruned to $cap"
cp -r "$repo/examples/ext/my_op" "$work/my_op"
export TORCH_CUDA_ARCH_LIST="8.0;9.0;10.0+PTX" MAX_JOBS=$(nproc)
export CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")}
"$py" -m pip wheel -q --no-build-isolation --no-deps --no-index --disable-pip-version-check -w "$work/dist" "$work/my_op" \
    || echo "MY_OP BUILD FAILED"
mkdir -p "$work/distp"; cp "$work"/dist/*.whl "$work/distp/"
"$py" "$prune" --targets "$cap" "$work"/distp/*.whl
ls -l "$work"/dist/*.whl "$work"/distp/*.whl
"$py" -m pip install -q --no-deps --no-index --target "$work/site_a" "$work"/dist/*.whl
"$py" -m pip install -q --no-deps --no-index --target "$work/site_b" "$work"/distp/*.whl || echo "PRUNED WHEEL DID NOT INSTALL"
(cd "$work/site_b" && "$py" - <<'PY'
import base64, csv, hashlib, pathlib
rec = next(pathlib.Path(".").glob("*.dist-info/RECORD"))
bad = 0
for row in csv.reader(open(rec)):
    if len(row) == 3 and row[1]:
        h = base64.urlsafe_b64encode(hashlib.sha256(pathlib.Path(row[0]).read_bytes()).digest()).rstrip(b"=").decode()
        bad += row[1] != "sha256=" + h
print("RECORD hashes match the installed files:", bad == 0)
PY
)
ext='
import sys, torch, my_op
g = torch.Generator(device="cuda").manual_seed(0)
x = torch.randn((1 << 22) + 3, device="cuda", generator=g)
y = torch.randn((1 << 22) + 3, device="cuda", generator=g)
out = my_op.axpby(x, y, 2.5, -0.75)
torch.testing.assert_close(out, 2.5 * x - 0.75 * y)
torch.save([t.cpu() for t in (x, y, out)], sys.argv[1]); print("my_op from", my_op.__file__, "ok")
'
PYTHONPATH="$work/site_a" "$py" -c "$ext" "$work/ext_a.pt"
PYTHONPATH="$work/site_b" "$py" -c "$ext" "$work/ext_b.pt"
"$py" -c 'import sys, torch; a, b = torch.load(sys.argv[1]), torch.load(sys.argv[2]); print("my_op pruned vs unpruned bit-identical (x, y, out):", [torch.equal(p.view(torch.int32), q.view(torch.int32)) for p, q in zip(a, b)])' \
    "$work/ext_a.pt" "$work/ext_b.pt"
"$py" "$prune" --targets "$cap" --dry-run --json "$work/site_a" >"$out/prune-my_op.json"
cuobjdump --list-elf --list-ptx "$work"/site_b/my_op/_C*.so

}
want gzip && {
echo "== gzip -6 after"
for lib in libtorch_cuda.so libtorch_cuda_linalg.so libtorch_nvshmem.so; do
    (printf '%s after %s\n' "$lib" "$(gzip -6 -c "$work/tp/torch/lib/$lib" | wc -c)" >>"$work/gzip.txt") &
    gz+=($!)
done
wait "${gz[@]}"  # not a bare wait: that would also wait for the tee of the log
sort "$work/gzip.txt" | tee "$out/gzip.txt"
du -sbL "$site/torch" "$work/tp/torch" | tee -a "$out/gzip.txt"
}
echo "done"
