#!/usr/bin/env bash
# Start (or stop) a throwaway PostgreSQL server on loopback for MLflow's backend store.
#   pipelines/services/postgres.sh start DATA_DIR [PORT]   -> prints the SQLAlchemy URI
#   pipelines/services/postgres.sh stop DATA_DIR
# Needs Debian's postgresql package. As root, the server runs as the `postgres` user
# (PostgreSQL refuses to run as root).
set -euo pipefail
cmd=${1:?start|stop}; data=${2:?data dir}; port=${3:-55432}
bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
case "$cmd" in
  start)
    mkdir -p "$data"
    [ "$(id -u)" = 0 ] && chown postgres "$data"
    if [ ! -f "$data/PG_VERSION" ]; then
      as_pg "$bin/initdb" -D "$data" -U mlflow --auth=trust -E UTF8 >/dev/null
    fi
    as_pg "$bin/pg_ctl" -D "$data" -o "-c listen_addresses=127.0.0.1 -p $port -k $data" -l "$data/server.log" -w start >/dev/null
    as_pg "$bin/psql" -h 127.0.0.1 -p "$port" -U mlflow -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname='mlflow'" | grep -q 1 \
      || as_pg "$bin/createdb" -h 127.0.0.1 -p "$port" -U mlflow mlflow
    echo "postgresql://mlflow@127.0.0.1:$port/mlflow"
    ;;
  stop)
    as_pg "$bin/pg_ctl" -D "$data" -m fast -w stop >/dev/null
    ;;
  *) echo "usage: $0 start|stop DATA_DIR [PORT]" >&2; exit 2 ;;
esac
