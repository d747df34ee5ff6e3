"""Bulk row loading, per engine: the single place where ingest and transfer write rows, and the
few rules that let several loads write one store at once (run creation, name interning, locks).

- SQLite: the driver's executemany (no RETURNING, tuples, one prepared statement); new launch shapes
  are interned with multi-row INSERT ... RETURNING (``_insert_returning``).
- PostgreSQL (psycopg 3): binary ``COPY table (cols) FROM STDIN`` inside the caller's transaction (it
  commits or rolls back with everything else), one statement per ``COPY_CHUNK`` rows; a chunk whose
  values do not fit the columns' binary form (a str in an integer column...) goes as text COPY, where the
  server converts or refuses it as before. The fact tables (activity, counter) have no foreign keys on
  PostgreSQL (migration 0006_pg_fact_keys): ``copy_rows`` checks each rank, source and name id once per
  transaction instead (``FACT_REFS``). See ``copy_rows`` for the measurements.
- Any other PostgreSQL driver: executemany, as for SQLite.

Here too: ``Writer`` (ingest's rows, names, summaries and steps within one transaction),
``load_transaction`` and ``defer_indexes`` (the SQLite bulk-load settings), and the run's locks
(``run_scope``/``hold_run``)."""

from __future__ import annotations

import io
import re
import sqlite3
import struct
import weakref
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext, suppress
from itertools import chain, groupby, repeat
from operator import itemgetter
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError, NoResultFound

from .batches import LAUNCHES_KEPT, ORIGIN_COLS, SHAPE_TABLES, Coded, Interned, cores
from .errors import ProfdbError, StoreError
from .fact_spans import Spans
from .validate import INT64_MAX, PastInt64, merged

if TYPE_CHECKING:  # (imported where used: runs, and so every query, imports this module, not the readers)
    from .collectives import RankTimeline
    from .ingest_workers import NamedSummaryRow, Parsed, SummaryColumns, SummaryRow, Totals


def placeholder(conn: Connection) -> str:
    return "?" if conn.dialect.paramstyle == "qmark" else "%s"


def insert_sql(conn: Connection, table: str, cols: Sequence[str]) -> str:
    m = placeholder(conn)
    return f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join([m] * len(cols))})"


def uses_copy(conn: Connection) -> bool:
    return conn.dialect.name == "postgresql" and conn.dialect.driver == "psycopg"


#: the fact tables' id columns and the tables they refer to. On PostgreSQL these have no foreign keys
#: (a per-row trigger each, ~75% of COPY's time): ``copy_rows`` checks the ids once per transaction
#: instead, and delete triggers remove the rows of a deleted rank or source file (0006_pg_fact_keys).
FACT_REFS: dict[str, dict[str, str]] = {
    "activity": {"rank_id": "rank", "source_id": "source_file", "name_id": "name"},
    "counter": {"rank_id": "rank", "source_id": "source_file", "kernel_name_id": "name", "counter_name_id": "name"},
}
#: rows per COPY statement (each chunk is formatted whole before it is sent: see ``copy_rows``)
COPY_CHUNK = 20000
#: SQLite: rows per INSERT statement (``insert_block``, ``execute_rows``)
ROWS_PER_INSERT = 100
#: ``insert_block`` turns this many statements' rows into Python parameter lists at a time, not a whole
#: batch: 50,000 summary rows of 10 values made 500,000 ints at once (~22 MB of the writer's peak)
STATEMENTS_PER_LIST = 20
#: SQLite: fewer rows than this are bound whole (``insert_rows``): a statement with its constants written
#: in (``constants_inlined``) has a new text, compiled anew (~0.6 ms for 100 rows), which costs more than
#: binding them saves below ~2,000 rows; a 512-rank run's per-rank collective calls (125 rows each) spent
#: 1.0 s compiling them
INLINE_MIN_ROWS = 2000
#: "binary" or "text" (benchmarks/pg_ingest.py compares them)
COPY_FORMAT = "binary"
_INT2, _INT4 = 21, 23  # type oids whose binary form psycopg fills without a range check


class _CopyState:
    """What one transaction's loads already know: column type oids per table, ids already checked
    (and locked) per referenced table."""

    def __init__(self) -> None:
        self.types: dict[str, dict[str, int]] = {}
        self.checked: dict[str, set[int]] = {}


_states: weakref.WeakKeyDictionary[Any, _CopyState] = weakref.WeakKeyDictionary()


def _copy_state(conn: Connection) -> _CopyState:
    tx = conn.get_transaction()
    if tx is None:  # (autocommit use: nothing to remember beyond this call)
        return _CopyState()
    state = _states.get(tx)
    if state is None:
        state = _states[tx] = _CopyState()
    return state


