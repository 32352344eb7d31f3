# KL005: a Jupyter dev image exposes a port but is no deployed service.
FROM python:3.11-slim
RUN pip install --no-cache-dir jupyterlab==4.2.5
EXPOSE 8888
CMD ["jupyter", "lab", "--ip=0.0.0.0", "--port=8888", "--allow-root"]
