"""PostgreSQL ingest rows/s: the load stage per node (binary COPY, no fact-table foreign keys) against
what it replaced, one node and four at once, whole `profdb ingest` runs, and a 1,024-rank scale row.

    python benchmarks/pg_ingest.py [--ranks 4] [--dispatches 100000] [--pg-url URL] [--only CASE]... [--json]
    python benchmarks/pg_ingest.py --only scale [--scale-ranks 64] [--scale-dispatches 20000]
    python benchmarks/pg_ingest.py --only analysis_nodes [--analysis-nodes 16] [--analysis-ranks 64]

Rows are activity + counter rows (one counter row per ten kernel dispatches, as rocprofv3's
counter_collection with one counter), every count checked against what was generated.

Load stage (``load_*``): what one ingesting node's writer and the server do once rows are parsed, i.e.
``store.bulk.copy_rows`` as ``bulk.Writer`` calls it (20,000-row batches, the once-per-transaction id
checks, name interning on the side connection), timed from the node's transaction start to its commit
and the summarization of the BRIN block ranges it filled (bulk.summarize_fact_ranges, as an ingest does);
the rows are generated in memory beforehand (no parsing). Each case uses a fresh database:
- ``load_binary``: today (binary COPY into the head schema's tables: no foreign keys, 0006; one BRIN index
  per fact table and no primary key, 0009);
- ``load_text``: text COPY, same tables;
- ``load_text_fks`` / ``load_binary_fks``: the fact tables' seven foreign keys added back (the schema
  before 0005), text COPY being what ingest used before;
- ``load_binary_4nodes`` / ``load_text_fks_4nodes``: four processes, each a node with its share of the
  ranks, loading one run at once (started together); rows/s summed and per node.
Whole ingests (``ingest_*``): `profdb ingest` of a generated rocprofv3 CSV run (parsing included; the
parse is Python in worker processes and is the bound there): in this process, SQLite and PostgreSQL,
and one `profdb ingest` process per rank at once.
``scale``: a 1,024-rank x 200,000-dispatch job. Each node of such a job (8 ranks, 1.76M rows) loads its
own ranks; ``--scale-ranks`` ranks (default 64 = 8 nodes' worth) of ``--scale-dispatches`` are loaded by
four concurrent nodes, then per-node time, whole-job time at the measured aggregate rate, and store bytes
per row (tables + indexes) are extrapolated. ``scale_sqlite``: one node of that job ingesting its 8
ranks (whole ingest, parsing included) into an SQLite file of its own. ``analysis_nodes``: 16 nodes ingest
their share of a 64-rank run rich in collectives at once (whole ingests), the run's analysis kept after their
commits (``timeline.keep_analysis``) against inside them under the run's lock (before), and the 1,024-rank
estimate of each. The PostgreSQL server is ``--pg-url`` /
$PROFDB_TEST_PG_URL (a role that may CREATE DATABASE), or one started for the run (tests/pg_fixtures.py)."""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from pg_fixtures import PgServer, PgUnavailable, get_server, kernel_names, write_rocprof_run  # noqa: E402
from sqlalchemy import create_engine, text  # noqa: E402

from profdb.store import bulk  # noqa: E402
from profdb.store.batches import SHAPE_TABLES  # noqa: E402
from profdb.store.db import open_db  # noqa: E402
from profdb.store.ingest import ingest_paths  # noqa: E402

COUNTER_EVERY = 10
NAMES = 400


def stored_rows(url: str) -> int:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(text("select (select count(*) from activity) + (select count(*) from counter)"))
                       .scalar_one())
    finally:
        engine.dispose()


