# KL002: small packages next to a large one (or a requirements file, or extras) leave a real cache.
FROM ubuntu:22.04
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip \
    && rm -rf /var/lib/apt/lists/*
# expect: KL002
RUN pip3 install -U pip setuptools scipy
# expect: KL002
RUN pip3 install ninja -r requirements.txt
# expect: KL002
RUN pip3 install "requests[socks]" tqdm opencv-python-headless
USER 1000:1000
