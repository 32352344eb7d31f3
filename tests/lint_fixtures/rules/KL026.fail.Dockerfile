# KL026: flash-attention built and installed with setup.py install.
FROM pytorch/pytorch:2.5.0-cuda12.4-cudnn9-devel
RUN git clone https://github.com/Dao-AILab/flash-attention.git /src/flash-attention
WORKDIR /src/flash-attention
# expect: KL026
RUN MAX_JOBS=2 python setup.py install
USER 1000:1000