def store_bytes(url: str) -> int:
    """Bytes of the fact tables with their indexes and TOAST (PostgreSQL)."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(text(
                "select pg_total_relation_size('activity') + pg_total_relation_size('counter')")).scalar_one())
    finally:
        engine.dispose()


def add_fact_fks(url: str) -> None:
    """The schema before 0006_pg_fact_keys: the fact tables' foreign keys back (this benchmark's own
    database only)."""
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            for table, refs in bulk.FACT_REFS.items():
                for col, ref in refs.items():
                    cascade = " ON DELETE CASCADE" if ref != "name" else ""
                    conn.execute(text(f"ALTER TABLE {table} ADD CONSTRAINT fk_{table}_{col}_{ref} FOREIGN KEY "
                                      f"({col}) REFERENCES {ref} (id){cascade}"))
    finally:
        engine.dispose()


# --------------------------------------------------------------------------- the load stage, per node


def node_rows(global_rank: int, dispatches: int, seed: int) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """One rank's kernel rows and counter rows, as a worker hands them to bulk.Writer.insert (rank,
    source and name ids are placeholders, filled in by the node): ids 0 and 1, name index in name_id."""
    rng = random.Random(seed * 100_003 + global_rank)
    acts: list[tuple[Any, ...]] = []
    ctrs: list[tuple[Any, ...]] = []
    t = 1_550_000_000_000_000 + global_rank * 1000
    for i in range(1, dispatches + 1):
        name = rng.randrange(NAMES)
        dur = rng.randrange(1_000, 2_000_000)
        t += rng.randrange(100, 5_000)
        # (launch_id and origin_id 0: the rank's one launch shape and origin, launch_shape(), filled in by the node)
        acts.append((0, 1, "kernel", "compute", name, t, dur, i, 0, 0, None))
        if i % COUNTER_EVERY == 0:
            ctrs.append((0, 1, name, NAMES, i, float(rng.randrange(1, 10_000)), 1, None, None))
        t += dur
    return acts, ctrs


def launch_shape(global_rank: int) -> dict[str, tuple[Any, ...]]:
    """The launch shape and origin of every dispatch of a rank (batches.SHAPE_TABLES: "launch": grid, block;
    "origin": device, stream, pid, tid)."""
    return {"launch": (65536, 1, 1, 256, 1, 1), "origin": (4 + global_rank % 8, 1, 4000 + global_rank, 4000 + global_rank)}


def backend_cpu(pid: int) -> float | None:
    """CPU seconds a server backend has used (a server on this machine; None elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load_node(
    url: str, run: str, ranks: list[int], dispatches: int, fmt: str, go: str
) -> tuple[float, int, float, float | None]:
    """One node: its ranks' rows generated, then one transaction that creates its rank and source rows and
    interns the names on the side connection (untimed: the rows need their ids), and, timed from the
    start signal (the file ``go``) to its commit, COPYs every row in Writer's 20,000-row batches.
    Signals ``go + '.ready.N'`` when it waits. Returns (seconds, rows, this process's CPU seconds, its
    server backend's CPU seconds or None): CPU per row does not depend on how busy the machine is."""
    bulk.COPY_FORMAT = fmt
    names = kernel_names(NAMES) + ["SQ_WAVES"]
    data = [(g, *node_rows(g, dispatches, seed=1)) for g in ranks]
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            conn.begin()
            run_id = int(conn.execute(text("SELECT id FROM run WHERE name = :n FOR KEY SHARE"), {"n": run})
                         .scalar_one())
            side = bulk.names_connection(conn)
            assert side is not None
            try:
                ids = {v: i for i, v in bulk.intern_names(conn, names, side)}
                shape_ids = {t: bulk.intern_shapes(conn, t, [launch_shape(g)[t] for g in ranks], side)
                             for t in SHAPE_TABLES}
            finally:
                side.close()
            name_id = [ids[n] for n in names]
            batches: list[tuple[str, tuple[str, ...], list[tuple[Any, ...]]]] = []
            for g, acts, ctrs in data:
                rank_id = int(conn.execute(text(
                    "INSERT INTO rank (run_id, global_rank) VALUES (:r, :g) RETURNING id"), {"r": run_id, "g": g})
                    .scalar_one())
                source_id = int(conn.execute(text(
                    "INSERT INTO source_file (run_id, rank_id, path, content_hash, size_bytes, format, content_kind, "
                    "rows, time_base_ns, ingested_at) VALUES (:r, :k, :p, :s, 0, 'rocprof_csv', 'kernel_trace', "
                    ":n, 0, now()) RETURNING id"),
                    {"r": run_id, "k": rank_id, "p": f"rank{g}/kernel_trace.csv", "s": f"{g:064d}",
                     "n": len(acts) + len(ctrs)}).scalar_one())
                for table, rows, cols in (("activity", acts, bulk.Writer.ACTIVITY_COLS),
                                          ("counter", ctrs, bulk.Writer.COUNTER_COLS)):
                    ni = [cols.index(c) for c in bulk.FACT_REFS[table] if c.endswith("name_id")]
                    shaped = [(cols.index(f"{t}_id"), t) for t in SHAPE_TABLES if f"{t}_id" in cols]
                    out = []
                    for r in rows:  # (a parsing worker's job: the ids into the row)
                        r2 = list(r)
                        r2[0], r2[1] = rank_id, source_id
                        for i in ni:
                            r2[i] = name_id[r2[i]]
                        for i, t in shaped:
                            r2[i] = shape_ids[t][launch_shape(g)[t]]
                        out.append(tuple(r2))
                    batches += [(table, cols, out[at:at + 20_000]) for at in range(0, len(out), 20_000)]
            del data
            Path(f"{go}.ready.{os.getpid()}").touch()
            while not os.path.exists(go):
                time.sleep(0.002)
            backend = int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())
            t0, c0, s0 = time.perf_counter(), time.process_time(), backend_cpu(backend)
            for table, cols, batch in batches:
                bulk.insert_rows(conn, table, cols, batch)
            conn.commit()
            bulk.summarize_fact_ranges(conn)  # (after the commit, as bulk.load_transaction does; timed)
        t1, c1, s1 = time.perf_counter(), time.process_time(), backend_cpu(backend)
        server = s1 - s0 if s0 is not None and s1 is not None else None
        return t1 - t0, sum(len(b) for _, _, b in batches), c1 - c0, server
    finally:
        engine.dispose()


