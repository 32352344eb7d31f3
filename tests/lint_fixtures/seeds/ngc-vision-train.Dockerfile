# A training image on NGC: reinstalls torch and builds apex with the image's preset arch list.
FROM nvcr.io/nvidia/pytorch:25.01-py3

# expect: KL002, KL013
RUN pip install --upgrade torch==2.5.1 torchvision==0.20.1

RUN git clone https://github.com/NVIDIA/apex /opt/apex
WORKDIR /opt/apex
# expect: KL002
RUN pip install -v --disable-pip-version-check --no-build-isolation --config-settings "--build-option=--cpp_ext" --config-settings "--build-option=--cuda_ext" ./

# expect: KL015
ADD https://pkgs.example.com/models/resnet152-weights.pth /opt/weights/resnet152.pth
WORKDIR /workspace
COPY train.py .
CMD ["torchrun", "--nproc_per_node", "8", "train.py"]
