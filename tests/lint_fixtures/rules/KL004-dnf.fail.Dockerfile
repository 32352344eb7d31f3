# KL004: the code is copied before the RPM installs, so every code change reruns dnf.
FROM registry.access.redhat.com/ubi9/ubi:9.5
WORKDIR /app
# expect: KL004
COPY . .
RUN dnf install -y python3-pip && dnf clean all
USER 1000:1000