def _node_proc(args: tuple[str, str, list[int], int, str, str]) -> tuple[float, int, float, float | None]:
    return load_node(*args)


def node_rate(rows: int, seconds: float) -> float:
    """A node's rows per second from ``load_nodes``' figures, whose seconds are rounded to 0.01 (a tiny load
    can take "0.0 s")."""
    return rows / max(seconds, 0.005)


def load_nodes(url: str, nodes: list[list[int]], dispatches: int, fmt: str, tmp: Path) -> dict[str, Any]:
    """``nodes`` (each a list of global ranks) loading one run at once, in processes released together
    once all are ready. Returns the wall time from the release to the last commit, per-node times, rows."""
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO run (name, created_at) VALUES ('bench', now())"))
    engine.dispose()
    go = tmp / f"go-{time.monotonic_ns()}"
    ctx = mp.get_context("spawn")  # (fresh processes, as separate nodes would be)
    with ctx.Pool(len(nodes)) as pool:
        pending = pool.map_async(_node_proc, [(url, "bench", ranks, dispatches, fmt, str(go)) for ranks in nodes])
        while len(list(tmp.glob(f"{go.name}.ready.*"))) < len(nodes):
            if pending.ready():
                pending.get()  # (a node failed before it was ready: raise its error)
            time.sleep(0.01)
        t0 = time.perf_counter()
        go.touch()
        results = pending.get()
        wall = time.perf_counter() - t0
    rows = sum(r[1] for r in results)
    out: dict[str, Any] = {"seconds": round(wall, 2), "rows": rows, "node_seconds": [round(r[0], 2) for r in results],
                           "node_rows": [r[1] for r in results],
                           "client_cpu_us_per_row": round(sum(r[2] for r in results) / rows * 1e6, 2)}
    if all(r[3] is not None for r in results):
        out["server_cpu_us_per_row"] = round(sum(r[3] or 0 for r in results) / rows * 1e6, 2)
    return out


# --------------------------------------------------------------------------- whole ingests


