# KL009: flash-attn's sdists have no pyproject.toml, so pip's version decides whether the build is
# isolated (pip < 25.3 with `wheel`: no; pip 25.3+: yes): info. After `pip install -U pip` the newest
# pip always isolates: error.
FROM pytorch/pytorch:2.1.2-cuda12.1-cudnn8-devel
ENV MAX_JOBS=4
# expect: KL009
RUN pip install --no-cache-dir flash-attn==2.5.5
# expect: KL009
RUN pip install --no-cache-dir -U pip && pip install --no-cache-dir flash-attn
USER 1000:1000
