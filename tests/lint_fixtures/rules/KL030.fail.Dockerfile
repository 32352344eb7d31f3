# KL030: a comment at the end of a continued line swallows the lines after it (BuildKit joins the
# lines first), so the second pip install never runs; KL002 is not reported for it either.
FROM python:3.11-slim
# expect: KL030
RUN pip install --no-cache-dir numpy  # the math library \
    && pip install requests
USER 1000:1000
