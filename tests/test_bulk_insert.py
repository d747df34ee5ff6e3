"""The SQLite write paths of a load (store/bulk.py): column batches (``insert_block``) and row tuples
(``execute_rows``) go in many rows per statement; the stored rows (values, SQLite storage types, ids
in order) must be exactly what one ``INSERT`` per row stores, at every batch size around the number
of rows per statement, with empty cells, floats, strings, coded categories and a small parameter limit."""

from __future__ import annotations

import sqlite3
from typing import Any

import numpy as np
import pytest
from sqlalchemy import create_engine

from profdb.store import batches, bulk
from profdb.store.columnar import Ints

COLS = "id INTEGER PRIMARY KEY, rank_id INTEGER, category VARCHAR(20), name_id INTEGER, start_ns BIGINT, " \
       "value FLOAT, dispatch_id BIGINT, args TEXT"


def _tables(raw: sqlite3.Connection) -> None:
    raw.execute(f"CREATE TABLE got ({COLS})")
    raw.execute(f"CREATE TABLE want ({COLS})")


def _dump(raw: sqlite3.Connection, table: str) -> list[tuple[Any, ...]]:
    return raw.execute(
        f"SELECT *, typeof(rank_id), typeof(category), typeof(name_id), typeof(start_ns), typeof(value), "
        f"typeof(dispatch_id), typeof(args) FROM {table} ORDER BY id"
    ).fetchall()


def _batch(n: int, seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    null = rng.random(n) < 0.3
    return {
        "name_id": rng.integers(1, 50, n),
        "start_ns": rng.integers(-(2**62), 2**62, n),  # beyond float precision: stays exact
        "category": batches.Coded(rng.integers(0, 3, n), ("compute", "communication", "it's memory")),
        "value": rng.random(n) * 1e6,
        "dispatch_id": Ints(np.where(null, 0, rng.integers(0, 2**40, n)), null),
    }


def _one_per_row(raw: sqlite3.Connection, cols: dict[str, Any], literals: dict[str, Any]) -> None:
    lists = {c: (v.decoded() if isinstance(v, batches.Coded) else v.tolist()) for c, v in cols.items()}
    n = len(next(iter(lists.values())))
    names = [*lists, *literals]
    rows = [tuple(lists[c][i] for c in lists) + tuple(literals.values()) for i in range(n)]
    raw.executemany(f"INSERT INTO want ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})", rows)


# (2,000 rows and more: several lists of STATEMENTS_PER_LIST statements' parameters, then the rest)
@pytest.mark.parametrize("n", [1, 7, 99, 100, 101, 250, 480, 1000, 2000, 2100, 4321])
@pytest.mark.parametrize("which", [("name_id", "start_ns"), ("name_id", "category", "start_ns"),
                                   ("name_id", "start_ns", "value", "dispatch_id", "category")])
def test_column_batches_store_what_one_insert_per_row_stores(n: int, which: tuple[str, ...]) -> None:
    raw = sqlite3.connect(":memory:")
    _tables(raw)
    batch = _batch(n, n)
    cols = {c: batch[c] for c in which}
    literals = {"rank_id": 7, "args": None}
    for _ in range(2):  # a second batch: ids go on in order
        bulk.insert_block(raw, "got", list(cols), list(cols.values()), list(literals.items()))
        _one_per_row(raw, cols, literals)
    got, want = _dump(raw, "got"), _dump(raw, "want")
    assert len(got) == 2 * n and got == want


def test_a_column_of_ints_without_empty_cells_is_bound_as_integers() -> None:
    raw = sqlite3.connect(":memory:")
    _tables(raw)
    values = np.arange(250, dtype=np.int64) * (2**53 + 1)  # exact only as integers
    bulk.insert_block(raw, "got", ["dispatch_id", "name_id"], [Ints(values), np.arange(250, dtype=np.int32)])
    assert raw.execute("SELECT dispatch_id FROM got ORDER BY id").fetchall() == [(v,) for v in values.tolist()]
    assert raw.execute("SELECT DISTINCT typeof(dispatch_id), typeof(name_id) FROM got").fetchall() == [
        ("integer", "integer")]


@pytest.mark.parametrize("limit", [999, 10, 3])
def test_a_small_parameter_limit_makes_smaller_statements(limit: int) -> None:
    raw = sqlite3.connect(":memory:")
    if not hasattr(raw, "setlimit"):
        pytest.skip("Python < 3.11 cannot set the parameter limit")
    _tables(raw)
    raw.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, limit)
    batch = _batch(333, 1)
    cols = {c: batch[c] for c in ("name_id", "start_ns", "value")}
    bulk.insert_block(raw, "got", list(cols), list(cols.values()), [("rank_id", 3)])
    raw.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 999)
    _one_per_row(raw, cols, {"rank_id": 3})
    assert _dump(raw, "got") == _dump(raw, "want")


