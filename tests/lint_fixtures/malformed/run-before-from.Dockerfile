RUN echo hi
FROM python:3.11-slim-bookworm
