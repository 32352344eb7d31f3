# KL049: a glob that names what an earlier COPY put in its layer (the same glob, or a file it matches)
# removes nothing from the image.
FROM python:3.11-slim
COPY python/dist/*.whl /opt/fastdeploy/
# expect: KL049
RUN pip install --no-cache-dir /opt/fastdeploy/*.whl && rm -rf /opt/fastdeploy/*.whl
COPY build/engine-1.0-py3-none-any.whl /opt/wheels/
# expect: KL049
RUN pip install --no-cache-dir /opt/wheels/engine-1.0-py3-none-any.whl && rm -f /opt/wheels/*.whl
# a glob of other files, or of another folder, is not what the COPY added
COPY dist/*.whl /opt/more/
RUN rm -f /opt/more/*.tar.gz /opt/other/*.whl
USER 1000
