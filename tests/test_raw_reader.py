"""A question reads an SQLite store through the sqlite3 module alone (db.open_raw_sqlite ->
reader.RawSqlite) or through SQLAlchemy (every other store and caller): the same SQL text, so the
same answers. Checked on real traces (the 8-rank DLRM job, the recorded torchrun CPU job, HTA's
2-rank sample) for every question, and the raw store's guarantees: read-only, one snapshot shared
with the SQLAlchemy connection it opens for a stale analysis, and what it leaves to open_readonly."""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from conftest import Invoke

from profdb.store import queries, reader, straggler
from profdb.store.db import alembic_config, make_engine, open_raw_sqlite, open_readonly
from profdb.store.errors import StoreError
from profdb.store.reader import RawSqlite
from profdb.store.scope import resolve_run

DATA = Path(__file__).parent / "data"

#: (question, options): every question of ``profdb query``, with the options that change its SQL
ASKED: list[tuple[Any, dict[str, Any]]] = [
    (queries.imbalance, {}),
    (queries.imbalance, {"inclusive": True, "kind": "gpu"}),
    (queries.imbalance, {"name_like": "E"}),  # case-insensitive substring
    (queries.imbalance, {"by": "host"}),
    (queries.imbalance, {"by": "local-rank", "name_like": "%e%"}),
    (queries.hotspots, {}),
    (queries.hotspots, {"inclusive": True, "kind": "cpu_op", "top": 0}),
    (queries.steps, {}),
    (queries.rank_split, {}),
    (queries.rank_split, {"kind": "cpu_op"}),
    (straggler.stragglers, {}),
    (straggler.collectives, {"top": 0}),
]


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory, dlrm_files: list[Path]) -> dict[str, Path]:
    from click.testing import CliRunner

    from profdb.cli.main import cli

    out = tmp_path_factory.mktemp("stores")
    inputs = {"dlrm": [str(p) for p in dlrm_files], "torchrun": [str(DATA / "kineto/torchrun4_cpu")],
              "hta": [str(DATA / "kineto/hta_trace_filter_2ranks")]}
    dbs = {}
    for run, paths in inputs.items():
        db = out / f"{run}.db"
        r = CliRunner().invoke(cli, ["ingest", "--db", str(db), "--run", run, *paths], catch_exceptions=False)
        assert r.exit_code == 0, r.output
        dbs[run] = db
    return dbs


@pytest.fixture
def raw() -> Iterator[list[RawSqlite]]:
    opened: list[RawSqlite] = []
    yield opened
    for r in opened:
        r.close()


def _open_raw(path: Path, opened: list[RawSqlite]) -> RawSqlite:
    r = open_raw_sqlite(str(path))
    assert r is not None
    opened.append(r)
    return r


@pytest.mark.parametrize("run", ["dlrm", "torchrun", "hta"])
def test_every_question_answers_the_same_through_sqlite3_and_sqlalchemy(
    run: str, stores: dict[str, Path], raw: list[RawSqlite]
) -> None:
    db = _open_raw(stores[run], raw)
    engine = open_readonly(str(stores[run]))
    try:
        with engine.connect() as conn:
            for ask, options in ASKED:
                try:
                    via_sa = ask(conn, run, **options)
                except Exception as e:  # noqa: BLE001 - the same error either way
                    with pytest.raises(type(e), match=str(e)[:40].replace("(", r"\(")):
                        ask(db, run, **options)
                    continue
                via_raw = ask(db, run, **options)
                assert (via_raw.headers, via_raw.rows, via_raw.headline, via_raw.notes) == (
                    via_sa.headers, via_sa.rows, via_sa.headline, via_sa.notes), (ask.__name__, options)
                assert via_raw.rows or ask is queries.steps, (ask.__name__, options)  # a real answer
    finally:
        engine.dispose()


def test_the_raw_store_is_read_only_and_says_so(stores: dict[str, Path], raw: list[RawSqlite]) -> None:
    db = _open_raw(stores["hta"], raw)
    with pytest.raises(StoreError, match="opened read-only by this command"):
        reader.rows(db, "DELETE FROM run")
    assert reader.scalars(db, "SELECT name FROM run") == ["hta"]


def test_a_question_reads_one_snapshot_even_through_its_sqlalchemy_connection(
    stores: dict[str, Path], tmp_path: Path, raw: list[RawSqlite]
) -> None:
    """What the question reads through sqlite3 and what it then computes through SQLAlchemy (a stale
    analysis) come from one read transaction: a run another process commits meanwhile is in neither."""
    path = tmp_path / "s.db"
    shutil.copy(stores["torchrun"], path)
    db = _open_raw(path, raw)
    assert resolve_run(db).name == "torchrun"
    with sqlite3.connect(path) as other:
        other.execute("INSERT INTO run (name, world_size, created_at) VALUES ('later', 1, '2999-01-01 00:00:00')")
        other.execute("INSERT INTO rank (run_id, global_rank) SELECT id, 0 FROM run WHERE name = 'later'")
    other.close()
    assert resolve_run(db).name == "torchrun"
    conn = reader.connection(db)
    assert conn.exec_driver_sql("SELECT count(*) FROM run").scalar() == 1
    assert resolve_run(conn).name == "torchrun"
    again = _open_raw(path, raw)
    assert resolve_run(again).name == "later"


def test_what_the_raw_opener_leaves_to_open_readonly(
    stores: dict[str, Path], tmp_path: Path, run_cli: Invoke
) -> None:
    assert open_raw_sqlite("postgresql://nobody@localhost/x") is None
    assert open_raw_sqlite(str(tmp_path / "missing.db")) is None
    old = tmp_path / "old.db"
    shutil.copy(stores["hta"], old)
    engine = make_engine(f"sqlite:///{old}")  # (a store one revision behind: taken down by its migration)
    with engine.begin() as conn:
        command.downgrade(alembic_config(conn), "-1")
    engine.dispose()
    assert open_raw_sqlite(str(old)) is None  # behind: open_readonly upgrades it (or refuses) first
    foreign = tmp_path / "foreign.db"
    sqlite3.connect(foreign).execute("CREATE TABLE t (x)").connection.close()
    with pytest.raises(StoreError, match="is not a profdb database"):
        open_raw_sqlite(str(foreign))
    # the CLI on the old store: upgraded as any command would, then answered
    r = run_cli("query", "--imbalance", "--db", old, "--format", "csv")
    assert r.stdout.startswith("name,kind,category")


def test_postgresql_answers_as_the_raw_sqlite_store(
    stores: dict[str, Path], dlrm_files: list[Path], pg_url: str, run_cli: Invoke, raw: list[RawSqlite]
) -> None:
    """The same SQL text on PostgreSQL (through SQLAlchemy's text(): its placeholders, LIKE on
    lower(), IN lists), on the DLRM job ingested there: every question gives what the raw SQLite
    store gives."""
    run_cli("ingest", "--db", pg_url, "--run", "dlrm", *dlrm_files)
    db = _open_raw(stores["dlrm"], raw)
    engine = open_readonly(pg_url)
    try:
        with engine.connect() as conn:
            for ask, options in ASKED:
                via_pg = ask(conn, "dlrm", **options)
                via_raw = ask(db, "dlrm", **options)
                assert (via_pg.headers, via_pg.rows, via_pg.headline, via_pg.notes) == (
                    via_raw.headers, via_raw.rows, via_raw.headline, via_raw.notes), (ask.__name__, options)
    finally:
        engine.dispose()
