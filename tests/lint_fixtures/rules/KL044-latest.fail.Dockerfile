# KL044: NVIDIA removed the `latest` tag of nvidia/cuda in 2021: an untagged FROM fails with
# "manifest unknown" (KL016's untagged finding on the same line is info: the build stops there).
# expect: KL044, KL016
FROM nvidia/cuda AS old
RUN echo old > /old.txt
# expect: KL044, KL016
FROM nvcr.io/nvidia/cuda:latest
COPY --from=old /old.txt /old.txt
USER 1000:1000
