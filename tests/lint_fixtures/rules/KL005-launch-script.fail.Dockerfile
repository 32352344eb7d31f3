# KL005: a shell that runs a launch script, with a service port exposed, starts a server: it runs as root.
# expect: KL005
FROM python:3.11-slim
WORKDIR /app
COPY startup.sh /app/startup.sh
EXPOSE 8000
CMD ["bash", "startup.sh"]
