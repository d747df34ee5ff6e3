"""fact_span (migration 0010): an SQLite store's fact tables have no secondary index; each source file's
rows are id ranges that every load records. These tests hold the spans to what the tables hold, on real
inputs and on loads whose files interleave, and check what used the indexes (deletes, reads by rank or
file, merge, reclassify) through them."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from alembic import command

from conftest import Invoke, sql
from pg_fixtures import write_rocprof_run
from profdb.store import bulk, ingest_columns, ingest_workers
from profdb.store.db import alembic_config, make_engine
from profdb.store.ingest import ingest_paths
from profdb.store.readers import rocprof_csv

#: every fact row, in exactly one span, and that span is of the row's own rank and file
_UNCOVERED = """select count(*) from {t} x where (select count(*) from fact_span s where s.fact = '{t}'
    and x.id between s.first_id and s.last_id) != 1 or not exists (select 1 from fact_span s where s.fact = '{t}'
    and x.id between s.first_id and s.last_id and s.source_id = x.source_id and s.rank_id = x.rank_id)"""


def check_spans(db: Path) -> dict[str, int]:
    """Assert the spans are exactly the fact tables' rows, file by file; return the span count per table."""
    out = {}
    for t in ("activity", "counter"):
        assert sql(db, _UNCOVERED.format(t=t)) == [(0,)], t
        # every span holds rows only (its length is the rows of its file in it), and spans do not overlap
        held = sql(db, f"""select count(*) from fact_span s where s.fact = '{t}' and s.last_id - s.first_id + 1 !=
            (select count(*) from {t} x where x.id between s.first_id and s.last_id and x.source_id = s.source_id)""")
        assert held == [(0,)], t
        spans = sql(db, f"select first_id, last_id from fact_span where fact = '{t}' order by first_id")
        assert all(a[1] < b[0] for a, b in zip(spans, spans[1:])), t
        assert sql(db, f"select count(*) from {t}")[0][0] == sum(b - a + 1 for a, b in spans), t
        out[t] = len(spans)
    return out


def test_spans_of_real_inputs(data: Path, tmp_path: Path, run_cli: Invoke) -> None:
    """The rocprofv3 8-rank example (kernels and counters: column batches), the Kineto torchrun sample (row
    batches), a second ingest into the same store, and nsys/RPD samples: spans cover every row once."""
    db = tmp_path / "s.db"
    examples = Path(__file__).parent.parent / "examples"
    for folder in (examples / "rocprof-8ranks", examples / "torchrun4_cpu"):
        r = run_cli("ingest", "--db", db, folder)
        assert r.exit_code == 0, r.output
    n = check_spans(db)
    assert n["activity"] >= 8 + 4 and n["counter"] >= 8
    assert sql(db, "select count(*) from activity")[0][0] > 1000
    for f in sorted((data / "nsys_sqlite").glob("*.sqlite"))[:1] + sorted((data / "legacy_rpd").glob("*.rpd"))[:1]:
        r = run_cli("ingest", "--db", db, "--run", f.stem, "--rank", "0", f)
        assert r.exit_code == 0, r.output
    check_spans(db)
    # the views read the rows through the spans: the same rows as a plain join of the tables
    plain_a = """select r.name, k.global_rank, a.kind, n.value, a.start_ns, a.duration_ns, o.device, a.args from activity a
        join rank k on k.id = a.rank_id join run r on r.id = k.run_id join name n on n.id = a.name_id
        join launch l on l.id = a.launch_id join origin o on o.id = a.origin_id"""
    view_a = "select run, global_rank, kind, name, start_ns, duration_ns, device, args from activity_v"
    assert sorted(sql(db, view_a), key=repr) == sorted(sql(db, plain_a), key=repr)
    plain_c = """select r.name, k.global_rank, kn.value, cn.value, c.value, c.dispatch_id from counter c
        join rank k on k.id = c.rank_id join run r on r.id = k.run_id join name kn on kn.id = c.kernel_name_id
        join name cn on cn.id = c.counter_name_id"""
    view_c = "select run, global_rank, kernel, counter, value, dispatch_id from counter_v"
    assert sorted(sql(db, view_c), key=repr) == sorted(sql(db, plain_c), key=repr) != []
    # one rank's rows: its spans, then id ranges; the whole view: run, rank, spans, rows (never the
    # fact table outside)
    plan = " | ".join(r[-1] for r in sql(db, "explain query plan select count(*) from activity_v where "
                                             "run = 'rocprof-8ranks' and global_rank = 3"))
    assert "ix_fact_span_rank_id" in plan and "INTEGER PRIMARY KEY (rowid>? AND rowid<?)" in plan, plan
    plan = [r[-1] for r in sql(db, "explain query plan select count(*) from activity_v")]
    assert plan[0].startswith("SCAN r") and "rowid>? AND rowid<?" in " ".join(plan), plan


