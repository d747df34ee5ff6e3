"""The same store on SQLite and PostgreSQL: ingest of real samples and generated runs, runs/ranks,
idempotency, rollback, same answers from every view on both, and PostgreSQL's own concerns
(migrations under a lock, COPY, connection errors). Tests taking ``store_url`` run once per backend."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import create_engine, inspect, text

from pg_fixtures import PgServer, write_rocprof_run
from pg_fixtures import query_url as rows
from conftest import sql
from profdb.cli.main import cli
from profdb.store import bulk, db
from profdb.store.errors import InputError, StoreError
from profdb.store.ingest import ingest_paths
from profdb.store.identity import IdentityFlags

SAMPLES = Path(__file__).parent / "data"  # real profiler outputs (tests/data/SOURCES.txt)
TORCHRUN4 = SAMPLES / "kineto" / "torchrun4_cpu"
ROCPROF_2025 = SAMPLES / "rocprofv3_csv" / "rocm-systems_2025-08"
HTA_2RANKS = SAMPLES / "kineto" / "hta_trace_filter_2ranks"


def run_cli(*args: str, env: dict[str, str] | None = None) -> Any:
    r = CliRunner().invoke(cli, list(args), catch_exceptions=False, env=env)
    return r


def count(url: str, sql: str) -> Any:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return conn.execute(text(sql)).scalar()
    finally:
        engine.dispose()


# ----------------------------------------------------------------------------- both backends


def test_ingest_samples_runs_and_ranks(store_url: str) -> None:
    r = run_cli("ingest", str(TORCHRUN4), "--run", "ddp4", "--db", store_url)
    assert r.exit_code == 0, r.output
    assert "files: 4 ingested" in r.output
    assert "ranks: 4 of world size 4" in r.output
    # every command takes the store from PROFDB_DB too
    r = run_cli("runs", "--format", "csv", env={"PROFDB_DB": store_url})
    assert r.exit_code == 0, r.output
    lines = r.stdout.strip().splitlines()
    assert lines[0].startswith("run,created_at")
    # issue 13: runs gained ended_abnormally (empty: no manifests) after missing_ranks; issue 12: clock_offsets
    # (empty: one host) at the end
    assert lines[1].startswith("ddp4,") and lines[1].endswith(",4,4,,,4,1896,")
    r = run_cli("ranks", "--run", "ddp4", "--format", "csv", "--db", store_url)
    assert r.exit_code == 0, r.output
    assert [ln.split(",")[0] for ln in r.stdout.strip().splitlines()[1:]] == ["0", "1", "2", "3"]
    assert count(store_url, "select count(*) from activity") == 1896
    assert count(store_url, "select count(*) from step_v") > 0
    # the rank 2 straggler of this sample shows in the summaries on both backends
    per_rank = dict(rows(store_url, "select global_rank, sum(total_ns) from summary_v where kind = 'cpu_op' group by global_rank"))
    assert max(per_rank, key=lambda g: per_rank[g]) == 2


def test_reingest_is_a_noop(store_url: str) -> None:
    first = ingest_paths([TORCHRUN4], store_url, run="ddp4")
    assert len(first.ingested) == 4
    before = count(store_url, "select count(*) from activity"), count(store_url, "select sum(calls) from summary")
    again = ingest_paths([TORCHRUN4], store_url, run="ddp4")
    assert len(again.ingested) == 0 and len(again.duplicates) == 4
    assert (count(store_url, "select count(*) from activity"), count(store_url, "select sum(calls) from summary")) == before
    assert count(store_url, "select count(*) from source_file") == 4
    assert count(store_url, "select count(*) from run") == 1


def test_rank_sets_union_and_summaries(store_url: str, tmp_path: Path) -> None:
    expected = write_rocprof_run(tmp_path / "job", ranks=4, dispatches=300)
    ingest_paths([tmp_path / "job" / "rank0000", tmp_path / "job" / "rank0001"], store_url, run="job")
    ingest_paths([tmp_path / "job" / "rank0002", tmp_path / "job" / "rank0003"], store_url, run="job")
    assert rows(store_url, "select global_rank from rank order by 1") == [(0,), (1,), (2,), (3,)]
    assert count(store_url, "select count(*) from run") == 1
    got = rows(store_url, "select global_rank, name, calls, total_ns from summary_v where kind = 'kernel'")
    want = {(g, n, e["calls"][n], e["total_ns"][n]) for g, e in expected.items() for n in e["calls"]}  # type: ignore[index,attr-defined]
    assert set(got) == want
    kernels = dict(rows(store_url, "select global_rank, count(*) from activity_v where kind = 'kernel' group by 1"))
    assert kernels == {g: e["kernels"] for g, e in expected.items()}
    counters = dict(rows(store_url, "select global_rank, count(*) from counter_v group by 1"))
    assert counters == {g: e["counters"] for g, e in expected.items()}
    # names with tabs and backslashes survive the bulk path unchanged
    names = {n for (n,) in rows(store_url, "select value from name")}
    assert "odd\tname with\\backslash\tand tab" in names and "café_kernel_µs" in names


def test_bad_input_rolls_everything_back(store_url: str, tmp_path: Path) -> None:
    write_rocprof_run(tmp_path / "good", ranks=1, dispatches=50)
    ingest_paths([tmp_path / "good"], store_url, run="good")
    before = {t: count(store_url, f"select count(*) from {t}") for t in ("run", "rank", "source_file", "activity", "counter", "summary")}
    write_rocprof_run(tmp_path / "bad", ranks=2, dispatches=3000, seed=3)
    kt = next((tmp_path / "bad" / "rank0001").glob("*_kernel_trace.csv"))
    lines = kt.read_text().splitlines()
    lines[2500] = lines[2500].replace(",1550", ",x1550", 1)  # damaged far into the file, after rank 0 loaded
    kt.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match="line 2501"):
        ingest_paths([tmp_path / "bad"], store_url, run="bad")
    after = {t: count(store_url, f"select count(*) from {t}") for t in before}
    assert after == before
    assert rows(store_url, "select name from run") == [("good",)]


def test_failed_ingest_into_new_store_leaves_no_file(tmp_path: Path) -> None:
    write_rocprof_run(tmp_path / "bad", ranks=1, dispatches=100)
    kt = next((tmp_path / "bad" / "rank0000").glob("*_kernel_trace.csv"))
    kt.write_text(kt.read_text().replace(",1550", ",y1550"))
    with pytest.raises(InputError):
        ingest_paths([tmp_path / "bad"], str(tmp_path / "new.db"), run="x")
    assert not list(tmp_path.glob("new.db*"))


def test_same_rank_twice_in_one_run_is_refused(store_url: str, tmp_path: Path) -> None:
    write_rocprof_run(tmp_path / "a", ranks=1, dispatches=20, seed=1)
    write_rocprof_run(tmp_path / "b", ranks=1, dispatches=20, seed=2)
    ingest_paths([tmp_path / "a"], store_url, run="r")
    with pytest.raises(Exception, match="already has"):
        ingest_paths([tmp_path / "b"], store_url, run="r")
    assert count(store_url, "select count(*) from source_file") == 2


# ----------------------------------------------------------------------------- same answers


VIEW_COLUMNS = {
    # every column but ids and ingest times, which differ between any two stores
    "rank_v": "run, hostname, global_rank, local_rank, node_rank, pid, device, sources, rows",
    "activity_v": "run, hostname, global_rank, local_rank, kind, category, name, start_ns, end_ns, duration_ns, "
    "device, stream, correlation, pid, tid, grid_x, grid_y, grid_z, block_x, block_y, block_z, args",
    "summary_v": "run, hostname, global_rank, local_rank, kind, category, name, calls, total_ns, mean_ns, min_ns, max_ns",
    "counter_v": "run, hostname, global_rank, local_rank, kernel, counter, value, dispatch_id, samples, min_value, max_value",
    "step_v": "run, hostname, global_rank, local_rank, step, start_ns, duration_ns",
    "source_v": "run, hostname, global_rank, local_rank, path, format, content_kind, rows, size_bytes, content_hash, identity_origin",
}


def _ingest_all(url: str, gen: Path) -> None:
    ingest_paths([TORCHRUN4], url, run="ddp4")
    ingest_paths([HTA_2RANKS], url, run="hta")
    ingest_paths([ROCPROF_2025], url, run="rocprof", flags=IdentityFlags(rank=0, allow_duplicate_ranks=True))
    ingest_paths([gen], url, run="gen")


def _norm(v: Any) -> Any:
    if isinstance(v, float):
        return round(v, 6)
    if isinstance(v, Decimal):  # numeric from PostgreSQL arithmetic
        return round(float(v), 6)
    return v


def test_views_answer_the_same_on_both_backends(pg_url: str, tmp_path: Path) -> None:
    write_rocprof_run(tmp_path / "gen", ranks=3, dispatches=400)
    sqlite_url = f"sqlite:///{tmp_path / 'profdb.db'}"
    _ingest_all(sqlite_url, tmp_path / "gen")
    _ingest_all(pg_url, tmp_path / "gen")
    for view, cols in VIEW_COLUMNS.items():
        a = sorted((tuple(_norm(v) for v in r) for r in rows(sqlite_url, f"select {cols} from {view}")), key=repr)
        b = sorted((tuple(_norm(v) for v in r) for r in rows(pg_url, f"select {cols} from {view}")), key=repr)
        assert len(a) > 0, view
        assert a == b, f"{view} differs between SQLite and PostgreSQL"
    # and the inventory commands print the same (created_at aside)
    for args in (["runs", "--format", "csv"], ["ranks", "--run", "gen", "--format", "csv"]):
        outs = []
        for url in (sqlite_url, pg_url):
            r = run_cli(*args, "--db", url)
            assert r.exit_code == 0, r.output
            outs.append([",".join(c for i, c in enumerate(ln.split(",")) if i != 1) for ln in r.stdout.splitlines()])
        assert outs[0] == outs[1]


# ----------------------------------------------------------------------------- PostgreSQL


def test_pg_migrations_match_models_and_go_down_and_up(pg_url: str) -> None:
    from alembic import command
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from profdb.store.models import Base

    engine = db.open_db(pg_url)
    try:
        assert db.current_revision(engine) == db.head_revision()
        with engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata)
            # the deliberate differences: the fact tables' name keys, replaced on PostgreSQL by one id check
            # per load (0006_pg_fact_keys; SQLite keeps them, and since 0010 has no rank or source keys there
            # either: fact_span and its trigger)
            replaced = [d for d in diff if d[0] == "add_fk" and d[1].parent.name in bulk.FACT_REFS]
            assert {(fk.parent.name, fk.column_keys[0], fk.referred_table.name) for _, fk in replaced} == {
                (t, c, ref) for t, refs in bulk.FACT_REFS.items() for c, ref in refs.items() if ref == "name"
            }
            # and their indexes: SQLite has none since 0010 (fact_span), PostgreSQL one BRIN index per table
            # (0009_pg_lean_fact_indexes; its dropped primary keys are not compared by Alembic, see
            # test_migrations)
            indexes = [d for d in diff if d[0] in ("add_index", "remove_index") and d[1].table.name in bulk.FACT_REFS]
            assert {(op, ix.name, tuple(c.name for c in ix.columns)) for op, ix in indexes} == {
                ("remove_index", "ix_activity_rank_source", ("rank_id", "source_id")),
                ("remove_index", "ix_counter_rank_source", ("rank_id", "source_id")),
            }
            assert [d for d in diff if d not in replaced and d not in indexes] == []
            views = set(inspect(conn).get_view_names())
        assert {"rank_v", "activity_v", "summary_v", "counter_v", "step_v", "source_v"} <= views
        with engine.begin() as conn:
            command.downgrade(db.alembic_config(conn), "base")
        with engine.connect() as conn:
            assert set(inspect(conn).get_table_names()) <= {"alembic_version"}
        db.upgrade_db(engine)
        assert db.current_revision(engine) == db.head_revision()
    finally:
        engine.dispose()


_OPENER = """
import sys, time, os
from profdb.store import db
url, go = sys.argv[1], sys.argv[2]
while not os.path.exists(go):
    time.sleep(0.002)
