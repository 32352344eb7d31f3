# KL027: the dnf cache is left in the layer.
FROM nvidia/cuda:12.4.1-runtime-ubi9
# expect: KL027
RUN dnf install -y python3-pip
USER 1000:1000