@pytest.mark.parametrize("n", [0, 1, 99, 100, 101, 333, 480, bulk.INLINE_MIN_ROWS + 1])
def test_row_tuples_store_what_one_insert_per_row_stores(n: int, tmp_path: Any) -> None:
    """Below INLINE_MIN_ROWS every value is bound; from it on, constant columns are written in."""
    engine = create_engine(f"sqlite:///{tmp_path / 's.db'}")
    rng = np.random.default_rng(n)
    rows = [
        (7, "compute" if i % 3 else "it's", int(rng.integers(1, 9)), int(rng.integers(-(2**62), 2**62)),
         None if i % 4 == 0 else float(rng.random()), None if i % 5 == 0 else i, "x" if i % 2 else None)
        for i in range(n)
    ]
    names = ("rank_id", "category", "name_id", "start_ns", "value", "dispatch_id", "args")
    with engine.begin() as conn:
        raw = conn.connection.driver_connection
        assert raw is not None
        _tables(raw)
        bulk.insert_rows(conn, "got", names, rows)
        bulk.insert_rows(conn, "got", names, rows)
        raw.executemany(f"INSERT INTO want ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})", rows + rows)
        got, want = _dump(raw, "got"), _dump(raw, "want")
    assert len(got) == 2 * n and got == want


