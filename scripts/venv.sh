#!/usr/bin/env bash
# The virtualenv the tests and the static checks run in: profdb (editable) with its test extras.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${PROFDB_VENV:-.venv}"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -e '.[test]'
[ -f .ci/test-extras.txt ] && "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r .ci/test-extras.txt
exit 0