def check_fact_ids(conn: Connection, table: str, cols: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """What the fact tables' foreign keys did on insert, once per transaction and id: every rank,
    source file and name id in ``rows`` must exist, and is locked (FOR KEY SHARE, as a foreign key
    check locks it) until the transaction ends, so no other session can delete it meanwhile; a
    session that deleted it first makes this fail. O(distinct ids): a load meets each id once."""
    refs = FACT_REFS.get(table)
    if not refs:
        return
    state = _copy_state(conn)
    for col, ref in refs.items():
        if col not in cols:
            continue
        ids = set(map(itemgetter(cols.index(col)), rows))
        ids.discard(None)  # (a NOT NULL column: the COPY itself refuses it)
        seen = state.checked.setdefault(ref, set())
        new = ids - seen
        if not new:
            continue
        want = sorted(int(i) for i in new)
        found = {
            int(i)
            for (i,) in conn.exec_driver_sql(
                f"SELECT id FROM {ref} WHERE id = ANY(%s) ORDER BY id FOR KEY SHARE", (want,)
            )
        }
        missing = [i for i in want if i not in found]
        if missing:
            shown = ", ".join(map(str, missing[:5])) + (" ..." if len(missing) > 5 else "")
            raise StoreError(
                f"{table} rows refer to {ref} id(s) {shown}, which are not in the store: another session "
                f"deleted them while this load ran (a run, rank or file removed); nothing was written by this "
                "load: run it again"
            )
        seen.update(found)


def _column_types(conn: Connection, state: _CopyState, table: str) -> dict[str, int]:
    types = state.types.get(table)
    if types is None:
        types = state.types[table] = {
            str(n): int(t)
            for n, t in conn.exec_driver_sql(
                "SELECT attname, atttypid::int FROM pg_attribute WHERE attrelid = %s::regclass "
                "AND attnum > 0 AND NOT attisdropped",
                (table,),
            )
        }
    return types


def _binary_chunk(
    raw: Any, oids: list[int], narrow: list[tuple[int, str]], rows: Sequence[Sequence[Any]]
) -> bytes | None:
    """``rows`` in COPY's binary format (signature, rows, trailer), or None when a value does not fit
    its column's binary form: a str or float in an integer column, an int beyond int8, or, for
    ``narrow`` (column index, array code) int2/int4 columns, beyond their range (psycopg's C dumper
    would silently wrap those; text COPY has the server refuse them, as binary must too)."""
    import psycopg
    from psycopg.copy import Copy, FileWriter

    try:
        for i, code in narrow:
            col = list(map(itemgetter(i), rows))
            if None in col:
                col = [v for v in col if v is not None]
            array(code, col)  # OverflowError beyond the type's range, TypeError for a non-int
        buf = io.BytesIO()
        with raw.cursor() as fmt, Copy(fmt, binary=True, writer=FileWriter(buf)) as cp:
            cp.set_types(oids)
            write = cp.write_row
            for r in rows:
                write(r)
    except (TypeError, ValueError, OverflowError, struct.error, psycopg.DataError):
        return None
    return buf.getvalue()


def copy_rows(conn: Connection, table: str, cols: Sequence[str], rows: Iterable[Sequence[Any]]) -> int:
    """Stream ``rows`` into ``table`` through PostgreSQL COPY on the connection's own psycopg
    connection (so inside its transaction). Returns the number of rows written.

    Binary COPY, ``COPY_CHUNK`` rows per statement: each chunk is formatted into memory first (so a
    chunk with a value binary cannot carry goes as text COPY instead, not half sent), then written in
    one call. Fact rows' ids are checked first (``check_fact_ids``).
    Measured (440,000 activity and counter rows, benchmarks/pg_ingest.py, CPU per row): this process
    0.9 us binary (psycopg's C formatter ~0.4, the int2/int4 range guard ~0.3, the id sets ~0.1), 1.2 us
    text; the server ~3.0 us either way (its two secondary indexes ~1.7 of it), 13-14 us when the fact
    tables had their foreign keys."""
    rows = rows if isinstance(rows, list) else list(rows)
    if not rows:
        return 0
    raw = conn.connection.driver_connection
    assert raw is not None
    check_fact_ids(conn, table, cols, rows)
    binary = COPY_FORMAT == "binary"
    oids: list[int] = []
    narrow: list[tuple[int, str]] = []
    if binary:
        types = _column_types(conn, _copy_state(conn), table)
        oids = [types[c] for c in cols]
        refs = FACT_REFS.get(table, {})
        narrow = [(i, "h" if t == _INT2 else "i") for i, (c, t) in enumerate(zip(cols, oids))
                  if t in (_INT2, _INT4) and c not in refs]  # (checked ids exist, so they fit)
    target = f"COPY {table} ({', '.join(cols)}) FROM STDIN"
    with raw.cursor() as cur:
        for at in range(0, len(rows), COPY_CHUNK):
            chunk = rows[at : at + COPY_CHUNK]
            block = _binary_chunk(raw, oids, narrow, chunk) if binary else None
            try:
                if block is not None:
                    with cur.copy(target + " (FORMAT BINARY)") as copy:
                        copy.write(block)
                    continue
                with cur.copy(target) as copy:
                    write = copy.write_row
                    for r in chunk:
                        write(r)
            except Exception as e:
                _note_failed_row(e, table, cols, chunk)
                raise
    return len(rows)


_COPY_CONTEXT = re.compile(r"COPY (\w+), line (\d+)(?:, column (\w+))?")


def _note_failed_row(e: BaseException, table: str, cols: Sequence[str], chunk: Sequence[Sequence[Any]]) -> None:
    """Mark a COPY error with what ``explain_db_error`` needs to name the input: the table, the column
    and the source id of the row the server refused (its CONTEXT line says which), as attributes."""
    diag = getattr(e, "diag", None)
    where = _COPY_CONTEXT.search(str(getattr(diag, "context", None) or ""))
    source = None
    if where and "source_id" in cols:
        line = int(where.group(2))
        if 1 <= line <= len(chunk):
            source = chunk[line - 1][cols.index("source_id")]
    with suppress(AttributeError, TypeError):
        e.profdb_copy = (table, where.group(3) if where else None, source)  # type: ignore[attr-defined]


def sql_literal(v: object) -> str | None:
    """``v`` as an SQL literal if it is None, an int or a str (the values a fact row holds), else None."""
    if v is None:
        return "NULL"
    if type(v) is int:
        return str(v)
    if type(v) is str and "\x00" not in v:
        return "'" + v.replace("'", "''") + "'"
    return None


def constants_inlined(
    table: str, cols: Sequence[str], rows: list[tuple[Any, ...]], mark: str = "?", fixed: Sequence[tuple[str, str]] = ()
) -> tuple[str, list[tuple[Any, ...]]]:
    """The INSERT statement for a batch, and its rows, with every column that holds one value in the
    whole batch (None, the rank and source ids, the kind, pid, stream...) written as a literal in the
    statement instead of bound on every row. Python's sqlite3 binds each parameter through its
    adaptation path (~270 ns for a None); a rocprofv3 kernel row has 11 such columns of 19. Measured
    (benchmarks/ablation.py, 400k short-name kernel rows): ingest CPU 2.81 s bound, 2.56 s inlined;
    on Kineto traces, within noise (fewer constant columns). Only for executemany
    (COPY has no per-value binding cost worth avoiding). One transposition and one ``count`` per
    column, in C: a few milliseconds per 20,000 rows. ``fixed``: more (column, SQL literal) pairs."""
    columns = list(zip(*rows))
    n = len(rows)
    values: list[str] = []
    bound: list[int] = []
    for i, col in enumerate(columns):
        first = col[0]
        # count() compares with ==, so an int column may also hold an equal float or bool: each is
        # stored alike in the fact tables' INTEGER and REAL columns, bound or written as a literal
        lit = sql_literal(first) if i < len(columns) - 1 or bound else None  # (bind at least one column)
        if lit is not None and col.count(first) == n:
            values.append(lit)
        else:
            values.append(mark)
            bound.append(i)
    names = [*cols, *(c for c, _ in fixed)]
    values += [v for _, v in fixed]
    sql = f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join(values)})"
    if len(bound) == len(columns):
        return sql, rows
    return sql, list(zip(*[columns[i] for i in bound]))


def execute_rows(conn: Connection, sql: str, rows: Sequence[Sequence[Any]], tail: str = "") -> None:
    """Run an SQLite ``INSERT ... VALUES (one row's values)`` (then ``tail``, e.g. an ON CONFLICT
    clause) for every row of ``rows``, with ``ROWS_PER_INSERT`` rows per statement (``VALUES (..),
    (..), ...``: see ``insert_block``); each statement's rows are laid end to end in C (``chain``)."""
    if not rows:
        return
    raw = conn.connection.driver_connection
    assert raw is not None
    head, row = sql.split(" VALUES ", 1)
    k = len(rows[0])
    per = _rows_per_statement(raw, k)
    full = len(rows) // per * per
    if full:  # (one statement's parameters at a time: a list of them all would double the rows' memory)
        raw.executemany(f"{head} VALUES {', '.join([row] * per)}{tail}",
                        (list(chain.from_iterable(rows[i : i + per])) for i in range(0, full, per)))
    at = full
    while at < len(rows):  # the rest in statements of 64, 32, ... rows, as insert_block's
        m = 1 << ((len(rows) - at).bit_length() - 1)
        raw.execute(f"{head} VALUES {', '.join([row] * m)}{tail}", list(chain.from_iterable(rows[at : at + m])))
        at += m


