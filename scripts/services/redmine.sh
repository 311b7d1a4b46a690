#!/usr/bin/env bash
# Test service: a real Redmine (Debian's `redmine` package on SQLite) on 127.0.0.1.
#
# Installs the packages on first use (about a minute with `apt-get update`),
# prepares the instance with scripts/services/redmine/setup.rb (REST API on, the
# e2e pipeline's statuses and workflow), starts `rails server` (WEBrick) on a free
# port and writes, to $SORTIE_TEST_SERVICES:
#   redmine.env   SORTIE_TEST_REDMINE_URL, SORTIE_TEST_REDMINE_API_KEY (admin key)
#   redmine.pid   the server's pid
#   redmine.log   the server's output
# Tests create a fresh project each, so runs never interfere.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
: "${SORTIE_TEST_SERVICES:?set SORTIE_TEST_SERVICES to a directory (scripts/test does)}"
mkdir -p "$SORTIE_TEST_SERVICES"
log="$SORTIE_TEST_SERVICES/redmine.log"
root=/usr/share/redmine
started=$SECONDS

installed() {
  dpkg-query -W -f='${Status}\n' redmine redmine-sqlite 2>/dev/null |
    grep -c '^install ok installed$' | grep -qx 2
}

if ! installed; then
  echo "redmine: installing Debian packages redmine, redmine-sqlite"
  export DEBIAN_FRONTEND=noninteractive
  apt_opts=(-o DPkg::Lock::Timeout=600 -q)
  apt-get "${apt_opts[@]}" update >/dev/null
  apt-get "${apt_opts[@]}" install -y --no-install-recommends debconf-utils >/dev/null
  debconf-set-selections <<'SEL'
redmine redmine/instances/default/database-type select sqlite3
redmine redmine/instances/default/dbconfig-install boolean true
SEL
  apt-get "${apt_opts[@]}" install -y --no-install-recommends redmine redmine-sqlite curl >/dev/null
  echo "redmine: installed in $((SECONDS - started)) s"
fi

# WEBrick left Ruby's standard library in 3.0; Redmine's Gemfile does not list it.
if ! grep -qs "^gem 'webrick'" "$root/Gemfile.local"; then
  echo "gem 'webrick'" >>"$root/Gemfile.local"
fi

# One request at a time: on SQLite, Rails' concurrent write transactions fail with
# "database is locked" (500) as soon as tests run in parallel.
extra_env="$root/config/additional_environment.rb"
if ! grep -qs 'Rack::Lock' "$extra_env"; then
  echo "config.middleware.insert_before 0, Rack::Lock # sortie test service: SQLite" >>"$extra_env"
fi
# Background jobs (Redmine sends its notification mails from ActiveJob's async pool)
# write outside that lock and hit the same "database is locked": run them inline,
# inside the request that enqueued them.
if ! grep -qs 'queue_adapter = :inline' "$extra_env"; then
  echo "config.active_job.queue_adapter = :inline # sortie test service: SQLite" >>"$extra_env"
fi

cd "$root"
key_line=$(RAILS_ENV=production bin/rails runner "$here/redmine/setup.rb" 2>>"$log" | tail -n 1)
case $key_line in
  SORTIE_TEST_REDMINE_API_KEY=?*) ;;
  *) echo "redmine: setup failed; see $log" >&2; tail -n 30 "$log" >&2; exit 1 ;;
esac

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

for try in 1 2 3; do
  port=$((20000 + RANDOM % 20000))
  port_free "$port" || continue
  # setsid: the server gets its own process group, so stopping it stops only it.
  setsid bin/rails server -u webrick -b 127.0.0.1 -p "$port" -e production \
    -P "$SORTIE_TEST_SERVICES/redmine-rails.pid" >>"$log" 2>&1 </dev/null &
  pid=$!
  url="http://127.0.0.1:$port"
  for _ in $(seq 1 120); do
    if curl -fsS -o /dev/null -m 2 -H "X-Redmine-API-Key: ${key_line#*=}" "$url/issue_statuses.json" 2>/dev/null; then
      echo "$pid" >"$SORTIE_TEST_SERVICES/redmine.pid"
      {
        echo "SORTIE_TEST_REDMINE_URL=$url"
        echo "$key_line"
      } >"$SORTIE_TEST_SERVICES/redmine.env"
      echo "redmine: ready at $url after $((SECONDS - started)) s (try $try)"
      exit 0
    fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
  done
  kill "$pid" 2>/dev/null || true
  echo "redmine: server on port $port did not answer (try $try)" >&2
done
echo "redmine: could not start; last lines of $log:" >&2
tail -n 40 "$log" >&2
exit 1
