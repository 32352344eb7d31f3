# KL037: pip upgraded but held below 25.3, where --global-option still exists; the apex commit
# predates its pyproject.toml, so pip builds it in this environment with the image's torch.
FROM pytorch/pytorch:2.5.1-cuda12.4-cudnn9-devel
ENV TORCH_CUDA_ARCH_LIST="8.0;9.0+PTX" MAX_JOBS=4
RUN pip install --no-cache-dir -U "pip<25.3"
RUN git clone https://github.com/NVIDIA/apex /opt/apex \
    && cd /opt/apex \
    && git checkout 3c19f1061879394f28272a99a7ea26d58f72dace \
    && pip install --no-cache-dir --global-option="--cpp_ext" --global-option="--cuda_ext" ./
USER 1000:1000
