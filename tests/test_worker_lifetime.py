"""After the writer of an ingest is killed outright (SIGKILL), no parsing worker is left behind,
even one blocked in a read that would never return (issue 14)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

SCRIPT = """
import sys, time
from pathlib import Path
from profdb.store import ingest_workers
from profdb.store.records import SourceInfo
fifo = Path(sys.argv[1])
info = SourceInfo("rocprof-csv", kind="kernel_trace")
tasks = [ingest_workers.Task(i, fifo, "rocprof-csv", info, 1, 1) for i in range(2)]
parsers = ingest_workers.Parsers(tasks, 2)
print(" ".join(str(p.pid) for p in parsers.procs), flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in state


def test_workers_die_with_a_killed_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "kernel_trace.csv"
    os.mkfifo(fifo)  # opening it for reading blocks: the workers are stuck in a read
    writer = subprocess.Popen([sys.executable, "-c", SCRIPT, str(fifo)], stdout=subprocess.PIPE, text=True)
    assert writer.stdout is not None
    workers = [int(p) for p in writer.stdout.readline().split()]
    assert len(workers) == 2 and all(_alive(p) for p in workers)
    try:
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        for _ in range(200):  # the kernel kills them at once; this only waits for that to be visible
            if not any(_alive(p) for p in workers):
                break
            time.sleep(0.05)
        assert not any(_alive(p) for p in workers), "a worker outlived its writer"
    finally:
        for p in workers:
            if _alive(p):
                os.kill(p, signal.SIGKILL)
