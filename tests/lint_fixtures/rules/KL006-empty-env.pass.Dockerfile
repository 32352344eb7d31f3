# KL006: an empty ENV placeholder (set at run time with `docker run -e`) stores no secret.
FROM python:3.11-slim
ENV OPENAI_API_KEY="" \
    WEBUI_SECRET_KEY=""
USER 1000:1000
