#!/usr/bin/env bash
# services.sh makes sure the services ragsync's demo and tests need are up:
# PostgreSQL >= 15 with the pgvector extension and wal_level=logical, and Redis.
# It installs what is missing from Debian's packages, starts what is down and
# says in one line each what it found and what it did. Safe to run twice.
set -euo pipefail

PGHOST=${PGHOST:-127.0.0.1}
PGPORT=${PGPORT:-5432}
PGUSER=${PGUSER:-postgres}
REDIS_PORT=${REDIS_PORT:-6379}
PGVECTOR_SUITE=${PGVECTOR_SUITE:-trixie}

say() { printf 'services: %s\n' "$*"; }
die() { printf 'services: error: %s\n' "$*" >&2; exit 1; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    die "need root to run '$*'; rerun as root or install sudo"
  fi
}

psql_q() { psql -h "$PGHOST" -p "$PGPORT" -U "$PGUSER" -d postgres -XtAc "$1"; }

apt_updated=0
apt_update() {
  if [ "$apt_updated" -eq 0 ]; then
    as_root apt-get update -qq >/dev/null || die "apt-get update failed; check the machine's Debian sources"
    apt_updated=1
  fi
}

pg_version() {
  # The newest installed cluster version, e.g. 15.
  ls /etc/postgresql 2>/dev/null | sort -n | tail -1
}

pg_start() {
  local v; v=$(pg_version)
  [ -n "$v" ] || die "no PostgreSQL cluster in /etc/postgresql; install postgresql (>= 15) first"
  as_root pg_ctlcluster --skip-systemctl-redirect "$v" main start >/dev/null 2>&1 || true
  for _ in $(seq 1 30); do
    pg_isready -q -h "$PGHOST" -p "$PGPORT" && return 0
    sleep 1
  done
  die "PostgreSQL $v did not start; see /var/log/postgresql/postgresql-$v-main.log"
}

ensure_postgres() {
  command -v psql >/dev/null || { apt_update; as_root apt-get install -y -qq postgresql >/dev/null; say "postgres: installed from Debian packages"; }
  if pg_isready -q -h "$PGHOST" -p "$PGPORT"; then
    say "postgres: running on $PGHOST:$PGPORT"
  else
    pg_start
    say "postgres: was down, started it on $PGHOST:$PGPORT"
  fi
  local num; num=$(psql_q "show server_version_num")
  [ "$num" -ge 150000 ] || die "PostgreSQL $(psql_q 'show server_version') is too old; ragsync needs 15 or newer"
}

# add_deb_src writes a deb-src entry for $PGVECTOR_SUITE derived from the
# machine's own Debian sources (same mirror, same keyring), so the script never
# names a mirror itself.
add_deb_src() {
  local src=/etc/apt/sources.list.d/debian.sources dst=/etc/apt/sources.list.d/ragsync-src.sources
  [ -f "$dst" ] && return 0
  [ -f "$src" ] || die "cannot find $src to derive a deb-src entry from; add 'deb-src <mirror> $PGVECTOR_SUITE main' yourself"
  local uri keyring
  uri=$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' "$src")
  keyring=$(awk '/^Signed-By:/ {print $2; exit}' "$src")
  [ -n "$uri" ] || die "no URIs line in $src"
  {
    echo "Types: deb-src"
    echo "URIs: $uri"
    echo "Suites: $PGVECTOR_SUITE"
    echo "Components: main"
    [ -n "$keyring" ] && echo "Signed-By: $keyring"
  } | as_root tee "$dst" >/dev/null
  apt_updated=0
}

ensure_pgvector() {
  if [ -n "$(psql_q "select 1 from pg_available_extensions where name = 'vector'")" ]; then
    say "pgvector: available ($(psql_q "select default_version from pg_available_extensions where name = 'vector'"))"
    return 0
  fi
  local v; v=$(pg_version)
  local pgc=/usr/lib/postgresql/$v/bin/pg_config
  # The build is silent and slow on a small machine: say what happens.
  say "pgvector: not available for PostgreSQL $v; installing the build tools and building it from Debian's source package (once; several minutes on a small machine)..."
  add_deb_src
  apt_update
  if [ ! -f "$("$pgc" --includedir-server 2>/dev/null)/postgres.h" ] || ! dpkg -s dpkg-dev >/dev/null 2>&1; then
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "postgresql-server-dev-$v" dpkg-dev make gcc >/dev/null \
      || die "could not install postgresql-server-dev-$v"
  fi
  local build; build=$(mktemp -d)
  (cd "$build" && apt-get source -qq pgvector >/dev/null 2>&1) || die "apt-get source pgvector failed (suite $PGVECTOR_SUITE)"
  local dir; dir=$(find "$build" -maxdepth 1 -type d -name 'pgvector-*' | head -1)
  [ -n "$dir" ] || die "apt-get source pgvector produced no source tree in $build"
  (cd "$dir" && make -s PG_CONFIG="$pgc" OPTFLAGS="" >/dev/null 2>&1 && as_root make -s PG_CONFIG="$pgc" install >/dev/null) \
    || die "building pgvector in $dir failed; run 'make PG_CONFIG=$pgc' there to see why"
  rm -rf "$build"
  # Installing the server dev package can upgrade the server and stop it.
  pg_isready -q -h "$PGHOST" -p "$PGPORT" || pg_start
  [ -n "$(psql_q "select 1 from pg_available_extensions where name = 'vector'")" ] || die "pgvector built but PostgreSQL does not see it"
  say "pgvector: was missing, built $(basename "$dir") from Debian's source package and installed it"
}

ensure_wal_level() {
  local lvl; lvl=$(psql_q "show wal_level")
  if [ "$lvl" = logical ]; then
    say "postgres: wal_level=logical"
    return 0
  fi
  # Only reached when the value differs: say so before the restart, which
  # disconnects every client of this server.
  say "postgres: wal_level is $lvl, logical replication needs logical: setting it and RESTARTING PostgreSQL now (its clients are disconnected; this happens once)"
  psql_q "alter system set wal_level = logical" >/dev/null
  as_root pg_ctlcluster --skip-systemctl-redirect "$(pg_version)" main restart >/dev/null 2>&1 || true
  pg_isready -q -h "$PGHOST" -p "$PGPORT" || pg_start
  for _ in $(seq 1 30); do pg_isready -q -h "$PGHOST" -p "$PGPORT" && break; sleep 1; done
  [ "$(psql_q "show wal_level")" = logical ] || die "could not set wal_level=logical; set it in postgresql.conf and restart PostgreSQL"
  say "postgres: wal_level=logical after the restart"
}

ensure_databases() {
  for db in test; do
    if [ -z "$(psql_q "select 1 from pg_database where datname = '$db'")" ]; then
      psql_q "create database $db" >/dev/null
      say "postgres: created database $db"
    fi
  done
}

ensure_redis() {
  command -v redis-server >/dev/null || { apt_update; as_root apt-get install -y -qq redis-server >/dev/null; say "redis: installed from Debian packages"; }
  if redis-cli -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG; then
    say "redis: running on 127.0.0.1:$REDIS_PORT"
    return 0
  fi
  mkdir -p /var/lib/redis /var/log/redis 2>/dev/null || true
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port "$REDIS_PORT" --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ragsync.log >/dev/null
  for _ in $(seq 1 20); do
    redis-cli -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG && { say "redis: was down, started it on 127.0.0.1:$REDIS_PORT"; return 0; }
    sleep 0.5
  done
  die "Redis did not start; see /var/log/redis/ragsync.log"
}

ensure_postgres
ensure_pgvector
ensure_wal_level
ensure_databases
ensure_redis
