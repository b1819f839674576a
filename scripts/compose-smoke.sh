#!/usr/bin/env bash
# compose-smoke.sh brings compose/'s "direct" profile up for real, with no
# image registry: Debian's Docker engine (docker.io), a base image made with
# debootstrap and brought in with `docker import`, ragsync's image built from
# compose/Dockerfile FROM that base (plus the host's Go toolchain for the
# build stage), and stand-ins for Postgres+pgvector, Redis and Prometheus
# built from Debian's packages (compose/smoke/). It starts the stack through
# compose/smoke/docker-compose.smoke.yml, writes a row into the sample
# document database, checks that it becomes searchable through `ragsync
# query` inside the stack and through the SQL view, and that Prometheus
# scrapes ragsync; then it tears the stack down. Grafana and the Kafka
# profile are not started: no Grafana, Kafka or Debezium image can be built
# from Debian's packages (make compose-config validates them).
#
# Runs as root. It installs what it needs first (docker.io, docker-compose,
# debootstrap), then validates compose/ as make compose-config does, then
# starts its own dockerd (own socket and data root) unless one answers
# there, and stops it at the end. Images stay cached in SMOKE_DIR, so a
# second run skips debootstrap and the builds; SMOKE_CLEAN=1 removes
# SMOKE_DIR at the end. The run directory (dockerd's socket, pid and exec
# root) lives under the build's scratch space, bin/scratch/compose-smoke
# (SMOKE_RUN_DIR overrides it), and is removed when the run passes.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
. "$REPO/scripts/debian-mirror.sh"
SMOKE_DIR=${SMOKE_DIR:-/var/lib/ragsync-smoke}
RUN_DIR=${SMOKE_RUN_DIR:-$REPO/bin/scratch/compose-smoke}
SOCK=$RUN_DIR/docker.sock
export DOCKER_HOST=unix://$SOCK
# Debian's docker client (20.10) has BuildKit built in; a newer client on
# PATH may want the buildx plugin, which Debian's package does not ship.
DOCKER=${DOCKER:-/usr/bin/docker}
export DOCKER_BUILDKIT=1
PROJECT=ragsync-smoke
COMPOSE=(docker-compose -p "$PROJECT" -f "$REPO/compose/docker-compose.yml" -f "$REPO/compose/smoke/docker-compose.smoke.yml" --profile direct)
BASE=ragsync-smoke/debian:bookworm
GOIMG=ragsync-smoke/golang:local
start=$(date +%s)
started_dockerd=0

elapsed() { local s=$(( $(date +%s) - start )); printf '%dm%02ds' $((s / 60)) $((s % 60)); }
say() { printf '=== compose-smoke %s %s\n' "$(elapsed)" "$*"; }
die() { printf 'compose-smoke: error: %s\n' "$*" >&2; exit 1; }

cleanup() {
  local rc=$?
  if [ -S "$SOCK" ]; then
    say "tearing the stack down"
    (cd "$REPO/compose" && PATH=$(dirname "$DOCKER"):$PATH "${COMPOSE[@]}" down -v --remove-orphans >/dev/null 2>&1) || true
  fi
  if [ "$started_dockerd" = 1 ] && [ -f "$RUN_DIR/dockerd.pid" ]; then
    say "stopping the dockerd this run started"
    kill "$(cat "$RUN_DIR/dockerd.pid")" 2>/dev/null || true
    for _ in $(seq 30); do [ -S "$SOCK" ] || break; sleep 1; done
  fi
  if [ "${SMOKE_CLEAN:-0}" = 1 ]; then rm -rf "$SMOKE_DIR"; fi
  if [ $rc -eq 0 ]; then
    rm -rf "$RUN_DIR"
    say "passed"
  else
    say "FAILED (exit $rc); the run directory stays for a look: $RUN_DIR"
  fi
}
trap cleanup EXIT

[ "$(id -u)" -eq 0 ] || die "run as root: it installs packages and starts dockerd"

