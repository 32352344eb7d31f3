# KL030: comment lines inside a continuation are dropped by BuildKit, and a comment on the last line
# hides nothing.
FROM python:3.11-slim
RUN pip install --no-cache-dir numpy \
    # the HTTP client comes next
    && pip install --no-cache-dir requests  # done
USER 1000:1000
