# KL002: `pip install --no-index --find-links DIR` installs from a local folder of wheels and
# downloads nothing, so nothing is cached.
FROM python:3.12-slim
# the wheels stay in this layer once installed (KL054); a bind mount would keep them out
# kiln: ignore=KL054
COPY wheels /wheels
RUN pip install --no-index --find-links /wheels mypackage
RUN pip install --no-index --find-links file:///wheels otherpackage
USER 1000:1000
