# KL052: exec-form instructions run no shell, so $VARIABLES in them stay literal text.
FROM python:3.12-slim
ARG TORCH=2.9.1
ENV PORT=8000
# expect: KL052
RUN ["pip", "install", "--no-cache-dir", "torch==${TORCH}"]
USER 1000
# expect: KL052
CMD ["uvicorn", "app:app", "--host", "0.0.0.0", "--port", "$PORT"]