def timed(fn: Callable[[], Any]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def in_process(url: str, job: Path) -> float:
    open_db(url).dispose()  # migrations are not ingest time
    return timed(lambda: ingest_paths([job], url, run="bench"))


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


# --------------------------------------------------------------------------- main


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--dispatches", type=int, default=100_000, help="kernel dispatches per rank")
    ap.add_argument("--scale-ranks", type=int, default=64, help="ranks generated for the scale row")
    ap.add_argument("--scale-dispatches", type=int, default=20_000, help="dispatches per rank for the scale row")
    ap.add_argument("--analysis-ranks", type=int, default=64, help="ranks of the analysis_nodes case's run")
    ap.add_argument("--analysis-nodes", type=int, default=16, help="nodes ingesting them at once (analysis_nodes)")
    ap.add_argument("--analysis-steps", type=int, default=4000, help="steps (one all-reduce each) per rank")
    ap.add_argument("--pg-url", default=None, help="server to use (default: $PROFDB_TEST_PG_URL or one started here)")
    ap.add_argument("--json", action="store_true", help="print the results as one JSON object")
    ap.add_argument("--only", action="append", help="only these cases (repeatable), e.g. load_binary")
    args = ap.parse_args()
    if args.pg_url:
        os.environ["PROFDB_TEST_PG_URL"] = args.pg_url
    try:
        server: PgServer = get_server()
    except PgUnavailable as e:
        raise SystemExit(f"PostgreSQL unavailable: {e}") from None
    results: dict[str, Any] = {"ranks": args.ranks, "dispatches_per_rank": args.dispatches}
    rank_list = list(range(args.ranks))
    quarters = [rank_list[i::4] for i in range(4) if rank_list[i::4]]

    def want(label: str) -> bool:
        return not args.only or label in args.only

    def show(label: str, r: dict[str, Any]) -> None:
        results[label] = r
        if not args.json:
            extra = ""
            if "node_seconds" in r:
                per = [node_rate(n, s) for n, s in zip(r["node_rows"], r["node_seconds"])]
                if len(per) > 1:
                    extra = f"  per node {min(per):,.0f}-{max(per):,.0f} rows/s"
                extra += f"  CPU us/row: client {r['client_cpu_us_per_row']}, server {r.get('server_cpu_us_per_row')}"
            elif "client_cpu_s" in r:
                extra = f"  client CPU {r['client_cpu_s']} s"
            print(f"{label:30s} {r['rows']:>11,} rows {r['seconds']:7.2f} s {r['rows_per_s']:>10,} rows/s{extra}",
                  flush=True)

    with tempfile.TemporaryDirectory(prefix="profdb-bench-") as tmp:
        work = Path(tmp)
        made: list[str] = []

        def pg(fks: bool = False) -> str:
            name, url = server.create_database("profdb_bench")
            made.append(name)
            open_db(url).dispose()
            if fks:
                add_fact_fks(url)
            return str(url)

        expected = args.ranks * (args.dispatches + args.dispatches // COUNTER_EVERY)
        try:
            for label, fmt, fks in (("load_binary", "binary", False), ("load_text", "text", False),
                                    ("load_binary_fks", "binary", True), ("load_text_fks", "text", True)):
                if want(label):
                    url = pg(fks)
                    r = load_nodes(url, [rank_list], args.dispatches, fmt, work)
                    assert r["rows"] == stored_rows(url) == expected, (r, expected)
                    r["rows_per_s"] = round(node_rate(r["rows"], r["seconds"]))
                    show(label, r)
            for label, fmt, fks in (("load_binary_4nodes", "binary", False), ("load_text_fks_4nodes", "text", True)):
                if want(label):
                    url = pg(fks)
                    r = load_nodes(url, quarters, args.dispatches, fmt, work)
                    assert r["rows"] == stored_rows(url) == expected, (r, expected)  # no row lost
                    r["rows_per_s"] = round(node_rate(r["rows"], r["seconds"]))
                    show(label, r)
            if any(want(c) for c in ("ingest_sqlite", "ingest_pg", "ingest_pg_text", "ingest_pg_fks",
                                     "ingest_pg_processes")):
                job = work / "job"
                write_rocprof_run(job, ranks=args.ranks, dispatches=args.dispatches, names=NAMES)
                results["input_mb"] = round(sum(f.stat().st_size for f in job.rglob("*") if f.is_file()) / 1e6, 1)
                whole: list[tuple[str, Callable[[], str], Callable[[str, Path], float], str]] = [
                    ("ingest_sqlite", lambda: f"sqlite:///{work / f'{time.monotonic_ns()}.db'}", in_process, "binary"),
                    ("ingest_pg", pg, in_process, "binary"),
                    ("ingest_pg_text", pg, in_process, "text"),
                    ("ingest_pg_fks", lambda: pg(True), in_process, "text"),
                    ("ingest_pg_processes", pg, per_rank_processes, "binary"),
                ]
                for label, make, how, fmt in whole:
                    if not want(label):
                        continue
                    url = make()
                    bulk.COPY_FORMAT = fmt
                    cpu = os.times()
                    try:
                        seconds = how(url, job)
                    finally:
                        bulk.COPY_FORMAT = "binary"
                    after = os.times()
                    rows = stored_rows(url)
                    assert rows == expected, (label, rows, expected)
                    cpu_s = (after.user - cpu.user) + (after.system - cpu.system) + (
                        after.children_user - cpu.children_user) + (after.children_system - cpu.children_system)
                    show(label, {"seconds": round(seconds, 2), "rows": rows, "rows_per_s": round(rows / seconds),
                                 "client_cpu_s": round(cpu_s, 2)})
            if want("scale"):
                scale(args, pg, work, results, show)
            if want("scale_sqlite"):
                scale_sqlite(args, work, results, show)
            if want("analysis_nodes"):
                analysis_nodes(args, pg, work, results)
        finally:
            for name in made:
                server.drop_database(name)
            server.stop()
    if args.json:
        print(json.dumps(results, indent=2))


def scale(args: argparse.Namespace, pg: Callable[[], str], work: Path, results: dict[str, Any],
          show: Callable[[str, dict[str, Any]], None]) -> None:
    """The 1,024-rank x 200,000-dispatch row (see the module's docstring)."""
    ranks = list(range(args.scale_ranks))
    url = pg()
    r = load_nodes(url, [ranks[i::4] for i in range(4)], args.scale_dispatches, "binary", work)
    expected = len(ranks) * (args.scale_dispatches + args.scale_dispatches // COUNTER_EVERY)
    assert r["rows"] == stored_rows(url) == expected, (r, expected)
    r["rows_per_s"] = round(node_rate(r["rows"], r["seconds"]))
    show("scale_load_4nodes", r)
    per_row = store_bytes(url) / r["rows"]
    rate = sum(node_rate(n, s) for n, s in zip(r["node_rows"], r["node_seconds"])) / len(r["node_rows"])
    job_rows = 1024 * (200_000 + 200_000 // COUNTER_EVERY)
    node_rows = 8 * (200_000 + 200_000 // COUNTER_EVERY)
    est = {
        "job_rows": job_rows,
        "rows_per_node_8_ranks": node_rows,
        "node_seconds_at_measured_node_rate": round(node_rows / rate, 1),
        "job_minutes_at_measured_aggregate_rate": round(job_rows / r["rows_per_s"] / 60, 1),
        "store_bytes_per_row": round(per_row, 1),
        "job_store_gb": round(job_rows * per_row / 1e9, 1),
    }
    if "server_cpu_us_per_row" in r:  # what the job costs the server, however many cores it has
        est["job_server_cpu_minutes"] = round(job_rows * r["server_cpu_us_per_row"] / 1e6 / 60, 1)
    results["scale_1024x200k"] = est
    if not args.json:
        print("scale, 1,024 ranks x 200,000 dispatches (+10% counter rows) = "
              f"{job_rows:,} rows; one node (8 ranks) = {node_rows:,} rows")
        print(f"  per node: {est['node_seconds_at_measured_node_rate']} s at the measured per-node rate "
              f"({rate:,.0f} rows/s, four nodes sharing this server)")
        print(f"  whole job through this one server: {est['job_minutes_at_measured_aggregate_rate']} min at "
              f"{r['rows_per_s']:,} rows/s aggregate")
        if "job_server_cpu_minutes" in est:
            print(f"  server CPU for the whole job: {est['job_server_cpu_minutes']} core-minutes "
                  f"({r['server_cpu_us_per_row']} us per row)")
        print(f"  store: {est['store_bytes_per_row']} bytes per row (tables + indexes) -> {est['job_store_gb']} GB")


# --------------------------------------------------------------------------- the run's analysis, nodes at once


#: one node of ``analysis_nodes``: a process of its own (it forks parsing workers for a large share, which a
#: multiprocessing pool's daemonic processes may not), started with the others by the file ``go``. Its whole
#: ``ingest_paths`` of its rank folders; ``in_transaction`` "1": the run's analysis kept inside the ingest's
#: transaction under the run's lock, as every ingest did before ``timeline.keep_analysis`` (the ingest's own
#: code path, chosen by ``timeline.analysed_after_commit``). Prints when it ended, on the wall clock.
_ANALYSIS_NODE = """
import os, sys, time
from pathlib import Path
from profdb.store import timeline
from profdb.store.ingest import ingest_paths
url, in_transaction, go, *folders = sys.argv[1:]
if in_transaction == "1":
    timeline.analysed_after_commit = lambda conn: False
Path(f"{go}.ready.{os.getpid()}").touch()
while not os.path.exists(go):
    time.sleep(0.002)
ingest_paths([Path(f) for f in folders], url, run="job")
print(time.time())
"""


def analysis_nodes(args: argparse.Namespace, pg: Callable[[], str], work: Path, results: dict[str, Any]) -> None:
    """``--analysis-nodes`` nodes ingest their share of a run rich in collectives (tests/gen_collective_run: one
    all-reduce per step and rank) at the same moment, each a whole ingest, the run's analysis kept after the
    commits (today) and inside them (before); then one analysis of the whole run, and the 1,024-rank
    estimate. Each way, the kept analysis is checked to be current and of every rank."""
    from gen_collective_run import generate

    from profdb.store import findings, timeline
    from profdb.store.scope import resolve_run

    ranks, nodes = args.analysis_ranks, args.analysis_nodes
    gen = generate(work / "collectives", nodes=max(1, ranks // 8), gpus_per_node=min(8, ranks), steps=args.analysis_steps,
                   late_rank=ranks // 2 + 1)
    folders = [str(p) for p in sorted(gen.root.glob("rank*"))]
    shares = [folders[i::nodes] for i in range(nodes)]
    out: dict[str, Any] = {"ranks": len(folders), "nodes": nodes, "steps": args.analysis_steps}
    for label, in_transaction in (("after_commit", False), ("in_transaction", True)):
        url = pg()
        go = work / f"go-{time.monotonic_ns()}"
        procs = [subprocess.Popen([sys.executable, "-c", _ANALYSIS_NODE, url, "1" if in_transaction else "0", str(go),
                                   *share], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for share in shares]
        while len(list(work.glob(f"{go.name}.ready.*"))) < nodes:
            if any(p.poll() is not None for p in procs):
                break  # (a node failed before it was ready: reported below)
            time.sleep(0.01)
        t0 = time.time()
        go.touch()
        ends = []
        for p in procs:
            stdout, stderr = p.communicate()
            if p.returncode != 0:
                raise SystemExit(f"an analysis_nodes node failed: {stderr[-2000:]}")
            ends.append(float(stdout.split()[-1]) - t0)
        ends.sort()
        engine = open_db(url)
        try:
            with engine.connect() as conn:
                scope = resolve_run(conn, "job")
                kept = findings.stored_findings(conn, scope)
                calls = int(conn.execute(text("select count(*) from collective_call")).scalar_one())
            assert kept is not None and len(kept.ranks) == len(folders), (label, kept)
            if label == "after_commit":
                with engine.begin() as conn:
                    t = time.perf_counter()
                    timeline.store_analysis(conn, "job")
                    out["one_analysis_s"] = round(time.perf_counter() - t, 2)
                out["calls"] = calls
        finally:
            engine.dispose()
        out[label] = {"last_node_s": round(ends[-1], 2), "first_node_s": round(ends[0], 2)}
        if not args.json:
            print(f"analysis, {nodes} nodes at once, kept {label.replace('_', ' ')}: nodes ended "
                  f"{ends[0]:.1f}-{ends[-1]:.1f} s after the start; kept analysis current, {len(folders)} ranks",
                  flush=True)
    t1024 = out["one_analysis_s"] * 1024 / len(folders)
    out["estimate_1024_ranks_128_nodes"] = {
        "one_analysis_s": round(t1024, 1),
        # before: each node analysed the ranks committed before it, in turn (sum over k of k/128 of the run)
        "in_transaction_turns_s": round(t1024 * sum(k / 128 for k in range(1, 129)), 1),
        # today: the node holding the lock analyses once more for the commits its first pass missed
        "after_commit_s": round(2 * t1024, 1),
    }
    out["ratio_after_commit_in_transaction"] = round(out["after_commit"]["last_node_s"] /
                                                     out["in_transaction"]["last_node_s"], 3)
    results["analysis_nodes"] = out
    if not args.json:
        e = out["estimate_1024_ranks_128_nodes"]
        print(f"  one analysis of the run: {out['one_analysis_s']} s ({out['calls']:,} collective calls); last node "
              f"after commit / in transaction: {out['ratio_after_commit_in_transaction']}")
        print(f"  1,024 ranks of as many calls each, 128 nodes at once: one analysis ~{e['one_analysis_s']} s; the "
              f"job's analyses ~{e['after_commit_s']} s after commit, ~{e['in_transaction_turns_s']} s in turns (before)")


def scale_sqlite(args: argparse.Namespace, work: Path, results: dict[str, Any],
                 show: Callable[[str, dict[str, Any]], None]) -> None:
    """The scale row for SQLite, where each node ingests its own 8 ranks into a file of its own (to merge
    or export later): one node's 8 ranks of ``--scale-dispatches`` as rocprofv3 CSV, one whole
    `profdb ingest` (parsing included), extrapolated to 200,000 dispatches per rank."""
    job = work / "scale-sqlite"
    write_rocprof_run(job, ranks=8, dispatches=args.scale_dispatches, names=NAMES)
    store = work / "scale-node.db"
    cpu = os.times()
    seconds = timed(lambda: ingest_paths([job], f"sqlite:///{store}", run="bench"))
    after = os.times()
    rows = stored_rows(f"sqlite:///{store}")
    expected = 8 * (args.scale_dispatches + args.scale_dispatches // COUNTER_EVERY)
    assert rows == expected, (rows, expected)
    cpu_s = sum(getattr(after, f) - getattr(cpu, f) for f in ("user", "system", "children_user", "children_system"))
    show("scale_sqlite_node", {"seconds": round(seconds, 2), "rows": rows, "rows_per_s": round(rows / seconds),
                               "client_cpu_s": round(cpu_s, 2)})
    per_row = store.stat().st_size / rows
    node_rows = 8 * (200_000 + 200_000 // COUNTER_EVERY)
    est = {"rows_per_node_8_ranks": node_rows, "node_seconds": round(node_rows / (rows / seconds), 1),
           "node_cpu_seconds": round(node_rows * cpu_s / rows, 1), "store_bytes_per_row": round(per_row, 1),
           "node_store_gb": round(node_rows * per_row / 1e9, 2),
           "job_store_gb": round(1024 / 8 * node_rows * per_row / 1e9, 1)}
    results["scale_sqlite_1024x200k"] = est
    if not args.json:
        print(f"  SQLite, one node (8 ranks, {node_rows:,} rows) into its own file: {est['node_seconds']} s "
              f"({est['node_cpu_seconds']} CPU-s), {est['store_bytes_per_row']} bytes per row -> "
              f"{est['node_store_gb']} GB per node, {est['job_store_gb']} GB for the job's 128 files")


if __name__ == "__main__":
    main()
