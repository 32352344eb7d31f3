# KL005: a shell script with only Jupyter's and TensorBoard's ports exposed is a dev image, not a service.
FROM python:3.11-slim
WORKDIR /workspace
COPY start.sh /workspace/start.sh
EXPOSE 8888 6006
CMD ["bash", "start.sh"]
