"""The bulk-load path of ingest (worker processes parse, one writer inserts; fact-table indexes
rebuilt at the end; foreign key checks off during the load) stores exactly what the plain in-process
path stores, and a failure in a worker still leaves the store byte for byte as it was."""

from __future__ import annotations

import csv
import importlib.util
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from profdb.store import bulk, ingest, ingest_load, ingest_workers
from profdb.store.readers import rocprof_csv
from profdb.store.errors import InputError
from profdb.store.identity import IdentityFlags

from conftest import file_bytes, sql

ROOT = Path(__file__).resolve().parents[1]


def _generate() -> Any:
    spec = importlib.util.spec_from_file_location("bench_generate", ROOT / "benchmarks" / "generate.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    gen = _generate()
    root = tmp_path_factory.mktemp("inputs")
    gen.generate_csv(root / "csv", dispatches=3000, ranks=4, hosts=2, counters=2)
    gen.generate_kineto(root / "kineto", ranks=2, size_mb=0.5)
    return root


def _bulk(monkeypatch: pytest.MonkeyPatch, on: bool) -> None:
    monkeypatch.setenv(ingest_workers.ENV_WORKERS, "2" if on else "0")
    monkeypatch.setattr(bulk, "DEFER_INDEXES_MIN_BYTES", 0 if on else 1 << 62)


def _content(db: Path) -> dict[str, Any]:
    """Everything stored, with ids replaced by what they stand for (ids differ between paths:
    names are interned in the order workers meet them)."""
    rank = "(select global_rank from rank where id = {}.rank_id)"
    src = "(select path from source_file where id = {}.source_id)"
    return {
        "activity": sorted(sql(db, f"select {rank.format('a')}, {src.format('a')}, a.kind, a.category, n.value, "
                                   "a.start_ns, a.duration_ns, o.device, o.stream, a.correlation, o.pid, o.tid, "
                                   "l.grid_x, l.grid_y, l.grid_z, l.block_x, l.block_y, l.block_z, a.args "
                                   "from activity a join name n on n.id = a.name_id "
                                   "join launch l on l.id = a.launch_id join origin o on o.id = a.origin_id")),
        "counter": sorted(sql(db, f"select {rank.format('c')}, {src.format('c')}, k.value, n.value, c.dispatch_id, "
                                  "c.value, c.samples, c.min_value, c.max_value from counter c "
                                  "join name k on k.id = c.kernel_name_id join name n on n.id = c.counter_name_id")),
        "summary": sorted(sql(db, "select global_rank, kind, category, name, calls, total_ns, min_ns, max_ns from summary_v")),
        "sumsq": sorted(round(r[0]) for r in sql(db, "select sum_sq_ns from summary")),
        "step": sorted(sql(db, "select global_rank, step, start_ns, duration_ns from step_v")),
        "source": sorted(sql(db, "select global_rank, path, format, content_kind, rows from source_v")),
        "rank": sorted(sql(db, "select run, hostname, global_rank, local_rank, pid from rank_v")),
        "indexes": sorted(sql(db, "select name, sql from sqlite_master where type = 'index'")),
        "names": sorted(r[0] for r in sql(db, "select value from name")),
    }


def test_bulk_path_stores_what_the_plain_path_stores(
    inputs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stores = {}
    for on in (False, True):
        _bulk(monkeypatch, on)
        db = tmp_path / f"bulk{on}.db"
        ingest.ingest_paths(sorted((inputs / "csv").glob("rank*")), str(db), run="csv")
        ingest.ingest_paths(sorted((inputs / "kineto").glob("rank-*.json")), str(db), run="kineto")
        stores[on] = _content(db)
    plain, bulk = stores[False], stores[True]
    assert len(plain["activity"]) > 4000 and len(plain["counter"]) == 6000 and plain["step"]
    for key in plain:
        assert bulk[key] == plain[key], key
    # the foreign key checks are back on for whoever uses the store next
    assert sql(tmp_path / "bulkTrue.db", "pragma foreign_key_check") == []


@pytest.mark.parametrize("workers", [True, False])
def test_bounded_writer_and_worker_tables_store_the_same(
    inputs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: bool
) -> None:
    """The launch shapes the writer and the workers keep (bulk.LAUNCHES_KEPT) and the complete ranks'
    summary rows the writer holds (bulk.SUMMARY_ROWS) are bounded; with tiny bounds (shapes looked
    up again in the store, summaries written a few ranks at a time, a second run adding to stored
    shapes, files read in many batches) the store holds what it holds with the usual ones."""
    stores = {}
    for small in (False, True):
        _bulk(monkeypatch, workers)
        if small:
            monkeypatch.setattr(bulk, "LAUNCHES_KEPT", 3)
            monkeypatch.setattr(ingest_workers, "LAUNCHES_KEPT", 3)
            monkeypatch.setattr(bulk, "SUMMARY_ROWS", 7)
            # several batches per file: a worker that let its shapes go asks the writer for known ones
            monkeypatch.setattr(ingest_workers, "BATCH", 100)
            monkeypatch.setattr(rocprof_csv, "BLOCK", 16384)
        db = tmp_path / f"small{small}.db"
        for run in ("a", "b"):
            ingest.ingest_paths(sorted((inputs / "csv").glob("rank*")), str(db), run=run)
        ingest.ingest_paths(sorted((inputs / "kineto").glob("rank-*.json")), str(db), run="kineto")
        stores[small] = _content(db) | {"launch": sorted(sql(db, "select key from launch"))}
    assert len(stores[False]["launch"]) > 20 and len(stores[False]["summary"]) > 2 * 7
    for key in stores[False]:
        assert stores[True][key] == stores[False][key], key


def test_worker_failure_rolls_back_byte_for_byte(inputs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "store.db"
    _bulk(monkeypatch, False)
    ingest.ingest_paths(sorted((inputs / "kineto").glob("rank-*.json")), str(db), run="kineto")
    before = file_bytes(db)
    run = shutil.copytree(inputs / "csv", tmp_path / "csv")
    bad = next((run / "rank0003").glob("*/*_kernel_trace.csv"))
    lines = bad.read_text().splitlines()
    lines[-5] = lines[-5].replace(",1,1,1\n", "").rsplit(",", 3)[0] + ",x,1,1"  # a damaged number late in the file
    bad.write_text("\n".join(lines) + "\n")
    _bulk(monkeypatch, True)
    with pytest.raises(InputError, match=rf"{bad.name}: line {len(lines) - 4}"):
        ingest.ingest_paths(sorted(run.glob("rank*")), str(db), run="csv")
    assert file_bytes(db) == before
    assert {r[0] for r in sql(db, "select name from sqlite_master where type = 'index'")} >= {
        "ix_collective_call_match", "ix_fact_span_rank_id", "ix_fact_span_source_id"}


def test_worker_count(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ingest_workers.ENV_WORKERS, raising=False)
    monkeypatch.setattr(ingest_workers, "cores", lambda: 2)
    assert ingest_workers.worker_count(1 << 19, 10) == 0  # small inputs stay in-process
    assert ingest_workers.worker_count(2 << 20, 10) == 1  # one worker parses what the writer inserts
    assert ingest_workers.worker_count(4 << 20, 10) == 2  # one per core
    assert ingest_workers.worker_count(1 << 40, 1) == 1  # one large file: it parses while the writer inserts
    monkeypatch.setenv(ingest_workers.ENV_WORKERS, "3")
    assert ingest_workers.worker_count(10, 2) == 2
    monkeypatch.setenv(ingest_workers.ENV_WORKERS, "0")
    assert ingest_workers.worker_count(1 << 40, 10) == 0



def test_gzip_inputs_count_uncompressed_for_the_workers(monkeypatch: pytest.MonkeyPatch, data: Path) -> None:
    """A real one-step profile: 445 KB of .json.gz, 8.6 MB of JSON to parse. Its uncompressed size decides
    whether workers parse it (they do: ``PARALLEL_MIN_BYTES``); the torchrun4 CPU job (4 files, 776 KB of
    JSON) stays in the writer, and HTA's two sampled ranks (240 KB of .json.gz, 3.4 MB of JSON) get one
    worker (``ALL_CORES_MIN_BYTES``)."""
    from profdb.store.inputs import Scan, prepare

    monkeypatch.delenv(ingest_workers.ENV_WORKERS, raising=False)
    monkeypatch.setattr(ingest_workers, "cores", lambda: 2)
    flags = IdentityFlags(rank=0)
    qwen = data / "kineto" / "tracelens_h100_Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
    inputs, _unknown, _plan = prepare(Scan([qwen], None, flags), flags)
    assert inputs[0].size < 500_000
    assert ingest.content_bytes(inputs, enough=1 << 40) == 8_647_357  # (its gzip trailer's ISIZE: zcat | wc -c)
    with ingest._early_workers(inputs) as parsers:  # (what the ingest forks)
        assert parsers is not None
    small = IdentityFlags()
    inputs, _unknown, _plan = prepare(Scan([data / "kineto" / "torchrun4_cpu"], None, small), small)
    with ingest._early_workers(inputs) as parsers:
        assert parsers is None
    inputs, _unknown, _plan = prepare(Scan([data / "kineto" / "hta_trace_filter_2ranks"], None, small), small)
    assert sum(i.size for i in inputs) < 250_000
    with ingest._early_workers(inputs) as parsers:
        assert parsers is not None and len(parsers.procs) == 1

def test_new_store_is_loaded_with_a_rollback_journal_and_left_in_wal(
    inputs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _bulk(monkeypatch, True)
    seen: list[str] = []
    real = bulk.Writer.insert

    def spy(self: bulk.Writer, table: str, rows: list[tuple[Any, ...]]) -> None:
        seen.append(str(self.conn.exec_driver_sql("pragma journal_mode").scalar()))
        real(self, table, rows)

    monkeypatch.setattr(bulk.Writer, "insert", spy)
    db = tmp_path / "new.db"
    ingest.ingest_paths(sorted((inputs / "csv").glob("rank*")), str(db), run="csv")
    assert seen and set(seen) == {"delete"}
    assert sql(db, "pragma journal_mode") == [("wal",)]
    assert not Path(str(db) + "-journal").exists()
    # a store that existed before is loaded in WAL mode (a failure must leave its bytes as they were)
    seen.clear()
    ingest.ingest_paths(sorted((inputs / "kineto").glob("rank-*.json")), str(db), run="kineto")
    assert seen and set(seen) == {"wal"}


def test_failed_load_of_a_new_store_leaves_no_file(inputs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = shutil.copytree(inputs / "csv", tmp_path / "csv")
    bad = next((run / "rank0002").glob("*/*_kernel_trace.csv"))
    lines = bad.read_text().splitlines()
    lines[-3] = lines[-3].rsplit(",", 3)[0] + ",x,1,1"
    bad.write_text("\n".join(lines) + "\n")
    _bulk(monkeypatch, True)
    db = tmp_path / "new.db"
    with pytest.raises(InputError, match=bad.name):
        ingest.ingest_paths(sorted(run.glob("rank*")), str(db), run="csv")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["csv"]


def test_constants_of_a_batch_are_written_as_literals() -> None:
    rows = [(7, None, "kernel", "it's", 1, 2.5, 10), (7, None, "kernel", "it's", 2, 2.5, 10)]
    sql_text, bound = bulk.constants_inlined("t", ("a", "b", "c", "d", "e", "f", "g"), rows, "?", (("h", "1"),))
    assert sql_text == "INSERT INTO t (a, b, c, d, e, f, g, h) VALUES (7, NULL, 'kernel', 'it''s', ?, ?, 10, 1)"
    assert bound == [(1, 2.5), (2, 2.5)]  # floats are always bound
    same = [(1, "x"), (1, "x")]  # all constant: the last column is bound (executemany needs parameters)
    assert bulk.constants_inlined("t", ("a", "b"), same) == ("INSERT INTO t (a, b) VALUES (1, ?)", [("x",), ("x",)])
    varied = [(1, "x"), (2, "y")]
    assert bulk.constants_inlined("t", ("a", "b"), varied) == ("INSERT INTO t (a, b) VALUES (?, ?)", varied)


def test_quiet_gc_restores_the_collector() -> None:
    import gc

    before = gc.get_threshold()
    with ingest_workers.quiet_gc():
        assert gc.get_threshold()[0] >= ingest_workers.GC_THRESHOLD0 and gc.get_freeze_count() > 0
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_parsed_files_merge_in_order_within_each_rank_not_across_ranks() -> None:
    """Workers take the largest files first, so files finish out of order. A file's results merge
    once its rank's earlier files have: one rank's slow first file holds back only that rank (held
    across the run, every timeline parsed meanwhile waited in memory: ingest._parse_in_workers)."""
    order = ingest_load.InOrderPerRank([7, 7, 9, 9, 7])
    assert order.done(2, "b0") == [(2, "b0")]  # rank 9 goes on while rank 7's first file is parsed
    assert order.done(4, "a2") == []  # rank 7's third file waits for its first two
    assert order.done(3, "b1") == [(3, "b1")]
    assert order.done(1, "a1") == []
    assert order.done(0, "a0") == [(0, "a0"), (1, "a1"), (4, "a2")]
    assert order.pending == {}


def test_worker_failing_while_its_names_are_answered(
    inputs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker reading records asks for a batch's ids and goes on without waiting (``_Names.ask``);
    when it fails before reading the answer and closes its end, the writer's answer finds the pipe
    closed. The ingest reports the worker's own error, naming the file, and leaves the store as it
    was. (Files read as columns never ask: their writer interns what they send.)"""
    import time

    from profdb.store import collectives

    db = tmp_path / "store.db"
    _bulk(monkeypatch, False)
    ingest.ingest_paths(sorted((inputs / "csv").glob("rank*")), str(db), run="csv")
    before = file_bytes(db)

    def planted(*_a: Any, **_k: Any) -> Any:
        raise ValueError("planted failure after asking for ids")

    answer = bulk.Writer.answer_names
    asked: list[int] = []

    def slow_answer(self: bulk.Writer, values: list[Any]) -> list[int]:
        asked.append(len(values))
        time.sleep(0.3)  # (the worker has failed and closed its end by the time this answers)
        return answer(self, values)

    # (called between asking and waiting; the workers are forked: they see it)
    monkeypatch.setattr(collectives.TimelineBuilder, "add_many", planted)
    monkeypatch.setattr(bulk.Writer, "answer_names", slow_answer)
    # (rows built once the ids came: a batch read before them asks nothing until they do, ``_Late.hold``)
    monkeypatch.setattr(ingest_workers, "HOLD_RECORD_ROWS", 0)
    _bulk(monkeypatch, True)
    with pytest.raises(InputError, match=r"rank-\d\.json: .*ValueError: planted failure after asking"):
        ingest.ingest_paths(sorted((inputs / "kineto").glob("rank-*.json")), str(db), run="kineto")
    assert asked
    assert file_bytes(db) == before


@pytest.mark.parametrize("workers", [True, False])
def test_a_ranks_summary_over_two_files_is_the_sum_of_their_rows(
    inputs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: bool
) -> None:
    """One rank, two kernel traces of the same kernels (another window of the same process), each
    read in several column batches: the rank's summary (calls, total, min, max, sum of squares) is
    what the two files' rows add up to, computed here from the CSV text. (A worker keeps a batch's
    summary as final rows while no other batch of the file met its kernels, and the writer keeps a
    rank's first file's rows as they came: both must give way to running sums.)"""
    src = next((inputs / "csv" / "rank0001").glob("*/*_kernel_trace.csv"))
    host = tmp_path / "run" / "rank0001" / src.parent.name
    host.mkdir(parents=True)
    lines = src.read_text().splitlines()
    head = lines[0].split(",")
    start, end = head.index('"Start_Timestamp"'), head.index('"End_Timestamp"')
    shifted = [lines[0]]
    for line in lines[1:]:  # (the second window: later, and each kernel 7 ns longer)
        cells = next(csv.reader([line]))
        cells[start] = str(int(cells[start]) + 10**9)
        cells[end] = str(int(cells[end]) + 10**9 + 7)
        shifted.append(",".join(f'"{c}"' if not c.lstrip("-").isdigit() else c for c in cells))
    (host / src.name).write_text("\n".join(lines) + "\n")
    (host / ("9" + src.name)).write_text("\n".join(shifted) + "\n")
    want: dict[str, list[Any]] = {}
    for path in host.iterdir():
        with path.open(newline="") as f:
            for r in csv.DictReader(f):
                d = int(r["End_Timestamp"]) - int(r["Start_Timestamp"])
                w = want.setdefault(r["Kernel_Name"], [0, 0, d, d, 0.0])
                w[0] += 1
                w[1] += d
                w[2], w[3] = min(w[2], d), max(w[3], d)
                w[4] += float(d) * d
    _bulk(monkeypatch, workers)
    monkeypatch.setattr(rocprof_csv, "BLOCK", 16384)  # (several batches per file)
    db = tmp_path / "s.db"
    ingest.ingest_paths([tmp_path / "run" / "rank0001"], str(db), run="two",
                        flags=IdentityFlags(allow_duplicate_ranks=True))
    got = {r[0]: [r[1], r[2], r[3], r[4], r[5], r[6]] for r in sql(
        db, "select n.value, calls, total_ns, min_ns, max_ns, sum_sq_ns, self_ns from summary s "
            "join name n on n.id = s.name_id where kind = 'kernel'")}
    assert len(want) > 5 and max(w[0] for w in want.values()) > 50
    assert got == {n: [*w[:4], pytest.approx(w[4], rel=1e-12), w[1]] for n, w in want.items()}


def test_workers_yield_the_cpu_to_the_writer(inputs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The parsing workers run at a lower priority than the writer (``ingest_workers.WORKER_NICE``):
    when the writer is the slower side, it keeps its core. Seen from inside a worker's parse."""
    import os

    from profdb.store import columnar

    seen = tmp_path / "nice.txt"
    check = columnar.check_activities  # (every batch of kernels is checked: read alone or in a group)

    def noting(*a: Any, **k: Any) -> Any:
        with seen.open("a") as f:
            f.write(f"{os.getpid()} {os.nice(0)}\n")
        return check(*a, **k)

    monkeypatch.setattr(columnar, "check_activities", noting)  # (the workers are forked: they see it)
    _bulk(monkeypatch, True)
    ingest.ingest_paths(sorted((inputs / "csv").glob("rank*")), str(tmp_path / "s.db"), run="csv")
    lines = {tuple(map(int, line.split())) for line in seen.read_text().splitlines()}
    assert {pid for pid, _ in lines} - {os.getpid()}
    assert {n for _, n in lines} == {min(19, os.nice(0) + ingest_workers.WORKER_NICE)}


@pytest.mark.parametrize("workers", [True, False])
def test_kernel_names_that_decode_alike_are_summed_as_one(
    inputs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: bool
) -> None:
    """Two kernel names that differ only in bytes that are not UTF-8 (both read as U+FFFD, as the csv
    module reads them) are one name in the store: its summary counts the calls of both."""
    src = next((inputs / "csv" / "rank0000").glob("*/*_kernel_trace.csv"))
    host = tmp_path / "run" / "rank0000" / src.parent.name
    host.mkdir(parents=True)
    with src.open(newline="") as f:  # (the most called kernel)
        names = [r["Kernel_Name"] for r in csv.DictReader(f)]
    name = max(set(names), key=names.count).encode()
    needle = b'"' + name + b'"'
    raw = src.read_bytes().split(b"\n")
    assert sum(needle in line for line in raw) > 20
    odd = [raw[0]] + [line.replace(needle, b'"' + name[:-1] + (b"\xff" if i % 2 else b"\xfe") + b'"')
                      for i, line in enumerate(raw[1:]) if line]
    path = host / src.name
    path.write_bytes(b"\n".join(odd) + b"\n")
    want: dict[str, list[int]] = {}
    with path.open(newline="", errors="replace") as f:
        for r in csv.DictReader(f):
            w = want.setdefault(r["Kernel_Name"], [0, 0])
            w[0] += 1
            w[1] += int(r["End_Timestamp"]) - int(r["Start_Timestamp"])
    assert any("\ufffd" in n and c > 10 for n, (c, _t) in want.items())
    _bulk(monkeypatch, workers)
    db = tmp_path / "s.db"
    ingest.ingest_paths([tmp_path / "run" / "rank0000"], str(db), run="odd")
    got = {r[0]: [r[1], r[2]] for r in sql(
        db, "select n.value, calls, total_ns from summary s join name n on n.id = s.name_id where kind = 'kernel'")}
    assert got == want
    assert sql(db, "select count(*) from activity")[0][0] == sum(c for c, _t in want.values())


@pytest.mark.parametrize("hold", [0, 1, 5000, ingest_workers.HOLD_ROWS])
def test_workers_forked_before_the_store_store_what_the_plain_path_stores(
    inputs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hold: int
) -> None:
    """The workers fork before SQLAlchemy is imported and the store opened (``ingest._early_workers``):
    they parse with no ids (``NO_ID``), holding messages of up to ``HOLD_ROWS`` rows until the writer
    sends the store's (``IdsMsg``), which complete what was built before. Holding none, one or many
    messages (a batch here is a few dozen rows), the store is the in-process path's, for CSV (kernel
    traces and counters, several batches a file) and Kineto; and a second ingest adding ranks to the
    run skips the files stored already (the workers drop what they parsed of them) and stores the new
    ones as the plain path does."""
    gen = _generate()
    run = tmp_path / "run"
    gen.generate_csv(run, dispatches=4000, ranks=4, hosts=2, counters=2)
    first, rest = sorted(run.glob("rank*"))[:2], sorted(run.glob("rank*"))
    monkeypatch.setattr(rocprof_csv, "BLOCK", 1 << 14)  # (many batches a file: messages held and completed)
    monkeypatch.setattr(ingest_workers, "HOLD_ROWS", hold)
    stores = {}
    for on in (False, True):
        _bulk(monkeypatch, on)
        db = tmp_path / f"early{on}.db"
        ingest.ingest_paths(first, str(db), run="csv")
        report = ingest.ingest_paths(rest, str(db), run="csv")
        assert len(report.duplicates) == 2 * 2 and len(report.ingested) == 2 * 2  # (kernel + counter files)
        ingest.ingest_paths(sorted((inputs / "kineto").glob("rank-*.json")), str(db), run="kineto")
        stores[on] = _content(db)
    assert stores[True] == stores[False]
    assert len(stores[True]["activity"]) > 4000 and stores[True]["counter"]


_SPY = """
import os, sys
from pathlib import Path
from profdb.store import ingest_workers
seen = Path(sys.argv[1])
plain = ingest_workers._parse

def spy(task, conn, *args):
    early = getattr(conn, "ids", "in-process") is None
    (seen / f"{os.getpid()}-{task.index}").write_text(f"{'sqlalchemy' in sys.modules} {early}")
    plain(task, conn, *args)

def spy_group(self, tasks, parsed):  # (small files parsed as one batch: ``ingest_columns.parse_group``)
    for task in tasks:
        (seen / f"{os.getpid()}-{task.index}").write_text(f"{'sqlalchemy' in sys.modules} {self.ids is None}")
    plain_group(self, tasks, parsed)

plain_group = ingest_workers._Late.send_parsed
ingest_workers._parse = spy
ingest_workers._Late.send_parsed = spy_group
from profdb.cli.main import main
sys.argv = ["profdb", "ingest", "--db", sys.argv[2], *sys.argv[3:]]
try:
    main()
finally:
    (seen / "writer").write_text(f"{'pyarrow' in sys.modules}")
"""


def test_workers_fork_before_sqlalchemy_is_imported(inputs: Path, tmp_path: Path) -> None:
    """What the early fork is for, in a `profdb ingest` process: each worker starts without SQLAlchemy
    (the writer had not imported it when they forked), and files are parsed before the writer's ids
    came. The writer never loads pyarrow (the workers do, as they start: ``rocprof_csv.warm_up``)."""
    import os
    import subprocess

    seen = tmp_path / "seen"
    seen.mkdir()
    env = {**os.environ, ingest_workers.ENV_WORKERS: "2"}
    r = subprocess.run([sys.executable, "-c", _SPY, str(seen), str(tmp_path / "s.db"),
                        *map(str, sorted((inputs / "csv").glob("rank*")))], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert (seen / "writer").read_text() == "False"
    got = [f.read_text().split() for f in seen.iterdir() if f.name != "writer"]
    assert len(got) == len(list((inputs / "csv").glob("rank*/*/*.csv")))
    assert all(loaded == "False" for loaded, _early in got), got
    assert any(early == "True" for _loaded, early in got), got


_SPY_ALLOCATOR = """
import os, sys
from pathlib import Path
from profdb.store.readers import rocprof_csv
seen = Path(sys.argv[1])
plain = rocprof_csv.warm_up

def spy():  # (in each worker, as it loads pyarrow, whose allocator reads its options then)
    options = [os.environ.get(k, "-") for k in ("MIMALLOC_ARENA_EAGER_COMMIT", "MIMALLOC_PURGE_DELAY")]
    (seen / str(os.getpid())).write_text(" ".join([str("pyarrow" in sys.modules), *options]))
    plain()

rocprof_csv.warm_up = spy
from profdb.cli.main import main
sys.argv = ["profdb", "ingest", "--db", sys.argv[2], *sys.argv[3:]]
main()
"""


@pytest.mark.parametrize("user", [None, "1"])
def test_workers_load_pyarrow_with_an_allocator_that_gives_memory_back(
    inputs: Path, tmp_path: Path, user: str | None
) -> None:
    """Each worker loads pyarrow (whose mimalloc reads its options once, as it loads) with the options
    that make freed memory leave the process: arenas committed as they are used, and a short purge delay
    (``rocprof_csv``: ~35-45 MB less tree memory on the benchmark's CSV runs). A user's own setting is kept."""
    import os
    import subprocess

    seen = tmp_path / "seen"
    seen.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MIMALLOC_")}
    env[ingest_workers.ENV_WORKERS] = "2"
    if user is not None:
        env["MIMALLOC_ARENA_EAGER_COMMIT"] = user
    r = subprocess.run([sys.executable, "-c", _SPY_ALLOCATOR, str(seen), str(tmp_path / "s.db"),
                        *map(str, sorted((inputs / "csv").glob("rank*")))], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    got = [f.read_text() for f in seen.iterdir()]
    assert len(got) == 2, got
    assert set(got) == {f"False {user or '0'} 10"}, got


_SPY_RECORDS = """
import sys
from pathlib import Path
from profdb.store import ingest_workers
from profdb.store.readers import kineto_json
seen = Path(sys.argv[1])
came = []  # (in each worker: the store's ids came)
plain_wait, plain_batches = ingest_workers._Late.wait, kineto_json.activity_batches

def wait(self):
    plain_wait(self)
    came.append(True)

def activity_batches(path, info, index, unread=None):
    first = True
    for batch in plain_batches(path, info, index, unread):
        if first:
            (seen / Path(path).name).write_text("late" if came else "early")
            first = False
        yield batch

ingest_workers._Late.wait = wait
kineto_json.activity_batches = activity_batches
from profdb.cli.main import main
sys.argv = ["profdb", "ingest", "--db", sys.argv[2], *sys.argv[3:]]
main()
"""


def test_records_are_read_before_the_store_ids_come(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file read as records (real Kineto traces: four ranks of a torchrun job, tests/data/SOURCES.txt)
    is read while the writer opens the store, before its ids come (its rows held with names until they
    do: ``_Late.hold``; until session 48 a worker waited for them at its first batch), not only once
    they came. The store is the in-process path's."""
    import os
    import subprocess

    traces = sorted((ROOT / "tests/data/kineto/torchrun4_cpu").glob("rank*.json.gz"))
    seen = tmp_path / "seen"
    seen.mkdir()
    env = {**os.environ, ingest_workers.ENV_WORKERS: "2"}
    db = tmp_path / "workers.db"
    r = subprocess.run([sys.executable, "-c", _SPY_RECORDS, str(seen), str(db), *map(str, traces)], env=env,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    got = {f.name: f.read_text() for f in seen.iterdir()}
    assert sorted(got) == [t.name for t in traces]
    assert "early" in got.values(), got  # (the writer imports SQLAlchemy and opens the store meanwhile: ~0.3 s)
    _bulk(monkeypatch, False)
    here = tmp_path / "here.db"
    ingest.ingest_paths(traces, str(here))
    assert _content(db) == _content(here)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc" or not Path("/proc/self/status").exists(),
                    reason="glibc's malloc, read through /proc")
@pytest.mark.parametrize("give_back", [False, True])
def test_a_worker_gives_back_a_large_block_it_freed(give_back: bool) -> None:
    """glibc raises its mmap threshold to the size of a large block freed, so the next such block (a
    worker's 4 MB CSV blocks) comes from its heap and stays there once freed; a worker fixes the
    threshold (``_give_back_large_blocks``) and gets its pages back."""
    code = f"""
from profdb.store import ingest_workers
if {give_back}:
    ingest_workers._give_back_large_blocks()
def anon():
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon"):
            return int(line.split()[1])
b = bytearray(4 << 20); del b
base = anon()
b = bytearray(4 << 20); b[::4096] = b"x" * len(b[::4096]); del b
print(anon() - base)
"""
    kept_kb = int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert (kept_kb < 1024) == give_back, kept_kb


def test_a_workers_outbox_sends_in_order_while_the_worker_goes_on_and_reports_a_closed_writer() -> None:
    """``_Outbox``: a worker's messages are written by a thread, so ``send`` returns while nobody reads
    (up to ``OUTBOX_MESSAGES`` waiting beside the one being written, each larger than the connection's
    buffer); they arrive whole and in order; once the writer closed its end, ``send`` or ``close``
    raises the write's OSError instead of hanging or dropping it silently."""
    import multiprocessing as mp
    import threading

    ours, theirs = ingest_workers._pipes(mp.get_context())
    box = ingest_workers._Outbox(theirs)
    big = [bytes([i]) * (3 << 20) for i in range(ingest_workers.OUTBOX_MESSAGES + 1)]  # (3 MB each)
    sent = threading.Thread(target=lambda: [box.send(("rows", i, b)) for i, b in enumerate(big)], daemon=True)
    sent.start()
    sent.join(60)
    assert not sent.is_alive(), "send blocked while the writer was busy"
    got = [ours.recv() for _ in big]
    box.send(ingest_workers.ExitMsg())
    got.append(ours.recv())
    assert got == [("rows", i, b) for i, b in enumerate(big)] + [ingest_workers.ExitMsg()]
    ours.close()
    with pytest.raises(OSError):
        for _ in range(20):  # (the failed write is seen by a later send, or by close)
            box.send(("rows", -1, big[0]))
        box.close()


def test_a_workers_messages_go_through_a_pipe_raised_to_pipe_bytes() -> None:
    """The pipe of a worker's messages to the writer holds ``PIPE_BYTES`` (Linux, where the system's
    pipe-max-size allows it; a message is then written in fewer pieces, each a wakeup of both sides);
    the pipe of the writer's answers keeps the system's size."""
    import fcntl
    import multiprocessing as mp

    if not hasattr(fcntl, "F_GETPIPE_SZ"):
        pytest.skip("pipe sizes are Linux's")
    most = int(Path("/proc/sys/fs/pipe-max-size").read_text())
    writer, worker = ingest_workers._pipes(mp.get_context())
    try:
        if ingest_workers.PIPE_BYTES <= most:
            assert fcntl.fcntl(worker.outgoing.fileno(), fcntl.F_GETPIPE_SZ) == ingest_workers.PIPE_BYTES
        assert fcntl.fcntl(writer.outgoing.fileno(), fcntl.F_GETPIPE_SZ) < ingest_workers.PIPE_BYTES
        worker.send(("rows", 1, b"x" * 100))
        assert writer.poll(5) and writer.recv() == ("rows", 1, b"x" * 100)
        writer.send(ingest_workers.ExitMsg())
        assert worker.recv() == ingest_workers.ExitMsg()
    finally:
        writer.close()
        worker.close()


def test_a_batch_readers_lists_store_what_its_records_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kineto traces reach ``_parse`` as lists (``kineto_json.activity_batches``), taken whole and cut
    at ``BATCH`` records as records one at a time were. Real traces (a torchrun job's four CPU ranks,
    nested ops and steps; a GPU training rank; tests/data/SOURCES.txt), read in slices of a few events
    and batches of 700 records, so lists cross the batches' ends: the store is the per-record path's,
    and every event the reader yields is stored once."""
    from profdb.store.readers import kineto_fast, kineto_json

    cpu_job = sorted((ROOT / "tests/data/kineto/torchrun4_cpu").glob("rank*.json.gz"))
    gpu_rank = [ROOT / "tests/data/kineto/deepseek_train_rank0.json.gz"]
    monkeypatch.setattr(kineto_fast, "SLICE", 4096)
    monkeypatch.setattr(kineto_fast, "READ", 1000)
    monkeypatch.setattr(ingest_workers, "BATCH", 700)
    _bulk(monkeypatch, False)
    stores = {}
    for how in ("lists", "records"):
        if how == "records":
            monkeypatch.delattr(kineto_json, "activity_batches")
        stores[how] = tmp_path / f"{how}.db"
        for run, traces in (("cpu", cpu_job), ("gpu", gpu_rank)):
            ingest.ingest_paths(traces, str(stores[how]), run=run)
    assert _content(stores["lists"]) == _content(stores["records"])
    read = sum(1 for t in cpu_job + gpu_rank for _ in kineto_json.read(t, kineto_json.inspect(t)))
    assert read > 10 * 700
    assert sql(stores["lists"], "select count(*) from activity") == [(read,)]


@pytest.mark.parametrize("name", ["nsys_sqlite/perlmutter-cloverleaf-cuda.sqlite", "kineto/nccl_data.json.gz",
                                  "rocprofv3_csv/rocm-systems_2025-08/kernel_trace.csv"])
def test_one_large_file_is_parsed_by_a_worker_and_stores_the_same(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """One file large enough (here: the threshold lowered below a real sample's size) is parsed by one
    worker while the writer inserts, and the store holds what parsing it in the writer stores."""
    monkeypatch.delenv(ingest_workers.ENV_WORKERS, raising=False)
    monkeypatch.setattr(ingest_workers, "PARALLEL_MIN_BYTES", 1)
    monkeypatch.setattr(ingest_workers, "cores", lambda: 2)
    started: list[int] = []
    parsers = ingest_workers.Parsers

    class Spy(parsers):  # type: ignore[misc,valid-type]
        def __init__(self, tasks: list[ingest_workers.Task], workers: int) -> None:
            started.append(workers)
            super().__init__(tasks, workers)

    monkeypatch.setattr(ingest_workers, "Parsers", Spy)
    flags = IdentityFlags(rank=0)
    ingest.ingest_paths([data / name], str(tmp_path / "worker.db"), run="r", flags=flags)
    assert started == [1]
    monkeypatch.setenv(ingest_workers.ENV_WORKERS, "0")
    ingest.ingest_paths([data / name], str(tmp_path / "here.db"), run="r", flags=flags)
    assert started == [1]
    worker, here = _content(tmp_path / "worker.db"), _content(tmp_path / "here.db")
    assert worker["activity"] and worker == here


def test_a_name_met_with_two_kinds_is_summed_per_kind(data: Path, tmp_path: Path, run_cli: Any) -> None:
    """The workers find what a name's records share once per batch (``_parse``'s per-name cache): a name
    met as a cpu_op and as an annotation in turn (the real torchrun4_cpu rank-0 trace, every third op
    and annotation renamed alike) is still summed per kind, each total the raw file's sum, and the
    ProfilerStep annotations are still the steps."""
    import gzip
    import json

    trace = json.loads(gzip.decompress((data / "kineto" / "torchrun4_cpu" / "rank0_iter5_7.json.gz").read_bytes()))
    xs = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation")
          and not str(e.get("name", "")).startswith("ProfilerStep#")]
    for k, e in enumerate(xs):
        if k % 3 == 0:
            e["name"] = "shared name"
    f = tmp_path / "rank0" / "trace.json"
    f.parent.mkdir()
    f.write_text(json.dumps(trace))
    db = tmp_path / "s.db"
    run_cli("ingest", "--db", db, "--rank", "0", f)
    kinds = {"cpu_op": "cpu_op", "user_annotation": "annotation"}
    want: dict[str, tuple[int, int]] = {}
    for e in xs:
        if e["name"] == "shared name":
            n, t = want.get(kinds[e["cat"]], (0, 0))
            want[kinds[e["cat"]]] = (n + 1, t + round(e.get("dur", 0) * 1000))
    assert set(want) == {"cpu_op", "annotation"}
    got = {k: (n, t) for k, n, t in sql(db, "select kind, calls, total_ns from summary_v where name = 'shared name'")}
    assert got == want
    steps = sorted(int(str(e["name"]).split("#")[1]) for e in trace["traceEvents"]
                   if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#"))
    assert [r[0] for r in sql(db, "select step from step_v order by step")] == steps


def test_progress_moves_while_one_large_file_is_parsed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file's worker says how far it has read the file with each batch of rows ("read" events), so
    that a bar moves during one large file's parse (a 600 MB trace sat at 0% for its 22 s). A real
    trace of 67,217 complete events (HTA's rank 0 of 16: four batches), gzip: its compressed bytes,
    as its size counts them."""
    trace = ROOT / "tests/data/kineto/rank0.json.gz"
    monkeypatch.setenv(ingest_workers.ENV_WORKERS, "1")
    events: list[tuple[str, str, int, int]] = []
    ingest.ingest_paths([trace], str(tmp_path / "p.db"), run="one", progress=lambda *e: events.append(e))
    size = trace.stat().st_size
    assert [e[0] for e in events if e[0] != "read"] == ["start", "file", "analysis"]
    reads = [e[2] for e in events[: [e[0] for e in events].index("file")] if e[0] == "read"]
    assert len(reads) >= 3 and all(e[1] == str(trace) for e in events if e[0] == "read")
    assert reads == sorted(reads) and 0 < reads[0] < size and reads[-1] <= size, reads
    assert len(set(reads)) >= 2  # (it moved during the parse, not only at its end)
    assert [e[2] for e in events if e[0] == "file"] == [size] and all(e[3] == size for e in events)


def test_a_file_read_meter_says_nothing_where_reads_cannot_be_told(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ingest_workers, "_bytes_read", lambda: None)
    assert ingest_workers._ReadMeter(1000)() == 0
    counts = iter([100, 250, 5000])
    monkeypatch.setattr(ingest_workers, "_bytes_read", lambda: next(counts))
    meter = ingest_workers._ReadMeter(1000)
    assert (meter(), meter()) == (150, 1000)  # (at most the file's size)
    assert ingest_workers._ReadMeter(0)() == 0  # (not measured: files read together)


def test_progress_moves_as_the_workers_finish_files_not_at_the_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With parsing workers, each file's progress event comes when the writer has merged it, while
    the later files' rows are still to come (until session 42 the events came after the last file:
    a terminal's bar sat at its start for the whole parse). One worker, so the order is fixed: the
    real torchrun job's four traces, each file's rows, then its end."""
    traces = sorted((ROOT / "tests/data/kineto/torchrun4_cpu").glob("*.json.gz"))
    monkeypatch.setenv(ingest_workers.ENV_WORKERS, "1")
    inserts: list[str] = []
    insert = bulk.Writer.insert

    def counted(self: bulk.Writer, table: str, rows: Any) -> None:
        inserts.append(table)
        insert(self, table, rows)

    monkeypatch.setattr(bulk.Writer, "insert", counted)
    events: list[tuple[str, str, int, int]] = []
    seen: list[int] = []

    def progress(event: str, path: str, done: int, total: int) -> None:
        events.append((event, path, done, total))
        seen.append(len(inserts))

    report = ingest.ingest_paths(traces, str(tmp_path / "p.db"), run="job", progress=progress)
    files = [i for i, e in enumerate(events) if e[0] == "file"]
    assert len(files) == len(traces) == 4
    # each file's event after some rows, before the next file's: the inserts went on after each
    assert 0 < seen[files[0]] < seen[files[1]] < seen[files[2]] < seen[files[3]] == len(inserts)
    assert [events[i][2] for i in files] == sorted(events[i][2] for i in files)  # (bytes done only grow)
    assert events[files[-1]][2] == events[0][3]
    # the report keeps the inputs' order whatever order the files were done in
    assert [f.path for f in report.files] == [str(t) for t in traces]


@pytest.mark.parametrize("hold", [1, 300, ingest_workers.HOLD_RECORD_ROWS])
def test_records_parsed_whole_before_the_ids_come_store_what_the_plain_path_stores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hold: int
) -> None:
    """Since session 48 a worker reading records goes on while the writer opens the store: it builds a
    batch's rows with names and launch shapes where their ids go and holds them (``_Late.hold``, up to
    ``HOLD_RECORD_ROWS`` rows), and a file read whole meanwhile is finished when the ids come (``_Late.defer``)
    while the worker reads its next one. Real traces (tests/data/kineto/torchrun4_cpu: 4 ranks of a CPU
    job, nested CPU ops, steps, gloo collectives), batches of 50 rows, the writer's ids 0.5 s late: with
    every file held, and with the hold running out in a file's first or a later batch, the store is
    the in-process path's, self times, steps and the run's analysis included; so after a second ingest
    adding ranks (the files stored already are dropped when the ids come) and a third adding none."""
    import time

    traces = sorted((ROOT / "tests/data/kineto/torchrun4_cpu").glob("rank*.json.gz"))
    marks = tmp_path / "deferred"
    marks.mkdir()
    monkeypatch.setattr(ingest_workers, "BATCH", 50)
    monkeypatch.setattr(ingest_workers, "HOLD_RECORD_ROWS", hold)
    plain_send, plain_defer = ingest_workers.Parsers.send_ids, ingest_workers._Late.defer

    def late_ids(self: Any, ids: Any) -> None:
        time.sleep(0.5)  # (the workers read meanwhile)
        plain_send(self, ids)

    def defer(self: Any, finish: Any) -> None:  # (in a worker: the end of a file read before the ids came)
        if self.ids is None:
            (marks / f"{id(finish)}-{time.monotonic_ns()}").touch()
        plain_defer(self, finish)

    monkeypatch.setattr(ingest_workers.Parsers, "send_ids", late_ids)
    monkeypatch.setattr(ingest_workers._Late, "defer", defer)
    stores = {}
    for on in (False, True):
        _bulk(monkeypatch, on)
        db = tmp_path / f"s{on}.db"
        got = []
        for files in (traces[:2], traces, traces):
            report = ingest.ingest_paths(files, str(db), run="torchrun4")
            got.append((len(report.ingested), len(report.duplicates)))
        assert got == [(2, 0), (2, 2), (0, 4)]
        stores[on] = {
            **_content(db),
            "self": sorted(sql(db, "select global_rank, kind, name, self_ns from summary_v")),
            "calls": sorted(sql(db, "select * from collective_call_v")),
            "analysis": sorted(sql(db, "select * from rank_analysis_v")),
            "unread": sorted(sql(db, "select path, rows, unread_json from source_file")),
        }
    assert stores[True] == stores[False]
    assert len(stores[True]["activity"]) > 1000 and stores[True]["step"] and stores[True]["calls"]
    assert any(r[1] == "cpu_op" and r[3] for r in stores[True]["self"])
    if hold > 1000:
        assert len(list(marks.iterdir())) >= 2  # (files read whole before the ids came, in two ingests)
