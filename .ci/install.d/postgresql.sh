#!/usr/bin/env bash
# PostgreSQL server binaries for the team-store tests (tests/pg_fixtures.py starts a throwaway
# server per test session with initdb + pg_ctl on a free loopback port, as the 'postgres' user when
# run as root). Debian's package; no cluster is created or started here (the tests make their own).
set -euo pipefail
have_server() {
    local d
    for d in "$(pg_config --bindir 2>/dev/null || true)" /usr/lib/postgresql/*/bin; do
        [ -n "$d" ] && [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && [ -x "$d/postgres" ] && return 0
    done
    return 1
}
if have_server && id postgres >/dev/null 2>&1; then
    echo "postgresql: server binaries already installed" >&2
    exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
# the tests start their own servers: keep the package from creating and starting a default cluster
if [ ! -e /etc/postgresql-common/createcluster.conf ]; then
    $SUDO mkdir -p /etc/postgresql-common
    echo "create_main_cluster = false" | $SUDO tee /etc/postgresql-common/createcluster.conf >/dev/null
fi
$SUDO apt-get update -qq
$SUDO env DEBIAN_FRONTEND=noninteractive UCF_FORCE_CONFFOLD=1 apt-get install -y -qq -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold postgresql >/dev/null
have_server || { echo "postgresql: installed, but initdb/pg_ctl/postgres not found" >&2; exit 1; }
ls -d /usr/lib/postgresql/*/bin >&2
