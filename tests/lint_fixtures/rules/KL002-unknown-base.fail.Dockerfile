# KL002: the base image is a build argument with no default: it may set PIP_NO_CACHE_DIR (projects
# that build FROM their own base image often do), so the finding is info and says why. (KL045 does
# not report a base that is wholly a declared argument: a template its tooling builds.)
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
COPY requirements.txt /tmp/
# expect: KL002
RUN pip install -r /tmp/requirements.txt
USER 1000:1000
