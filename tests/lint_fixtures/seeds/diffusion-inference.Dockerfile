# A Stable Diffusion inference image: a floating base, cache-busting COPY, xformers from source.
# expect: KL016
FROM pytorch/pytorch:latest AS build
# expect: KL012
ENV TORCH_CUDA_ARCH_LIST="7.5 8.0 8.6" \
    MAX_JOBS=4
WORKDIR /app
# expect: KL004
COPY . /app
RUN --mount=type=cache,target=/root/.cache/pip \
# expect: KL019
    pip install --extra-index-url https://deploy:Zm9vYmFyYmF6@pkgs.example.com/simple -r requirements.txt \
# expect: KL009
    && pip install --no-binary xformers xformers==0.0.28.post3

# expect: KL001
FROM pytorch/pytorch:2.5.1-cuda12.4-cudnn9-devel
COPY --from=build /opt/conda /opt/conda
COPY --from=build /app /app
RUN useradd --create-home --uid 1000 app
USER app
WORKDIR /app
CMD ["python", "serve.py"]
