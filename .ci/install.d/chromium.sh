#!/usr/bin/env bash
# Headless Chromium for tests/test_report.py: it opens the HTML report `profdb report` writes, reads
# the rendered DOM (--dump-dom) and takes a screenshot, offline. Debian's package; the test skips,
# saying why, when no chromium is on PATH.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
    echo "chromium: already installed ($(chromium --version 2>/dev/null | head -1))" >&2
    exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
chromium --version 2>/dev/null | head -1 >&2
