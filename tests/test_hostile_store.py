"""Hostile store locations (issue 14): --db paths that look like URLs, URLs that do not parse, the
backup taken before an upgrade, which must hold rows still in another connection's -wal file, and a
full temporary folder."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

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


# ----------------------------------------------------------------------------- a full temporary folder

#: runs profdb's CLI (argv[2:]) with SQLite's sort memory cut to 64 KiB and every load a bulk load, so
#: the index rebuild of a small input spills to temporary files as a large one's does (argv[1]: "spill")
_SCRIPT = r"""
import sys
if sys.argv[1] == "spill":
    from profdb.store import bulk, db
    on_connect = db._sqlite_on_connect
    def small_cache(conn, record):
        on_connect(conn, record)
        conn.execute("PRAGMA cache_size=-64")
    db._sqlite_on_connect = small_cache
    bulk.DEFER_INDEXES_MIN_BYTES = 0
from profdb.cli import main as cli_main
sys.argv = ["profdb", *sys.argv[2:]]
cli_main.main()
"""


def _with_small_tmpdir(tmpdir: Path, mode: str, *args: object, full: bool = True) -> subprocess.CompletedProcess[str]:
    """profdb ``args`` with TMPDIR on a 64 KiB tmpfs mounted in a mount namespace of its own (nothing is
    mounted for other processes), or (``full=False``, the control) TMPDIR a plain folder."""
    tmpdir.mkdir(exist_ok=True)
    cmd = [sys.executable, "-c", _SCRIPT, mode, *map(str, args)]
    if not full:
        return subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, TMPDIR=str(tmpdir)), timeout=300)
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-Urm", "true"], capture_output=True).returncode:
        pytest.skip("needs `unshare -Urm` (user and mount namespaces) to mount a small tmpfs as TMPDIR")
    shell = 'mount -t tmpfs -o size=64k tmpfs "$1" && shift && TMPDIR="$0" exec "$@"'
    return subprocess.run(
        ["unshare", "-Urm", "sh", "-c", shell, str(tmpdir), str(tmpdir), *cmd], capture_output=True, text=True, timeout=300
    )


def test_full_tmpdir_while_sqlite_sorts_is_a_message_and_changes_nothing(
    tmp_path: Path, data: Path, run_cli: Invoke
) -> None:
    """SQLite's temporary files (the index rebuild of a bulk load) on a full TMPDIR: 'database or disk is
    full' becomes the message naming the store and TMPDIR, and the store keeps its bytes. 200k kernel rows:
    sorting their index keys needs several MB, past the ~2 MB a rebuild's sort keeps in memory
    (bulk.INDEX_BUILD_CACHE_KIB), so the sort spills to TMPDIR (100k rows only just did)."""
    from gen_rocprof_run import generate

    store = tmp_path / "s.db"
    run_cli("ingest", "--db", store, data / "kineto" / "torchrun4_cpu" / "rank0_iter5_7.json.gz")
    before = store.read_bytes()
    gen = tmp_path / "gen"
    generate(gen, nodes=1, gpus_per_node=2, calls=20000, counters=False)
    r = _with_small_tmpdir(tmp_path / "tmp", "spill", "ingest", "--db", store, "--run", "big", gen)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "ran out of space; nothing was written" in r.stderr and "TMPDIR" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and store.read_bytes() == before
    # the control: the same load with room in TMPDIR goes through
    ok = _with_small_tmpdir(tmp_path / "tmp", "spill", "ingest", "--db", store, "--run", "big", gen, full=False)
    assert ok.returncode == 0, ok.stderr
    assert sql(store, "select count(*) from run") == [(2,)]


def test_full_tmpdir_while_decompressing_an_input_names_the_folder(tmp_path: Path, data: Path) -> None:
    """A gzipped SQLite input (RPD) is decompressed into TMPDIR first: a full TMPDIR is said to be one, not
    'the gzip stream is truncated or corrupt' (what the error said before), and no store is left."""
    store = tmp_path / "s.db"
    trace = data / "legacy_rpd" / "mytrace.rpd.gz"
    r = _with_small_tmpdir(tmp_path / "tmp", "plain", "ingest", "--db", store, trace)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"{trace}: no space left in the temporary folder {tmp_path / 'tmp'} to decompress it" in r.stderr, r.stderr
    assert "point TMPDIR at a larger disk" in r.stderr and "corrupt" not in r.stderr and "Traceback" not in r.stderr
    assert not store.exists()


def test_a_database_error_during_a_load_is_a_message(
    store_url: str, data: Path, run_cli: Invoke, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An IntegrityError from the database itself (as when two PostgreSQL nodes raced on one key, seen in
    CI) reaches the user as one line saying what happened, that nothing was written and what to do, not
    as SQLAlchemy's text with its SQL; the store keeps what it had."""
    from sqlalchemy import text

    from profdb.store import timeline

    kineto = data / "kineto" / "torchrun4_cpu"
    run_cli("ingest", "--db", store_url, "--run", "first", kineto / "rank0_iter5_7.json.gz")
    save = timeline.save_timelines

    def twice(conn: Any, run_id: int, new: Any, *rest: Any) -> None:
        save(conn, run_id, new, *rest)
        conn.execute(text("insert into rank_timeline select * from rank_timeline"))  # every key taken again

    monkeypatch.setattr(timeline, "save_timelines", twice)
    r = run_cli("ingest", "--db", store_url, "--run", "second", kineto, ok=False)
    assert r.exit_code == 1, r.output + r.stderr
    err = r.stderr
    assert f"{kineto / 'rank0_iter5_7.json.gz'}" in err and "the store" in err and "refused this load's rows" in err, err
    assert "nothing was written (the load is one transaction): run it again" in err and "Traceback" not in err, err
    assert "insert into" not in err.lower() and "sqlalchemy" not in err.lower() and err.count("\n") == 1, err
    assert "second" not in run_cli("runs", "--db", store_url, "--format", "csv").stdout


def test_a_store_build_left_by_a_killed_process_is_removed(tmp_path: Path, data: Path, run_cli: Invoke) -> None:
    """A new store is built under a private name (.NAME.PID.new) and linked into place; a process
    SIGKILLed meanwhile leaves that build behind: the next load that creates the store removes it, and
    leaves alone the build of a process that is still alive."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone = tmp_path / f".s.db.{int(dead.stdout)}.new"
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        alive = tmp_path / f".s.db.{other.pid}.new-wal"
        for f in (gone, Path(str(gone) + "-wal"), alive):
            f.write_bytes(b"half a store")
        run_cli("ingest", "--db", tmp_path / "s.db", data / "kineto" / "torchrun4_cpu" / "rank0_iter5_7.json.gz")
        assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == [alive.name]
    finally:
        other.kill()
        other.wait()
