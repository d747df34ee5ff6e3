#!/usr/bin/env bash
# Set up a virtualenv with profdb (editable) and its test dependencies, then run the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${PROFDB_VENV:-.venv}"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -e '.[test]'
[ -f .ci/test-extras.txt ] && "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r .ci/test-extras.txt
exec "$VENV/bin/python" -m pytest "$@"
