FROM python:3.11-slim-bookworm
RUN --mount=type=cache,target=/root/.cache/pip \
# expect: KL019
    pip install --extra-index-url https://__token__:pypi-private-0123456789@pkgs.example.com/simple acme-models==1.2.0
USER 1000:1000
