# KL026: torchvision from its checkout and a project built with FORCE_CUDA=1 are CUDA packages
# installed with setup.py.
FROM pytorch/pytorch:2.1.2-cuda12.1-cudnn8-devel
ENV TORCH_CUDA_ARCH_LIST="8.0;9.0+PTX" MAX_JOBS=4
# expect: KL026
RUN git clone https://github.com/pytorch/vision.git && cd vision && python setup.py install
# expect: KL026
RUN git clone https://github.com/example/detector.git && cd detector && FORCE_CUDA=1 python setup.py build develop
USER 1000:1000
