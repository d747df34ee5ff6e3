"""PostgreSQL ingest rows/s beside SQLite's, on the same generated rocprofv3 CSV run.

    python benchmarks/pg_ingest.py [--ranks 4] [--dispatches 100000] [--pg-url URL] [--json]

Generates a run (``--ranks`` ranks of ``--dispatches`` kernel dispatches each, plus one counter row
per ten dispatches), then times, each into a fresh store:
- one ``ingest`` of every rank, in this process (SQLite; PostgreSQL through COPY; PostgreSQL with
  COPY switched off, i.e. executemany, to show what COPY buys; PostgreSQL through COPY into a store
  whose fact tables (activity, counter) have no foreign keys, to show what the per-row checks cost),
- one ``profdb ingest`` process per rank started together, as the nodes of a job would (SQLite
  takes them one at a time; PostgreSQL loads them side by side).
The PostgreSQL server is ``--pg-url`` / $PROFDB_TEST_PG_URL (a role that may CREATE DATABASE), or
one started for the run (tests/pg_fixtures.py). Rows = activity + counter rows stored."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from pg_fixtures import PgServer, PgUnavailable, get_server, write_rocprof_run  # noqa: E402
from sqlalchemy import create_engine, text  # noqa: E402

from profdb.store import bulk  # noqa: E402
from profdb.store.db import open_db  # noqa: E402
from profdb.store.ingest import ingest_paths  # noqa: E402


def stored_rows(url: str) -> int:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(text("select (select count(*) from activity) + (select count(*) from counter)")).scalar_one())
    finally:
        engine.dispose()


def timed(fn: Callable[[], Any]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def in_process(url: str, job: Path) -> float:
    open_db(url).dispose()  # migrations are not ingest time
    return timed(lambda: ingest_paths([job], url, run="bench"))


def without_fact_fks(url: str, job: Path) -> float:
    """``in_process`` into a store whose activity and counter tables lost their foreign keys (this
    benchmark's own database only; the same indexes stay)."""
    open_db(url).dispose()
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            fks = conn.execute(text(
                "SELECT conrelid::regclass::text, conname FROM pg_constraint "
                "WHERE contype = 'f' AND conrelid::regclass::text IN ('activity', 'counter')")).all()
            for table, name in fks:
                conn.execute(text(f'ALTER TABLE {table} DROP CONSTRAINT "{name}"'))
    finally:
        engine.dispose()
    return timed(lambda: ingest_paths([job], url, run="bench"))


def copy_only(url: str, job: Path, *, fks: bool, binary: bool) -> float:
    """The server's side alone: the job's rows, read once from an SQLite store built here, COPYed into
    a fresh PostgreSQL store (run, rank, source_file and name first, untimed; then activity and
    counter, timed, in one transaction), with or without the fact tables' foreign keys, text or binary
    COPY. No parsing, no Python per row beyond psycopg's own."""
    import sqlite3

    src = job.parent / "copy-source.db"
    if not src.exists():
        ingest_paths([job], str(src), run="bench")
    open_db(url).dispose()
    engine = create_engine(url)
    lite = sqlite3.connect(src)
    try:
        with engine.begin() as conn:
            if not fks:
                for table, name in conn.execute(text(
                        "SELECT conrelid::regclass::text, conname FROM pg_constraint "
                        "WHERE contype = 'f' AND conrelid::regclass::text IN ('activity', 'counter')")).all():
                    conn.execute(text(f'ALTER TABLE {table} DROP CONSTRAINT "{name}"'))
        tables = ("run", "rank", "source_file", "name", "launch", "activity", "counter")  # (launch: migration 0005)
        data = {}
        for t in tables:
            cols = [r[1] for r in lite.execute(f"PRAGMA table_info({t})")]
            data[t] = (cols, lite.execute(f"SELECT {', '.join(cols)} FROM {t}").fetchall())
        with engine.begin() as conn:
            raw = conn.connection.driver_connection
            with raw.cursor() as cur:
                for t in tables[:5]:
                    cols, rows = data[t]
                    with cur.copy(f"COPY {t} ({', '.join(cols)}) FROM STDIN") as cp:
                        for r in rows:
                            cp.write_row(r)
        t0 = time.perf_counter()
        with engine.begin() as conn:
            raw = conn.connection.driver_connection
            with raw.cursor() as cur:
                for t in tables[5:]:
                    cols, rows = data[t]
                    types = [cur.execute(
                        "SELECT atttypid::int FROM pg_attribute WHERE attrelid = %s::regclass "
                        "AND attname = %s", (t, c)).fetchone()[0] for c in cols] if binary else []
                    fmt = " WITH (FORMAT BINARY)" if binary else ""
                    with cur.copy(f"COPY {t} ({', '.join(cols)}) FROM STDIN{fmt}") as cp:
                        if binary:
                            cp.set_types(types)
                        for r in rows:
                            cp.write_row(r)
        return time.perf_counter() - t0
    finally:
        lite.close()
        engine.dispose()


def per_rank_processes(url: str, job: Path) -> float:
    open_db(url).dispose()
    dirs = sorted(p for p in job.iterdir() if p.is_dir())

    def run() -> None:
        procs = [
            subprocess.Popen([sys.executable, "-m", "profdb.cli.main", "ingest", "--db", url, "--run", "bench", str(d)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            for d in dirs
        ]
        for p in procs:
            _, err = p.communicate()
            if p.returncode != 0:
                raise SystemExit(f"an ingest process failed: {err}")

    return timed(run)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--dispatches", type=int, default=100_000, help="kernel dispatches per rank")
    ap.add_argument("--pg-url", default=None, help="server to use (default: $PROFDB_TEST_PG_URL or one started here)")
    ap.add_argument("--json", action="store_true", help="print the results as one JSON object")
    ap.add_argument("--only", action="append", help="only these cases (repeatable), e.g. postgresql_copy")
    args = ap.parse_args()
    if args.pg_url:
        os.environ["PROFDB_TEST_PG_URL"] = args.pg_url
    try:
        server: PgServer = get_server()
    except PgUnavailable as e:
        raise SystemExit(f"PostgreSQL unavailable: {e}")
    results: dict[str, Any] = {"ranks": args.ranks, "dispatches_per_rank": args.dispatches}
    with tempfile.TemporaryDirectory(prefix="profdb-bench-") as tmp:
        work = Path(tmp)
        job = work / "job"
        write_rocprof_run(job, ranks=args.ranks, dispatches=args.dispatches, names=400)
        results["input_mb"] = round(sum(f.stat().st_size for f in job.rglob("*") if f.is_file()) / 1e6, 1)
        made: list[str] = []

        def pg() -> str:
            name, url = server.create_database("profdb_bench")
            made.append(name)
            return url

        try:
            cases: list[tuple[str, Callable[[], str], Callable[[str, Path], float]]] = [
                ("sqlite", lambda: f"sqlite:///{work / f'{time.monotonic_ns()}.db'}", in_process),
                ("postgresql_copy", pg, in_process),
                ("postgresql_executemany", pg, in_process),
                ("postgresql_copy_no_fact_fks", pg, without_fact_fks),
                ("copy_only_text_fks", pg, lambda u, j: copy_only(u, j, fks=True, binary=False)),
                ("copy_only_text_no_fks", pg, lambda u, j: copy_only(u, j, fks=False, binary=False)),
                ("copy_only_binary_fks", pg, lambda u, j: copy_only(u, j, fks=True, binary=True)),
                ("copy_only_binary_no_fks", pg, lambda u, j: copy_only(u, j, fks=False, binary=True)),
                ("sqlite_parallel_processes", lambda: f"sqlite:///{work / f'{time.monotonic_ns()}.db'}", per_rank_processes),
                ("postgresql_parallel_processes", pg, per_rank_processes),
            ]
            for label, make, how in cases:
                if args.only and label not in args.only:
                    continue
                url = make()
                real = bulk.uses_copy
                if label == "postgresql_executemany":
                    bulk.uses_copy = lambda conn: False  # type: ignore[assignment]
                try:
                    seconds = how(url, job)
                finally:
                    bulk.uses_copy = real  # type: ignore[assignment]
                rows = stored_rows(url)
                results[label] = {"seconds": round(seconds, 2), "rows": rows, "rows_per_s": round(rows / seconds)}
                if not args.json:
                    print(f"{label:32s} {rows:>10,} rows  {seconds:7.2f} s  {rows / seconds:>10,.0f} rows/s", flush=True)
        finally:
            for name in made:
                server.drop_database(name)
            server.stop()
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        rate = {k: v["rows_per_s"] for k, v in results.items() if isinstance(v, dict)}
        if "sqlite" in rate and "postgresql_copy" in rate:
            print(f"PostgreSQL (COPY) / SQLite, one process: {rate['postgresql_copy'] / rate['sqlite']:.2f}x")
        if "postgresql_copy" in rate and "postgresql_copy_no_fact_fks" in rate:
            print(f"COPY without / with the fact tables' foreign keys: "
                  f"{rate['postgresql_copy_no_fact_fks'] / rate['postgresql_copy']:.2f}x")
        if "sqlite_parallel_processes" in rate and "postgresql_parallel_processes" in rate:
            print(f"per-rank processes, PostgreSQL / SQLite: "
                  f"{rate['postgresql_parallel_processes'] / rate['sqlite_parallel_processes']:.2f}x")


if __name__ == "__main__":
    main()
