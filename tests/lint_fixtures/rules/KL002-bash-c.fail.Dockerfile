# KL002 reads the script of a shell-form `bash -c "..."` like any other commands of the RUN.
FROM python:3.11-slim
RUN python3 -m venv /opt/venv
# expect: KL002
RUN /bin/bash -c "source /opt/venv/bin/activate && \
    pip install transformers==4.46.3"
RUN /bin/bash -c "source /opt/venv/bin/activate && pip install --no-cache-dir idna==3.10"
USER 1000:1000
