# KL002: the base image is a build argument with no default: it may set PIP_NO_CACHE_DIR (projects
# that build FROM their own base image often do), so the finding is info and says why. (KL045 says
# that the build needs --build-arg BASE_IMAGE.)
ARG BASE_IMAGE
# expect: KL045
FROM ${BASE_IMAGE}
COPY requirements.txt /tmp/
# expect: KL002
RUN pip install -r /tmp/requirements.txt
USER 1000:1000
