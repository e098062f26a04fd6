#!/bin/bash
# Start a throw-away PostgreSQL server for gimbal's tests (as root; no systemd needed) and
# print its URL on stdout:  postgresql://gimbal@127.0.0.1:55432/gimbal_test
#
#   sudo bash tests/services/postgres.sh          # install (apt) if needed, init, start
#   sudo bash tests/services/postgres.sh stop
#
# Own data dir (GIMBAL_PG_DIR, default /var/lib/gimbal-test/pg), own port (GIMBAL_PG_PORT,
# default 55432) on 127.0.0.1 plus a unix socket in $GIMBAL_PG_DIR/run, trust auth for local
# connections only, so it never touches a site's own cluster. Idempotent.
set -euo pipefail
D=${GIMBAL_PG_DIR:-/var/lib/gimbal-test/pg}
PORT=${GIMBAL_PG_PORT:-55432}
DB=${GIMBAL_PG_DB:-gimbal_test}
ROLE=gimbal
die() { echo "postgres.sh: ERROR: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "must run as root"
bindir() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1; }
B=$(bindir)
as_pg() { runuser -u postgres -- "$@"; }
if [ "${1:-}" = stop ]; then
  [ -n "$B" ] && [ -f "$D/data/postmaster.pid" ] && as_pg "$B/pg_ctl" -D "$D/data" -m fast -w stop >&2
  exit 0
fi
if [ -z "$B" ] || [ ! -x "$B/initdb" ]; then
  s=$SECONDS
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2 || die "apt-get update failed"
  apt-get install -y -qq --no-install-recommends postgresql >/dev/null || die "apt-get install postgresql failed"
  echo "[timing] postgres apt-get install: $((SECONDS-s)) s" >&2
  B=$(bindir)
fi
id postgres >/dev/null 2>&1 || die "user postgres missing"
install -d -o postgres -g postgres -m 700 "$D" "$D/run"
if [ ! -f "$D/data/PG_VERSION" ]; then
  rm -rf "$D/data"
  as_pg "$B/initdb" -D "$D/data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >/dev/null \
    || as_pg "$B/initdb" -D "$D/data" -U postgres --auth=trust -E UTF8 --locale=C >/dev/null \
    || die "initdb failed"
fi
if ! as_pg "$B/pg_ctl" -D "$D/data" status >/dev/null 2>&1; then
  as_pg "$B/pg_ctl" -D "$D/data" -l "$D/server.log" -w -t 30 \
    -o "-c listen_addresses=127.0.0.1 -p $PORT -k $D/run -c fsync=off -c full_page_writes=off" start >&2 \
    || { tail -20 "$D/server.log" >&2; die "postgres did not start"; }
fi
Q() { as_pg "$B/psql" -h "$D/run" -p "$PORT" -U postgres -d postgres -tAqc "$1"; }
[ "$(Q "select 1 from pg_roles where rolname='$ROLE'")" = 1 ] || Q "create role $ROLE login createdb" >/dev/null
[ "$(Q "select 1 from pg_database where datname='$DB'")" = 1 ] || Q "create database $DB owner $ROLE" >/dev/null
echo "postgresql://$ROLE@127.0.0.1:$PORT/$DB"
