# KL022: NGC 25.05 pins torch in /etc/pip/constraint.txt; emptying PIP_CONSTRAINT turns that off.
FROM nvcr.io/nvidia/pytorch:25.05-py3
# expect: KL022
ENV PIP_CONSTRAINT=""
RUN pip install --no-cache-dir pytest==8.3.4
USER 1000:1000
