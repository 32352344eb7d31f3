# KL004: the dependencies are installed before the COPY; after it only the project's own wheels
# (built from the copied code) are installed, with a pin repeated from before: nothing new.
FROM python:3.12-slim
WORKDIR /app
COPY requirements.txt ./
RUN pip install --no-cache-dir -r requirements.txt "setuptools~=75.0"
COPY . .
RUN python -m build --wheel && pip install --no-cache-dir dist/*.whl "setuptools~=75.0"
USER 1000:1000
