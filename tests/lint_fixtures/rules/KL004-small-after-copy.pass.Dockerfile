# KL004: only a few MB of small packages (a pip self-upgrade, a protobuf pin) come after the COPY;
# the project's own install needs the tree anyway.
FROM python:3.11-slim
WORKDIR /app
COPY . /app
RUN pip install --no-cache-dir -U pip wheel && pip install --no-cache-dir "protobuf==3.20.3"
RUN pip install --no-cache-dir --no-deps .
USER 1000:1000
