# KL039: torchvision 0.16 is the release for torch 2.1; beside torch 2.6 pip cannot resolve it.
FROM nvidia/cuda:12.4.1-devel-ubuntu22.04
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip \
    && rm -rf /var/lib/apt/lists/*
# expect: KL039
RUN pip install --no-cache-dir "torch==2.6.0" "torchvision==0.16.0" "torchaudio==2.6.0" \
    --index-url https://download.pytorch.org/whl/cu124
USER 1000:1000
