# KL033: logged out in the same RUN (the token file never reaches a layer), and a builder stage
# whose layers do not ship.
FROM python:3.12-slim AS fetch
RUN pip install --no-cache-dir "huggingface_hub[cli]==0.26.2"
RUN --mount=type=secret,id=hf_token,env=HF_TOKEN huggingface-cli login --token "$HF_TOKEN" \
    && huggingface-cli download org/model --local-dir /models/model
FROM python:3.12-slim
RUN pip install --no-cache-dir "huggingface_hub[cli]==0.26.2"
RUN --mount=type=secret,id=hf_token,env=HF_TOKEN huggingface-cli login --token "$HF_TOKEN" \
    && huggingface-cli download org/other --local-dir /models/other \
    && huggingface-cli logout
COPY --from=fetch /models /models
USER 1000:1000
