#!/usr/bin/env bash
# Set up a virtualenv with profdb (editable) and its test dependencies (scripts/venv.sh), then run the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/venv.sh
# One pytest worker per core, at most 4 (pytest-xdist): most tests wait on subprocesses (launchers,
# servers, workers) rather than fill a core; on CI's 2 cores the suite took 21 min in one process and
# 10-11.5 in two (worksteal: an idle worker takes tests queued for a busy one, 599 s against 611-633 s;
# the tests marked alone, run one at a time since, brought it to 677-690 s).
# A later -n in "$@" wins (-n 0: one process, e.g. to debug with -x --pdb).
exec "${PROFDB_VENV:-.venv}/bin/python" -m pytest -n auto --maxprocesses 4 --dist worksteal "$@"
