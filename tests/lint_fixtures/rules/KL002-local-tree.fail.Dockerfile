# KL002 at info: a local folder (or an unnamed git checkout of a branch) is never put in pip's cache;
# only the dependencies pip downloads for it would be, and the Dockerfile does not show any.
FROM python:3.12-slim
COPY tools /opt/tools
# expect: KL002
RUN pip install /opt/tools
# expect: KL002
RUN pip install git+https://github.com/example/helper-scripts
USER 1000:1000
