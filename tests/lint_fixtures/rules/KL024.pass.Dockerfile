# The host driver's libcuda is used; compat is only added at run time where needed.
FROM nvidia/cuda:12.8.1-runtime-ubuntu24.04
ENV LD_LIBRARY_PATH=/usr/local/cuda/lib64
USER 1000:1000
