#!/usr/bin/env bash
# A throwaway PostgreSQL cluster on a loopback port, in a temporary folder.
#   scripts/postgres.sh start DIR PORT   initdb + start; prints the admin URL
#   scripts/postgres.sh stop DIR         stops it and removes DIR
# initdb refuses root, so the cluster runs as the `postgres` user when we are root.
set -euo pipefail
cmd="${1:?usage: postgres.sh start DIR PORT | stop DIR}"
dir="${2:?a folder for the cluster}"

bindir=""
for candidate in /usr/lib/postgresql/*/bin; do
  [ -x "$candidate/initdb" ] && bindir="$candidate"
done
[ -n "$bindir" ] || { echo "error: PostgreSQL server binaries not found; run scripts/bootstrap.sh test" >&2; exit 1; }

as_pg() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

case "$cmd" in
  start)
    port="${3:?a port}"
    mkdir -p "$dir"
    [ "$(id -u)" -eq 0 ] && chown postgres:postgres "$dir"
    as_pg "$bindir/initdb" -D "$dir/data" -A trust -U postgres --no-sync -E UTF8 >"$dir/initdb.log" 2>&1 \
      || { cat "$dir/initdb.log" >&2; exit 1; }
    # Durability off: a test cluster lives for one run.
    as_pg "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
      -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" \
      start >/dev/null || { cat "$dir/server.log" >&2; exit 1; }
    echo "postgres://postgres@127.0.0.1:$port/postgres"
    ;;
  stop)
    if [ -d "$dir/data" ]; then
      as_pg "$bindir/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
    fi
    rm -rf "$dir"
    ;;
  *)
    echo "usage: postgres.sh start DIR PORT | stop DIR" >&2
    exit 2
    ;;
esac
