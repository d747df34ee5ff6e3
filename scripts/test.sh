#!/usr/bin/env bash
# Set up a virtualenv with profdb (editable) and its test dependencies (scripts/venv.sh), then run the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/venv.sh
exec "${PROFDB_VENV:-.venv}/bin/python" -m pytest "$@"
