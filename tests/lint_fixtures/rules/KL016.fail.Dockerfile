ARG PY_IMAGE=python
# expect: KL016
FROM ${PY_IMAGE} AS build
RUN python -c "print('hi')" > /hi.txt

# expect: KL016
FROM ubuntu:latest
COPY --from=build /hi.txt /hi.txt
USER 1000:1000
