# KL050: names that are not the package an ML Dockerfile means on PyPI.
FROM python:3.11-slim
# expect: KL050
RUN pip install --no-cache-dir sklearn
# expect: KL050
RUN pip install --no-cache-dir apex==0.9.10.dev0
# expect: KL050
RUN pip install --no-cache-dir flash-attention
# expect: KL050
RUN pip install --no-cache-dir cv2
USER 1000:1000
