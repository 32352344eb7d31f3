# micromamba-docker ends with USER $MAMBA_USER (mambauser): the server does not run as root.
FROM mambaorg/micromamba:1.5.8
COPY --chown=$MAMBA_USER:$MAMBA_USER app.py /tmp/app.py
CMD ["python", "-m", "uvicorn", "app:app", "--host", "0.0.0.0", "--port", "8000"]
