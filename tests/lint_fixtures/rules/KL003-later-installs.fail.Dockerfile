# KL003: lists that later RUNs install from cannot be removed where they are downloaded: the finding
# says so and asks for one RUN (mit-han-lab/bevfusion); an update in a RUN of its own too (KL051 beside it)
FROM nvidia/cuda:12.4.1-runtime-ubuntu22.04
# expect: KL003
RUN apt-get update && apt-get install -y wget
RUN apt-get install -y --no-install-recommends git
USER 1000:1000
