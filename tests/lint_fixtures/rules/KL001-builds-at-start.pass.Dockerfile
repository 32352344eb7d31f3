# KL001: a serving image that builds its server when the container starts (`uv run` of a project no
# RUN installed syncs and compiles it at the first start) uses the devel image's nvcc at run time.
FROM nvidia/cuda:12.9.1-devel-ubuntu22.04
RUN apt-get update && apt-get install -y --no-install-recommends curl build-essential && rm -rf /var/lib/apt/lists/*
COPY --from=ghcr.io/astral-sh/uv:0.8.3 /uv /uvx /bin/
WORKDIR /app
COPY server/pyproject.toml server/uv.lock ./server/
EXPOSE 8080
USER 1000:1000
ENTRYPOINT ["uv", "run", "--locked", "--project", "./server", "my-server", "--port", "8080"]
