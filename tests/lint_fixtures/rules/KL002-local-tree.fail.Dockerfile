# KL002 at info: a local folder or wheel file (or an unnamed git checkout of a branch) is never put in pip's cache;
# only the dependencies pip downloads for it would be, and the Dockerfile does not show any.
FROM python:3.12-slim
COPY tools /opt/tools
# expect: KL002
RUN pip install /opt/tools
# expect: KL002
RUN pip install git+https://github.com/example/helper-scripts
# a local wheel file is installed from the file; only its dependencies could be downloaded
# the wheels stay in the COPY's layer once installed
# expect: KL054
COPY dist /opt/dist
# expect: KL002
RUN pip install /opt/dist/helper-1.0-py3-none-any.whl
USER 1000:1000
