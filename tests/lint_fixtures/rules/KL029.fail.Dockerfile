# KL029: `>=` unquoted: the shell redirects pip's output to a file named "=2.6".
FROM pytorch/pytorch:2.5.1-cuda12.4-cudnn9-devel
# expect: KL029
RUN MAX_JOBS=4 pip install --no-cache-dir --no-build-isolation flash-attn>=2.6
USER 1000:1000
