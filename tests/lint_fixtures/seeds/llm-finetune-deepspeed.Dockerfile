# A fine-tuning image as it is often written: one stage on the devel image, everything as root.
FROM nvidia/cuda:12.4.1-cudnn-devel-ubuntu22.04

# expect: KL006
ARG HF_TOKEN
ARG TORCH_INDEX
ENV DEBIAN_FRONTEND=noninteractive \
    DS_BUILD_FUSED_ADAM=1 \
    DS_BUILD_CPU_ADAM=1 \
# expect: KL007
    NVCC_APPEND_FLAGS="--use_fast_math -O3"

# expect: KL003
RUN apt-get update && apt-get install -y --no-install-recommends \
        python3.11 python3.11-venv python3-pip git ninja-build \
    && apt-get clean

WORKDIR /workspace
# expect: KL004
COPY . .

# expect: KL002
RUN pip install torch==2.5.1 --index-url "${TORCH_INDEX}" \
# expect: KL002
    && pip install -r requirements.txt
# expect: KL002, KL008
RUN pip install --no-build-isolation deepspeed==0.16.2
# expect: KL002, KL009
RUN pip install flash-attn==2.7.4.post1

# expect: KL033
RUN huggingface-cli login --token "$HF_TOKEN"
CMD ["deepspeed", "--num_gpus", "8", "train.py", "--deepspeed", "ds_config.json"]
