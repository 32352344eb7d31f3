# KL052 passes: a shell form, a shell that expands the script, and a CMD a shell-form ENTRYPOINT ignores.
FROM python:3.12-slim
ARG TORCH=2.9.1
ENV PORT=8000
RUN pip install --no-cache-dir "torch==${TORCH}"
USER 1000
CMD ["sh", "-c", "exec uvicorn app:app --host 0.0.0.0 --port $PORT"]
