# KL032: `--trusted-host pypi.python.org` (an old copy-paste) changes nothing: pip's default index is
# pypi.org, verified as usual, and pypi.python.org is only contacted when an index URL names it.
FROM python:3.11-slim
RUN pip install --no-cache-dir --trusted-host pypi.python.org requests
USER 1000:1000
