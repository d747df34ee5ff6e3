"""Migrations, as pytest-alembic checks them: empty -> head, round trips, every revision up and
down, models match migrations, an old store with data upgrades without losing rows (backup first)."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory

from conftest import Invoke, sql
from profdb.store import db as store_db
from profdb.store.db import alembic_config, current_revision, head_revision, make_engine, open_db, scripted_head
from profdb.store.models import Base


def _revisions() -> list[str]:
    script = ScriptDirectory.from_config(alembic_config())
    return [r.revision for r in reversed(list(script.walk_revisions()))]


def _migrate(url: str, fn: str, rev: str) -> None:
    engine = make_engine(url)
    with engine.begin() as conn:
        getattr(command, fn)(alembic_config(conn), rev)
    engine.dispose()


def test_empty_to_head(db_path: Path) -> None:
    engine = open_db(str(db_path))
    assert current_revision(engine) == head_revision()
    engine.dispose()
    tables = {t for (t,) in sql(db_path, "select name from sqlite_master where type in ('table', 'view')")}
    assert {"run", "rank", "source_file", "name", "activity", "counter", "summary", "step"} <= tables
    assert {"rank_v", "activity_v", "summary_v", "counter_v", "step_v", "source_v"} <= tables


def test_up_down_up_and_each_revision(db_path: Path) -> None:
    url = f"sqlite:///{db_path}"
    revs = _revisions()
    for rev in revs:
        _migrate(url, "upgrade", rev)
    _migrate(url, "downgrade", "base")
    assert {t for (t,) in sql(db_path, "select name from sqlite_master where type in ('table','view')")} <= {
        "alembic_version"
    }
    _migrate(url, "upgrade", "head")
    for rev in reversed(["base"] + revs[:-1]):
        _migrate(url, "downgrade", rev)
        _migrate(url, "upgrade", "head")
        _migrate(url, "downgrade", rev)
    _migrate(url, "upgrade", "head")


def test_models_match_migrations(db_path: Path) -> None:
    store_db._migrate_new(db_path)
    engine = make_engine(f"sqlite:///{db_path}")
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata)
    engine.dispose()
    assert diff == []


@pytest.mark.parametrize("start", _revisions()[:-1] or ["0001"])
def test_old_store_with_data_upgrades(tmp_path: Path, data: Path, run_cli: Invoke, start: str) -> None:
    """Ingest into a store held at an older revision, then open it with today's profdb."""
    db = tmp_path / "old.db"
    url = f"sqlite:///{db}"
    _migrate(url, "upgrade", start)
    # fill it through the tables that exist at that revision (the 0001 tables)
    head = _revisions()[-1]
    run_cli("ingest", "--db", tmp_path / "scratch.db", data / "kineto" / "torchrun4_cpu")
    scratch = sqlite3.connect(tmp_path / "scratch.db")
    con = sqlite3.connect(db)
    # (activity as today's store holds it, with its launch shape and origin joined back in for older
    # revisions: before 0005 as activity's columns, from 0005 to 0010 as a launch row per pair)
    shape = "o.device, o.stream, o.pid, o.tid, l.grid_x, l.grid_y, l.grid_z, l.block_x, l.block_y, l.block_z"
    scratch.execute(f"create temp view wide_activity as select a.*, {shape} from activity a join launch l on "
                    "l.id = a.launch_id join origin o on o.id = a.origin_id")
    scratch.execute("create temp table pair (id integer primary key, launch_id, origin_id)")
    scratch.execute("insert into pair (launch_id, origin_id) select distinct launch_id, origin_id from activity")
    key = " || '|' || ".join(f"coalesce(cast({c} as text), '')" for c in shape.split(", "))
    scratch.execute(f"create temp view old_launch as select p.id, {key} as key, {shape} from pair p join launch l "
                    "on l.id = p.launch_id join origin o on o.id = p.origin_id")
    scratch.execute("create temp view old_activity as select a.*, p.id as pair_id from activity a join pair p on "
                    "p.launch_id = a.launch_id and p.origin_id = a.origin_id")
    tables = {r[0] for r in con.execute("select name from sqlite_master where type = 'table'")}
    narrow, split = "launch" in tables, "origin" in tables  # 0005 and later, 0011 and later
    for table in ("run", "rank", "source_file", "name", *(["launch"] if narrow else []), *(["origin"] if split else []),
                  "activity", *(["fact_span"] if "fact_span" in tables else []), "summary", "step"):
        cols = [r[1] for r in con.execute(f"pragma table_info({table})")]
        source = {"activity": "wide_activity" if not narrow else table if split else "old_activity",
                  "launch": table if split else "old_launch"}.get(table, table)
        # (source_file.sha256 before 0013 is today's content_hash)
        picked = ["pair_id" if source == "old_activity" and c == "launch_id" else
                  "content_hash" if table == "source_file" and c == "sha256" else c for c in cols]
        rows = scratch.execute(f"select {', '.join(picked)} from {source}").fetchall()
        con.executemany(f"insert into {table} ({', '.join(cols)}) values ({', '.join('?' * len(cols))})", rows)
    con.commit()
    counts = {t: con.execute(f"select count(*) from {t}").fetchone()[0] for t in ("activity", "summary", "rank")}
    shown = sorted(scratch.execute("select * from activity_v").fetchall())  # what sqlite3 users see, by the view
    con.close()
    scratch.close()
    if start == head:
        return
    r = run_cli("runs", "--db", db)
    assert "torchrun4_cpu" in r.output
    assert Path(f"{db}.bak-{start}").exists(), "an older store is copied before it is upgraded"
    for t, n in counts.items():
        assert sql(db, f"select count(*) from {t}") == [(n,)]
    assert sql(db, "select version_num from alembic_version") == [(head,)]
    # every activity column came along, the launch shapes moved by 0005 included (ids are those of scratch)
    assert sorted(sql(db, "select * from activity_v")) == shown


