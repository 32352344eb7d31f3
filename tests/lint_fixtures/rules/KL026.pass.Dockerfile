# The same build through pip, as a tracked install.
FROM pytorch/pytorch:2.5.0-cuda12.4-cudnn9-devel
RUN git clone https://github.com/Dao-AILab/flash-attention.git /src/flash-attention
WORKDIR /src/flash-attention
RUN MAX_JOBS=2 pip install --no-cache-dir --no-build-isolation .
USER 1000:1000
