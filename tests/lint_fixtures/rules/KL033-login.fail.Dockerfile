# KL033: a login during the build stores the credential in the layer, even when the token itself
# came from a secret mount.
FROM python:3.12-slim
RUN pip install --no-cache-dir "huggingface_hub[cli]==0.26.2" wandb==0.18.5
# expect: KL033
RUN --mount=type=secret,id=hf_token,env=HF_TOKEN huggingface-cli login --token "$HF_TOKEN"
# expect: KL033
RUN --mount=type=secret,id=wandb,env=WANDB_API_KEY wandb login "$WANDB_API_KEY"
USER 1000:1000
