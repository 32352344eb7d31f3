#!/usr/bin/env bash
# Build the fixture library for the architectures given (nvcc -gencode arguments).
# usage: build_fixture.sh OUTDIR NAME GENCODE...
#   build_fixture.sh /tmp/fx libkiln_sm80_only.so arch=compute_80,code=sm_80
set -euo pipefail
out=$1; name=$2; shift 2
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
gencode=()
for g in "$@"; do gencode+=(-gencode "$g"); done
nvcc -shared -Xcompiler -fPIC "${gencode[@]}" -o "$out/$name" "$here/kiln_fixture.cu"
echo "built $out/$name for: $*"
