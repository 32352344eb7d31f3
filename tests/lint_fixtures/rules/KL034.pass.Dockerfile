# KL034: the wheels match the image's torch 2.7.
FROM pytorch/pytorch:2.7.0-cuda12.6-cudnn9-runtime
RUN pip install --no-cache-dir https://github.com/Dao-AILab/flash-attention/releases/download/v2.7.4.post1/flash_attn-2.7.4.post1+cu12torch2.7cxx11abiFALSE-cp311-cp311-linux_x86_64.whl
RUN pip install --no-cache-dir --no-deps xformers==0.0.30
USER 1000:1000
