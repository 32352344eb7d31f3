# Jupyter Docker Stacks end with USER ${NB_UID}: a server on them runs as jovyan without a USER here.
FROM quay.io/jupyter/pytorch-notebook:cuda12-2024-10-07
COPY --chown=1000:100 app.py /home/jovyan/app.py
CMD ["python", "-m", "uvicorn", "app:app", "--host", "0.0.0.0", "--port", "8000"]
