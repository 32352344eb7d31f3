# KL035: `RUN cd dir` changes the directory for that RUN only; the next RUN starts in the WORKDIR, so an
# install of `.` there installs the wrong folder.
FROM pytorch/pytorch:2.1.2-cuda12.1-cudnn8-devel
RUN git clone https://github.com/example/plugin /opt/plugin
# expect: KL035
RUN cd /opt/plugin
RUN pip install --no-cache-dir -e .
USER 1000:1000
