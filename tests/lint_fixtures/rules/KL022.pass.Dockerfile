# NGC's constraints stay on; one conflicting package comes without its dependencies.
FROM nvcr.io/nvidia/pytorch:25.05-py3
RUN pip install --no-cache-dir --no-deps pytest==8.3.4
USER 1000:1000
