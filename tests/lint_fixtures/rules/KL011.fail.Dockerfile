# KL011: ninja starts one nvcc per CPU; on a 64-core builder that is an OOM kill.
FROM pytorch/pytorch:2.5.1-cuda12.4-cudnn9-devel AS build
ENV TORCH_CUDA_ARCH_LIST="8.0;9.0+PTX"
RUN --mount=type=cache,target=/root/.cache/pip \
# expect: KL011
    pip install --no-build-isolation "git+https://github.com/facebookresearch/xformers.git@v0.0.28.post3"

FROM pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime
COPY --from=build /opt/conda /opt/conda
USER 1000:1000
