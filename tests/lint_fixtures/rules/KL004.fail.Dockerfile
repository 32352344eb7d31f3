# KL004: any change to the code reinstalls every dependency.
FROM python:3.11-slim-bookworm
WORKDIR /app
# expect: KL004
COPY . .
RUN --mount=type=cache,target=/root/.cache/pip pip install -r requirements.txt
USER 1000:1000
CMD ["python", "serve.py"]
