# KL002: an exec-form RUN that hands a script to a shell is read as that script; `mim install`
# runs pip.
FROM pytorch/pytorch:2.1.2-cuda12.1-cudnn8-runtime
# expect: KL002
RUN ["/bin/bash", "-c", "pip install openmim"]
# expect: KL002
RUN mim install mmengine
RUN ["python", "-c", "print('pip install is only text here')"]
USER 1000:1000
