#!/bin/bash
set -e
export TORCH_CUDA_ARCH_LIST="8.0;9.0+PTX"
cd build;make -j4
