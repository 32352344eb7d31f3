# KL008: pytorch3d, detectron2, kaolin and PyG's extensions compile CUDA only when torch sees a GPU
# or FORCE_CUDA=1; `docker build` shows no GPU, so without FORCE_CUDA they build CPU-only.
FROM pytorch/pytorch:2.5.1-cuda12.4-cudnn9-devel
ENV TORCH_CUDA_ARCH_LIST="8.0;9.0+PTX" MAX_JOBS=4
# expect: KL008
RUN pip install --no-cache-dir --no-build-isolation "git+https://github.com/facebookresearch/pytorch3d.git@stable"
# expect: KL008
RUN pip install --no-cache-dir --no-build-isolation torch-scatter==2.1.2
USER 1000:1000
