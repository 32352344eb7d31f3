# KL028: the `\` continuations join `then cmd fi` with no `;` before `fi`.
FROM ubuntu:24.04
# expect: KL028
RUN if [ -f /etc/os-release ]; then \
        cat /etc/os-release \
    fi
USER 1000:1000