def test_store_from_newer_profdb_is_refused(db_path: Path, run_cli: Invoke) -> None:
    open_db(str(db_path)).dispose()
    con = sqlite3.connect(db_path)
    con.execute("update alembic_version set version_num = 'ffff_future'")
    con.commit()
    con.close()
    before = db_path.read_bytes()
    r = run_cli("runs", "--db", db_path, ok=False)
    assert r.exit_code == 1 and "newer profdb" in r.stderr
    assert db_path.read_bytes() == before
    shutil.rmtree(db_path.parent, ignore_errors=True)


def _schema_of(path: Path) -> tuple[list[tuple[str, ...]], str, str]:
    con = sqlite3.connect(path)
    try:
        objects = sorted(con.execute("select type, name, tbl_name, coalesce(sql, '') from sqlite_master"))
        version = con.execute("select version_num from alembic_version").fetchone()[0]
        journal = con.execute("pragma journal_mode").fetchone()[0]
    finally:
        con.close()
    return objects, version, journal


def test_shipped_sqlite_schema_is_what_the_migrations_build() -> None:
    shipped = store_db.sqlite_schema_path().read_text()
    assert shipped == store_db.sqlite_schema_script(), (
        "alembic/sqlite_schema.sql is stale: regenerate it with `python -m profdb.store.db --write-schema`"
    )


def test_new_store_from_shipped_schema_equals_a_migrated_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    migrated = tmp_path / "migrated.db"
    store_db._migrate_new(migrated)

    def no_migrations(*_a: object, **_k: object) -> None:
        raise AssertionError("a new store at head is made from the shipped schema, without running migrations")

    monkeypatch.setattr(store_db, "upgrade_db", no_migrations)
    made = tmp_path / "made.db"
    assert store_db.create_sqlite_store(made)
    assert _schema_of(made) == _schema_of(migrated)
    assert _schema_of(made)[1:] == (head_revision(), "wal")
    assert list(tmp_path.glob(".made.db.*")) == []  # the private build is gone
    # a writing command's (or the API's) open_db on a new path makes it the same way (its upgrade_db
    # then finds the store at head; the migrations themselves must not run)
    monkeypatch.undo()
    monkeypatch.setattr(store_db, "_migrate_new", no_migrations)
    monkeypatch.setattr(command, "upgrade", no_migrations)
    opened = tmp_path / "opened.db"
    open_db(str(opened)).dispose()
    assert _schema_of(opened) == _schema_of(migrated)


