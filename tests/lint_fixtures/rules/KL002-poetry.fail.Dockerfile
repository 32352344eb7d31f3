# KL002: Poetry keeps the wheels it downloads in ~/.cache/pypoetry and copies them into the venv;
# a later `poetry install` of the project alone downloads nothing new.
FROM python:3.11-slim
RUN pip install --no-cache-dir poetry==1.8.3
COPY pyproject.toml poetry.lock ./
# expect: KL002
RUN poetry install --no-root
RUN poetry install --no-root --no-cache
COPY . .
# the project itself: its dependencies came with the --no-root install above
RUN poetry install
USER 1000:1000
