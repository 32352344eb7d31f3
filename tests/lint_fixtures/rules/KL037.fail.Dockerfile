# KL037: `pip install -U pip` brings the newest pip, which no longer has --global-option (removed in
# 25.3) or --install-option (removed in 23.1): the extension install stops with "no such option".
FROM pytorch/pytorch:2.5.1-cuda12.4-cudnn9-devel
ENV TORCH_CUDA_ARCH_LIST="8.0;9.0+PTX" MAX_JOBS=4
RUN pip install --no-cache-dir -U pip
RUN git clone https://github.com/NVIDIA/apex /opt/apex \
    && cd /opt/apex \
    && git checkout 3c19f1061879394f28272a99a7ea26d58f72dace \
# expect: KL037
    && pip install --no-cache-dir --global-option="--cpp_ext" --global-option="--cuda_ext" ./
# expect: KL037
RUN pip install --no-cache-dir --install-option="--force_cuda" git+https://github.com/example/sparse-ops@v1.0
USER 1000:1000
