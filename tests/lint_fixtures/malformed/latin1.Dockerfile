FROM python:3.11-slim-bookworm
LABEL maintainer="Jörg"
