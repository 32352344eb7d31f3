# KL005: ssh's port exposed beside another, with a start script that is no known server, is a remote
# workstation users log in to (RunPod-style): sshd must start as root.
FROM python:3.11-slim
RUN apt-get update && apt-get install -y --no-install-recommends openssh-server && rm -rf /var/lib/apt/lists/*
COPY start.sh /start.sh
EXPOSE 22 8001
ENTRYPOINT ["/start.sh"]
