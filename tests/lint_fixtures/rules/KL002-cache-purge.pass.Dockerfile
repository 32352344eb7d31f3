# KL002: the same RUN empties the cache after the install, whichever way pip is called
# (tile-ai/tilelang's ROCm image: `python3 -m pip cache purge || true`)
FROM python:3.11-slim-bookworm
RUN python3 -m pip install --upgrade pip setuptools wheel cmake ninja \
 && python3 -m pip cache purge || true
RUN pip3 install cmake==3.30.2 && pip3 cache purge
RUN uv pip install --system --link-mode copy polars==1.9.0 && uv cache clean
USER 1000:1000