@pytest.mark.parametrize("columns", [True, False])
def test_spans_when_files_interleave(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, columns: bool) -> None:
    """Two workers, small batches: the files' batches reach the writer interleaved, so each file has many
    spans; they still cover each row once, and the totals per rank are what the files hold."""
    run = tmp_path / "run"
    want = write_rocprof_run(run, ranks=4, dispatches=3000, seed=3)
    monkeypatch.setenv(ingest_workers.ENV_WORKERS, "2")
    monkeypatch.setattr(ingest_workers, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(bulk, "DEFER_INDEXES_MIN_BYTES", 0)
    monkeypatch.setattr(rocprof_csv, "BLOCK", 16 << 10)  # (column batches of 16 KiB of text)
    # each file read alone, and its batches sent as made: not joined, neither in a group nor when the
    # batches held until the store's ids came are sent (ingest_columns.concat)
    monkeypatch.setattr(rocprof_csv, "GROUP_FILE_BYTES", 0)
    monkeypatch.setattr(ingest_columns, "CONCAT_ROWS", 0)
    monkeypatch.setattr(ingest_workers, "BATCH", 100)
    if not columns:
        monkeypatch.setattr(ingest_workers, "_column_reader", lambda task: None)
    db = tmp_path / "s.db"
    ingest_paths([run], str(db), run="r")
    n = check_spans(db)
    assert n["activity"] > 8  # (many batches per file, interleaved)
    got = dict(sql(db, "select k.global_rank, count(*) from activity a join rank k on k.id = a.rank_id group by 1"))
    assert got == {g: e["kernels"] for g, e in want.items()}


def test_deletes_and_reads_go_through_the_spans(tmp_path: Path, run_cli: Invoke) -> None:
    """Deleting a file, a rank or a run (foreign keys on, as profdb's connections have them) deletes their
    fact rows and spans and nothing else; a rank's and a file's rows are read as id ranges."""
    a, b = tmp_path / "a", tmp_path / "b"
    write_rocprof_run(a, ranks=3, dispatches=400, seed=1)
    write_rocprof_run(b, ranks=2, dispatches=300, seed=2)
    db = tmp_path / "s.db"
    ingest_paths([a], str(db), run="a")
    ingest_paths([b], str(db), run="b")
    check_spans(db)
    con = sqlite3.connect(db)
    con.execute("pragma foreign_keys = on")

    def rows_of_run(run: str) -> int:
        return int(con.execute("select count(*) from activity x join rank k on k.id = x.rank_id join run r on "
                               "r.id = k.run_id where r.name = ?", (run,)).fetchone()[0])

    b_rows = rows_of_run("b")
    sid, rid = con.execute("select id, rank_id from source_file where path like '%kernel_trace.csv' "
                           "order by id limit 1").fetchone()
    con.execute("delete from source_file where id = ?", (sid,))
    assert con.execute("select count(*) from activity where source_id = ?", (sid,)).fetchone() == (0,)
    assert con.execute("select count(*) from fact_span where source_id = ?", (sid,)).fetchone() == (0,)
    con.execute("delete from rank where id = (select max(id) from rank where run_id = (select id from run "
                "where name = 'a'))")
    con.execute("delete from run where name = 'a'")
    con.commit()
    assert rows_of_run("b") == b_rows
    assert con.execute("select count(*) from activity").fetchone() == (b_rows,)
    assert con.execute("select count(*) from counter where rank_id not in (select id from rank)").fetchone() == (0,)
    assert con.execute("select count(*) from fact_span where rank_id not in (select id from rank)").fetchone() == (0,)
    # a file or rank id that rows use cannot change (fact_span's key on source_file)
    with pytest.raises(sqlite3.IntegrityError):
        con.execute("update source_file set id = id + 1000 where id = (select min(source_id) from fact_span)")
    con.rollback()
    # a rank's rows: rowid ranges of activity, found through the spans
    from sqlalchemy import func, select

    from profdb.store import fact_spans
    from profdb.store.models import Activity

    engine = make_engine(f"sqlite:///{db}")
    with engine.connect() as conn:
        rank = int(conn.exec_driver_sql("select min(id) from rank").scalar_one())
        frm, cond = fact_spans.scoped(conn, Activity.__table__, ranks=[rank])
        q = select(func.count()).select_from(frm).where(*cond)
        plan = " ".join(str(r[-1]) for r in conn.exec_driver_sql(
            "explain query plan " + str(q.compile(conn, compile_kwargs={"literal_binds": True}))))
        assert "INTEGER PRIMARY KEY (rowid>? AND rowid<?)" in plan and "ix_fact_span_rank_id" in plan, plan
        assert conn.execute(q).scalar_one() == con.execute(
            "select count(*) from activity where rank_id = ?", (rank,)).fetchone()[0] > 0
    engine.dispose()
    con.close()
    check_spans(db)
    # merge into another store: its spans cover what was copied
    r = run_cli("merge", "--db", tmp_path / "m.db", db)
    assert r.exit_code == 0, r.output
    assert check_spans(tmp_path / "m.db")["activity"] > 0
    assert sql(tmp_path / "m.db", "select count(*) from activity") == [(b_rows,)]


def test_0010_computes_the_spans_of_an_existing_store(data: Path, tmp_path: Path) -> None:
    """A store filled at 0009 (its files' rows interleaved, as two workers leave them) upgraded to 0010:
    same rows and ids, the spans of its rows, no rank or source keys, no fact indexes; and back."""
    db = tmp_path / "old.db"
    url = f"sqlite:///{db}"
    engine = make_engine(url)
    with engine.begin() as conn:
        command.upgrade(alembic_config(conn), "0009")
    engine.dispose()
    con = sqlite3.connect(db)
    con.execute("insert into run (id, name, created_at) values (1, 'r', '2026-01-01 00:00:00')")
    con.executemany("insert into rank (id, run_id, global_rank, hostname) values (?, 1, ?, 'h')", [(1, 0), (2, 1)])
    con.executemany(
        "insert into source_file (id, run_id, rank_id, path, sha256, size_bytes, format, content_kind, rows, "
        "time_base_ns, ingested_at) values (?, 1, ?, ?, ?, 1, 'f', '', 0, 0, '2026-01-01 00:00:00')",
        [(s, r, f"p{s}", f"{s:064d}") for s, r in ((1, 1), (2, 1), (3, 2))])
    con.execute("insert into name (id, value) values (1, 'k')")
    con.execute("insert into launch (id, key) values (1, '')")
    files = [1, 1, 2, 3, 3, 3, 1, 2, 2, 3, 1]  # (interleaved runs of each file's rows)
    rank = {1: 1, 2: 1, 3: 2}
    con.executemany("insert into activity (rank_id, source_id, kind, category, name_id, start_ns, duration_ns, "
                    "launch_id) values (?, ?, 'kernel', 'compute', 1, ?, 5, 1)",
                    [(rank[s], s, i) for i, s in enumerate(files)])
    con.executemany("insert into counter (rank_id, source_id, kernel_name_id, counter_name_id, value, samples) "
                    "values (?, ?, 1, 1, 1.0, 1)", [(rank[s], s) for s in (3, 3, 1)])
    con.commit()
    before = con.execute("select * from activity order by id").fetchall()
    con.close()
    engine = make_engine(url)
    with engine.begin() as conn:
        command.upgrade(alembic_config(conn), "0010")
    engine.dispose()
    assert sql(db, "select * from activity order by id") == before
    assert sql(db, "select fact, rank_id, source_id, first_id, last_id from fact_span order by fact, first_id") == [
        ("activity", 1, 1, 1, 2), ("activity", 1, 2, 3, 3), ("activity", 2, 3, 4, 6), ("activity", 1, 1, 7, 7),
        ("activity", 1, 2, 8, 9), ("activity", 2, 3, 10, 10), ("activity", 1, 1, 11, 11),
        ("counter", 2, 3, 1, 2), ("counter", 1, 1, 3, 3)]
    check_spans(db)
    assert sql(db, "select name from sqlite_master where type = 'index' and tbl_name in ('activity', 'counter') "
                   "and sql is not null") == []
    assert {r[2] for t in ("activity", "counter") for r in sql(db, f"pragma foreign_key_list({t})")} == {"name"}
    assert {"activity_v", "counter_v"} <= {r[0] for r in sql(db, "select name from sqlite_master where type = 'view'")}
    assert len(sql(db, "select * from activity_v")) == len(files)
    assert len(sql(db, "select * from counter_v")) == 3
    engine = make_engine(url)
    with engine.begin() as conn:
        command.downgrade(alembic_config(conn), "0009")
    engine.dispose()
    assert sql(db, "select * from activity order by id") == before
    assert {r[0] for r in sql(db, "select name from sqlite_master where type = 'index' and tbl_name in "
                                  "('activity', 'counter') and sql is not null")} == {
        "ix_activity_rank_name", "ix_activity_source_id", "ix_counter_rank_id", "ix_counter_source_id"}
    assert {r[2] for r in sql(db, "pragma foreign_key_list(activity)")} == {"name", "rank", "source_file"}
    assert len(sql(db, "select * from activity_v")) == len(files)
    assert len(sql(db, "select * from counter_v")) == 3
    assert "fact_span" not in sql(db, "select sql from sqlite_master where name = 'activity_v'")[0][0]


def test_an_id_taken_behind_the_writers_back_fails_the_load(tmp_path: Path) -> None:
    """The spans are counted, not read back: if the table's ids did not follow (a row another way), the
    load fails whole rather than keep spans that do not match."""
    from profdb.store.fact_spans import Spans

    db = tmp_path / "s.db"
    run = tmp_path / "run"
    write_rocprof_run(run, ranks=1, dispatches=50, counters=False)
    ingest_paths([run], str(db), run="r")
    engine = make_engine(f"sqlite:///{db}")
    with engine.begin() as conn:
        spans = Spans(conn)
        sid, rid = conn.exec_driver_sql("select id, rank_id from source_file").one()
        conn.exec_driver_sql(f"insert into activity (rank_id, source_id, kind, category, name_id, start_ns, "
                             f"duration_ns, launch_id, origin_id) select rank_id, source_id, kind, category, name_id, "
                             f"start_ns, duration_ns, launch_id, origin_id from activity where source_id = {sid} limit 3")
        spans.added("activity", rid, sid, 3)
        conn.exec_driver_sql(f"insert into activity (id, rank_id, source_id, kind, category, name_id, start_ns, "
                             f"duration_ns, launch_id, origin_id) select max(id) + 5, {rid}, {sid}, 'kernel', 'compute', "
                             f"1, 0, 1, 1, 1 from activity")  # (an id the counting did not expect)
        spans.added("activity", rid, sid, 1)
        with pytest.raises(RuntimeError, match="internal error: activity ends at id"):
            spans.write()
    engine.dispose()


def test_an_upgrade_runs_with_temporary_files_and_gives_the_settings_back(tmp_path: Path) -> None:
    """upgrade_db runs the migrations with temporary storage in files and a smaller page cache (a
    copy of a fact table sorts and journals past the cache: in memory, a 4M-row store's upgrade to
    0010 peaked at 383 MB, with files at 79 MB), and the connection gets profdb's settings back."""
    from profdb.store import db as store_db

    path = tmp_path / "old.db"
    engine = make_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        command.upgrade(alembic_config(conn), "0009")
    engine.dispose()
    seen: list[tuple[int, int]] = []
    real = command.upgrade

    def upgrade(config: object, revision: str) -> None:
        conn = config.attributes["connection"]  # type: ignore[attr-defined]
        seen.append((int(conn.exec_driver_sql("PRAGMA temp_store").scalar()),
                     int(conn.exec_driver_sql("PRAGMA cache_size").scalar())))
        real(config, revision)  # type: ignore[arg-type]

    mp = pytest.MonkeyPatch()
    mp.setattr(command, "upgrade", upgrade)
    try:
        engine = store_db.open_db(str(path))
    finally:
        mp.undo()
    try:
        assert seen == [(1, -store_db.UPGRADE_CACHE_KIB)]  # (1: FILE)
        with engine.connect() as conn:
            assert int(conn.exec_driver_sql("PRAGMA temp_store").scalar()) == 2  # MEMORY, as before
            assert int(conn.exec_driver_sql("PRAGMA cache_size").scalar()) == -65536
            assert conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar() == store_db.head_revision()
    finally:
        engine.dispose()


def test_ids_freed_by_hand_and_taken_again(tmp_path: Path) -> None:
    """Rows deleted by hand from the end of activity free their ids; the next load takes them, so the
    first file's old span now covers the new file's rows. The views, the reads and deleting the first
    file still see each row under its own file only."""
    from sqlalchemy import func, select

    from profdb.store import fact_spans
    from profdb.store.models import Activity

    a, b = tmp_path / "a", tmp_path / "b"
    write_rocprof_run(a, ranks=1, dispatches=200, counters=False, seed=4)
    write_rocprof_run(b, ranks=1, dispatches=150, counters=False, seed=5)
    db = tmp_path / "s.db"
    ingest_paths([a], str(db), run="a")
    con = sqlite3.connect(db)
    top = con.execute("select max(id) from activity").fetchone()[0]
    con.execute("delete from activity where id > ?", (top - 50,))  # (by hand: the file's span stays)
    con.commit()
    ingest_paths([b], str(db), run="b")
    (sid_a,), (sid_b,) = con.execute("select id from source_file order by id").fetchall()
    overlap = con.execute("select count(*) from activity where source_id = ? and id between (select min(first_id) "
                          "from fact_span where source_id = ?) and (select max(last_id) from fact_span where "
                          "source_id = ?)", (sid_b, sid_a, sid_a)).fetchone()[0]
    assert overlap == 50  # (the new file's first rows took the freed ids)
    plain = "select r.name, count(*) from activity x join rank k on k.id = x.rank_id join run r on r.id = k.run_id "
    assert sql(db, "select run, count(*) from activity_v group by 1 order by 1") == sql(db, plain + "group by 1 order by 1")
    assert sql(db, "select run, count(*) from activity_v group by 1 order by 1") == [("a", 150), ("b", 150)]
    engine = make_engine(f"sqlite:///{db}")
    with engine.connect() as conn:
        for sid, want in ((sid_a, 150), (sid_b, 150)):
            frm, cond = fact_spans.scoped(conn, Activity.__table__, sources=[sid])
            assert conn.execute(select(func.count()).select_from(frm).where(*cond)).scalar_one() == want
    engine.dispose()
    con.execute("pragma foreign_keys = on")
    con.execute("delete from source_file where id = ?", (sid_a,))
    con.commit()
    assert con.execute("select source_id, count(*) from activity group by 1").fetchall() == [(sid_b, 150)]
    con.close()
