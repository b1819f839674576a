#!/bin/sh
# register.sh registers the Debezium connector described by $CONNECTOR_FILE
# with Kafka Connect at $CONNECT_URL, then exits: it is the one-shot
# "register-connector" service of docker-compose.yml.
#
# Connect answers 404/5xx (and briefly 400) for a while after its REST port
# opens, until it has read its config topic; so the POST is retried. 201 means created and 409
# means a connector of that name already exists (a second `docker compose up`),
# both of which are success: the config in Connect's topic survives restarts.
set -eu

CONNECT_URL=${CONNECT_URL:-http://connect:8083}
CONNECTOR_FILE=${CONNECTOR_FILE:-/connect/articles.json}
ATTEMPTS=${ATTEMPTS:-60}

i=0
rejected=0
while [ "$i" -lt "$ATTEMPTS" ]; do
  i=$((i + 1))
  code=$(curl -s -o /tmp/register.out -w '%{http_code}' -X POST \
    -H 'Content-Type: application/json' -H 'Accept: application/json' \
    --data @"$CONNECTOR_FILE" "$CONNECT_URL/connectors") || code=000 # no connection yet
  case "$code" in
    201) echo "register: connector created from $CONNECTOR_FILE"; exit 0 ;;
    409) echo "register: connector already registered; leaving it as it is"; exit 0 ;;
    400|422)
      # Usually a config Connect rejects, which retrying will not fix; but
      # Connect also answers 400 for a short while during its own start-up,
      # so give it a few tries before showing its reason and failing.
      rejected=$((rejected + 1))
      if [ "$rejected" -ge 5 ]; then
        echo "register: Connect rejected $CONNECTOR_FILE (HTTP $code):" >&2
        cat /tmp/register.out >&2; echo >&2
        exit 1
      fi ;;
  esac
  echo "register: Connect not ready (HTTP $code), attempt $i/$ATTEMPTS"
  sleep 2
done
echo "register: gave up after $ATTEMPTS attempts; see 'docker compose logs connect'" >&2
exit 1
