# A local stand-in for the redis:7.4-alpine image, from Debian's
# redis-server package, for make compose-smoke. Like the official image it
# runs in /data and accepts connections from other containers without a
# password (protected mode off): the compose network is its boundary.
ARG BASE_IMAGE=ragsync-smoke/debian:bookworm
FROM ${BASE_IMAGE}
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server >/dev/null \
 && rm -rf /var/lib/apt/lists/* && mkdir -p /data
WORKDIR /data
EXPOSE 6379
ENTRYPOINT ["/bin/sh", "-c", "if [ \"$1\" = redis-server ]; then shift; exec redis-server \"$@\" --protected-mode no; fi; exec \"$@\"", "--"]
CMD ["redis-server"]
