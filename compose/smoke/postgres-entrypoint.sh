#!/bin/bash
# The part of the official postgres image's entrypoint the compose stack
# relies on: on an empty data directory, initdb with POSTGRES_USER and
# POSTGRES_PASSWORD, create POSTGRES_DB, run /docker-entrypoint-initdb.d/*.sql
# in it; then run the server as user postgres, listening on every address,
# with the command's arguments ("postgres -c wal_level=logical …").
set -euo pipefail
if [ "${1:-}" != postgres ]; then exec "$@"; fi
shift
user=${POSTGRES_USER:-postgres}
db=${POSTGRES_DB:-$user}
as_pg() { setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }
mkdir -p "$PGDATA" /var/run/postgresql
chown -R postgres:postgres "$PGDATA" /var/run/postgresql
chmod 700 "$PGDATA"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  pw=$(mktemp)
  printf '%s\n' "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD must be set}" > "$pw"
  chown postgres "$pw"
  as_pg initdb -D "$PGDATA" -U "$user" --pwfile="$pw" --auth-local=trust --auth-host=scram-sha-256 >/dev/null
  rm -f "$pw"
  echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
  echo "host replication all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
  as_pg pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
  if [ "$db" != postgres ]; then
    as_pg psql -q -v ON_ERROR_STOP=1 -U "$user" -d postgres -c "CREATE DATABASE \"$db\""
  fi
  for f in /docker-entrypoint-initdb.d/*.sql; do
    [ -e "$f" ] || continue
    echo "docker-entrypoint.sh: running $f"
    as_pg psql -q -v ON_ERROR_STOP=1 -U "$user" -d "$db" -f "$f"
  done
  as_pg pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
fi
exec setpriv --reuid=postgres --regid=postgres --init-groups postgres -D "$PGDATA" -c listen_addresses='*' "$@"