need=()
command -v dockerd >/dev/null || need+=(docker.io)
command -v docker-compose >/dev/null || need+=(docker-compose)
command -v debootstrap >/dev/null || need+=(debootstrap)
if [ ${#need[@]} -gt 0 ]; then
  say "installing ${need[*]} from Debian's packages"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
[ -x "$DOCKER" ] || DOCKER=$(command -v docker)
docker() { "$DOCKER" "$@"; }
export PATH=$(dirname "$DOCKER"):$PATH # docker-compose runs `docker` for exec

# Validate compose/ now that docker-compose is installed (make compose-config
# cannot run before this script installed it).
say "validating compose/ (default, direct and ollama profiles)"
(cd "$REPO/compose" && docker-compose config -q && docker-compose --profile direct config -q && docker-compose --profile ollama config -q) ||
  die "compose/docker-compose.yml is not valid (docker-compose config above says where)"

mkdir -p "$SMOKE_DIR" "$RUN_DIR"
# A Unix socket path holds at most 107 bytes.
[ ${#SOCK} -le 100 ] || die "the run directory's path is too long for dockerd's socket ($SOCK): set SMOKE_RUN_DIR to a shorter one"
if ! docker info >/dev/null 2>&1; then
  say "starting dockerd (--iptables=false --bridge=none; compose's own network resolves service names)"
  dockerd --iptables=false --bridge=none --data-root "$SMOKE_DIR/docker" --exec-root "$RUN_DIR/exec" \
    --pidfile "$RUN_DIR/dockerd.pid" -H "$DOCKER_HOST" >"$SMOKE_DIR/dockerd.log" 2>&1 &
  started_dockerd=1
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || die "dockerd did not start; see $SMOKE_DIR/dockerd.log"
fi

for port in 5433 5434 6380 9090 9465; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    die "127.0.0.1:$port is in use; the compose file publishes it (stop what listens there)"
  fi
done

if ! docker image inspect "$BASE" >/dev/null 2>&1; then
  if [ ! -x "$SMOKE_DIR/rootfs/bin/bash" ]; then
    say "debootstrap: a minimal Debian bookworm (a few minutes)"
    rm -rf "$SMOKE_DIR/rootfs"
    # The Debian mirror this machine's apt already uses (DEBIAN_MIRROR
    # overrides it), so the smoke test reaches what the machine reaches.
    mirror=${DEBIAN_MIRROR:-}
    if [ -z "$mirror" ]; then
      mirror=$(debian_mirror) || die "no Debian mirror found for debootstrap (see above); set DEBIAN_MIRROR to one"
    fi
    debootstrap --variant=minbase --include=ca-certificates bookworm "$SMOKE_DIR/rootfs" "$mirror" >"$SMOKE_DIR/debootstrap.log" 2>&1 ||
      die "debootstrap failed; see $SMOKE_DIR/debootstrap.log"
  fi
  # The machine's own trust store, so that builds reach the Go module
  # proxy through whatever TLS inspection this machine's network does.
  cp /etc/ssl/certs/ca-certificates.crt "$SMOKE_DIR/rootfs/etc/ssl/certs/ca-certificates.crt"
  say "docker import: $BASE"
  tar -C "$SMOKE_DIR/rootfs" -c . | docker import -c 'CMD ["/bin/bash"]' - "$BASE" >/dev/null
fi
if ! docker image inspect "$GOIMG" >/dev/null 2>&1; then
  goroot=$(go env GOROOT)
  say "docker import: $GOIMG (the base plus the host's Go $(go env GOVERSION) at /usr/local/go)"
  tar -c -C "$SMOKE_DIR/rootfs" . -C "$(dirname "$goroot")" --transform "s,^$(basename "$goroot"),usr/local/go," "$(basename "$goroot")" |
    docker import -c 'ENV PATH=/usr/local/go/bin:/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      -c 'ENV GOPATH=/go' -c "ENV GOPROXY=$(go env GOPROXY)" - "$GOIMG" >/dev/null
fi

# ticking CMD...: runs CMD, printing a line per minute it runs, so a long
# image build (the ragsync build compiles every dependency the first time)
# is not silence.
ticking() {
  "$@" &
  local pid=$! n=0
  while kill -0 "$pid" 2>/dev/null; do
    sleep 5
    n=$((n + 5))
    if (( n % 60 == 0 )) && kill -0 "$pid" 2>/dev/null; then say "... still building"; fi
  done
  wait "$pid"
}

# build IMAGE DOCKERFILE CONTEXT: a BuildKit build on the host's network (the
# engine has no bridge), skipped when the image exists unless SMOKE_REBUILD=1.
build() {
  if [ "${SMOKE_REBUILD:-0}" != 1 ] && docker image inspect "$1" >/dev/null 2>&1; then return; fi
  say "building $1 from ${2#"$REPO"/}"
  ticking docker build -q --network host --build-arg BASE_IMAGE="$BASE" -f "$2" -t "$1" "$3" >/dev/null
}
ctx=$SMOKE_DIR/postgres-context
rm -rf "$ctx" && mkdir -p "$ctx/pgvector/lib" "$ctx/pgvector/extension"
pglib=/usr/lib/postgresql/15/lib
[ -f "$pglib/vector.so" ] || die "no pgvector for PostgreSQL 15 on this machine: run make services first"
cp "$pglib/vector.so" "$ctx/pgvector/lib/"
if [ -d "$pglib/bitcode/vector" ]; then mkdir -p "$ctx/pgvector/lib/bitcode" && cp -r "$pglib/bitcode/vector" "$pglib/bitcode/vector.index.bc" "$ctx/pgvector/lib/bitcode/" 2>/dev/null || true; fi
cp /usr/share/postgresql/15/extension/vector* "$ctx/pgvector/extension/"
cp compose/smoke/postgres-entrypoint.sh "$ctx/"
build ragsync-smoke/postgres:local compose/smoke/postgres.Dockerfile "$ctx"
build ragsync-smoke/redis:local compose/smoke/redis.Dockerfile compose/smoke
build ragsync-smoke/prometheus:local compose/smoke/prometheus.Dockerfile compose/smoke
say "building ragsync:compose from compose/Dockerfile (FROM $GOIMG and $BASE; the first build compiles every dependency: many minutes on a busy 2-core machine, cached afterwards)"
ticking docker build -q --network host --build-arg GO_IMAGE="$GOIMG" --build-arg RUNTIME_IMAGE="$BASE" \
  -f compose/Dockerfile -t ragsync:compose . >/dev/null

cd compose
say "docker-compose up: the direct profile (source-db, pgvector, redis, ragsync-direct) and prometheus"
"${COMPOSE[@]}" up -d ragsync-direct prometheus 2>&1 | sed 's/^/    /'

# wait_healthy SERVICE: its container's health check passes.
wait_healthy() {
  local id status
  id=$("${COMPOSE[@]}" ps -q "$1")
  for _ in $(seq 120); do
    status=$(docker inspect -f '{{.State.Health.Status}}' "$id" 2>/dev/null || echo gone)
    [ "$status" = healthy ] && return 0
    [ "$(docker inspect -f '{{.State.Running}}' "$id")" = true ] || break
    sleep 2
  done
  "${COMPOSE[@]}" logs --tail 40 "$1" >&2
  die "$1 did not become healthy (status: $status)"
}
wait_healthy ragsync-direct
say "ragsync-direct is healthy (/readyz): the initial load of public.articles is done"

token="smoke$(date +%s)"
title="Compose smoke $token"
body="The lighthouse keeper $token winds the clockwork lamp at dusk and logs the fog signal hours."
id=$("${COMPOSE[@]}" exec -T source-db psql -U postgres -d app -XtAq -c \
  "INSERT INTO articles (title, body, tenant, tags) VALUES ('$title', '$body', 'acme', '{smoke}') RETURNING id" | tr -d '[:space:]')
[ -n "$id" ] || die "the insert into source-db returned no id"
say "wrote public.articles id $id into source-db"

doc="public.articles/$id"
found=""
for _ in $(seq 60); do
  out=$("${COMPOSE[@]}" exec -T ragsync-direct ragsync query --json -k 3 --all-tenants "$body" 2>/dev/null || true)
  if grep -q "\"doc_id\":\"$doc\"" <<<"$out"; then found=1; break; fi
  sleep 2
done
[ -n "$found" ] || die "ragsync query inside the stack never found $doc; last output: $out"
say "ragsync query (inside ragsync-direct) finds $doc"

psql_index() { "${COMPOSE[@]}" exec -T pgvector psql -U postgres -d ragsync -XtAq -c "$1"; }
view=$(psql_index "SELECT 'ragsync.' || table_name FROM information_schema.views WHERE table_schema = 'ragsync' AND table_name = 'articles_index'" | tr -d '[:space:]')
if [ -z "$view" ]; then
  # No per-index view in this build: the alias view, as the README shows
  # SQL users, after promoting an alias to the index.
  out=$("${COMPOSE[@]}" exec -T ragsync-direct ragsync index promote articles --alias smoke_live)
  view=$(sed -n 's/.*SQL view \([a-z_.]*\).*/\1/p' <<<"$out")
  [ -n "$view" ] || die "index promote printed no SQL view: $out"
fi
n=$(psql_index "SELECT count(*) FROM $view WHERE doc_id = '$doc' AND text LIKE '%$token%'" | tr -d '[:space:]')
[ "${n:-0}" -ge 1 ] || die "the SQL view $view has no chunk of $doc"
say "the SQL view $view holds $n chunk(s) of $doc"

up=""
for _ in $(seq 45); do
  out=$("${COMPOSE[@]}" exec -T prometheus wget -qO- 'http://localhost:9090/api/v1/query?query=up%7Bpath%3D%22direct%22%7D' 2>/dev/null || true)
  if grep -q '"value":\[[0-9.]*,"1"\]' <<<"$out"; then up=1; break; fi
  sleep 2
done
[ -n "$up" ] || die "Prometheus never scraped ragsync-direct: $out"
say "Prometheus scrapes ragsync-direct (up{path=\"direct\"} = 1)"
