"""A small per-rank program for `profdb record` tests: reports what it was given, exits as told.

--out PATH       write {"argv", "pid", "ppid", "env": PROFDB_* and launcher variables} as JSON to PATH
                 (default: $PROFDB_RANK_DIR/probe.json when that is set, else nothing)
--marker FILE    append "<PROFDB_RANK> <profiled|unprofiled>" to FILE (shows that every rank ran)
--exit N         exit with status N
--wait-signals F install handlers for SIGINT/SIGTERM/SIGHUP, create F (ready), wait for a signal,
                 keep listening 0.5 s more (a duplicate would arrive then), write the names of the
                 signals received to F + ".got", one a line, and exit with --exit's status
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType

KEEP = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "ROCPROF_OUTPUT_PATH")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--marker")
    ap.add_argument("--exit", type=int, default=0)
    ap.add_argument("--wait-signals")
    args = ap.parse_args()

    rank_dir = os.environ.get("PROFDB_RANK_DIR")
    out = args.out or (str(Path(rank_dir) / "probe.json") if rank_dir else None)
    if out:
        env = {k: v for k, v in os.environ.items() if k.startswith("PROFDB_") or k in KEEP}
        Path(out).write_text(json.dumps({"argv": sys.argv, "pid": os.getpid(), "ppid": os.getppid(), "env": env}))
    if args.marker:
        with open(args.marker, "a") as f:
            f.write(f"{os.environ.get('PROFDB_RANK')} {'profiled' if rank_dir else 'unprofiled'}\n")
    if args.wait_signals:
        got: list[str] = []

        def handler(signum: int, frame: FrameType | None) -> None:
            got.append(signal.Signals(signum).name)

        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, handler)
        # atomically: a waiter that sees the file also sees the pid in it
        tmp = Path(args.wait_signals + ".tmp")
        tmp.write_text(str(os.getpid()))
        os.replace(tmp, args.wait_signals)
        deadline = time.monotonic() + 30
        while not got and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.5)
        # atomically too: a test that sees the file may kill this process at once (it did, mid-write,
        # under load: the file was empty)
        tmp.write_text("".join(f"{g}\n" for g in got))
        os.replace(tmp, args.wait_signals + ".got")
    return args.exit


if __name__ == "__main__":
    sys.exit(main())
