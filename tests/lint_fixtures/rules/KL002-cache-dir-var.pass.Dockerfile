# KL002: the cache folder an ENV moves the cache to, removed in the same RUN through that variable
# (`rm -rf $POETRY_CACHE_DIR`, the pattern of Poetry-in-Docker guides), never reaches the layer.
FROM python:3.11-slim
ENV POETRY_NO_INTERACTION=1 POETRY_VIRTUALENVS_CREATE=false POETRY_CACHE_DIR=/tmp/poetry_cache \
    PIP_CACHE_DIR=/tmp/pipcache
RUN pip install poetry==1.8.3 && rm -rf "${PIP_CACHE_DIR}"
COPY pyproject.toml poetry.lock ./
RUN poetry install --without dev --no-root && rm -rf $POETRY_CACHE_DIR
USER 1000:1000
