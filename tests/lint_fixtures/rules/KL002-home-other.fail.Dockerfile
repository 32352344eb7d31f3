# Removing another folder of the home folder leaves pip's cache in the layer.
FROM pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime
# expect: KL002
RUN pip install transformers==4.46.3 && rm -rf ~/.cache/huggingface
USER 1000:1000
