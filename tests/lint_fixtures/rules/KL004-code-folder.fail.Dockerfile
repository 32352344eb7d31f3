# KL004: not only `COPY . .`: the project's code folder or its Python files copied before the
# dependency install invalidate it on every code change. One copied script (rarely edited) and a
# manifest (requirements, pyproject, setup.py) do not.
FROM python:3.12-slim
WORKDIR /app
COPY pyproject.toml uv.lock ./
COPY --from=ghcr.io/astral-sh/uv:0.8.4 /uv /bin/uv
# expect: KL004
COPY src/ ./src/
RUN --mount=type=cache,target=/root/.cache/uv uv sync --frozen

FROM python:3.12-slim AS scripts
WORKDIR /app
COPY environment.yaml /tmp/env.yaml
# expect: KL004
COPY *.py ./
RUN pip install --no-cache-dir -U pip && pip install --no-cache-dir -r /tmp/env.yaml
USER 1000:1000
