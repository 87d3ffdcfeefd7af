#!/usr/bin/env bash
# A throwaway PostgreSQL server for the demo and the benchmark (the tests' is PostgresCluster).
#
#   Scripts/pg-cluster.sh start DIR   makes a cluster in DIR (which must not exist; its parent must),
#                                     starts it on a free port of 127.0.0.1 and creates the role
#                                     `dopesync` (a random password, scram-sha-256 over TCP) and its
#                                     database `dopesync`. Prints, to be eval'd:
#                                       PG_URL=postgresql://dopesync@127.0.0.1:PORT/dopesync
#                                       PG_PASSWORD_FILE=DIR/password   (mode 0600, the caller's)
#   Scripts/pg-cluster.sh stop DIR    stops it at once (`pg_ctl stop -m immediate`) and deletes DIR.
#
# Debian's server programs (/usr/lib/postgresql/VERSION/bin, the highest version; `make deps`
# installs them) run as the `postgres` account when this runs as root, since initdb refuses root:
# DIR is then that account's, so its parent must be one `postgres` can enter (not a 0700 folder of
# root's). The server's socket and log (server.log) are in DIR.
set -euo pipefail

usage() {
  echo "usage: $0 start|stop DIR" >&2
  exit 64
}
[ $# -eq 2 ] || usage
action=$1
dir=$2
case "$dir" in /*) ;; *) dir="$PWD/$dir" ;; esac
# What marks DIR as one this script made, so `stop` never deletes anything else.
marker="$dir/.dopesync-pg-cluster"

bin=""
for candidate in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
  if [ -x "$candidate/initdb" ] && [ -x "$candidate/pg_ctl" ] && [ -x "$candidate/psql" ]; then
    bin=$candidate
    break
  fi
done
if [ -z "$bin" ]; then
  echo "PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb or psql): run \`make deps\`" >&2
  exit 69
fi

# Runs one of the server's programs as the account that owns the cluster, inside DIR.
as_server() {
  if [ "$(id -u)" -eq 0 ]; then
    (cd "$dir" && /usr/sbin/runuser -u postgres -- "$@")
  else
    (cd "$dir" && "$@")
  fi
}

# A port nothing is bound to now: the kernel's pick for port 0, let go.
unused_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start() {
  if [ -e "$dir" ]; then
    echo "$dir exists: start makes a new cluster in a folder that does not exist yet" >&2
    exit 73
  fi
  mkdir -m 0700 "$dir"
  touch "$marker"
  if [ "$(id -u)" -eq 0 ]; then
    chown -R postgres: "$dir"
    if ! /usr/sbin/runuser -u postgres -- test -w "$dir"; then
      rm -rf "$dir"
      echo "the postgres account cannot enter $dir: put it where postgres can (under /tmp, say)" >&2
      exit 77
    fi
  fi
  # A start that fails half way leaves nothing: no server, no folder.
  trap 'echo "could not start a cluster in $dir" >&2; stop' EXIT

  as_server "$bin/initdb" -D "$dir/data" -U postgres --auth-local=trust --auth-host=scram-sha-256 \
    --no-locale -E UTF8 --no-instructions --no-sync > "$dir/initdb.log"
  printf "\ninclude 'throwaway.conf'\n" >> "$dir/data/postgresql.conf"

  # Another server may take the free port before this one binds it: then try another.
  local port="" attempt
  for attempt in 1 2 3 4 5 6 7 8; do
    port=$(unused_port)
    cat > "$dir/data/throwaway.conf" <<EOF
# A throwaway cluster (Scripts/pg-cluster.sh): loopback only, its socket in its folder.
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir'
max_connections = 200
EOF
    [ "$(id -u)" -ne 0 ] || chown postgres: "$dir/data/throwaway.conf"
    local logged=0
    [ ! -e "$dir/server.log" ] || logged=$(stat -c %s "$dir/server.log")
    if as_server "$bin/pg_ctl" start -D "$dir/data" -l "$dir/server.log" -w > /dev/null; then
      break
    fi
    if [ "$attempt" -lt 8 ] && tail -c +$((logged + 1)) "$dir/server.log" | grep -q "Address already in use"; then
      continue
    fi
    tail -c +$((logged + 1)) "$dir/server.log" >&2
    exit 1
  done

  local password
  password=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
  "$bin/psql" -X -q -v ON_ERROR_STOP=1 -h "$dir" -p "$port" -U postgres -d postgres -f - <<EOF
CREATE ROLE dopesync LOGIN PASSWORD '$password';
CREATE DATABASE dopesync OWNER dopesync;
EOF
  (umask 077 && printf '%s\n' "$password" > "$dir/password")
  trap - EXIT
  printf 'PG_URL=%q\n' "postgresql://dopesync@127.0.0.1:$port/dopesync"
  printf 'PG_PASSWORD_FILE=%q\n' "$dir/password"
}

stop() {
  if [ ! -e "$marker" ]; then
    echo "$dir is not a cluster made by $0 start (no $marker): left alone" >&2
    exit 64
  fi
  # `status` is 0 while a server runs (a pid file left by a dead one is no reason to keep DIR).
  if [ -e "$dir/data/postmaster.pid" ] && as_server "$bin/pg_ctl" status -D "$dir/data" > /dev/null; then
    as_server "$bin/pg_ctl" stop -D "$dir/data" -m immediate -w > /dev/null
  fi
  rm -rf "$dir"
}

case "$action" in
start) start ;;
stop) stop ;;
*) usage ;;
esac
