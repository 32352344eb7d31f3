FROM python:3.11-slim-bookworm
WORKDIR /app
COPY requirements.txt .
RUN --mount=type=cache,target=/root/.cache/pip pip install -r requirements.txt
COPY . .
RUN --mount=type=cache,target=/root/.cache/pip pip install --no-deps .
USER 1000:1000
CMD ["python", "serve.py"]
