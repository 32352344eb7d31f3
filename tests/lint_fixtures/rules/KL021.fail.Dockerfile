# KL021: xformers pins one torch release; -U replaces the image's torch with it.
FROM pytorch/pytorch:2.5.0-cuda12.4-cudnn9-runtime
# expect: KL002, KL021
RUN pip install --pre -U xformers
USER 1000:1000
