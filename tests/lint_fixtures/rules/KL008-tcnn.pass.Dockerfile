# KL008: tiny-cuda-nn's torch bindings read TCNN_CUDA_ARCHITECTURES (set in the same command).
FROM pytorch/pytorch:2.1.2-cuda12.1-cudnn8-devel
RUN TCNN_CUDA_ARCHITECTURES="80;86;90" MAX_JOBS=4 pip install --no-cache-dir --no-build-isolation \
    "git+https://github.com/NVlabs/tiny-cuda-nn/@v1.7#subdirectory=bindings/torch"
USER 1000:1000
