ARG PY_IMAGE=python:3.11-slim-bookworm
FROM ${PY_IMAGE} AS build
RUN python -c "print('hi')" > /hi.txt

FROM nvidia/cuda:12.4.1-base-ubuntu22.04@sha256:0f5e8a1e5d4fa0c2f3e0b6d8bd2e3cc0e8b1c4a6e2d9f7a3b5c1d0e9f8a7b6c5
COPY --from=build /hi.txt /hi.txt
USER 1000:1000
