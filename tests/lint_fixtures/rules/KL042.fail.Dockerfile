# KL042: torch swapped under a compiled extension, or by a --force-reinstall of a package that needs it.
FROM pytorch/pytorch:2.6.0-cuda12.4-cudnn9-devel
ENV TORCH_CUDA_ARCH_LIST="8.0;9.0+PTX" MAX_JOBS=4
RUN pip install --no-cache-dir --no-build-isolation flash-attn==2.7.4.post1
# expect: KL042
RUN pip install --no-cache-dir --force-reinstall torch==2.5.1
# expect: KL042
RUN pip install --no-cache-dir -U --force-reinstall xformers==0.0.29
USER 1000:1000
