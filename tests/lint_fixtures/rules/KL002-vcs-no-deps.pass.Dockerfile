# KL002: `pip install --no-deps` of a git checkout downloads nothing from an index but build
# requirements, and pip does not cache wheels built from a moving git reference.
FROM pytorch/pytorch:2.1.2-cuda12.1-cudnn8-devel
ENV TORCH_CUDA_ARCH_LIST="8.0;9.0+PTX" MAX_JOBS=4
RUN pip install --no-deps git+https://github.com/example/pure-python-tool
USER 1000:1000