def _rows_per_statement(raw: Any, k: int, shared: int = 0) -> int:
    """Rows per multi-row INSERT of ``k`` bound values each (and ``shared`` bound once), within the
    library's parameter limit (32,766 since SQLite 3.32, 999 before; Python < 3.11 cannot ask: 999)."""
    return max(1, min(ROWS_PER_INSERT, (_variable_limit(raw) - shared) // max(1, k)))


def _variable_limit(raw: Any) -> int:
    return int(raw.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)) if hasattr(raw, "getlimit") else 999


def insert_dicts(conn: Connection, table: Any, rows: Sequence[Mapping[str, Any]]) -> None:
    """Insert ``rows`` (column -> value, every row the same keys) into the model table ``table``, as
    ``conn.execute(insert(table), rows)`` would store them. SQLite: each value goes through its
    column's bind processor (a DATETIME's text), then the rows go as tuples (``insert_rows``);
    SQLAlchemy's own path spent ~30 us a row on 8,192 ranks or source files (parameters built per row;
    for the ranks, with RETURNING, one statement per row), between the workers' fork and their ids."""
    if not rows:
        return
    if conn.dialect.name != "sqlite":
        from sqlalchemy import insert

        conn.execute(insert(table), list(rows))
        return
    cols = list(rows[0])
    columns = [[r[c] for r in rows] for c in cols]
    for j, c in enumerate(cols):
        process = table.c[c].type.dialect_impl(conn.dialect).bind_processor(conn.dialect)
        if process is not None:
            columns[j] = _processed(process, columns[j])
    insert_rows(conn, table.name, cols, list(zip(*columns)))


def _processed(process: Callable[[Any], Any], values: list[Any]) -> list[Any]:
    """``values`` through a column's bind processor, None kept, each distinct value processed once (the
    load's one time, in every source file's row)."""
    done: dict[Any, Any] = {}
    out: list[Any] = []
    for v in values:
        if v is None:
            out.append(None)
            continue
        try:
            out.append(done[v])
        except KeyError:
            out.append(done.setdefault(v, process(v)))
        except TypeError:  # (unhashable: processed each time)
            out.append(process(v))
    return out


def insert_rows(conn: Connection, table: str, cols: Sequence[str], rows: list[tuple[Any, ...]]) -> None:
    """Append ``rows`` (tuples in ``cols`` order) to ``table`` inside the caller's transaction."""
    if not rows:
        return
    if uses_copy(conn):
        copy_rows(conn, table, cols, rows)
        return
    if conn.dialect.name == "postgresql":
        check_fact_ids(conn, table, cols, rows)
    if conn.dialect.name == "sqlite" and len(rows) < INLINE_MIN_ROWS:
        execute_rows(conn, insert_sql(conn, table, cols), rows)
    elif conn.dialect.name == "sqlite":
        execute_rows(conn, *constants_inlined(table, cols, rows, placeholder(conn)))
    else:
        conn.exec_driver_sql(insert_sql(conn, table, cols), rows)


# --------------------------------------------------------------------------- shared by ingest and transfer


def insert_ignore(conn: Connection, table: Any) -> Any:
    """``INSERT ... ON CONFLICT DO NOTHING`` for the connection's dialect (SQLite and PostgreSQL)."""
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert(table).on_conflict_do_nothing()
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    return sqlite_insert(table).on_conflict_do_nothing()


def names_connection(conn: Connection) -> Connection | None:
    """PostgreSQL interns names on a second, autocommit connection (None elsewhere): a name committed
    at once is visible to every node, so nodes sharing names never wait for each other's whole load
    (inserting a name that another open transaction inserted blocks until that transaction ends, and
    two nodes doing so in different orders deadlock). Names of a load that fails stay interned; they
    are only a dictionary. The caller closes it."""
    if conn.dialect.name != "postgresql":
        return None
    return conn.engine.connect().execution_options(isolation_level="AUTOCOMMIT")


def intern_names(
    conn: Connection, values: Sequence[str], names_conn: Connection | None = None
) -> list[tuple[int, str]]:
    """Intern ``values`` (insert the new ones) and return their (id, value) pairs."""
    if not values:
        return []
    if conn.dialect.name == "postgresql":
        nc = names_conn or conn
        new = sorted(set(values))  # one statement, sorted: concurrent interning locks in the same order
        nc.exec_driver_sql(
            "INSERT INTO name (value) SELECT v FROM unnest(%s::text[]) AS t(v) ORDER BY v "
            "ON CONFLICT (value) DO NOTHING",
            (new,),
        )
        return [(int(i), v) for i, v in nc.exec_driver_sql("SELECT id, value FROM name WHERE value = ANY(%s)", (new,))]
    raw = conn.connection.driver_connection
    assert raw is not None
    raw.executemany("INSERT OR IGNORE INTO name (value) VALUES (?)", [(v,) for v in values])
    return _sqlite_ids(raw, "name", "value", values)


#: keys per ``_sqlite_ids`` statement, padded with NULLs (which match nothing) to the next of these sizes:
#: a few statement texts, each compiled once (an IN list of 500 costs ~0.6 ms to run, of 16 ~0.05 ms)
_IDS_PER_SELECT = (16, 128, 500)


def _sqlite_ids(raw: sqlite3.Connection, table: str, key: str, keys: Sequence[str]) -> list[tuple[int, str]]:
    """(id, key) of ``keys`` in an SQLite ``table`` with a unique ``key`` column, through the driver's
    connection and a few statement texts (``_IDS_PER_SELECT``): a new ``IN (?, ..)`` text per count of
    keys was compiled anew, with SQLAlchemy's round trip: ~1.7 ms per file of a 512-file run."""
    out: list[tuple[int, str]] = []
    most = _IDS_PER_SELECT[-1]
    for i in range(0, len(keys), most):
        chunk: list[str | None] = list(keys[i : i + most])
        size = next(n for n in _IDS_PER_SELECT if n >= len(chunk))
        chunk += [None] * (size - len(chunk))
        sql = f"SELECT id, {key} FROM {table} WHERE {key} IN ({', '.join(['?'] * size)})"
        out += raw.execute(sql, chunk).fetchall()  # (an INTEGER PRIMARY KEY comes as int)
    return out


#: rows per ``_insert_returning`` statement: each count of rows is its own statement text, so a batch
#: is cut into these sizes (a few texts, compiled once each by the driver's statement cache)
_RETURNING_ROWS = (64, 32, 16, 8, 4, 2, 1)


def _insert_returning(
    raw: sqlite3.Connection, head: str, values: str, rows: Sequence[tuple[Any, ...]], returning: str
) -> list[tuple[Any, ...]]:
    """Run ``head VALUES values, values, ... RETURNING returning`` over ``rows`` (``values`` is one
    row's placeholders; SQLite >= 3.35) and return what it returned: for INSERT OR IGNORE, the rows
    inserted. Inserting and reading the ids in one statement halved interning a writer's new launch
    shapes against executemany and a SELECT of their keys (2,048 small files: 0.6 -> 0.3 ms per file)."""
    out: list[tuple[Any, ...]] = []
    i = 0
    while i < len(rows):
        n = next(k for k in _RETURNING_ROWS if k <= len(rows) - i)
        args = list(chain.from_iterable(rows[i : i + n]))
        out += raw.execute(f"{head} VALUES {', '.join([f'({values})'] * n)} RETURNING {returning}", args).fetchall()
        i += n
    return out


#: a key without NULLs, as one format per tuple length (0.76 us for ten values, against 1.5 us joining
#: them one by one)
_KEY_FORMAT = {len(cols): "|".join(["%s"] * len(cols)) for cols in SHAPE_TABLES.values()}


def shape_key(shape: Sequence[Any]) -> str:
    """A launch shape's or an origin's unique text (``SHAPE_TABLES``): its values, '|'-separated, empty
    for NULL (migration 0011 builds the same text in SQL)."""
    key = _KEY_FORMAT[len(shape)] % tuple(shape)
    # (the values are integers or None: "None" can only be a NULL's text; 0.9 us instead of 1.6 joining)
    return key.replace("None", "") if None in shape else key


def intern_shapes(
    conn: Connection, table: str, shapes: Sequence[tuple[Any, ...]], names_conn: Connection | None = None
) -> dict[tuple[Any, ...], int]:
    """Intern launch shapes or origins (``table`` "launch" or "origin", tuples in its ``SHAPE_TABLES``
    order) like names (``intern_names``: PostgreSQL on the autocommit names connection, race-safe by the
    unique key); returns shape -> id."""
    if not shapes:
        return {}
    cols = ", ".join(SHAPE_TABLES[table])
    by_key = {shape_key(s): tuple(s) for s in shapes}
    keys = sorted(by_key)
    m = placeholder(conn)
    values = ", ".join([m] * (1 + len(SHAPE_TABLES[table])))
    if conn.dialect.name == "sqlite":
        raw = conn.connection.driver_connection
        assert raw is not None
        head = f"INSERT OR IGNORE INTO {table} (key, {cols})"
        rows = [(k, *by_key[k]) for k in keys]
        if sqlite3.sqlite_version_info < (3, 35):  # (no RETURNING)
            raw.executemany(f"{head} VALUES ({values})", rows)
            return {by_key[key]: lid for lid, key in _sqlite_ids(raw, table, "key", keys)}
        found = {by_key[key]: lid for lid, key in _insert_returning(raw, head, values, rows, "id, key")}
        if len(found) < len(keys):  # shapes interned by an earlier ingest: looked up
            missing = [k for k in keys if by_key[k] not in found]
            found.update((by_key[key], lid) for lid, key in _sqlite_ids(raw, table, "key", missing))
        return found
    nc = names_conn if names_conn is not None else conn
    nc.exec_driver_sql(
        f"INSERT INTO {table} (key, {cols}) VALUES ({values}) ON CONFLICT (key) DO NOTHING",
        [(k, *by_key[k]) for k in keys],
    )
    out: dict[tuple[Any, ...], int] = {}
    for i in range(0, len(keys), 500):
        chunk = keys[i : i + 500]
        for lid, key in nc.exec_driver_sql(
            f"SELECT id, key FROM {table} WHERE key IN ({', '.join([m] * len(chunk))})", tuple(chunk)
        ):
            out[by_key[key]] = int(lid)
    return out


def add_summaries(conn: Connection, rows: Iterable[tuple[Any, ...]]) -> None:
    """Add (rank_id, name_id, kind, category, calls, total_ns, min_ns, max_ns, sum_sq_ns, self_ns) rows
    to the summary table: new keys are inserted, existing ones accumulate (calls and sums add, min/max
    widen; a NULL self_ns, from a store ingested before migration 0003, counts as its total). Rows go
    in key order, so two transactions updating shared keys cannot deadlock. (Each key once in
    ``rows``: tuples sort by their key, the first three values.)"""
    data = sorted(rows)
    if not data:
        return
    m = placeholder(conn)
    sql = f"INSERT INTO summary ({', '.join(SUMMARY_COLS)}) VALUES ({', '.join([m] * 10)})"
    if conn.dialect.name == "sqlite":  # (a run of 512 ranks x 320 names: 164k rows; keys are unique here)
        execute_rows(conn, sql, data, _SUMMARY_UPSERT)
    else:
        conn.exec_driver_sql(sql + _SUMMARY_UPSERT, data)


def check_summed(conn: Connection, rank_ids: set[int]) -> None:
    """The summary rows of ``rank_ids`` (ranks with rows before this load, which ``add_summaries``
    added to in SQL) still hold integers: SQLite's ``+`` turns a sum past int64 into a REAL and
    stores it (PostgreSQL refuses it: a DataError, ``explain_db_error``). Raises
    ``validate.PastInt64``."""
    if conn.dialect.name != "sqlite" or not rank_ids:
        return
    ids = sorted(rank_ids)
    for at in range(0, len(ids), 500):
        some = ids[at : at + 500]
        bad = conn.exec_driver_sql(
            "SELECT s.rank_id, n.value, s.kind, MAX(s.total_ns, COALESCE(s.self_ns, 0)) FROM summary s "
            f"JOIN name n ON n.id = s.name_id WHERE s.rank_id IN ({', '.join('?' * len(some))}) "
            "AND (typeof(s.total_ns) <> 'integer' OR typeof(s.self_ns) = 'real') LIMIT 1",
            tuple(some),
        ).first()
        if bad is not None:
            raise PastInt64(int(bad[0]), f"the durations of {bad[1]!r} ({bad[2]})", f"about {float(bad[3]):.4g}")


SUMMARY_COLS = ("rank_id", "name_id", "kind", "category", "calls", "total_ns", "min_ns", "max_ns", "sum_sq_ns",
                "self_ns")
#: a summary row whose key is stored already adds to it (``add_summaries``)
_SUMMARY_UPSERT = (
    " ON CONFLICT (rank_id, name_id, kind) DO UPDATE SET "
    "calls = summary.calls + excluded.calls, total_ns = summary.total_ns + excluded.total_ns, "
    "min_ns = CASE WHEN excluded.min_ns < summary.min_ns THEN excluded.min_ns ELSE summary.min_ns END, "
    "max_ns = CASE WHEN excluded.max_ns > summary.max_ns THEN excluded.max_ns ELSE summary.max_ns END, "
    "sum_sq_ns = summary.sum_sq_ns + excluded.sum_sq_ns, "
    "self_ns = COALESCE(summary.self_ns, summary.total_ns) + COALESCE(excluded.self_ns, excluded.total_ns)"
)


def add_summary_columns(conn: Connection, pieces: Sequence[SummaryColumns]) -> None:
    """``add_summaries`` of rows given as columns (each piece in key order, the pieces in rank order):
    on SQLite bound from one block made in C (``insert_block``), no tuple per row; elsewhere as tuples."""
    import numpy as np

    if conn.dialect.name != "sqlite":
        add_summaries(conn, chain.from_iterable(p.rows() for p in pieces))
        return
    pieces = [p for p in pieces if len(p)]
    if not pieces:
        return
    text: dict[str, int] = {}
    codes: dict[int, Any] = {}  # (a group's files share their text table: mapped once)
    for p in pieces:
        if id(p.text) not in codes:
            codes[id(p.text)] = np.array([text.setdefault(t, len(text)) for t in p.text], dtype=np.int64)
    ints = np.concatenate([p.ints for p in pieces], axis=1)  # (a copy: its codes are mapped in place)
    word = np.concatenate([codes[id(p.text)] for p in pieces])
    base = np.repeat(np.cumsum([0] + [len(p.text) for p in pieces])[:-1], [len(p) for p in pieces])
    ints[2:4] = word[ints[2:4] + base]
    values = tuple(text)
    sum_sq = np.concatenate([p.sum_sq for p in pieces])
    # Bound as integers when each is one exactly: sums of squared whole nanoseconds are whole numbers
    # (doubles above 2**53 are too), each below 2**63 converts exactly, and the column's REAL affinity
    # stores the very same double. The block is then all int64 (insert_block's fast path, no object
    # array): 655k rows of 2,048 ranks x 320 names, this function 0.70 -> 0.66-0.69 s CPU (3 runs each;
    # SQLite's own insert is 0.5 s of it).
    if np.all(np.abs(sum_sq) < 2.0**63) and np.all(sum_sq == np.floor(sum_sq)):
        sum_sq = sum_sq.astype(np.int64)
    columns: list[Any] = [ints[0], ints[1], Coded(ints[2], values), Coded(ints[3], values), *ints[4:8], sum_sq,
                          ints[8]]
    literals: list[tuple[str, Any]] = []
    if len(np.unique(ints[2])) == 1:  # (a column file's rows are of one kind)
        literals.append(("kind", values[int(ints[2, 0])]))
        del columns[2]
    raw = conn.connection.driver_connection
    assert raw is not None
    insert_block(raw, "summary", [c for c in SUMMARY_COLS if not (literals and c == "kind")], columns, literals,
                 _SUMMARY_UPSERT)


def add_steps(conn: Connection, rows: Iterable[Sequence[Any]]) -> None:
    """Add (rank_id, step, source_id, start_ns, duration_ns) rows; a step already stored is kept."""
    data = sorted(tuple(r) for r in rows)
    if not data:
        return
    m = placeholder(conn)
    conn.exec_driver_sql(
        f"INSERT INTO step (rank_id, step, source_id, start_ns, duration_ns) VALUES ({', '.join([m] * 5)}) "
        "ON CONFLICT (rank_id, step) DO NOTHING",
        data,
    )


@contextmanager
def run_scope(engine: Engine, find_or_create: Callable[[Connection], tuple[int, bool]]) -> Iterator[int | None]:
    """Where a load finds or creates its run. PostgreSQL: in a short transaction of its own, committed
    at once (``find_or_create(conn) -> (run_id, created)``, race-safe with INSERT ... ON CONFLICT), so
    nodes loading ranks of one run at the same time do not wait for each other's whole load; if the
    load then fails, a run it created is removed again unless another load put ranks in it. SQLite
    (yields None): the load does it inside its own transaction (BEGIN IMMEDIATE lets one writer in,
    and a failed load leaves the file untouched); see ``hold_run``."""
    if engine.dialect.name != "postgresql":
        yield None
        return
    with engine.begin() as conn:
        remove_abandoned_runs(conn)
        run_id, created = find_or_create(conn)
    try:
        yield run_id
    except BaseException:
        if created:
            try:
                with engine.begin() as conn:
                    # FOR UPDATE waits for loads still holding the run (hold_run), then sees their ranks
                    if conn.exec_driver_sql("SELECT id FROM run WHERE id = %s FOR UPDATE", (run_id,)).first():
                        if not conn.exec_driver_sql("SELECT 1 FROM rank WHERE run_id = %s LIMIT 1", (run_id,)).first():
                            conn.exec_driver_sql("DELETE FROM run WHERE id = %s", (run_id,))
            except Exception:  # the load's own error is the one to report
                pass
        raise


def remove_abandoned_runs(conn: Connection) -> int:
    """PostgreSQL: remove the run rows that loads committed early (``run_scope``) and that never got
    a rank because the load was SIGKILLed (nothing ran to remove them); returns how many. A run still
    being loaded is held by its load (``hold_run``: FOR KEY SHARE), so SKIP LOCKED passes it by; a
    run removed in the instant between its load's ``run_scope`` and ``hold_run`` is made again there.
    Readers never saw these rows (runs.py shows a run once it has ranks)."""
    return conn.exec_driver_sql(
        "DELETE FROM run WHERE id IN (SELECT r.id FROM run r WHERE NOT EXISTS "
        "(SELECT 1 FROM rank k WHERE k.run_id = r.id) FOR UPDATE OF r SKIP LOCKED)"
    ).rowcount


#: times ``hold_run`` looks for its run again when other nodes' loads remove it before it is held
HOLD_TRIES = 100


def hold_run(
    conn: Connection, run_id: int | None, ranks: Iterable[int], find_or_create: Callable[[Connection], tuple[int, bool]]
) -> int:
    """First statements of a load's transaction; returns the run id. PostgreSQL: hold the run row
    (FOR KEY SHARE: a failing node cannot remove it meanwhile; others may hold it too) and the
    load's ranks (transaction advisory locks on (run, rank), taken in rank order, so never a
    deadlock) until commit. Nodes with their own ranks load in parallel; two given the same rank
    take turns, and the second then finds the first's files present and its rank rows made.
    SQLite (``run_id`` None, from ``run_scope``): find or create the run here."""
    if run_id is None:
        return find_or_create(conn)[0]
    for _ in range(HOLD_TRIES):
        if conn.exec_driver_sql("SELECT id FROM run WHERE id = %s FOR KEY SHARE", (run_id,)).first() is not None:
            break
        # removed just now, before this load held it: by another node's failed load, or as abandoned (a run
        # with no rank, ``remove_abandoned_runs``) by a node starting its load. Found again (another node's
        # row, committed: it may be removed again before it is held, hence the loop) or created in this
        # transaction (then no other can see it, let alone remove it).
        try:
            run_id = find_or_create(conn)[0]
        except NoResultFound:  # (its row was removed between the statements that found it)
            continue
    else:
        raise StoreError(f"the run was removed by other loads {HOLD_TRIES} times while this one began: ingest again")
    for g in sorted(set(ranks)):
        conn.exec_driver_sql("SELECT pg_advisory_xact_lock(%s::int4, %s::int4)", (run_id, g))
    return run_id





def _length(column: Any) -> int:
    """Rows in a batch's column (numpy array, list, ``Coded`` or ``columnar.Ints``)."""
    inner = getattr(column, "codes", None)
    if inner is None:
        inner = getattr(column, "values", column)
    return len(inner)


def insert_block(
    raw: sqlite3.Connection, table: str, bound: Sequence[str], arrays: Sequence[Any],
    literals: Sequence[tuple[str, Any]] = (), tail: str = "",
) -> None:
    """Insert one batch given as columns into an SQLite ``table``: ``bound`` columns from ``arrays``
    (numpy arrays, ``columnar.Ints`` or ``Coded``, all of one length), ``literals`` (column, value) the
    same in every row, written into the statement. ``ROWS_PER_INSERT`` rows go in one statement
    (``VALUES (..), (..), ...``): sqlite3's executemany costs ~0.7 us per row and statement besides
    binding (reset, step, the per-row parameter checks), so 1M short-name kernel rows (5 bound
    columns) took 1.40 s CPU one row per statement, 0.60-0.67 s at 100 rows (50-200: the same).
    When every bound column is integers without empty cells (the usual kernel batch; a category is
    bound as its code), the batch is one int64 array whose rows numpy turns into the statements'
    parameter lists in C; otherwise (counter values are floats, empty cells are None) an object
    array does the same (0.81-0.89 s for the same rows with categories as strings). Rows keep their
    order (ids ascend as before). ``tail`` ends each statement (an ON CONFLICT clause)."""
    import numpy as np

    n = _length(arrays[0])
    marks: list[str] = []
    parts: list[Any] = []
    as_ints = True
    for v in arrays:
        if isinstance(v, Coded):
            marks.append(v.case())
            parts.append(v.codes)
            continue
        marks.append("?")
        if isinstance(v, np.ndarray):
            as_ints = as_ints and v.dtype.kind in "iu"
            parts.append(v)
        elif getattr(v, "null", None) is None and isinstance(getattr(v, "values", None), np.ndarray):
            parts.append(v.values)  # (``columnar.Ints`` without empty cells)
        else:  # empty cells (None), or a list
            as_ints = False
            parts.append(v.tolist() if hasattr(v, "tolist") else v)
    # integer constants (rank and source ids, a launch id) are bound once per statement as ?1, ?2...
    # and repeated in every row: the statement's text is then the same for every file and batch, so
    # sqlite3's statement cache keeps a few compiled 100-row statements, not one per file
    shared: list[int] = []
    fixed: list[str] = []
    ints = sum(type(value) is int for _c, value in literals)
    share = ints + len(parts) <= _variable_limit(raw)  # (else they are written as literals)
    for _c, value in literals:
        if type(value) is int and share:
            shared.append(value)
            fixed.append(f"?{len(shared)}")
        else:
            lit = sql_literal(value)
            assert lit is not None
            fixed.append(lit)
    k = len(parts)
    if as_ints:
        block: Any = np.stack([np.asarray(p, dtype=np.int64) for p in parts], axis=1)
    else:
        block = np.empty((n, k), dtype=object)
        for j, p in enumerate(parts):
            block[:, j] = p
    per = _rows_per_statement(raw, k, len(shared))
    # (the numbered ones first: a plain ? takes the number after the largest one used before it)
    head = f"INSERT INTO {table} ({', '.join([*(c for c, _ in literals), *bound])}) VALUES "
    row = f"({', '.join([*fixed, *marks])})"
    full = n // per * per
    sql = head + ", ".join([row] * per) + tail
    step = per * STATEMENTS_PER_LIST
    for at in range(0, full, step):  # (a slice's parameter lists at a time: Python ints cost ~36 bytes each)
        params = block[at : min(at + step, full)].reshape(-1, per * k).tolist()
        raw.executemany(sql, [shared + p for p in params] if shared else params)
    at = full
    while at < n:  # the rest in statements of 64, 32, ... rows (a small file's batch is mostly its rest:
        m = 1 << ((n - at).bit_length() - 1)  # 480 rows left 80 to go one per statement)
        raw.execute(head + ", ".join([row] * m) + tail, shared + block[at : at + m].reshape(-1).tolist())
        at += m


# --------------------------------------------------------------------------- ingest's writer and bulk-load settings

#: bulk loads of at least this many input bytes may rebuild the fact tables' indexes (defer_indexes)
DEFER_INDEXES_MIN_BYTES = 16 << 20


class Writer:
    """Streams records into one open transaction; keeps names, summaries and steps in memory."""

    ACTIVITY_COLS = (
        "rank_id", "source_id", "kind", "category", "name_id", "start_ns", "duration_ns", "correlation", "launch_id",
        "origin_id", "args",
    )
    COUNTER_COLS = (
        "rank_id", "source_id", "kernel_name_id", "counter_name_id", "dispatch_id", "value", "samples",
        "min_value", "max_value",
    )

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        #: rank_id -> the collective timelines of its files (the caller stores them: timeline.save_timelines)
        self.timelines: dict[int, list[RankTimeline]] = {}
        self.dialect = conn.dialect.name
        self.names: dict[str, int] = {}
        #: "launch" and "origin" (SHAPE_TABLES) -> their interned tuples' ids (at most LAUNCHES_KEPT each)
        self.shapes: dict[str, dict[tuple[Any, ...], int]] = {t: {} for t in SHAPE_TABLES}
        #: rank_id -> its first file's summary rows as the worker sent them (as columns: a file of a
        #: group, ``split_summaries``); once a second file of the rank comes, (name_id, kind) -> the
        #: worker's row, or a running Totals once two files had the key
        self.summary: dict[int, list[SummaryRow] | SummaryColumns | dict[tuple[int, str], Totals | SummaryRow]] = {}
        #: complete ranks' summary rows (each rank's, in the order it came), written once SUMMARY_ROWS wait
        #: (``rank_done``)
        self.ready: list[list[SummaryRow] | SummaryColumns] = []
        self.ready_rows = 0
        self.steps: dict[tuple[int, int], tuple[int, int, int]] = {}
        self.mark = placeholder(conn)
        #: the id ranges of each file's fact rows (SQLite: fact_span, written by ``finish``)
        self.spans = Spans(conn)
        self._names_conn: Connection | None = None  # PostgreSQL: see names_connection
        self._close_names: Callable[[], Any] = lambda: None

    def name_ids(self, values: Iterable[str]) -> None:
        """Intern every new name in one round trip per batch (``intern_names``)."""
        new = [v for v in set(values) if v not in self.names]
        if new:
            self.names.update((v, i) for i, v in intern_names(self.conn, new, self._side()))

    def _name_ids_of(self, values: Sequence[str]) -> list[int]:
        """The ids of ``values``, in order: looked up in C, and interned first (``name_ids``) only when
        one is new (a column batch's names are known once the run's first files are in; its file's
        summary names always are)."""
        ids = list(map(self.names.get, values))
        if None in ids:
            self.name_ids(values)
            ids = list(map(self.names.get, values))
        return cast("list[int]", ids)

    def _side(self) -> Connection | None:
        """PostgreSQL: the autocommit connection names and launch shapes are interned on (opened once,
        closed with the writer; ``names_connection``); None on SQLite."""
        if self.conn.dialect.name == "postgresql" and self._names_conn is None:
            self._names_conn = nc = names_connection(self.conn)
            assert nc is not None
            self._close_names = weakref.finalize(self, nc.close)
        return self._names_conn

    def shape_ids(self, table: str, shapes: Iterable[tuple[Any, ...]]) -> dict[tuple[Any, ...], int]:
        """Intern every new launch shape or origin (``table``, SHAPE_TABLES) in one round trip per
        batch; returns the table's ids as kept (every one of ``shapes`` among them)."""
        have = self.shapes[table]
        wanted = set(shapes)
        new = [v for v in wanted if v not in have]
        if new:
            if len(have) + len(new) > LAUNCHES_KEPT:  # (only the batch's own are kept)
                have = self.shapes[table] = {v: have[v] for v in wanted if v in have}
            have.update(intern_shapes(self.conn, table, new, self._side()))
        return have

    def answer_names(self, values: list[Any]) -> list[Any]:
        """Ids of ``values`` (interned now if new), for a parsing worker: names (str) get their id;
        per-launch columns (tuples in SHAPE_COLS order: origin, then launch shape) get the pair
        (launch_id, origin_id)."""
        shapes = [v for v in values if type(v) is tuple]
        pairs: dict[tuple[Any, ...], tuple[int, int]] = {}
        if shapes:
            n = len(ORIGIN_COLS)
            origins = self.shape_ids("origin", [v[:n] for v in shapes])
            launches = self.shape_ids("launch", [v[n:] for v in shapes])
            pairs = {v: (launches[v[n:]], origins[v[:n]]) for v in shapes}
        self.name_ids(v for v in values if type(v) is str)
        return [pairs[v] if type(v) is tuple else self.names[v] for v in values]

    def insert(self, table: str, rows: Any) -> None:
        """Rows a worker built, in ACTIVITY_COLS or COUNTER_COLS order; "counter1" rows are per-dispatch
        counters (the first six COUNTER_COLS; samples 1, no min/max), bound with fewer parameters;
        "activity_columns" / "counter_columns": one batch as columns (``insert_columns``)."""
        if table in ("activity_columns", "counter_columns"):
            self.insert_columns(table.split("_")[0], rows)
            return
        if table == "counter1" and self.dialect != "sqlite":  # PostgreSQL loads through COPY: all columns
            insert_rows(self.conn, "counter", self.COUNTER_COLS, [r + (1, None, None) for r in rows])
            return
        if table == "counter1":
            if rows:
                fixed = (("samples", "1"), ("min_value", "NULL"), ("max_value", "NULL"))
                execute_rows(self.conn, *constants_inlined("counter", self.COUNTER_COLS[:6], rows, self.mark, fixed))
                self.spans.added_rows("counter", rows)
            return
        cols = self.ACTIVITY_COLS if table == "activity" else self.COUNTER_COLS
        insert_rows(self.conn, table, cols, rows)
        self.spans.added_rows(table, rows)

    def insert_columns(self, table: str, columns: dict[str, Any]) -> None:
        """A batch a worker read as columns (``ingest_workers.Columns``): every column that holds one
        value is written as an SQL literal, the others are bound from lists made in C, so no Python
        code runs per row. SQLite: ``ROWS_PER_INSERT`` rows per statement (``insert_block``);
        PostgreSQL: COPY of the same rows."""
        cols = self.ACTIVITY_COLS if table == "activity" else self.COUNTER_COLS
        bound: list[str] = []
        arrays: list[Any] = []
        literals: list[tuple[str, Any]] = []
        for c in cols:
            v = columns[c]
            if isinstance(v, Interned):
                v = self._ids_of(v)
            if v is None or isinstance(v, (int, str)):
                literals.append((c, v))
            else:
                bound.append(c)
                arrays.append(v)
        if not arrays or not _length(arrays[0]):
            return
        if self.dialect != "sqlite":
            lists = [v.decoded() if isinstance(v, Coded) else v.tolist() for v in arrays]
            n = len(lists[0])
            consts = {c: v for c, v in literals}
            data = dict(zip(bound, lists))
            rows = zip(*[data[c] if c in data else repeat(consts[c], n) for c in cols])
            if uses_copy(self.conn):
                copy_rows(self.conn, table, cols, rows)
            else:
                self.conn.exec_driver_sql(insert_sql(self.conn, table, cols), list(rows))
            return
        raw = self.conn.connection.driver_connection  # (the same connection, in the same transaction)
        assert raw is not None
        insert_block(raw, table, bound, arrays, literals)
        # (a batch is one file's, its rank and source ids one int each, or several small files' in
        # order, ``segments`` naming them: ingest_columns.concat)
        self.spans.added_runs(
            table, columns.get("segments") or [(columns["rank_id"], columns["source_id"], _length(arrays[0]))]
        )

    def _ids_of(self, column: Interned) -> Any:
        """An ``Interned`` column's ids: one int when every row has one value, else an int64 array."""
        import numpy as np

        if column.table in SHAPE_TABLES:
            have = self.shape_ids(column.table, column.values)
            ids = [have[v] for v in column.values]
        else:
            ids = self._name_ids_of(column.values)
        if column.index is None:
            return ids[0]
        return np.array(ids, dtype=np.int64)[column.index]

    def _with_name_ids(self, rows: Sequence[tuple[Any, ...]]) -> list[SummaryRow]:
        """Summary rows that carry the name where its id goes (``Parsed.named``), with the ids:
        interned here, the rows rebuilt column-wise in C, in their key's order (name id, kind) when the
        file has one kind (the usual column file: its kernels), so that ``add_summaries``' sort finds the
        rows of complete ranks sorted already (sorting 655k rows of 2,048 small files was ~0.4 s)."""
        if not rows:
            return []
        import numpy as np

        cols = list(zip(*rows))
        ids = self._name_ids_of(cols[1])
        cols[1] = tuple(ids)
        if len(rows) > 1 and len(set(cols[2])) == 1:
            order = np.argsort(np.array(ids, dtype=np.int64), kind="stable").tolist()
            cols = [itemgetter(*order)(c) for c in cols]
        return list(zip(*cols))

    def merge(self, rank_id: int, source_id: int, parsed: Parsed) -> None:
        """A file's summary rows and steps, as a worker (``ingest_workers``) sends them when done. A
        rank's first file's rows are kept as they came (most ranks have one file: a 2,048-file run
        spent ~0.8 s of the writer's time keying 655k rows for nothing); a second file's rows key them
        by (name, kind), and a key met twice becomes a running Totals."""
        from .ingest_workers import Totals
        rows = (
            self._with_name_ids(cast("list[NamedSummaryRow]", parsed.summary)) if parsed.named
            else cast("list[SummaryRow] | SummaryColumns", parsed.summary)
        )
        have = self.summary.get(rank_id)
        if have is None:
            self.summary[rank_id] = rows
        else:
            if not isinstance(have, dict):
                have = self.summary[rank_id] = {(r[1], r[2]): r for r in _as_rows(have)}
            for r in _as_rows(rows):  # (rank_id, name_id, kind, category, calls, total, min, max, sum sq, self)
                key = (r[1], r[2])
                s = have.get(key)
                if s is None:
                    have[key] = r
                    continue
                if isinstance(s, tuple):
                    s = have[key] = Totals(*s[3:])
                s.add(*r[4:])
                if s.total_ns > INT64_MAX or s.self_ns > INT64_MAX:  # (each file's fit: validate.summed)
                    name = next((n for n, i in self.names.items() if i == key[0]), key[0])
                    merged(rank_id, f"the durations of {name!r} ({key[1]})", max(s.total_ns, s.self_ns))
        for st in parsed.steps:
            self.steps[(rank_id, st.step)] = (source_id, st.start_ns, st.duration_ns)
        if parsed.timeline is not None:
            self.timelines.setdefault(rank_id, []).append(parsed.timeline)

    def rank_done(self, rank_id: int) -> None:
        """Every file of ``rank_id`` is merged: its summary is final. Its rows are written with other
        complete ranks' once ``SUMMARY_ROWS`` wait, and let go: holding every rank's until the end
        grew with ranks x names (2,048 ranks of 320 names: 650k rows, ~470 MB at the ingest's peak).
        (PostgreSQL: a load holds its ranks' locks, ``hold_run``, so no other load updates these keys.)"""
        ranks = self.summary.pop(rank_id, None)
        if ranks is not None:
            self.ready.append(_summary_rows(rank_id, ranks))
            self.ready_rows += len(self.ready[-1])
        if self.ready_rows >= SUMMARY_ROWS:
            self._write_ready()

    def _write_ready(self) -> None:
        """Write the complete ranks' summary rows, rank by rank in rank id order (``add_summaries`` sorts
        them: little to do when each rank's rows come sorted, ``_with_name_ids``); ranks whose rows are
        columns go as columns (``add_summary_columns``), a run of them at a time."""
        from .ingest_workers import SummaryColumns

        self.ready.sort(key=_rank_of)
        for as_columns, run in groupby(self.ready, key=lambda rows: isinstance(rows, SummaryColumns)):
            if as_columns:
                add_summary_columns(self.conn, cast("list[SummaryColumns]", list(run)))
            else:
                add_summaries(self.conn, chain.from_iterable(cast("Iterator[list[SummaryRow]]", run)))
        self.ready = []
        self.ready_rows = 0

    def finish(self) -> None:
        """Merge the in-memory summaries and steps into the store (adding to earlier ingests)."""
        self._close_names()
        self.ready += [_summary_rows(rank_id, per_name) for rank_id, per_name in self.summary.items()]
        self.summary = {}
        self._write_ready()
        add_steps(self.conn, [(k[0], k[1], *v) for k, v in self.steps.items()])
        self.spans.write()


#: complete ranks' summary rows the writer holds before writing them (``Writer.rank_done``)
SUMMARY_ROWS = 50_000


def _summary_rows(
    rank_id: int, per_name: list[SummaryRow] | SummaryColumns | dict[tuple[int, str], Totals | SummaryRow]
) -> list[SummaryRow] | SummaryColumns:
    """A rank's summary rows as ``add_summaries`` (or, as columns, ``add_summary_columns``) takes them (a
    worker's row met once is kept as it came)."""
    if not isinstance(per_name, dict):
        return per_name
    return [t if isinstance(t, tuple) else t.row(rank_id, name_id, kind, t.self_ns) for (name_id, kind), t in
            per_name.items()]


def _as_rows(rows: list[SummaryRow] | SummaryColumns) -> list[SummaryRow]:
    return rows if isinstance(rows, list) else rows.rows()


def _rank_of(rows: list[SummaryRow] | SummaryColumns) -> int:
    """The rank id of a rank's summary rows (0 without rows)."""
    if isinstance(rows, list):
        return rows[0][0] if rows else 0
    return rows.rank_id()


#: SQLite's page cache during a bulk load into SQLite (KiB, as PRAGMA cache_size takes it negated),
#: instead of the store's 64 MB (db._sqlite_on_connect), which the load filled with pages it writes
#: once: rows are appended in key order with the fact indexes deferred, and names are looked up in
#: the writer's own table. Measured, the benchmark's 1x long-counters run (2.1 GB of CSV, 2 runs
#: each): main process peak RSS 192-193 -> 165-176 MB, CPU seconds 22.9-24.7 -> 22.1-23.3.
LOAD_CACHE_KIB = 4096


@contextmanager
def load_transaction(engine: Engine, bulk_load: bool, new_store: bool = False) -> Iterator[Connection]:
    """A load's one transaction. For a bulk load into SQLite, foreign key checks are off while it
    runs (each inserted row would otherwise look up its rank, source and names: half the cost of
    inserting a counter row) and back on afterwards, commit or not. The ingest itself creates every
    row those keys point to, under BEGIN IMMEDIATE, so no other writer can remove them meanwhile.
    Temporary storage goes to files meanwhile: rebuilding an index sorts beyond the page cache's worth
    of memory in temporary files, which with temp_store=MEMORY are memory too, so the peak would grow
    with the table (measured on 10M rows: 550 MB, 150 MB with files). The page cache is held to
    LOAD_CACHE_KIB meanwhile.
    A bulk load into a store this ingest created (``new_store``: a failed load removes the file) runs
    with a rollback journal and switches the store to WAL after commit: in WAL mode every page is
    written twice (into the log, then checkpointed into the file), with a rollback journal into an
    empty file once (the journal holds only the few pages that existed). Measured (ablation.py):
    400k short-name kernel rows, 2.72 -> 2.56 s CPU and less I/O wait.
    (SQLite refuses or ignores these pragmas inside a transaction: they are set before BEGIN.)"""
    from .db import temporary_files

    with engine.connect() as conn:
        raw = conn.connection.driver_connection if bulk_load and engine.dialect.name == "sqlite" else None
        journal = False
        with temporary_files(raw, LOAD_CACHE_KIB) if raw is not None else nullcontext():
            if raw is not None:
                raw.execute("PRAGMA foreign_keys=OFF")
                if new_store:
                    journal = raw.execute("PRAGMA journal_mode=DELETE").fetchone()[0] == "delete"
            try:
                with conn.begin():
                    yield conn
            finally:
                if raw is not None:
                    with suppress(Exception):  # a broken connection is discarded anyway: keep the first error
                        raw.execute("PRAGMA foreign_keys=ON")
                        if journal:
                            raw.execute("PRAGMA journal_mode=WAL")
        if engine.dialect.name == "postgresql":  # (committed: the rows are in; now make them findable)
            summarize_fact_ranges(conn)


#: the fact tables' BRIN indexes (PostgreSQL; migration 0009, see models.Activity)
_BRIN_INDEXES = ("ix_activity_rank_source", "ix_counter_rank_source")


def summarize_fact_ranges(conn: Connection) -> None:
    """PostgreSQL, after a load's commit: summarize the block ranges of the fact tables' BRIN indexes
    that the load filled, in a short transaction of its own (``brin_summarize_new_values``; a range
    not yet summarized is read by every search that uses the index, so a store answers at full speed
    as soon as the ingest returns). Measured: ~0.3-0.5 us per loaded row, against the ~2.5-3.5 us per
    row a B-tree's upkeep cost during the load. Best effort: the load is committed whatever happens
    here, and autovacuum summarizes what is left (the indexes are ``autosummarize``), so a failure,
    e.g. a lock held by a concurrent schema change, is not the load's error."""
    with suppress(DBAPIError), conn.begin():
        conn.exec_driver_sql(
            "SELECT brin_summarize_new_values(c.oid) FROM pg_class c JOIN pg_am am ON am.oid = c.relam "
            "WHERE am.amname = 'brin' AND c.relname IN (" + ", ".join(f"'{n}'" for n in _BRIN_INDEXES) + ")"
        ).all()


def defer_indexes(conn: Connection, incoming_bytes: int) -> list[str]:
    """For a bulk load into an SQLite store that holds little next to the input: drop the secondary
    indexes of the fact tables (activity, counter: none since migration 0010, which keeps their rows'
    id ranges in fact_span instead; any a user added) and of the collective calls (``collective_call``'s
    match index: its rows are written after the activity's, by ``timeline.save_timelines``) now and
    return their CREATE statements, to run after those writes and before commit. Building an index
    once over the rows costs less than updating it row by row (measured: inserts twice as fast) when
    the table already holds fewer rows than about twice the rows coming in. DDL is transactional in
    SQLite: a failed ingest gets the indexes back."""
    if conn.dialect.name != "sqlite" or incoming_bytes < DEFER_INDEXES_MIN_BYTES:
        return []
    existing = sum(
        int(conn.exec_driver_sql(f"SELECT COALESCE(MAX(id), 0) FROM {t}").scalar() or 0)
        for t in ("activity", "counter")
    )
    if existing > 2 * (incoming_bytes // 200):  # ~200 input bytes per row in rocprofv3 CSV and Kineto JSON
        return []
    indexes = conn.exec_driver_sql(
        "SELECT name, sql FROM sqlite_master WHERE type = 'index' "
        "AND tbl_name IN ('activity', 'counter', 'collective_call') "
        "AND sql IS NOT NULL ORDER BY name"
    ).all()
    for name, _sql in indexes:
        conn.exec_driver_sql(f'DROP INDEX "{name}"')
    return [str(sql) for _name, sql in indexes]


#: SQLite's page cache while ``rebuild_indexes`` runs (KiB, as PRAGMA cache_size takes it negated): its
#: table scans filled the store's 64 MB cache (db._sqlite_on_connect), the ingest's peak at 4x the
#: benchmark's input (+64 MB). SQLite's own default, which the sort already used: dropping the indexes
#: reloads the schema, which resets the cache size the sort reads to the default, so a sort spilled to
#: temporary files past 2 MB before too. Measured on 1M rows: 1.23 s for both activity indexes, 1.28 s
#: with 64 MB.
INDEX_BUILD_CACHE_KIB = 2000


#: most helper threads SQLite's sorter may start for a multi-column index build (``PRAGMA threads``;
#: at most the machine's cores). The builds run after every file is parsed, with the other cores
#: idle; a sort beyond the page cache's worth of keys is cut in runs that helper threads sort while
#: the main thread reads on. Measured, 2 cores, median of 7 builds each (before 0010 dropped the fact
#: tables' indexes): ``(rank_id, name_id)`` on 1M CSV rows 0.52-0.54 -> 0.41-0.44 s, on 650k Kineto
#: rows 0.37 -> 0.31-0.34 s; but one integer column (``source_id``) sorts faster alone (0.14 -> 0.16 s,
#: 0.21-0.24 -> 0.23-0.31 s), so those are built without. (Today: collective_call's match index.)
INDEX_BUILD_THREADS = 4


def rebuild_indexes(conn: Connection, statements: Sequence[str]) -> None:
    """Run the CREATE INDEX statements ``defer_indexes`` returned, with the page cache (hence the
    sort's memory) held to INDEX_BUILD_CACHE_KIB and, for indexes of several columns, the sorter's
    helper threads allowed (INDEX_BUILD_THREADS); the connection's settings restored after."""
    if not statements:
        return
    before = conn.exec_driver_sql("PRAGMA cache_size").scalar()
    threads = int(conn.exec_driver_sql("PRAGMA threads").scalar() or 0)
    conn.exec_driver_sql(f"PRAGMA cache_size=-{INDEX_BUILD_CACHE_KIB}")
    try:
        for sql in statements:
            several = "," in sql[sql.rindex("(") :]  # (the indexed columns: CREATE INDEX n ON t (a, b))
            conn.exec_driver_sql(f"PRAGMA threads={min(INDEX_BUILD_THREADS, cores()) if several else threads}")
            conn.exec_driver_sql(sql)
    finally:
        conn.exec_driver_sql(f"PRAGMA cache_size={int(before or 0)}")
        conn.exec_driver_sql(f"PRAGMA threads={threads}")


# --------------------------------------------------------------------------- database errors during a load

#: SQLSTATE classes and codes of errors a load can meet on the server, and what the user should do
_RETRY = "nothing was written (the load is one transaction): run it again"


def explain_db_error(
    e: BaseException, store: str, inputs: Sequence[str], named: Mapping[int, str] | None = None
) -> StoreError | None:
    """A database error raised during a load into ``store`` (its display URL or path), as one
    message naming the input and the fix, or None when ``e`` is not a database error. ``inputs``:
    the load's input paths (named when the failing file is unknown); ``named``: source_file id ->
    input path, to name the very file whose row the server refused (``copy_rows`` marks its errors).
    Call it where the load's exception surfaces, or wrap the load in ``db_errors_explained``."""
    orig: BaseException = getattr(e, "orig", None) or e  # (SQLAlchemy's DBAPIError wraps the driver's)
    if not (isinstance(orig, sqlite3.Error) or type(orig).__module__.split(".")[0] == "psycopg"):
        return None
    if isinstance(orig, sqlite3.Error):  # (a statement run on the driver's connection, not mapped on the way)
        from .db import sqlite_error

        mapped = sqlite_error(orig, store)
        if mapped is not None:
            return mapped
    diag = getattr(orig, "diag", None)
    text = str(orig).strip()
    primary = str(getattr(diag, "message_primary", None) or (text.splitlines()[0] if text else type(orig).__name__))
    code = str(getattr(orig, "sqlstate", None) or "")
    table, column, source = getattr(orig, "profdb_copy", None) or getattr(e, "profdb_copy", None) or (None, None, None)
    if source is not None and named and source in named:
        what = str(named[source])
    elif len(inputs) == 1:
        what = str(inputs[0])
    else:
        what = f"{len(inputs)} inputs ({', '.join(map(str, inputs[:3]))}{', ...' if len(inputs) > 3 else ''})"
    name = type(orig).__name__
    where = f" ({table}.{column})" if table and column else f" ({table})" if table else ""
    if code.startswith("22") or name in ("DataError",):
        return StoreError(
            f"{what}: the store {store} refused a value from it: {primary}{where}; nothing was written (the "
            "load is one transaction): this file holds a value that column cannot hold; load the other files "
            "without it, or this one into an SQLite store (--db FILE.db), and report the value to profdb's "
            "maintainers"
        )
    if code.startswith("23") or name == "IntegrityError":
        constraint = getattr(diag, "constraint_name", None)
        return StoreError(
            f"{what}: the store {store} refused this load's rows: {primary}"
            f"{f' ({constraint})' if constraint else where}; {_RETRY} (a node that loaded the same files at "
            "the same moment is then seen, and its files are skipped); if it fails again, the store was changed "
            "by hand: check the run with `profdb ranks --run NAME`"
        )
    if code in ("40P01", "40001", "55P03", "57014"):  # deadlock, serialization, lock not available, cancelled
        return StoreError(f"loading {what} into {store} was stopped by the server: {primary}; {_RETRY}")
    if code.startswith("53"):  # disk full, out of memory, too many connections
        return StoreError(
            f"loading {what} into {store} failed: the server is out of resources ({primary}); nothing was "
            "written (the load is one transaction): ask the store's administrator to free space or connections, "
            "then run it again"
        )
    if code.startswith("08") or code.startswith("57P") or name == "OperationalError":
        return StoreError(
            f"loading {what} into {store} failed: the connection to the server was lost or refused ({primary}); "
            "nothing was written (the load is one transaction): check that the server is running and reachable, "
            "then run it again"
        )
    return StoreError(f"loading {what} into {store} failed: the store reported {name}: {primary}; {_RETRY}")


@contextmanager
def db_errors_explained(store: str, inputs: Sequence[str], named: Mapping[int, str] | None = None) -> Iterator[None]:
    """Turn a database error escaping the block into ``explain_db_error``'s StoreError (profdb's own
    errors, interrupts and anything else pass unchanged)."""
    try:
        yield
    except Exception as e:
        if isinstance(e, ProfdbError):
            raise
        err = explain_db_error(e, store, inputs, named)
        if err is None:
            raise
        raise err from e
