# KL002 at info: from git, uv keeps the fetched repository and the checkout it built from in its
# cache; hard links save the installed files, not those.
FROM python:3.11-slim
RUN pip install --no-cache-dir uv==0.5.0
# expect: KL002
RUN uv pip install --system "deep-gemm @ git+https://github.com/example/deep-gemm@v1.0"
USER 1000:1000
