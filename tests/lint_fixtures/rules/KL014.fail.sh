#!/bin/bash
# KL014 in a build script (the pattern hpccm renders into Singularity recipes).
set -e
# expect: KL014
export TORCH_CUDA_ARCH_LIST=8.0;9.0
python setup.py bdist_wheel
