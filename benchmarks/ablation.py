"""What each of ingest's cheap wins is worth: the same ingest with one of them switched off at a time.

    python benchmarks/ablation.py DIR [DIR ...] [--repeat 3] [--json]

Each DIR is a generated run (``benchmarks/generate.py csv DIR ...``, or Kineto traces). For every
variant, every DIR is ingested into a fresh store in a child process (so workers, GC state and
imports start alike), ``--repeat`` times interleaved; the lowest CPU seconds (this process tree:
writer + workers) and wall seconds are kept. Variants:

- ``all``: the code as it is;
- ``no-quiet-gc``: the default cyclic GC (``ingest_workers.quiet_gc`` replaced by nothing);
- ``no-literals``: every column bound on every row (``bulk.constants_inlined`` binds all; since issue 15
  phase 2 only the row path uses it: rocprofv3 kernel and counter traces go through ``Writer.insert_columns``,
  whose literals this variant does not switch off);
- ``no-rollback-journal``: a brand-new store loaded in WAL mode like an existing one;
- ``no-multirow``: one row per INSERT statement (``bulk.ROWS_PER_INSERT = 1``; issue 15 phase 3 made it 100);
- ``none``: the first three off (what main did before issue 15; rows still go 100 per statement).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

VARIANTS = ("all", "no-quiet-gc", "no-literals", "no-rollback-journal", "no-multirow", "none")


def child(variant: str, inputs: list[str], db: str) -> dict[str, float]:
    """Run one ingest in this (child) process with ``variant``'s wins switched off; CPU and wall."""
    from profdb.store import bulk, ingest, ingest_workers

    off = {"none": {"gc", "literals", "journal"}, "no-quiet-gc": {"gc"}, "no-literals": {"literals"},
           "no-rollback-journal": {"journal"}, "no-multirow": {"multirow"}}.get(variant, set())
    if "multirow" in off:
        bulk.ROWS_PER_INSERT = 1
    if "gc" in off:
        ingest_workers.quiet_gc = contextlib.nullcontext  # type: ignore[assignment]
    if "literals" in off:
        def bind_all(table: str, cols: Any, rows: Any, mark: str = "?", fixed: Any = ()) -> tuple[str, Any]:
            names = [*cols, *(c for c, _ in fixed)]
            values = [mark] * len(cols) + [v for _, v in fixed]
            return f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join(values)})", rows
        bulk.constants_inlined = bind_all  # type: ignore[assignment]
    if "journal" in off:
        real = bulk.load_transaction

        def wal_only(engine: Any, bulk_load: bool, new_store: bool = False) -> Any:
            return real(engine, bulk_load, False)
        bulk.load_transaction = wal_only  # type: ignore[assignment]
    t = time.perf_counter()
    c0 = time.process_time()
    ingest.ingest_paths(inputs, db, run="ablation")
    wall = time.perf_counter() - t
    own = time.process_time() - c0
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"wall_s": wall, "cpu_s": own + kids.ru_utime + kids.ru_stime}


def inputs_of(d: Path) -> list[str]:
    ranks = sorted(str(x) for x in d.glob("rank*") if x.is_dir())
    return ranks or sorted(str(x) for x in d.glob("*.json*"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dirs", nargs="+", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--variant", action="append", choices=VARIANTS, help="only these (repeatable)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", nargs=2, metavar=("VARIANT", "DB"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.child[0], [str(d) for d in a.dirs], a.child[1])))
        return 0
    variants = a.variant or list(VARIANTS)
    res: dict[str, dict[str, dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="profdb-ablation-", dir=os.environ.get("TMPDIR")) as tmp:
        for _ in range(a.repeat):
            for d in a.dirs:
                for v in variants:
                    db = str(Path(tmp) / "s.db")
                    for suffix in ("", "-wal", "-shm", "-journal"):
                        Path(db + suffix).unlink(missing_ok=True)
                    out = subprocess.run([sys.executable, __file__, *inputs_of(d), "--child", v, db],
                                         capture_output=True, text=True)
                    if out.returncode != 0:
                        raise SystemExit(out.stderr[-3000:])
                    m = json.loads(out.stdout.strip().splitlines()[-1])
                    best = res.setdefault(d.name, {}).setdefault(v, {"wall_s": 1e9, "cpu_s": 1e9})
                    best["wall_s"] = min(best["wall_s"], m["wall_s"])
                    best["cpu_s"] = min(best["cpu_s"], m["cpu_s"])
    if a.json:
        print(json.dumps(res, indent=1))
    else:
        print(f"load average {os.getloadavg()[0]:.1f}; best of {a.repeat}")
        for d, by in res.items():
            base = by.get("all")
            for v, m in by.items():
                rel = f"  CPU x{m['cpu_s'] / base['cpu_s']:.2f} of 'all'" if base else ""
                print(f"{d:24s} {v:22s} {m['wall_s']:7.2f} s wall {m['cpu_s']:7.2f} s CPU{rel}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
