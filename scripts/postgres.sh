#!/usr/bin/env bash
# Sourced by scripts/test and scripts/bench: starts this machine's PostgreSQL
# cluster if it is not running and makes sure the `ephemera_test` role (which
# may create databases) exists, and `ephemera_peer` (a login with no rights of
# its own: the benchmark grants it reading the database it seeded, for the
# PostGraphile peer). PostgreSQL 15 is installed but not running on
# the CI machines.

start_postgres() {
  if pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
    return
  fi
  if ! command -v pg_ctlcluster >/dev/null 2>&1; then
    echo "PostgreSQL is not installed (need pg_ctlcluster); on Debian: apt-get install postgresql" >&2
    exit 1
  fi
  local version
  version=$(ls /usr/lib/postgresql | sort -n | tail -n 1)
  if ! pg_lsclusters -h | awk '{print $2}' | grep -qx main; then
    pg_createcluster "$version" main >/dev/null
  fi
  pg_ctlcluster "$version" main start
  for _ in $(seq 1 30); do
    pg_isready -q -h 127.0.0.1 -p 5432 && return
    sleep 1
  done
  echo "PostgreSQL did not become ready" >&2
  exit 1
}

psql_admin() {
  if [ "$(id -u)" = 0 ]; then
    printf '%s\n' "$1" | su postgres -c "psql -v ON_ERROR_STOP=1 -qAt"
  else
    printf '%s\n' "$1" | psql -v ON_ERROR_STOP=1 -qAt
  fi
}

start_postgres
psql_admin "DO \$\$ BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'ephemera_test') THEN
    CREATE ROLE ephemera_test LOGIN CREATEDB PASSWORD 'ephemera_test';
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'ephemera_peer') THEN
    CREATE ROLE ephemera_peer LOGIN PASSWORD 'ephemera_peer';
  END IF;
END \$\$;"
