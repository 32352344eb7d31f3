# KL002: `poetry run pip install` (like `conda run -n env pip install`) is still pip, with its cache.
FROM python:3.12-slim
RUN pip install --no-cache-dir poetry==1.8.3
# expect: KL002
RUN poetry run pip install pandas
# expect: KL002
RUN conda run -n base --no-capture-output pip install scipy
USER 1000:1000
