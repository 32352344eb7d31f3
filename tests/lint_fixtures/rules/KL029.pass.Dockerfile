# The specifier is quoted, so pip sees it.
FROM pytorch/pytorch:2.5.1-cuda12.4-cudnn9-devel
RUN MAX_JOBS=4 pip install --no-cache-dir --no-build-isolation "flash-attn>=2.6"
USER 1000:1000
