# KL033: keys and credentials copied into a layer.
FROM python:3.11-slim
# expect: KL033
COPY gcp-service-account.json /app/key.json
# expect: KL033
COPY id_rsa /root/.ssh/id_rsa
USER 1000:1000
