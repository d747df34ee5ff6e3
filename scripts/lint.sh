#!/usr/bin/env bash
# The static checks, as CI runs them (before the tests): ruff on store/ cli/ alembic/, and mypy --strict
# (pyproject.toml) on the three packages under the names they are installed as (profdb.store, profdb.cli,
# profdb.migrations), through a temporary tree of links, so imports between them resolve as in the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
[ "${PROFDB_LINT_NO_SETUP:-}" ] || bash scripts/venv.sh
VENV="$(cd "${PROFDB_VENV:-.venv}" && pwd)"
"$VENV/bin/python" -m ruff check store cli alembic
tree="$(mktemp -d)"
trap 'rm -rf "$tree"' EXIT
mkdir "$tree/profdb"
ln -s "$root/store" "$tree/profdb/store"
ln -s "$root/cli" "$tree/profdb/cli"
ln -s "$root/alembic" "$tree/profdb/migrations"
cd "$tree"
"$VENV/bin/python" -m mypy --config-file "$root/pyproject.toml" --cache-dir "$root/.mypy_cache" \
    -p profdb.store -p profdb.cli -p profdb.migrations
