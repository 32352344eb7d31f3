#!/usr/bin/env bash
# The build-and-smoke-test script that sits next to many of these Dockerfiles.
set -euo pipefail
IMAGE="${IMAGE:-acme/finetune:dev}"
# expect: KL014
export TORCH_CUDA_ARCH_LIST=8.0;9.0
docker build --build-arg TORCH_CUDA_ARCH_LIST -t "$IMAGE" .
# expect: KL017
nvidia-docker run --rm -it -v "$PWD/data:/data" "$IMAGE" python -c "import torch; print(torch.cuda.device_count())"
