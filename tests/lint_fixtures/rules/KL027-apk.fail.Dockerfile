# KL027: the apk index is left in the layer.
FROM alpine:3.20
# expect: KL027
RUN apk add python3
USER 1000:1000
