# KL002: git checkouts of CUDA extension trees that declare no dependencies (nvdiffrast: numpy,
# tiny-cuda-nn's torch bindings: none) leave nothing in pip's cache: pip does not cache what it
# builds from a moving reference, and there is nothing else to download.
FROM pytorch/pytorch:2.5.1-cuda12.4-cudnn9-devel
ENV TORCH_CUDA_ARCH_LIST="8.0;9.0+PTX" TCNN_CUDA_ARCHITECTURES="80;90" MAX_JOBS=4
RUN pip install --no-build-isolation git+https://github.com/NVlabs/nvdiffrast/
RUN pip install --no-build-isolation "git+https://github.com/NVlabs/tiny-cuda-nn/#subdirectory=bindings/torch"
USER 1000:1000
