# The same test, with the `;` that ends the command before `fi`.
FROM ubuntu:24.04
RUN if [ -f /etc/os-release ]; then \
        cat /etc/os-release; \
    fi
USER 1000:1000