def test_stale_shipped_schema_falls_back_to_the_migrations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A migration being written (the shipped script names an older head): new stores still reach
    the head, by running the migrations."""
    migrations = tmp_path / "migrations"
    shutil.copytree(store_db.migrations_dir(), migrations)
    script = migrations / store_db.SQLITE_SCHEMA
    script.write_text(script.read_text().replace(f"revision {head_revision()} ", "revision 0001 ", 1))
    monkeypatch.setattr(store_db, "migrations_dir", lambda: str(migrations))
    assert not store_db._create_from_schema(tmp_path / "unused.db")
    assert not (tmp_path / "unused.db").exists()
    made = tmp_path / "made.db"
    assert store_db.create_sqlite_store(made)
    assert _schema_of(made)[1] == head_revision()


def test_fast_head_check_agrees_with_alembic() -> None:
    assert scripted_head() == head_revision() == _revisions()[-1]


def test_0005_moves_launch_shapes_and_back_on_both_engines(store_url: str) -> None:
    """0005 on a store holding activity rows (SQLite: table copy; PostgreSQL: add/update/drop columns):
    every shape, NULLs included, becomes one launch row and activity_v shows the same columns; the
    downgrade puts the same values back in activity."""
    from datetime import datetime

    from sqlalchemy import text

    _migrate(store_url, "upgrade", "0004")
    now = datetime(2026, 1, 1)
    shape_cols = ("device", "stream", "pid", "tid", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")
    shapes = [(4, 1, None, 834304, 1024, 1024, 1, 64, 1, 1), (4, 1, None, 834304, 1024, 1024, 1, 64, 1, 1),
              (5, None, 7, 1 << 40, 8, 1, 1, 256, 1, 1), (None,) * 10, (None,) * 10]
    acts = [(i + 1, 1, 1, "kernel", "compute", 1 + i % 2, 100 * i, 10 + i, i, *shape, None if i else '{"a": 1}')
            for i, shape in enumerate(shapes)]
    cols = ("id", "rank_id", "source_id", "kind", "category", "name_id", "start_ns", "duration_ns", "correlation",
            *shape_cols, "args")
    engine = make_engine(store_url)
    with engine.begin() as c:
        c.execute(text("insert into run (id, name, created_at) values (1, 'r', :t)"), {"t": now})
        c.execute(text("insert into rank (id, run_id, global_rank) values (1, 1, 0)"))
        c.execute(text("insert into source_file (id, run_id, rank_id, path, sha256, size_bytes, format, content_kind, "
                       "rows, time_base_ns, ingested_at) values (1, 1, 1, 'p', 's', 1, 'f', 'k', 5, 0, :t)"), {"t": now})
        c.execute(text("insert into name (id, value) values (1, 'k1'), (2, 'k2')"))
        c.execute(text(f"insert into activity ({', '.join(cols)}) values ({', '.join(':' + x for x in cols)})"),
                  [dict(zip(cols, a)) for a in acts])
        before = sorted(tuple(r) for r in c.execute(text("select * from activity_v")))
    engine.dispose()
    _migrate(store_url, "upgrade", "head")
    engine = make_engine(store_url)
    with engine.begin() as c:
        assert sorted(tuple(r) for r in c.execute(text("select * from activity_v"))) == before
        assert c.execute(text("select count(*) from launch")).scalar() == 3
    engine.dispose()
    _migrate(store_url, "downgrade", "0004")
    engine = make_engine(store_url)
    with engine.begin() as c:
        back = sorted(tuple(r) for r in c.execute(text(f"select {', '.join(cols)} from activity")))
        assert back == sorted(acts)
        assert sorted(tuple(r) for r in c.execute(text("select * from activity_v"))) == before
    engine.dispose()
    _migrate(store_url, "upgrade", "head")


def test_0011_splits_launch_shapes_from_their_origins_and_back_on_both_engines(
    store_url: str, data: Path, run_cli: Invoke
) -> None:
    """0011 on a store at 0010 holding a real run and hand-made shapes where ranks share a grid/block
    but not their device, stream, pid or tid: each grid/block becomes one launch row, each origin one
    origin row, activity keeps its ids and activity_v shows the same rows (through fact_span on
    SQLite); the downgrade makes one ten-value launch row per pair again, the same view, the same ids."""
    from sqlalchemy import text

    _migrate(store_url, "upgrade", "0010")
    r = run_cli("ingest", "--db", store_url, data / "kineto" / "torchrun4_cpu")  # (opening upgrades it to head)
    assert r.exit_code == 0, r.output
    _migrate(store_url, "downgrade", "0010")
    cols = ("device", "stream", "pid", "tid", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")
    grid = (1024, 1, 1, 256, 1, 1)
    shapes = [(d, 1, p, t, *grid) for d, p, t in ((0, 10, 10), (1, 11, 11), (0, 10, 12))]
    shapes += [(None, None, 10, 10, *grid), (0, 1, 10, 10, None, None, None, None, None, None)]
    key = " || '|' || ".join(f"coalesce(cast({c} as text), '')" for c in cols)
    engine = make_engine(store_url)
    with engine.begin() as c:
        made = []
        for shape in shapes:
            params = dict(zip(cols, shape))
            c.execute(text(f"insert into launch (key, {', '.join(cols)}) select {key}, * from (select "
                           + ", ".join(f"cast(:{x} as bigint) as {x}" for x in cols) + ") v"), params)
            made.append(c.execute(text("select max(id) from launch")).scalar())
        # point some of the run's rows at them (every fifth row: the others keep their ingested shapes)
        ids = [i for (i,) in c.execute(text("select id from activity order by id"))]
        for n, aid in enumerate(ids[::5]):
            c.execute(text("update activity set launch_id = :l where id = :a"), {"l": made[n % len(made)], "a": aid})
        before = sorted(tuple(r) for r in c.execute(text("select * from activity_v")))
        pairs = c.execute(text("select count(distinct launch_id) from activity")).scalar()
        wide = {tuple(r) for r in c.execute(text(f"select distinct {', '.join('l.' + x for x in cols)} from activity a "
                                                 "join launch l on l.id = a.launch_id"))}
        stored = {tuple(r) for r in c.execute(text(f"select {', '.join(cols)} from launch"))}  # (some unused now)
    engine.dispose()
    assert len(before) == len(ids) > 1000 and pairs == len(wide)
    _migrate(store_url, "upgrade", "0011")
    engine = make_engine(store_url)
    with engine.begin() as c:
        assert sorted(tuple(r) for r in c.execute(text("select * from activity_v"))) == before
        assert [i for (i,) in c.execute(text("select id from activity order by id"))] == ids
        launches = {tuple(r) for r in c.execute(text(f"select {', '.join(cols[4:])} from launch"))}
        origins = {tuple(r) for r in c.execute(text(f"select {', '.join(cols[:4])} from origin"))}
        assert launches == {w[4:] for w in stored} and origins == {w[:4] for w in stored}
        assert c.execute(text("select count(*) from launch")).scalar() == len(launches)
        for t, n in (("launch", 6), ("origin", 4)):  # keys as bulk.shape_key writes them
            got = {k for (k,) in c.execute(text(f"select key from {t}"))}
            assert all(k.count("|") == n - 1 for k in got), got
        assert c.execute(text("select key from launch where grid_x = 1024 and block_x = 256")).scalar() == \
            "1024|1|1|256|1|1"
    engine.dispose()
    _migrate(store_url, "downgrade", "0010")
    engine = make_engine(store_url)
    with engine.begin() as c:
        assert sorted(tuple(r) for r in c.execute(text("select * from activity_v"))) == before
        assert [i for (i,) in c.execute(text("select id from activity order by id"))] == ids
        assert {tuple(r) for r in c.execute(text(f"select {', '.join(cols)} from launch"))} == wide
        assert c.execute(text(f"select count(*) from launch where key <> {key}")).scalar() == 0
    engine.dispose()
    _migrate(store_url, "upgrade", "head")


def test_0012_keeps_sqlite_summary_in_its_key_alone_and_back(store_url: str, data: Path, run_cli: Invoke) -> None:
    """0012 on a store at 0011 holding a real run: SQLite's summary becomes a WITHOUT ROWID table (no
    rowid, no second B-tree for its key) with the same rows, and every view answers as before (views
    that read views of summary included); the downgrade gives the rowid table back. PostgreSQL: no
    change."""
    from sqlalchemy import text

    r = run_cli("ingest", "--db", store_url, data / "kineto" / "torchrun4_cpu")
    assert r.exit_code == 0, r.output
    _migrate(store_url, "downgrade", "0011")
    sqlite = store_url.startswith("sqlite")

    def state() -> tuple[list[tuple[object, ...]], dict[str, int], set[str]]:
        engine = make_engine(store_url)
        with engine.begin() as c:
            rows = [tuple(x) for x in c.execute(text("select * from summary order by rank_id, name_id, kind"))]
            if sqlite:
                views = [v for (v,) in c.execute(text("select name from sqlite_master where type = 'view'"))]
                trees = {n for (n,) in c.execute(text("select name from sqlite_master where tbl_name = 'summary' "
                                                      "and type in ('table', 'index')"))}
                trees |= {"WITHOUT ROWID"} if "WITHOUT ROWID" in c.execute(text(
                    "select sql from sqlite_master where name = 'summary'")).scalar() else set()
            else:
                views = [v for (v,) in c.execute(text("select viewname from pg_views where schemaname = 'public'"))]
                trees = set()
            counts = {v: int(c.execute(text(f"select count(*) from {v}")).scalar() or 0) for v in views}
        engine.dispose()
        return rows, counts, trees

    rows, counts, trees = state()
    assert len(rows) > 50 and counts["summary_v"] == len(rows) and counts["imbalance_v"] > 0
    assert trees == ({"summary", "sqlite_autoindex_summary_1"} if sqlite else set())
    _migrate(store_url, "upgrade", "0012")
    assert state() == (rows, counts, {"summary", "WITHOUT ROWID"} if sqlite else set())
    _migrate(store_url, "downgrade", "0011")
    assert state() == (rows, counts, trees)
    _migrate(store_url, "upgrade", "head")


def _pg_fact_state(url: str) -> tuple[set[tuple[str, str]], set[str], dict[str, int]]:
    """(table, column) of the fact tables' foreign keys, profdb's triggers, and row counts."""
    from pg_fixtures import query_url

    fks = {(str(t), str(c)) for t, c in query_url(url, """
        select c.conrelid::regclass::text, a.attname from pg_constraint c
        join pg_attribute a on a.attrelid = c.conrelid and a.attnum = c.conkey[1]
        where c.contype = 'f' and c.conrelid in ('activity'::regclass, 'counter'::regclass)""")}
    triggers = {str(t) for (t,) in query_url(url, "select tgname from pg_trigger where not tgisinternal")}
    counts = {t: int(query_url(url, f"select count(*) from {t}")[0][0]) for t in ("activity", "counter", "rank")}
    return fks, triggers, counts


def test_pg_fact_keys_migration_up_and_down_with_data(pg_url: str, data: Path, run_cli: Invoke) -> None:
    """0006_pg_fact_keys on a store holding a real run: up, the fact tables' seven foreign keys give way to
    triggers and no row changes; down, the keys (each checked against the rows) come back; up again."""
    from profdb.store import bulk

    all_keys = {(t, c) for t, refs in bulk.FACT_REFS.items() for c in refs}
    _migrate(pg_url, "upgrade", "0005")
    r = run_cli("ingest", "--db", pg_url, data / "kineto" / "torchrun4_cpu")  # (opening upgrades it to head)
    assert r.exit_code == 0, r.output
    fks, triggers, counts = _pg_fact_state(pg_url)
    assert fks == set() and len(triggers) == 9 and counts["activity"] > 1000 and counts["rank"] == 4
    _migrate(pg_url, "downgrade", "0005")
    assert _pg_fact_state(pg_url) == (all_keys, set(), counts)
    _migrate(pg_url, "upgrade", "head")
    assert _pg_fact_state(pg_url) == (set(), triggers, counts)
    # the restored keys are the real thing: at 0005 a row with a missing rank is refused
    _migrate(pg_url, "downgrade", "0005")
    engine = make_engine(pg_url)
    try:
        with pytest.raises(Exception, match="fk_activity_rank_id_rank"):
            with engine.begin() as conn:
                conn.exec_driver_sql(
                    "insert into activity (rank_id, source_id, kind, category, name_id, start_ns, duration_ns, "
                    "launch_id) select 999999, source_id, kind, category, name_id, start_ns, duration_ns, launch_id "
                    "from activity limit 1")
    finally:
        engine.dispose()
    _migrate(pg_url, "upgrade", "head")


def test_fact_keys_migration_leaves_sqlite_alone(db_path: Path) -> None:
    """SQLite keeps the fact tables' name keys (0006 is PostgreSQL's); their rank and source keys went in
    0010, where fact_span's trigger deletes a file's rows (tests/test_fact_spans.py)."""
    from profdb.store import bulk

    open_db(str(db_path)).dispose()
    fks = {(t, r[3]) for t in ("activity", "counter") for r in sql(db_path, f"pragma foreign_key_list({t})")}
    assert fks == {(t, c) for t, refs in bulk.FACT_REFS.items() for c, ref in refs.items() if ref == "name"}


def _fact_index_methods(url: str) -> dict[str, tuple[str, str]]:
    """Index name -> (access method, reloptions) of the fact tables' secondary indexes (PostgreSQL)."""
    from pg_fixtures import query_url

    return {str(n): (str(m), str(o)) for n, m, o in query_url(url, """
        select c.relname, am.amname, coalesce(array_to_string(c.reloptions, ','), '') from pg_index i
        join pg_class c on c.oid = i.indexrelid join pg_am am on am.oid = c.relam
        where i.indrelid in ('activity'::regclass, 'counter'::regclass) and not i.indisprimary""")}


