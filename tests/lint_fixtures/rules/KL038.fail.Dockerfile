# KL038: ENV and ARG expand variables, never commands: the value is the literal text.
FROM pytorch/pytorch:2.1.2-cuda12.1-cudnn8-devel
# expect: KL038
ENV CMAKE_PREFIX_PATH="$(dirname $(which conda))/../"
# expect: KL038
ARG BUILD_DATE=`date +%F`
USER 1000:1000
