# KL009 at info: apex from a fork or a local copy, built with the old --global-option command,
# may or may not have a pyproject.toml (only NVIDIA/apex's default branch is known to): whether
# pip isolates the build cannot be told from the file.
FROM pytorch/pytorch:2.5.1-cuda12.4-cudnn9-devel
ENV TORCH_CUDA_ARCH_LIST="8.0;9.0+PTX" MAX_JOBS=4
RUN git clone https://github.com/someone/apex /opt/apex \
    && cd /opt/apex \
# expect: KL009
    && pip install --no-cache-dir --global-option="--cpp_ext" --global-option="--cuda_ext" ./
COPY vendor/apex /src/apex
RUN cd /src/apex \
# expect: KL009
    && pip install --no-cache-dir --global-option="--cpp_ext" --global-option="--cuda_ext" .
USER 1000:1000
