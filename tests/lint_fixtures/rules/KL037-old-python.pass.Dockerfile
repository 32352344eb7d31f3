# KL037/KL009: an NGC release of Python 3.8 (20.11 to 23.04): `pip install -U pip` stops at pip 25.0.1
# (pip 25.1 dropped Python 3.8), which still has --global-option and, with `wheel` installed, runs a
# setup.py-only sdist in this environment with the image's torch: neither "no such option" nor isolation.
FROM nvcr.io/nvidia/pytorch:21.09-py3
ENV TORCH_CUDA_ARCH_LIST="8.0;9.0+PTX" MAX_JOBS=4
RUN pip install --no-cache-dir -U pip
RUN DS_BUILD_OPS=1 pip install --no-cache-dir --global-option="build_ext" --global-option="-j4" deepspeed==0.5.10
USER 1000:1000
