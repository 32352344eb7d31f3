# KL003: a brace list in the rm that should clear the apt lists. A RUN runs /bin/sh (dash here),
# which has no brace expansion: rm gets one literal name and removes nothing. Under bash the
# expansions must name the lists folder, its contents or a parent.
FROM ubuntu:22.04
# expect: KL003
RUN apt-get update && apt-get install -y --no-install-recommends curl && rm -rf /var/lib/{apt,dpkg,cache,log}/
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# bash expands it to /var/lib/apt/, which holds the lists: cleared
RUN apt-get update && apt-get install -y --no-install-recommends git && rm -rf /var/lib/{apt,dpkg,cache,log}/
# expect: KL003
RUN apt-get update && apt-get install -y --no-install-recommends vim && rm -rf /var/lib/apt/lists/{apt,dpkg,cache,log}
USER 1000:1000
