# KL041 stays quiet on an Anaconda installer from before July 2025: Anaconda numbers its installers by
# year and month (Anaconda3-2020.02 ships conda 4.8), so no Terms of Service plugin asks anything.
FROM nvidia/cuda:11.3.1-runtime-ubuntu20.04
RUN apt-get update && apt-get install -y --no-install-recommends wget ca-certificates \
    && rm -rf /var/lib/apt/lists/*
RUN wget -q https://repo.anaconda.com/archive/Anaconda3-2020.02-Linux-x86_64.sh -O /tmp/a.sh \
    && bash /tmp/a.sh -b -p /opt/conda && rm /tmp/a.sh
RUN /opt/conda/bin/conda update -y conda && /opt/conda/bin/conda clean -afy
USER 1000:1000
