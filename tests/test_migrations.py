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
    engine = open_db(str(db_path))
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
    # (activity as today's store holds it, with its launch shape joined back in for older revisions)
    scratch.execute("create temp view wide_activity as select a.*, l.device, l.stream, l.pid, l.tid, l.grid_x, "
                    "l.grid_y, l.grid_z, l.block_x, l.block_y, l.block_z from activity a join launch l on l.id = "
                    "a.launch_id")
    for table in ("run", "rank", "source_file", "name", "activity", "summary", "step"):
        cols = [r[1] for r in con.execute(f"pragma table_info({table})")]
        source = "wide_activity" if table == "activity" else table
        rows = scratch.execute(f"select {', '.join(cols)} from {source}").fetchall()
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


def test_fast_head_check_agrees_with_alembic() -> None:
    assert scripted_head() == head_revision() == _revisions()[-1]
