# KL016 stays quiet on a placeholder the build always overrides (`<jupyter>` is no image reference).
ARG BASE_IMG=<jupyter>
FROM $BASE_IMG
USER 1000:1000
