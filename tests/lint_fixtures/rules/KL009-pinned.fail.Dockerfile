# KL009: flash-attn pinned to a release: whether pip isolates the build depends on that release's
# pyproject.toml, which the file cannot show, so the finding is info; unpinned it is an error.
FROM pytorch/pytorch:2.1.2-cuda12.1-cudnn8-devel
ENV MAX_JOBS=4
# expect: KL009
RUN pip install --no-cache-dir flash-attn==2.5.5
# expect: KL009
RUN pip install --no-cache-dir flash-attn
USER 1000:1000
