# KL050 stays quiet on the right names, a local apex tree, detectron2 from its own wheel index, and
# sklearn allowed on purpose.
FROM python:3.11-slim
RUN pip install --no-cache-dir scikit-learn opencv-python-headless torch
RUN pip install --no-cache-dir ./my-local-apex-wheel-folder
RUN pip install --no-cache-dir detectron2 -f https://dl.fbaipublicfiles.com/detectron2/wheels/cu113/torch1.10/index.html
RUN SKLEARN_ALLOW_DEPRECATED_SKLEARN_PACKAGE_INSTALL=True pip install --no-cache-dir sklearn
USER 1000:1000

# NGC's PyTorch image has NVIDIA's apex installed as `apex`: pip answers "already satisfied"
FROM nvcr.io/nvidia/pytorch:21.07-py3 AS ngc
RUN pip install --no-cache-dir pytest apex
