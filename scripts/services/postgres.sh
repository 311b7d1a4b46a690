#!/usr/bin/env bash
# Test service: a throwaway PostgreSQL cluster (Debian's `postgresql` package) on
# 127.0.0.1, for the Postgres ledger tests (tests/services/ledger_pg*.rs).
#
# Installs the package on first use, initdb's a fresh cluster into a temporary data
# directory owned by the `postgres` user (the server refuses to run as root), starts it
# on a free port with `synchronous_commit = on` (the default, stated for the figures in
# docs/benchmarks.md) and room for the
# parallel tests' connections (each ledger opens up to 4; each tick process is a ledger), and writes, to $SORTIE_TEST_SERVICES:
#   postgres.env   SORTIE_TEST_POSTGRES_URL=postgres://sortie@127.0.0.1:PORT/sortie
#                  SORTIE_TEST_POSTGRES_DATA, SORTIE_TEST_POSTGRES_BIN (for restart tests)
#   postgres.pid   the postmaster's pid (stopping it stops the cluster)
#   postgres.log   the server's log
# Tests create a schema each (search_path in the URL's options), so runs never interfere.
set -euo pipefail
: "${SORTIE_TEST_SERVICES:?set SORTIE_TEST_SERVICES to a directory (scripts/test does)}"
mkdir -p "$SORTIE_TEST_SERVICES"
log=$SORTIE_TEST_SERVICES/postgres.log
started=$SECONDS

bindir() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }

if [[ -z $(bindir) ]] || ! command -v psql >/dev/null; then
  echo "postgres: installing Debian package postgresql"
  export DEBIAN_FRONTEND=noninteractive
  apt_opts=(-o DPkg::Lock::Timeout=600 -q)
  apt-get "${apt_opts[@]}" update >/dev/null
  apt-get "${apt_opts[@]}" install -y --no-install-recommends postgresql >/dev/null
  echo "postgres: installed in $((SECONDS - started)) s"
fi
bin=$(bindir)

as_postgres() {
  if [[ $(id -u) -eq 0 ]]; then
    # runuser keeps the environment small and needs no password.
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

data=$(mktemp -d "${TMPDIR:-/tmp}/sortie-pg.XXXXXX")
# The postgres user cannot enter $SORTIE_TEST_SERVICES (mode 700), so the cluster lives
# beside it; scripts/test removes the directories listed in *.dirs once the services
# are stopped.
echo "$data" >>"$SORTIE_TEST_SERVICES/postgres.dirs"
if [[ $(id -u) -eq 0 ]]; then
  chown postgres: "$data"
  touch "$log" && chown postgres: "$log"
fi
as_postgres "$bin/initdb" -D "$data" -U sortie --auth=trust -E UTF8 --locale=C.UTF-8 >>"$log" 2>&1 || {
  echo "postgres: initdb failed; see $log" >&2
  tail -n 30 "$log" >&2
  exit 1
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

for try in 1 2 3; do
  port=$((20000 + RANDOM % 20000))
  port_free "$port" || continue
  cat >>"$data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$data'
max_connections = 400
synchronous_commit = on
fsync = on
CONF
  # setsid: the server gets its own process group, so stopping it stops only it.
  setsid runuser -u postgres -- "$bin/postgres" -D "$data" >>"$log" 2>&1 </dev/null &
  for _ in $(seq 1 100); do
    if [[ -s $data/postmaster.pid ]] && "$bin/pg_isready" -q -h 127.0.0.1 -p "$port"; then
      pid=$(head -n 1 "$data/postmaster.pid")
      as_postgres "$bin/createdb" -h 127.0.0.1 -p "$port" -U sortie sortie >>"$log" 2>&1
      echo "$pid" >"$SORTIE_TEST_SERVICES/postgres.pid"
      {
        echo "SORTIE_TEST_POSTGRES_URL=postgres://sortie@127.0.0.1:$port/sortie"
        echo "SORTIE_TEST_POSTGRES_DATA=$data"
        echo "SORTIE_TEST_POSTGRES_BIN=$bin"
      } >"$SORTIE_TEST_SERVICES/postgres.env"
      echo "postgres: ready at 127.0.0.1:$port (data $data) after $((SECONDS - started)) s (try $try)"
      exit 0
    fi
    sleep 0.2
  done
  echo "postgres: server on port $port did not answer (try $try)" >&2
  if [[ -s $data/postmaster.pid ]]; then kill "$(head -n 1 "$data/postmaster.pid")" 2>/dev/null || true; fi
  sleep 1
  sed -i '/^listen_addresses/,$d' "$data/postgresql.conf"
done
echo "postgres: could not start; last lines of $log:" >&2
tail -n 40 "$log" >&2
exit 1
