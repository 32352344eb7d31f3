# The image's torch stays: xformers comes without its dependencies.
FROM pytorch/pytorch:2.5.0-cuda12.4-cudnn9-runtime
RUN pip install --no-cache-dir --no-deps xformers==0.0.28.post2
USER 1000:1000
