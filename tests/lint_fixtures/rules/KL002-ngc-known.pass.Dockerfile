# KL002: NGC PyTorch 23.08-23.12 ship /etc/xdg/pip/pip.conf with no-cache-dir = true (23.08:
# pypa/pip#12278): pip keeps no cache there, so nothing is reported.
FROM nvcr.io/nvidia/pytorch:23.10-py3
RUN pip install einops