def _fact_primary_keys(url: str) -> set[str]:
    """Names of the primary-key constraints on activity and counter (PostgreSQL)."""
    from pg_fixtures import query_url

    return {str(n) for (n,) in query_url(url, """
        select conname from pg_constraint
        where contype = 'p' and conrelid in ('activity'::regclass, 'counter'::regclass)""")}


def _fact_ids(url: str) -> dict[str, tuple[int, int, int, int]]:
    """Per fact table: rows, distinct ids, ids out of load order within a source file, NULL ids."""
    from pg_fixtures import query_url

    out = {}
    for t in ("activity", "counter"):
        rows, distinct, nulls = (int(v) for v in query_url(
            url, f"select count(*), count(distinct id), count(*) - count(id) from {t}")[0])
        # ids follow each file's rows as COPY wrote them: a row's id is above the previous row's (by ctid)
        unordered = int(query_url(url, f"""
            select count(*) from (select id, lag(id) over (partition by source_id order by ctid) as prev from {t}) x
            where prev is not null and id <= prev""")[0][0])
        out[t] = (rows, distinct, unordered, nulls)
    return out


def _plan(url: str, query: str) -> str:
    """PostgreSQL's plan for ``query`` with sequential scans discouraged (the test tables are small)."""
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("set enable_seqscan = off")
            return "\n".join(str(r[0]) for r in conn.exec_driver_sql(f"explain {query}"))
    finally:
        engine.dispose()


