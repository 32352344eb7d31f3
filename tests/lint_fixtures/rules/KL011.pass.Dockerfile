FROM pytorch/pytorch:2.5.1-cuda12.4-cudnn9-devel AS build
ENV TORCH_CUDA_ARCH_LIST="8.0;9.0+PTX" FORCE_CUDA=1
RUN --mount=type=cache,target=/root/.cache/pip \
    MAX_JOBS=8 pip install --no-build-isolation "git+https://github.com/facebookresearch/pytorch3d.git@v0.7.8"

# flash-attn's setup.py (2.5.8 and newer) sizes MAX_JOBS from the cores and the free memory itself
RUN --mount=type=cache,target=/root/.cache/pip \
    pip install --no-build-isolation flash-attn==2.7.4.post1

FROM pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime
COPY --from=build /opt/conda /opt/conda
USER 1000:1000