db.open_db(url).dispose()
"""


def test_pg_fresh_store_opened_by_many_at_once(pg_url: str, tmp_path: Path) -> None:
    """Nodes opening a new team store together: one migrates, the others wait for it (advisory lock)."""
    go = tmp_path / "go"
    procs = [
        subprocess.Popen([sys.executable, "-c", _OPENER, pg_url, str(go)], stderr=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    time.sleep(1.5)  # let them all import and wait at the line
    go.touch()
    errs = [(p.wait(timeout=120), p.stderr.read() if p.stderr else "") for p in procs]
    assert all(rc == 0 for rc, _ in errs), errs
    assert rows(pg_url, "select version_num from alembic_version") == [(db.head_revision(),)]


def test_pg_database_of_another_application_is_refused(pg_url: str) -> None:
    engine = create_engine(pg_url)
    with engine.begin() as conn:
        conn.execute(text("create table customers (id int)"))
    engine.dispose()
    with pytest.raises(StoreError, match="not a profdb store.*customers"):
        db.open_db(pg_url)
    assert rows(pg_url, "select count(*) from information_schema.tables where table_name = 'run'") == [(0,)]


def test_pg_newer_schema_is_refused(pg_url: str) -> None:
    db.open_db(pg_url).dispose()
    engine = create_engine(pg_url)
    with engine.begin() as conn:
        conn.execute(text("update alembic_version set version_num = '9999_future'"))
    engine.dispose()
    with pytest.raises(StoreError, match="newer profdb"):
        db.open_db(pg_url)


def test_pg_connection_errors_name_the_url_without_password() -> None:
    with socket_closed_port() as port:
        url = f"postgresql://alice:s3cret@127.0.0.1:{port}/teamdb"
        with pytest.raises(StoreError) as ei:
            db.open_db(url)
    msg = str(ei.value)
    assert "s3cret" not in msg
    assert f"postgresql+psycopg://alice:***@127.0.0.1:{port}/teamdb" in msg
    assert "check that the server is running" in msg
    r = run_cli("runs", "--db", url)
    assert r.exit_code == 1 and "s3cret" not in r.output and "cannot open the store" in r.output


def test_pg_missing_database_says_createdb(pg_server: PgServer) -> None:
    with pytest.raises(StoreError, match=r"createdb no_such_db"):
        db.open_db(pg_server.url("no_such_db"))


def test_url_forms() -> None:
    assert db.resolve_url("postgresql://u@h/d") == "postgresql+psycopg://u@h/d"
    assert db.resolve_url("postgres://u@h:5433/d") == "postgresql+psycopg://u@h:5433/d"
    assert db.resolve_url("postgresql+psycopg://u@h/d") == "postgresql+psycopg://u@h/d"
    assert db.display_url("postgresql+psycopg://u:pw@h/d") == "postgresql+psycopg://u:***@h/d"


@pytest.mark.parametrize("fmt", ["binary", "text"])
def test_pg_bulk_rows_go_through_copy_and_round_trip(pg_url: str, monkeypatch: pytest.MonkeyPatch, fmt: str) -> None:
    import psycopg

    monkeypatch.setattr(bulk, "COPY_FORMAT", fmt)
    engine = db.open_db(pg_url)
    odd = ["tab\there", "back\\slash", "new\nline", "quote\"'", "\\N", "", "µ-ünïcode", "comma, semi;"]
    try:
        with engine.begin() as conn:
            assert bulk.uses_copy(conn)
            bulk.insert_rows(conn, "name", ("value",), [(v,) for v in odd])
            calls: list[str] = []
            real_copy = psycopg.Cursor.copy

            def spy(self: Any, statement: Any, *a: Any, **k: Any) -> Any:
                calls.append(str(statement))
                return real_copy(self, statement, *a, **k)

            monkeypatch.setattr(psycopg.Cursor, "copy", spy)
            bulk.insert_rows(conn, "name", ("value",), [("via copy",)])
            assert calls == ["COPY name (value) FROM STDIN" + (" (FORMAT BINARY)" if fmt == "binary" else "")]
        got = {v for (v,) in rows(pg_url, "select value from name")}
        assert got == set(odd) | {"via copy"}
        assert rows(pg_url, "select count(*) from name where value = ''") == [(1,)]
    finally:
        engine.dispose()


def test_pg_binary_copy_of_real_traces_matches_the_raw_files(pg_url: str, tmp_path: Path) -> None:
    """Real traces through binary COPY (several chunks for the rocprofv3 JSON's 43,915 kernels): Nsight
    Systems kernels equal the raw CUPTI table's count and sum; every activity and counter column equals
    what SQLite stores from the same files."""
    nsys = SAMPLES / "nsys_sqlite" / "perlmutter-cloverleaf-cuda.sqlite"
    rocjson = SAMPLES / "rocprof_json" / "908_results.json.gz"
    sqlite_url = f"sqlite:///{tmp_path / 'profdb.db'}"
    for url in (pg_url, sqlite_url):
        ingest_paths([nsys], url, run="nsys")
        ingest_paths([rocjson], url, run="json", flags=IdentityFlags(rank=0))
        ingest_paths([ROCPROF_2025], url, run="csv", flags=IdentityFlags(rank=0, allow_duplicate_ranks=True))
    con = sqlite3.connect(nsys)
    raw = con.execute('select count(*), sum("end" - start) from CUPTI_ACTIVITY_KIND_KERNEL').fetchone()
    con.close()
    assert rows(pg_url, "select count(*), sum(duration_ns) from activity_v where run = 'nsys' and kind = 'kernel'") == [
        (raw[0], Decimal(raw[1]))]
    assert rows(pg_url, "select count(*) from activity_v where run = 'json' and kind = 'kernel'") == [(43915,)]
    for view in ("activity_v", "counter_v"):
        cols = VIEW_COLUMNS[view]
        a = sorted((tuple(_norm(v) for v in r) for r in rows(sqlite_url, f"select {cols} from {view}")), key=repr)
        b = sorted((tuple(_norm(v) for v in r) for r in rows(pg_url, f"select {cols} from {view}")), key=repr)
        assert len(a) > (40000 if view == "activity_v" else 0)
        assert a == b, view


def _one_rank_store(url: str) -> tuple[int, int, list[int]]:
    """A run with one rank and one source file, and three names: (rank id, source id, name ids)."""
    engine = db.open_db(url)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql("INSERT INTO run (name, created_at) VALUES ('r', now())")
            rank = conn.exec_driver_sql("INSERT INTO rank (run_id, global_rank) SELECT id, 0 FROM run RETURNING id")
            rank_id = int(rank.scalar_one())
            src = conn.exec_driver_sql(
                "INSERT INTO source_file (run_id, rank_id, path, content_hash, size_bytes, format, content_kind, rows, "
                "time_base_ns, ingested_at) SELECT run_id, id, 'p', 's', 1, 'f', '', 0, 0, now() FROM rank RETURNING id")
            source_id = int(src.scalar_one())
            names = [int(i) for (i,) in conn.exec_driver_sql(
                "INSERT INTO name (value) VALUES ('a'), ('b'), ('c') RETURNING id")]
    finally:
        engine.dispose()
    return rank_id, source_id, names


def _activity(rank_id: int, source_id: int, name_id: int, n: int, **cols: Any) -> list[tuple[Any, ...]]:
    base = dict(rank_id=rank_id, source_id=source_id, kind="kernel", category="compute", name_id=name_id,
                start_ns=10**15, duration_ns=1000, correlation=None, launch_id=1, origin_id=1, args=None)
    out = []
    for i in range(n):
        row = base | {k: (v(i) if callable(v) else v) for k, v in cols.items()}
        row["start_ns"] = 10**15 + i * 2000
        out.append(tuple(row[c] for c in bulk.Writer.ACTIVITY_COLS))
    return out


def test_pg_binary_copy_keeps_every_value_and_falls_back_to_text_per_chunk(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Values binary COPY cannot carry (a str in an integer column, as a reader of an odd file or an
    SQLite source might hand over) send their chunk as text, where the server converts them as before;
    the other chunks stay binary, and every row arrives once."""
    import psycopg

    rank_id, source_id, (n1, n2, _) = _one_rank_store(pg_url)
    monkeypatch.setattr(bulk, "COPY_CHUNK", 4)
    rows_in = _activity(rank_id, source_id, n1, 12, launch_id=lambda i: "7" if i == 5 else i % 3,
                        correlation=lambda i: None if i % 2 else 2**62 + i, args=lambda i: f"é\t{i}")
    rows_in += _activity(rank_id, source_id, n2, 3, kind="memcpy", category="memory", launch_id=4)
    statements: list[str] = []
    real_copy = psycopg.Cursor.copy

    def spy(self: Any, statement: Any, *a: Any, **k: Any) -> Any:
        statements.append(str(statement).rsplit(" ", 2)[-1])
        return real_copy(self, statement, *a, **k)

    monkeypatch.setattr(psycopg.Cursor, "copy", spy)
    engine = db.open_db(pg_url)
    try:
        with engine.begin() as conn:
            assert bulk.copy_rows(conn, "activity", bulk.Writer.ACTIVITY_COLS, rows_in) == 15
    finally:
        engine.dispose()
    assert statements == ["BINARY)", "STDIN", "BINARY)", "BINARY)"]  # the chunk holding "7" went as text
    got = rows(pg_url, f"select {', '.join(bulk.Writer.ACTIVITY_COLS)} from activity order by id")
    want = [tuple(7 if v == "7" else v for v in r) for r in rows_in]
    assert got == want


def test_pg_an_int4_out_of_range_is_refused_not_wrapped(pg_url: str) -> None:
    """psycopg's binary int4 dumper wraps 2**31 to -2**31 without a word; the chunk goes as text and
    the server refuses it, as text COPY always did, and nothing is written."""
    import psycopg

    rank_id, source_id, (n1, _, _) = _one_rank_store(pg_url)
    engine = db.open_db(pg_url)
    try:
        with pytest.raises(psycopg.errors.NumericValueOutOfRange):
            with engine.begin() as conn:
                bulk.copy_rows(conn, "activity", bulk.Writer.ACTIVITY_COLS,
                               _activity(rank_id, source_id, n1, 3, launch_id=lambda i: 2**31 if i == 1 else 1))
    finally:
        engine.dispose()
    assert rows(pg_url, "select count(*) from activity") == [(0,)]


def test_pg_fact_ids_are_checked_once_and_held(pg_url: str) -> None:
    """Without the fact tables' foreign keys, a load's rank, source and name ids are checked once per
    transaction (a missing one fails the load and writes nothing), and locked until it ends: another
    session cannot delete the rank meanwhile, and deleting it afterwards takes the rows along."""
    from sqlalchemy import event

    rank_id, source_id, (n1, n2, n3) = _one_rank_store(pg_url)
    engine = db.open_db(pg_url)
    checks: list[str] = []

    @event.listens_for(engine, "before_cursor_execute")
    def seen(conn: Any, cursor: Any, statement: str, *a: Any) -> None:
        if "FOR KEY SHARE" in statement:
            checks.append(statement.split()[3])  # the table

    other = create_engine(pg_url)
    try:
        missing = r"activity rows refer to name id\(s\) 999999, which are not in the store"
        with pytest.raises(StoreError, match=missing):
            with engine.begin() as conn:
                bulk.copy_rows(conn, "activity", bulk.Writer.ACTIVITY_COLS, _activity(rank_id, source_id, n1, 5))
                bulk.copy_rows(conn, "activity", bulk.Writer.ACTIVITY_COLS, _activity(rank_id, source_id, 999999, 5))
        assert rows(pg_url, "select count(*) from activity") == [(0,)]
        checks.clear()
        with engine.begin() as conn:
            for name_id in (n1, n2, n1, n3, n2):
                bulk.copy_rows(conn, "activity", bulk.Writer.ACTIVITY_COLS, _activity(rank_id, source_id, name_id, 5))
            assert sorted(checks) == ["name", "name", "name", "rank", "source_file"]  # each id once
            with other.connect() as o:  # the rank is held: another session's delete waits for this load
                o.exec_driver_sql("SET lock_timeout = '300ms'")
                with pytest.raises(Exception, match="lock timeout"):
                    o.exec_driver_sql(f"DELETE FROM rank WHERE id = {rank_id}")
        assert rows(pg_url, "select count(*) from activity") == [(25,)]
        with other.begin() as o:
            o.exec_driver_sql(f"DELETE FROM rank WHERE id = {rank_id}")
        assert rows(pg_url, "select count(*) from activity") == [(0,)]
    finally:
        engine.dispose()
        other.dispose()


def test_pg_a_rank_deleted_before_the_check_fails_the_load(pg_url: str) -> None:
    """Another session deleted the rank (and committed) between the load's start and its rows: the
    check finds it missing; the load fails whole, with a message saying what happened and what to do."""
    rank_id, source_id, (n1, _, _) = _one_rank_store(pg_url)
    engine = db.open_db(pg_url)
    try:
        with pytest.raises(StoreError, match=r"deleted them while this load ran.*run it again"):
            with engine.begin() as conn:
                conn.exec_driver_sql("SELECT 1")  # the load's transaction is open
                with create_engine(pg_url).begin() as o:
                    o.exec_driver_sql(f"DELETE FROM rank WHERE id = {rank_id}")
                bulk.copy_rows(conn, "activity", bulk.Writer.ACTIVITY_COLS, _activity(rank_id, source_id, n1, 5))
    finally:
        engine.dispose()
    assert rows(pg_url, "select count(*) from activity") == [(0,)]


def test_pg_a_grid_beyond_32_bits_is_held_as_in_sqlite(pg_url: str, tmp_path: Path) -> None:
    """A real rocprofv3 kernel trace whose second dispatch has a grid of 3e9 work-items: the launch
    table's grid and block sizes are 64-bit on both engines (migration 0005), so the team store holds
    what an SQLite store holds (a 32-bit grid_x refused the whole load before)."""
    job = tmp_path / "rank0000"
    job.mkdir()
    lines = (ROCPROF_2025 / "kernel_trace.csv").read_text().splitlines()
    assert lines[2].endswith(",1024,1024,1")
    big = job / "4000_kernel_trace.csv"
    big.write_text("\n".join([*lines[:2], lines[2][: -len("1024,1024,1")] + "3000000000,1024,1", *lines[3:]]) + "\n")
    lite = tmp_path / "s.db"
    for url in (pg_url, str(lite)):
        ingest_paths([big], url, run="big", flags=IdentityFlags(rank=0))
    q = "select grid_x, count(*) from activity_v group by grid_x order by grid_x"
    assert rows(pg_url, q) == sql(lite, q) and (3_000_000_000, 1) in rows(pg_url, q)


def test_pg_copy_errors_name_the_file_of_the_refused_row(pg_url: str) -> None:
    import psycopg

    rank_id, source_id, (n1, _, _) = _one_rank_store(pg_url)
    engine = db.open_db(pg_url)
    try:
        with pytest.raises(psycopg.Error) as ei:
            with engine.begin() as conn:
                bulk.copy_rows(conn, "activity", bulk.Writer.ACTIVITY_COLS,
                               _activity(rank_id, source_id, n1, 4, launch_id=lambda i: -(2**40) if i == 2 else 64))
    finally:
        engine.dispose()
    err = bulk.explain_db_error(ei.value, "teamdb", ["a.csv", "b.csv"], {source_id: "b.csv", 999: "a.csv"})
    assert err is not None and str(err).startswith("b.csv: the store teamdb refused a value from it: ")
    assert "(activity.launch_id)" in str(err)
    assert bulk.explain_db_error(ValueError("not the database's"), "teamdb", ["a.csv"]) is None


def test_pg_a_lost_connection_during_ingest_is_one_message(pg_url: str, tmp_path: Path) -> None:
    """The server ends the load's session midway (as a restart or an administrator would): one message
    saying the connection was lost, nothing written, what to check; no traceback, no SQLAlchemy text."""
    write_rocprof_run(tmp_path / "job", ranks=2, dispatches=300)
    db.open_db(pg_url).dispose()
    killer = create_engine(pg_url)

    def kill_others(event: str, path: str, done: int, total: int) -> None:
        if event == "file":
            with killer.connect() as k:
                k.exec_driver_sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                  "WHERE datname = current_database() AND pid <> pg_backend_pid()")

    try:
        with pytest.raises(StoreError) as ei:  # (ingest_paths explains it: bulk.db_errors_explained)
            ingest_paths([tmp_path / "job"], pg_url, run="job", progress=kill_others)
    finally:
        killer.dispose()
    msg = str(ei.value)
    assert msg.startswith(f"loading 4 inputs ({tmp_path / 'job' / 'rank0000'}")
    assert "failed: the connection to the server was lost" in msg
    assert "nothing was written" in msg and "sqlalche" not in msg and "\n" not in msg
    assert rows(pg_url, "select count(*) from activity") == [(0,)]


