# KL037 stays quiet where the stage's Python caps `pip install -U pip` below 25.3: Ubuntu 20.04's own
# python3 is 3.8, whose newest pip is 25.0.1 (pip 25.1 dropped 3.8), and pyenv's global 3.8 the same.
FROM nvidia/cuda:11.8.0-cudnn8-devel-ubuntu20.04 AS system
ENV TORCH_CUDA_ARCH_LIST="8.0;8.6" MAX_JOBS=4
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip git \
    && rm -rf /var/lib/apt/lists/*
RUN python3 -m pip install --no-cache-dir -U pip
RUN python3 -m pip install --no-cache-dir torch==2.1.2 --index-url https://download.pytorch.org/whl/cu118
RUN python3 -m pip install --no-cache-dir --no-build-isolation --global-option="--cpp_ext" \
    git+https://github.com/example/ops@0123456789abcdef0123456789abcdef01234567

FROM nvidia/cuda:12.4.1-cudnn-devel-ubuntu22.04
ENV TORCH_CUDA_ARCH_LIST="8.0;9.0" MAX_JOBS=4
RUN apt-get update && apt-get install -y --no-install-recommends curl git build-essential \
    && rm -rf /var/lib/apt/lists/*
RUN curl https://pyenv.run | bash && pyenv install 3.8 && pyenv install 3.11 && pyenv global 3.8
RUN pip install --no-cache-dir -U pip
RUN pip install --no-cache-dir torch==2.1.2
RUN pip install --no-cache-dir --no-build-isolation --global-option="--cpp_ext" \
    git+https://github.com/example/ops@0123456789abcdef0123456789abcdef01234567
USER 1000:1000
