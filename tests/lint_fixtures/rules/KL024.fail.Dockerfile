# KL024: the compat libcuda is registered for every process of the image, by ldconfig or by an
# LD_LIBRARY_PATH that nothing later puts the driver's folder in front of.
FROM nvidia/cuda:12.8.1-runtime-ubuntu24.04
# expect: KL024
RUN ldconfig /usr/local/cuda-12.8/compat/
# expect: KL024
ENV LD_LIBRARY_PATH=/usr/local/cuda/compat:${LD_LIBRARY_PATH}
ENV LD_LIBRARY_PATH=/opt/tool/lib:${LD_LIBRARY_PATH}
USER 1000:1000
