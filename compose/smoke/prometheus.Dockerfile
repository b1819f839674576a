# A local stand-in for the prom/prometheus image, from Debian's prometheus
# package, for make compose-smoke: the same config path, data directory and
# port, and wget for the compose file's health check.
ARG BASE_IMAGE=ragsync-smoke/debian:bookworm
FROM ${BASE_IMAGE}
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus wget >/dev/null \
 && rm -rf /var/lib/apt/lists/* && mkdir -p /prometheus
EXPOSE 9090
ENTRYPOINT ["/usr/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]
