# Fast math in an inference-only image is a choice, not a mistake.
FROM nvidia/cuda:12.4.1-runtime-ubuntu22.04
ENV NVCC_APPEND_FLAGS="--use_fast_math"
USER 1000:1000
CMD ["python3", "serve.py"]
