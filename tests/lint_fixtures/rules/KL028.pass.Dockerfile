# The same test, with the `;` that ends the command before `fi`; the quote is closed.
FROM ubuntu:24.04
RUN if [ -f /etc/os-release ]; then \
        cat /etc/os-release; \
    fi
ENV LUA_PATH='/opt/lua/?.lua;./?.lua' MOTD="it's fine"
USER 1000:1000
