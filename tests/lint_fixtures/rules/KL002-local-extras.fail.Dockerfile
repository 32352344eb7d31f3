# KL002 stays a warning for a local folder with extras: `.[serve]` names dependencies, which pip
# downloads and keeps in its cache.
FROM python:3.12-slim
WORKDIR /app
COPY pyproject.toml ./
# the code comes before the install of its dependencies
# expect: KL004
COPY src ./src
# expect: KL002
RUN pip install ".[serve]"
USER 1000:1000
