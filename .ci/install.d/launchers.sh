#!/usr/bin/env bash
# Launchers for tests/test_record_launchers.py (`profdb record` under real launchers):
# OpenMPI's mpirun and GNU time (a real `TOOL -o FILE -- APP` profiler stand-in) from Debian.
# torchrun comes with CPU PyTorch, installed into the test venv by scripts/test.sh from
# .ci/test-extras.txt (torch==2.13.0: the CPU wheel that lies on this machine kind's disk, ~30 s,
# no CUDA download; a bare `torch` or a range would pull a multi-GB CUDA build).
# Tests run mpirun as root with OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM)=1, set by the tests themselves.
set -euo pipefail
if command -v mpirun >/dev/null && mpirun --version 2>/dev/null | grep -q "Open MPI" && [ -x /usr/bin/time ]; then
    echo "launchers: OpenMPI and GNU time already installed" >&2
    exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq openmpi-bin time >/dev/null
mpirun --version | head -1 >&2
