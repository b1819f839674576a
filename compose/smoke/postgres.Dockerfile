# A local stand-in for the postgres:16 and pgvector/pgvector images, built
# from Debian's packages for make compose-smoke (no image registry needed):
# Debian's PostgreSQL 15 plus the pgvector extension files of the host, which
# scripts/services.sh built from Debian's pgvector source package. Its
# entrypoint honours what the compose file uses of the official image:
# POSTGRES_USER/PASSWORD/DB, /docker-entrypoint-initdb.d/*.sql and a
# "postgres -c …" command.
ARG BASE_IMAGE=ragsync-smoke/debian:bookworm
FROM ${BASE_IMAGE}
RUN mkdir -p /etc/postgresql-common \
 && echo 'create_main_cluster = false' > /etc/postgresql-common/createcluster.conf \
 && apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql-15 >/dev/null \
 && rm -rf /var/lib/apt/lists/*
COPY pgvector/lib/ /usr/lib/postgresql/15/lib/
COPY pgvector/extension/ /usr/share/postgresql/15/extension/
COPY postgres-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
ENV PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PGDATA=/var/lib/postgresql/data
EXPOSE 5432
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["postgres"]
