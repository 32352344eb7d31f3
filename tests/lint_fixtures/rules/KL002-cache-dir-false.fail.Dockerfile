# `pip config set global.cache-dir false` does not turn the cache off: pip writes it to a folder
# named 'false' in the working directory (apache/tvm#9862).
FROM python:3.11-slim-bookworm
RUN pip config set global.cache-dir false
# expect: KL002
RUN pip install pandas==2.2.3
USER 1000:1000
