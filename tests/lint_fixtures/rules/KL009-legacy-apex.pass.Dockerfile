# apex pinned to a commit from before its pyproject.toml, built with the README's old
# --global-option command: pip runs its setup.py in this environment, with torch.
FROM pytorch/pytorch:2.5.1-cuda12.4-cudnn9-devel AS build
ENV MAX_JOBS=4 \
    TORCH_CUDA_ARCH_LIST="8.0;9.0+PTX"
RUN pip install --no-cache-dir --global-option="--cpp_ext" --global-option="--cuda_ext" \
    git+https://github.com/NVIDIA/apex@705cba9
RUN git clone https://github.com/NVIDIA/apex /opt/apex \
    && cd /opt/apex \
    && git checkout 3c19f1061879394f28272a99a7ea26d58f72dace \
    && pip install --no-cache-dir --global-option="--cpp_ext" --global-option="--cuda_ext" ./

FROM pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime
COPY --from=build /opt/conda /opt/conda
USER 1000:1000
