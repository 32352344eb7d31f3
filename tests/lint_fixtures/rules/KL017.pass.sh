#!/usr/bin/env bash
set -euo pipefail
IMAGE=acme/trainer:1.0
docker build -t "$IMAGE" .
docker run --rm --gpus all "$IMAGE" python -c "import torch; print(torch.cuda.is_available())"
