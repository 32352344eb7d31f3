# KL028: the `\` continuations join `then cmd fi` with no `;` before `fi`; an ENV quote is never closed.
FROM ubuntu:24.04
# expect: KL028
RUN if [ -f /etc/os-release ]; then \
        cat /etc/os-release \
    fi
# expect: KL028
ENV LUA_PATH='/opt/lua/?.lua;./?.lua
USER 1000:1000