def test_pg_fact_layout_migrations_up_and_down_with_data(
    pg_url: str, data: Path, run_cli: Invoke, tmp_path: Path
) -> None:
    """0008_pg_brin_fact_indexes and 0009_pg_lean_fact_indexes on a store holding real runs (Kineto, and a
    rocprofv3 CSV with counters) and a larger generated one (120,000 rows: many 128-page block ranges).
    At head: one BRIN index (autosummarize) per fact table on (rank_id, source_id), every block range the
    ingests filled summarized, searches by rank and by file use it, no primary keys, and every row still has
    a unique id in load order. Down to 0008: the four BRIN indexes and the primary keys; to 0007: B-trees.
    No row changes on the way."""
    from gen_rocprof_run import generate
    from pg_fixtures import query_url

    old = {"ix_activity_rank_name", "ix_activity_source_id", "ix_counter_rank_id", "ix_counter_source_id"}
    new = {"ix_activity_rank_source", "ix_counter_rank_source"}
    keys = {"pk_activity", "pk_counter"}
    brin = ("brin", "autosummarize=on")
    _migrate(pg_url, "upgrade", "0007")
    assert {n: m for n, (m, _o) in _fact_index_methods(pg_url).items()} == dict.fromkeys(old, "btree")
    r = run_cli("ingest", "--db", pg_url, data / "kineto" / "torchrun4_cpu")  # (opening upgrades it to head)
    assert r.exit_code == 0, r.output
    csv = data / "rocprofv3_csv" / "rocm-systems_2025-08"
    r = run_cli("ingest", "--db", pg_url, "--run", "csv", "--rank", "0", csv / "kernel_trace.csv",
                csv / "counter_collection.csv", csv / "memory_copy_trace.csv")
    assert r.exit_code == 0, r.output
    generate(tmp_path / "gen", calls=3000, counters=False)
    r = run_cli("ingest", "--db", pg_url, "--run", "big", tmp_path / "gen")
    assert r.exit_code == 0, r.output
    assert int(query_url(pg_url, "select pg_relation_size('activity') / 8192")[0][0]) > 3 * 128

    def at_head() -> None:
        assert _fact_index_methods(pg_url) == dict.fromkeys(new, brin)
        assert _fact_primary_keys(pg_url) == set()

    at_head()
    # ranges are summarized: a second summarization finds nothing new
    for name in sorted(new):
        assert query_url(pg_url, f"select brin_summarize_new_values('{name}'::regclass)") == [(0,)], name
    for table in ("activity", "counter"):
        for where in ("rank_id = 2", "source_id = 3"):
            assert f"Bitmap Index Scan on ix_{table}_rank_source" in _plan(pg_url, f"select * from {table} where {where}")
    counts, ids = _pg_fact_state(pg_url)[2], _fact_ids(pg_url)
    assert ids["activity"][0] > 100_000 and ids["counter"][0] > 0
    assert all(rows == distinct and unordered == 0 and nulls == 0 for rows, distinct, unordered, nulls in ids.values())
    _migrate(pg_url, "downgrade", "0008")
    assert _fact_index_methods(pg_url) == dict.fromkeys(old, brin) and _fact_primary_keys(pg_url) == keys
    assert _pg_fact_state(pg_url)[2] == counts and _fact_ids(pg_url) == ids
    _migrate(pg_url, "downgrade", "0007")
    assert {n: m for n, (m, _o) in _fact_index_methods(pg_url).items()} == dict.fromkeys(old, "btree")
    assert _fact_primary_keys(pg_url) == keys and _pg_fact_state(pg_url)[2] == counts
    _migrate(pg_url, "upgrade", "head")
    at_head()
    assert _pg_fact_state(pg_url)[2] == counts and _fact_ids(pg_url) == ids
