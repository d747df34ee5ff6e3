"""Hostile store locations (issue 14): --db paths that look like URLs, URLs that do not parse, and
the backup taken before an upgrade, which must hold rows still in another connection's -wal file."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from conftest import Invoke, sql
from profdb.store.db import alembic_config, make_engine, resolve_url, sqlite_path

from alembic import command


@pytest.mark.parametrize("name", ["a?mode=ro.db", "b#frag.db", "c%41.db"])
def test_db_path_with_url_characters(tmp_path: Path, data: Path, run_cli: Invoke, name: str) -> None:
    """The file named is the file written: ? # % are part of a path, not a URL's query or fragment."""
    db = tmp_path / name
    run_cli("ingest", "--db", db, data / "kineto" / "torchrun4_cpu" / "rank0_iter5_7.json.gz")
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(("-wal", "-shm"))) == [name]
    assert sql(db, "select count(*) from rank") == [(1,)]
    assert sqlite_path(resolve_url(str(db))) == db


@pytest.mark.parametrize("url", ["postgresql://u@h:port/d", "postgresql://u@[::1/d"])
def test_unparsable_url_is_a_message(run_cli: Invoke, url: str) -> None:
    r = run_cli("runs", "--db", url, ok=False)
    assert r.exit_code == 1, r.output
    assert "is not a database URL profdb can parse" in r.stderr and "Traceback" not in r.stderr


def test_backup_before_upgrade_holds_rows_in_the_wal(tmp_path: Path, data: Path, run_cli: Invoke) -> None:
    """Another connection still open with committed rows in the -wal file: the .bak copy has them."""
    db = tmp_path / "old.db"
    engine = make_engine(f"sqlite:///{db}")
    with engine.begin() as conn:
        command.upgrade(alembic_config(conn), "0001")
    engine.dispose()
    other = sqlite3.connect(db)
    other.execute("pragma journal_mode=wal")
    other.execute("pragma wal_autocheckpoint=0")
    other.execute("insert into run (name, created_at) values ('in-wal', '2026-11-23')")
    other.commit()
    assert (tmp_path / "old.db-wal").stat().st_size > 0
    try:
        run_cli("runs", "--db", db)
        backup = tmp_path / "old.db.bak-0001"
        assert sql(backup, "select name from run") == [("in-wal",)]
        assert sql(backup, "select version_num from alembic_version") == [("0001",)]
    finally:
        other.close()


def _ingest(store_url: str, data: Path) -> None:
    from profdb.store.ingest import ingest_paths

    ingest_paths([data / "kineto" / "torchrun4_cpu"], store_url, run="ddp4")


def test_readonly_store_is_readonly_by_construction(store_url: str, data: Path) -> None:
    """`commit` inside a statement string does not escape: every transaction is read-only."""
    from sqlalchemy import text

    from profdb.store.db import open_db

    _ingest(store_url, data)
    engine = open_db(store_url, readonly=True)
    try:
        with engine.connect() as conn:
            before = conn.execute(text("select count(*) from activity")).scalar()
        assert before
        for statement in ("delete from activity", "commit; delete from activity" if engine.dialect.name == "postgresql" else "drop table activity"):
            with pytest.raises(Exception, match="read-only|readonly|query_only"), engine.connect() as conn:
                if engine.dialect.name == "postgresql":
                    conn.exec_driver_sql("select 1; " + statement)
                else:
                    conn.exec_driver_sql(statement)
                conn.commit()
        with engine.connect() as conn:
            assert conn.execute(text("select count(*) from activity")).scalar() == before
    finally:
        engine.dispose()


def test_reader_answers_while_an_ingest_holds_the_write_lock(store_url: str, data: Path) -> None:
    """A writer in the middle of its transaction (as an ingest is) does not block a read-only open."""
    from sqlalchemy import text

    from profdb.store.db import open_db

    _ingest(store_url, data)
    writer = open_db(store_url)
    try:
        with writer.connect() as w:
            w.begin()
            w.execute(text("update run set world_size = world_size where name = 'ddp4'"))  # holds the lock
            w.execute(text("insert into run (name, created_at) values ('in-flight', CURRENT_TIMESTAMP)"))
            reader = open_db(store_url, readonly=True)
            try:
                with reader.connect() as r:
                    # sees the last commit only, at once (a wait would be SQLITE_BUSY_S seconds and then fail)
                    assert r.execute(text("select name from run order by name")).scalars().all() == ["ddp4"]
            finally:
                reader.dispose()
            w.rollback()
    finally:
        writer.dispose()


def test_readonly_open_of_a_missing_store(tmp_path: Path) -> None:
    from profdb.store.db import open_db
    from profdb.store.errors import StoreError

    with pytest.raises(StoreError, match="no profdb store here"):
        open_db(str(tmp_path / "none.db"), readonly=True)
    assert not (tmp_path / "none.db").exists()


def test_full_disk_is_a_message_and_changes_nothing(
    tmp_path: Path, data: Path, run_cli: Invoke, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite's own 'database or disk is full' (here from max_page_count, as on a full disk)."""
    from profdb.store import db as dbmod

    store = tmp_path / "s.db"
    run_cli("ingest", "--db", store, data / "kineto" / "torchrun4_cpu" / "rank0_iter5_7.json.gz")
    before = store.read_bytes()
    pages = sql(store, "pragma page_count")[0][0]
    on_connect = dbmod._sqlite_on_connect

    def small_disk(conn: object, record: object) -> None:
        on_connect(conn, record)
        conn.execute(f"PRAGMA max_page_count={pages + 2}")  # type: ignore[attr-defined]

    monkeypatch.setattr(dbmod, "_sqlite_on_connect", small_disk)
    r = run_cli("ingest", "--db", store, "--run", "big", data / "kineto" / "hta_trace_filter_2ranks", ok=False)
    assert r.exit_code == 1, r.output + r.stderr
    assert "ran out of space; nothing was written" in r.stderr and "Traceback" not in r.stderr
    assert store.read_bytes() == before
