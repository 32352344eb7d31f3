# apex's default branch has a pyproject.toml: the same old command now builds it in isolation.
FROM pytorch/pytorch:2.5.1-cuda12.4-cudnn9-devel AS build
ENV MAX_JOBS=4 \
    TORCH_CUDA_ARCH_LIST="8.0;9.0+PTX"
RUN git clone https://github.com/NVIDIA/apex /opt/apex \
    && cd /opt/apex \
# expect: KL009
    && pip install --no-cache-dir --global-option="--cpp_ext" --global-option="--cuda_ext" ./
WORKDIR /src
RUN git clone -b master https://github.com/NVIDIA/apex \
    && cd apex \
# expect: KL009
    && pip install --no-cache-dir --global-option="--cuda_ext" ./

FROM pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime
COPY --from=build /opt/conda /opt/conda
USER 1000:1000
