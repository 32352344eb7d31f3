# KL037: on an NGC release of Python 3.8 the upgrade stops at pip 25.0.1, which still has --global-option
# but no longer --install-option (removed in 23.1): this install stops with "no such option".
FROM nvcr.io/nvidia/pytorch:22.12-py3
ENV TORCH_CUDA_ARCH_LIST="8.0;9.0+PTX" MAX_JOBS=4
RUN pip install --no-cache-dir -U pip
# expect: KL037
RUN pip install --no-cache-dir --install-option="--force_cuda" git+https://github.com/example/sparse-ops@v1.0
USER 1000:1000
