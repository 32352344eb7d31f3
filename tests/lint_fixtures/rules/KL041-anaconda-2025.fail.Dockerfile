# KL041: Anaconda3-2025.06 (conda 25.5) asks for the Terms of Service of the default channels, and a
# docker build cannot answer: the first conda command that reads them stops.
FROM ubuntu:24.04
RUN apt-get update && apt-get install -y --no-install-recommends wget ca-certificates \
    && rm -rf /var/lib/apt/lists/*
RUN wget -q https://repo.anaconda.com/archive/Anaconda3-2025.06-0-Linux-x86_64.sh -O /tmp/a.sh \
    && bash /tmp/a.sh -b -p /opt/conda && rm /tmp/a.sh
# expect: KL041
RUN /opt/conda/bin/conda update -y conda && /opt/conda/bin/conda clean -afy
USER 1000:1000
