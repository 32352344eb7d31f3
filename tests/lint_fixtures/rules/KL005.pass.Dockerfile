# Root in a build stage is fine; the final stage switches to a user.
FROM nvidia/cuda:12.8.1-runtime-ubuntu24.04 AS base
RUN useradd --create-home --uid 1000 app

FROM base AS runtime
USER app
CMD ["nvidia-smi"]
