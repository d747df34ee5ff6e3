"""The same store on SQLite and PostgreSQL: ingest of real samples and generated runs, runs/ranks,
idempotency, rollback, same answers from every view on both, and PostgreSQL's own concerns
(migrations under a lock, COPY, connection errors). Tests taking ``store_url`` run once per backend."""

from __future__ import annotations

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
    "source_v": "run, hostname, global_rank, local_rank, path, format, content_kind, rows, size_bytes, sha256, identity_origin",
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
            # the one deliberate difference: the fact tables' foreign keys, replaced on PostgreSQL by one id
            # check per load and delete triggers (0005_pg_fact_keys; SQLite keeps them)
            replaced = [d for d in diff if d[0] == "add_fk" and d[1].parent.name in bulk.FACT_REFS]
            assert {(fk.parent.name, fk.column_keys[0], fk.referred_table.name) for _, fk in replaced} == {
                (t, c, ref) for t, refs in bulk.FACT_REFS.items() for c, ref in refs.items()
            }
            assert [d for d in diff if d not in replaced] == []
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
