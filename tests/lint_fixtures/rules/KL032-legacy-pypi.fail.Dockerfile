# KL032: the same option with an index URL on that host does turn off verification for it.
FROM python:3.11-slim
# expect: KL032
RUN pip install --no-cache-dir --index-url https://pypi.python.org/simple --trusted-host pypi.python.org requests
USER 1000:1000
