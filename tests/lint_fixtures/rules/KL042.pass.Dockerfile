# KL042 stays quiet when torch comes first and the extensions after it, when the same torch is asked for
# again, and when a --force-reinstall keeps the dependencies (--no-deps).
FROM nvidia/cuda:12.4.1-devel-ubuntu22.04
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip && rm -rf /var/lib/apt/lists/*
ENV TORCH_CUDA_ARCH_LIST="8.0;9.0+PTX" MAX_JOBS=4
RUN pip install --no-cache-dir torch==2.6.0 --index-url https://download.pytorch.org/whl/cu124
RUN pip install --no-cache-dir packaging ninja psutil \
    && pip install --no-cache-dir --no-build-isolation flash-attn==2.7.4.post1
RUN pip install --no-cache-dir torch==2.6.0 --index-url https://download.pytorch.org/whl/cu124
RUN pip install --no-cache-dir --force-reinstall --no-deps xformers==0.0.29.post3
USER 1000:1000
