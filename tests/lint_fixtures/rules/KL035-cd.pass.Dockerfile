# KL035 leaves a lone `RUN cd` that misleads nothing: back up (`cd ..`), into the WORKDIR itself, or
# followed by a RUN that uses absolute paths or goes somewhere itself.
FROM pytorch/pytorch:2.1.2-cuda12.1-cudnn8-devel
WORKDIR /app
RUN git clone https://github.com/example/plugin && cd plugin && pip install --no-cache-dir .
RUN cd ..
RUN cd /app
RUN cd /opt
RUN python -c "import plugin"
USER 1000:1000