@pytest.mark.parametrize("n", [1, 16, 17, 128, 129, 500, 501, 1130])
def test_interned_names_launch_shapes_and_origins_get_their_own_ids(n: int, tmp_path: Any) -> None:
    """Ids are looked up through IN lists padded to a few sizes: every key gets its own row's id, on
    first interning and again (some keys new, some stored) later."""
    engine = create_engine(f"sqlite:///{tmp_path / 's.db'}")
    names = [f"kernel_{i}<{'x' * (i % 7)}>" for i in range(n)]
    shapes = {
        "launch": [(100 + i, 200 + i, None if i % 2 else -i, 64, 1, None if i % 3 else 1) for i in range(n)],
        "origin": [(0, None if i % 2 else i, 100 + i, 200 + i) for i in range(n)],
    }
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE name (id INTEGER PRIMARY KEY, value TEXT UNIQUE)")
        for table, cols in batches.SHAPE_TABLES.items():
            conn.exec_driver_sql(f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, key TEXT UNIQUE, {', '.join(cols)})")
        first = dict((v, i) for i, v in bulk.intern_names(conn, names[: n // 2 + 1]))
        got = dict((v, i) for i, v in bulk.intern_names(conn, names))
        firsts = {t: bulk.intern_shapes(conn, t, s[: n // 2 + 1]) for t, s in shapes.items()}
        interned = {t: bulk.intern_shapes(conn, t, s) for t, s in shapes.items()}
        stored = dict(conn.exec_driver_sql("SELECT value, id FROM name").all())
        keys = {t: dict(conn.exec_driver_sql(f"SELECT key, id FROM {t}").all()) for t in shapes}
        rows = {t: {r[0]: tuple(r[1:]) for r in conn.exec_driver_sql(f"SELECT id, {', '.join(cols)} FROM {t}")}
                for t, cols in batches.SHAPE_TABLES.items()}
    assert got == stored and len(stored) == n and all(got[v] == i for v, i in first.items())
    for t in shapes:
        assert {bulk.shape_key(s): i for s, i in interned[t].items()} == keys[t] and len(keys[t]) == n
        assert all(interned[t][s] == i for s, i in firsts[t].items())
        assert all(rows[t][i] == s for s, i in interned[t].items())  # (each id's row holds its values)
    # a NULL is an empty field of the key, as migration 0011 writes it in SQL
    assert bulk.shape_key((None, 3, -4, None, 1, 64)) == "|3|-4||1|64"
    assert bulk.shape_key((0, None, 3, None)) == "0||3|"


def test_summaries_accumulate_over_many_rows_per_statement(tmp_path: Any) -> None:
    """add_summaries (SQLite: many rows per upsert statement) inserts new keys and adds into stored
    ones, min/max widening, self time of rows without it counted as their total."""
    engine = create_engine(f"sqlite:///{tmp_path / 's.db'}")
    rng = np.random.default_rng(9)

    def rows(keys: list[tuple[int, int, str]]) -> list[tuple[Any, ...]]:
        out = []
        for r, n, k in keys:
            lo, hi = sorted(int(x) for x in rng.integers(1, 10**6, 2))
            own = None if rng.random() < 0.2 else int(rng.integers(0, 10**6))
            out.append((r, n, k, "compute", int(rng.integers(1, 99)), int(rng.integers(1, 10**9)), lo, hi,
                        float(rng.random()), own))
        return out

    first = rows([(r, n, k) for r in range(3) for n in range(70) for k in ("kernel", "api")])  # 420 keys
    second = rows([(r, n, "kernel") for r in range(2, 5) for n in range(60, 90)])  # 10 shared, 80 new
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "CREATE TABLE summary (rank_id INTEGER, name_id INTEGER, kind TEXT, category TEXT, calls INTEGER, "
            "total_ns INTEGER, min_ns INTEGER, max_ns INTEGER, sum_sq_ns FLOAT, self_ns INTEGER, "
            "PRIMARY KEY (rank_id, name_id, kind))")
        bulk.add_summaries(conn, first)
        bulk.add_summaries(conn, second)
        got = {tuple(r[:3]): tuple(r[3:]) for r in conn.exec_driver_sql("SELECT * FROM summary")}
    want: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    for r in first + second:
        key, (cat, calls, total, lo, hi, sq, own) = r[:3], r[3:]
        if key in want:  # a stored NULL self time counts as its total, as does an incoming one
            _c, c0, t0, lo0, hi0, sq0, own0 = want[key]
            want[key] = (cat, c0 + calls, t0 + total, min(lo0, lo), max(hi0, hi), sq0 + sq,
                         (t0 if own0 is None else own0) + (total if own is None else own))
        else:
            want[key] = (cat, calls, total, lo, hi, sq, own)
    assert len(got) == len(want) == 500
    assert {k: v[:5] + (pytest.approx(v[5]), v[6]) for k, v in want.items()} == got


@pytest.mark.parametrize("sums", ["fractional", "whole", "beyond-int64"])
def test_summaries_as_columns_store_what_their_rows_store(tmp_path: Any, sums: str) -> None:
    """The writer's summaries of files read in groups (``SummaryColumns``: rows bound from columns,
    ``add_summary_columns``) store what the same rows as tuples store (``add_summaries``), value and
    SQLite type, exactly: ranks of columns and of tuples interleaved, pieces of several groups (each
    its own text table), a piece of two kinds, keys stored already (they add up), ranks of two files
    (columns and tuples merged). Sums of squares with a fraction, whole (as real ones are: bound as
    integers, stored as the same doubles), and whole but some beyond int64 (bound as doubles)."""
    from profdb.store.ingest_workers import Parsed, SummaryColumns

    rng = np.random.default_rng(5)

    def sum_sq() -> float:
        if sums == "fractional":
            return float(rng.random() * 1e12)  # (below 2**53, where doubles hold fractions)
        return float(rng.integers(1, 2**62)) * (8.0 if sums == "beyond-int64" else 1.0)

    def rows(rank: int, n: int, kinds: tuple[str, ...] = ("kernel",)) -> list[Any]:
        out = []
        for name in sorted(rng.choice(400, n, replace=False).tolist()):
            lo, hi = sorted(int(x) for x in rng.integers(1, 10**6, 2))
            kind = kinds[int(rng.integers(0, len(kinds)))]
            out.append((rank, name, kind, ("compute", "communication", "memory")[int(rng.integers(0, 3))],
                        int(rng.integers(1, 99)), int(rng.integers(1, 2**60)), lo, hi, sum_sq(),
                        int(rng.integers(0, 10**9))))
        return out

    def columns(rs: list[Any], text: tuple[str, ...]) -> SummaryColumns:
        ints = np.array([[r[0] for r in rs], [r[1] for r in rs], [text.index(r[2]) for r in rs],
                         [text.index(r[3]) for r in rs], *([r[i] for r in rs] for i in (4, 5, 6, 7, 9))],
                        dtype=np.int64).reshape(9, len(rs))
        return SummaryColumns(ints, np.array([r[8] for r in rs], dtype=np.float64), text)

    stored = rows(3, 50) + rows(8, 30)  # (ranks 3 and 8 have rows in the store before)
    per_rank = {r: rows(r, 40 if r != 4 else 0, ("kernel", "api") if r == 6 else ("kernel",)) for r in range(1, 13)}
    second = {5: rows(5, 60), 9: rows(9, 25)}  # (a rank's second file, its rows as tuples)
    texts = [("kernel", "compute", "communication", "memory"), ("memory", "api", "kernel", "compute", "communication")]
    dumps = []
    for as_columns in (False, True):
        engine = create_engine(f"sqlite:///{tmp_path / f's{as_columns}.db'}")
        with engine.begin() as conn:
            conn.exec_driver_sql(
                "CREATE TABLE summary (rank_id INTEGER NOT NULL, name_id INTEGER NOT NULL, kind VARCHAR(20) NOT NULL, "
                "category VARCHAR(20) NOT NULL, calls BIGINT NOT NULL, total_ns BIGINT NOT NULL, min_ns BIGINT NOT "
                "NULL, max_ns BIGINT NOT NULL, sum_sq_ns FLOAT NOT NULL, self_ns BIGINT, PRIMARY KEY (rank_id, "
                "name_id, kind)) WITHOUT ROWID")
            bulk.add_summaries(conn, stored)
            writer = bulk.Writer(conn)
            for rank in sorted(per_rank, key=lambda r: (r * 7) % 13):  # (ranks complete in another order)
                rs = per_rank[rank]
                summary: Any = columns(rs, texts[rank % 2]) if as_columns and rank % 3 else rs
                writer.merge(rank, rank, Parsed({}, summary, []))
                if rank in second:
                    writer.merge(rank, 100 + rank, Parsed({}, second[rank], []))
                writer.rank_done(rank)
            kinds = [type(r) for r in writer.ready]
            assert not as_columns or (SummaryColumns in kinds and list in kinds)
            writer._write_ready()
            dumps.append(conn.exec_driver_sql(
                "SELECT *, typeof(calls), typeof(total_ns), typeof(sum_sq_ns), typeof(self_ns) FROM summary "
                "ORDER BY rank_id, name_id, kind").fetchall())
    first_files = {r[:3] for v in per_rank.values() for r in v}
    others = {r[:3] for r in [*stored, *second[5], *second[9]]}
    assert first_files & others  # (some keys add up)
    assert len(dumps[0]) == len(first_files | others)
    assert dumps[1] == dumps[0]
    assert {r[-2] for r in dumps[1]} == {"real"}
    if sums == "beyond-int64":
        assert max(r[8] for r in dumps[1]) >= 2.0**63


def test_deferred_indexes_come_back_and_the_cache_size_is_restored(tmp_path: Any) -> None:
    from profdb.store.db import open_db

    engine = open_db(str(tmp_path / "s.db"))
    try:
        with engine.begin() as conn:
            # (collective_call's match index: the fact tables have none since 0010, fact_span)
            indexes = ("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'collective_call' "
                       "AND sql IS NOT NULL")
            before = sorted(conn.exec_driver_sql(indexes).scalars())
            cache = conn.exec_driver_sql("PRAGMA cache_size").scalar()
            recreate = bulk.defer_indexes(conn, bulk.DEFER_INDEXES_MIN_BYTES)
            assert before and not list(conn.exec_driver_sql(indexes).scalars())
            bulk.rebuild_indexes(conn, recreate)
            assert sorted(conn.exec_driver_sql(indexes).scalars()) == before
            assert conn.exec_driver_sql("PRAGMA cache_size").scalar() == cache != -bulk.INDEX_BUILD_CACHE_KIB
            assert conn.exec_driver_sql("PRAGMA threads").scalar() == 0
    finally:
        engine.dispose()


def test_indexes_rebuilt_by_the_sorters_threads_are_whole(tmp_path: Any) -> None:
    """rebuild_indexes lets SQLite's sorter use helper threads (PRAGMA threads): on more keys than the
    build's page cache holds, the sort is cut in runs the threads sort; the index must still hold
    every row, in order, and the connection's setting comes back."""
    engine = create_engine(f"sqlite:///{tmp_path / 's.db'}")
    rng = np.random.default_rng(5)
    n = 300_000  # (~6 MB of keys: three times the build's 2 MB cache)
    rows = list(zip(range(1, n + 1), rng.integers(1, 64, n).tolist(), rng.integers(1, 5000, n).tolist()))
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql("CREATE TABLE activity (id INTEGER PRIMARY KEY, rank_id INTEGER, name_id INTEGER)")
            conn.exec_driver_sql("CREATE INDEX ix_activity_rank_name ON activity (rank_id, name_id)")
            conn.exec_driver_sql("CREATE TABLE counter (id INTEGER PRIMARY KEY)")
            recreate = bulk.defer_indexes(conn, bulk.DEFER_INDEXES_MIN_BYTES)
            assert recreate
            conn.exec_driver_sql("INSERT INTO activity VALUES (?, ?, ?)", rows)
            conn.exec_driver_sql("PRAGMA threads=1")
            bulk.rebuild_indexes(conn, recreate)
            assert conn.exec_driver_sql("PRAGMA threads").scalar() == 1
            assert conn.exec_driver_sql("PRAGMA integrity_check").scalar() == "ok"
            by_index = conn.exec_driver_sql(
                "SELECT rank_id, name_id, id FROM activity INDEXED BY ix_activity_rank_name ORDER BY rank_id, name_id"
            ).all()
        assert [tuple(r) for r in by_index] == sorted((r, nm, i) for i, r, nm in rows)
    finally:
        engine.dispose()


def test_a_bulk_load_spills_to_files_and_gives_the_settings_back(tmp_path: Any) -> None:
    """load_transaction (through db.temporary_files, shared with upgrades): during a bulk load into a new
    SQLite store, temporary storage in files, the load's page cache, no foreign-key checks and a rollback
    journal; after it, the connection's own settings again."""
    from profdb.store.db import open_db

    settings = ("temp_store", "cache_size", "foreign_keys", "journal_mode")
    engine = open_db(str(tmp_path / "s.db"))
    try:
        with bulk.load_transaction(engine, bulk_load=True, new_store=True) as conn:
            raw = conn.connection.driver_connection
            assert [raw.execute(f"PRAGMA {p}").fetchone()[0] for p in settings] == [
                1, -bulk.LOAD_CACHE_KIB, 0, "delete"]
        with engine.connect() as conn:
            raw = conn.connection.driver_connection
            assert [raw.execute(f"PRAGMA {p}").fetchone()[0] for p in settings] == [2, -65536, 1, "wal"]
    finally:
        engine.dispose()


# (from INLINE_MIN_ROWS on, insert_rows writes the constant columns into the statement)
@pytest.mark.parametrize("n", [40, bulk.INLINE_MIN_ROWS + 500])
def test_dict_rows_store_what_sqlalchemys_insert_stores(tmp_path: Any, n: int) -> None:
    """``insert_dicts`` (the ranks and source files of a load: the driver's executemany, each value
    through its column's bind processor) stores what ``conn.execute(insert(table), rows)`` stores:
    values and SQLite types, DATETIMEs as the same text, NULLs, in order."""
    from datetime import datetime, timezone

    from sqlalchemy import insert

    from profdb.store import db, models

    rows = [dict(run_id=1, global_rank=g, hostname=None if g % 3 else f"node{g // 8}", local_rank=g % 8,
                 node_rank=None, pid=1000 + g, device=g % 8 if g % 2 else None, exit_code=None if g % 4 else 0,
                 signal=9 if g == 5 else None,
                 started_at=datetime(2026, 11, 29, 14, 1, g % 60, 123456, tzinfo=timezone.utc) if g % 5 else None,
                 ended_at=datetime(2026, 11, 29, 15, 0, 0) if g % 7 else None, end_status="ok" if g % 4 else None)
            for g in range(n)]
    dumps = []
    for how in ("sqlalchemy", "insert_dicts"):
        path = tmp_path / f"{how}.db"
        db.create_sqlite_store(path)
        engine = db.make_engine(f"sqlite:///{path}")
        with engine.begin() as conn:
            conn.exec_driver_sql("INSERT INTO run (id, name, created_at) VALUES (1, 'job', '2026-11-29 00:00:00')")
            if how == "sqlalchemy":
                conn.execute(insert(models.Rank), rows)
            else:
                bulk.insert_dicts(conn, models.Rank.__table__, rows)
            dumps.append(conn.exec_driver_sql(
                "SELECT *, typeof(started_at), typeof(ended_at), typeof(hostname) FROM rank ORDER BY id").fetchall())
        engine.dispose()
    assert len(dumps[0]) == n and dumps[0] == dumps[1]
