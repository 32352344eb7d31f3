# KL002: on an NGC release whose pip configuration is not confirmed, the finding is info and says so.
FROM nvcr.io/nvidia/pytorch:21.08-py3
# expect: KL002
RUN pip install transformers
