FROM python:3.11-slim-bookworm
RUN --mount=type=secret,id=index_token,env=INDEX_TOKEN \
    --mount=type=cache,target=/root/.cache/pip \
    pip install --extra-index-url "https://__token__:${INDEX_TOKEN}@pkgs.example.com/simple" acme-models==1.2.0
USER 1000:1000