# ----------------------------------------------------------------------------- SQLite lock


def test_sqlite_store_locked_by_another_writer_gives_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmp_path / "profdb.db"
    write_rocprof_run(tmp_path / "a", ranks=1, dispatches=10)
    ingest_paths([tmp_path / "a"], str(store), run="a")
    holder = sqlite3.connect(store, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    monkeypatch.setattr(db, "SQLITE_BUSY_S", 1)
    try:
        t = time.monotonic()
        with pytest.raises(StoreError, match="locked by another profdb; retry, or ingest into separate files and merge"):
            ingest_paths([tmp_path / "a"], str(store), run="b")
        assert time.monotonic() - t < 20
    finally:
        holder.rollback()
        holder.close()
    assert store.exists()  # the existing store is never removed
    assert rows(f"sqlite:///{store}", "select name from run") == [("a",)]


class socket_closed_port:
    """A loopback port nothing listens on (bound, then released)."""

    def __enter__(self) -> int:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])

    def __exit__(self, *a: Any) -> None:
        return None


# ----------------------------------------------------------------------------- the PostgreSQL benchmark


def test_pg_ingest_benchmark_runs_at_tiny_size(pg_server: PgServer) -> None:
    """benchmarks/pg_ingest.py at tiny size, one case of each kind (it checks each store's row count)."""
    bench = Path(__file__).resolve().parents[1] / "benchmarks" / "pg_ingest.py"
    cases = ("load_binary", "load_text_fks", "load_binary_4nodes", "ingest_pg", "ingest_pg_fks", "scale")
    r = subprocess.run(
        [sys.executable, str(bench), "--ranks", "2", "--dispatches", "300", "--scale-ranks", "4",
         "--scale-dispatches", "200", "--analysis-ranks", "4", "--analysis-nodes", "2", "--analysis-steps", "20",
         "--pg-url", pg_server.admin_url, "--json", *[a for c in (*cases, "analysis_nodes") for a in ("--only", c)]],
        capture_output=True, text=True, timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout)
    for case in (*cases[:-1], "scale_load_4nodes"):
        assert out[case]["rows"] == (4 * 220 if case.startswith("scale") else 2 * 330), case
    assert len(out["load_binary_4nodes"]["node_rows"]) == 2  # two ranks: two nodes of one rank each
    assert out["scale_1024x200k"]["job_rows"] == 1024 * 220_000
    # (each way, the benchmark checked the kept analysis is current and of every rank)
    assert out["analysis_nodes"]["calls"] == 4 * 20 and out["analysis_nodes"]["ranks"] == 4
