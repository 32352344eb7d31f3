# syntax=docker/dockerfile:1.7
FROM python:3.11-slim-bookworm
RUN <<EOF
set -e
pip install numpy==2.1.0
