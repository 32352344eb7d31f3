# Builds KL008 must not report: extensions whose setup.py passes its own -gencode flags, a
# *_SKIP_CUDA_BUILD build, a path that only contains a package's name, and an NGC base.
FROM pytorch/pytorch:2.5.1-cuda12.4-cudnn9-devel AS build
RUN --mount=type=cache,target=/root/.cache/pip \
    MAX_JOBS=4 pip install --no-build-isolation mamba-ssm==2.2.4 causal-conv1d==1.5.0.post8
RUN --mount=type=cache,target=/root/.cache/pip \
    FLASH_ATTENTION_SKIP_CUDA_BUILD=TRUE pip install --no-build-isolation flash-attn==2.7.4.post1
RUN --mount=type=cache,target=/root/.cache/pip \
    pip install -e tests/vllm_test_utils

FROM nvcr.io/nvidia/pytorch:24.05-py3 AS ngc
RUN --mount=type=cache,target=/root/.cache/pip \
    git clone https://github.com/NVIDIA/apex /opt/apex \
    && cd /opt/apex \
    && MAX_JOBS=4 pip install -v --no-build-isolation --config-settings "--build-option=--cuda_ext" .

FROM pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime
COPY --from=build /opt/conda /opt/conda
USER 1000:1000
