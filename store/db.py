"""Opening a store: engine, pragmas, safety checks, upgrade to the head migration.

``open_db(url)`` accepts a file path (SQLite, the default ``./profdb.db``) or an SQLAlchemy URL
(``sqlite:///x.db``, ``postgresql+psycopg://user@host/db``). It refuses a file that is not a
profdb store, backs up a SQLite store whose schema is behind before upgrading it, and leaves the
engine ready for one-transaction-per-command use. ``open_raw_sqlite`` opens an SQLite store at head
for reading through the sqlite3 module alone (reader.RawSqlite), so this module imports SQLAlchemy
only in the functions that make or inspect engines and URLs."""

from __future__ import annotations

import glob
import importlib.util
import os
import re
import shutil
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from .errors import StoreError
from .reader import RawSqlite

if TYPE_CHECKING:
    from sqlalchemy import Engine

DEFAULT_DB = "profdb.db"
ENV_DB = "PROFDB_DB"
#: tables profdb owns; a database holding other tables (and no alembic_version) is not ours
OWN_TABLES = {"alembic_version", "run", "rank", "source_file", "name", "activity", "counter", "summary", "step"}


#: seconds an SQLite writer waits for another one's lock before giving up
SQLITE_BUSY_S = 30
#: pg_advisory_xact_lock key held while migrating a PostgreSQL store ("profdb" + 1)
PG_MIGRATION_LOCK = 0x70726F6664620001


def given_store(db: str | None) -> str:
    """The store a command was given: ``--db`` (a path or URL), else $PROFDB_DB, else ./profdb.db."""
    return db or os.environ.get(ENV_DB) or DEFAULT_DB


def resolve_url(db: str | None) -> str:
    """``--db`` value (or $PROFDB_DB, or ./profdb.db) as an SQLAlchemy URL. A bare
    ``postgresql://`` (or ``postgres://``, as libpq and psql spell it) gets profdb's driver, psycopg 3."""
    from sqlalchemy.engine import URL, make_url

    db = given_store(db)
    if "://" in db:
        scheme, rest = db.split("://", 1)
        if scheme in ("postgresql", "postgres"):
            db = f"postgresql+psycopg://{rest}"
        try:
            make_url(db)
        except Exception as e:  # sqlalchemy.exc.ArgumentError, ValueError (a bad port)
            raise StoreError(
                f"--db {display_url(db)!r} is not a database URL profdb can parse ({e}); write "
                "postgresql://USER@HOST:PORT/DBNAME (percent-encode @ : / in a password), or give an SQLite file path"
            ) from e
        return db
    # a file path: ? # % are part of the name, not a URL's query or fragment (URL.create quotes them)
    return URL.create("sqlite", database=str(Path(db).expanduser())).render_as_string(hide_password=False)


def display_url(url: str) -> str:
    """The URL with any password masked, for messages and reports."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # not a URL SQLAlchemy parses: show it without anything after a ':' in the netloc
        return re.sub(r"(://[^:/@]*:)[^@/]*@", r"\1***@", url)


def sqlite_path(url: str) -> Path | None:
    from sqlalchemy.engine import make_url

    u = make_url(url)
    if u.get_backend_name() != "sqlite" or not u.database or u.database == ":memory:":
        return None
    return Path(u.database)


def create_sqlite_store(path: Path) -> bool:
    """Create the SQLite store ``path`` if it does not exist; True when this call created it.

    The store is built whole (schema at head, WAL mode) under a private name and linked into place
    (``os.link`` fails when the name exists), so several processes creating one store at once never
    meet on a half-made file (four nodes switching a new file's journal mode and migrating it at once
    failed with "database is locked"), and exactly one of them is its creator: only that one removes
    it again when its load fails (a loser removing it under the others gave them "disk I/O error")."""
    if path.exists():
        return False
    check_sqlite_file(path)
    _check_writable(path)
    _remove_abandoned_builds(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.new")
    try:
        if not _create_from_schema(tmp):
            _migrate_new(tmp)
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        return True
    finally:
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(str(tmp) + suffix).unlink(missing_ok=True)


#: the SQLite schema at head, as the migrations build it (``sqlite_schema_script``), shipped beside them
SQLITE_SCHEMA = "sqlite_schema.sql"
_SCHEMA_HEADER = "-- profdb SQLite store at revision "


def sqlite_schema_path() -> Path:
    """Where the shipped schema script is: beside the migrations (``SQLITE_SCHEMA``)."""
    return Path(migrations_dir()) / SQLITE_SCHEMA


def _migrate_new(path: Path) -> None:
    """Bring the new SQLite file ``path`` to head by running the migrations."""
    engine = make_engine(resolve_url(str(path)))
    try:
        upgrade_db(engine, None)
    finally:
        engine.dispose()


def sqlite_schema_script() -> str:
    """The SQL that makes an empty SQLite store at head: the migrations run into a scratch file, dumped
    (``iterdump``: tables, their rows, indexes, views), under a header naming the revision. Written to
    ``alembic/sqlite_schema.sql`` by ``python -m profdb.store.db --write-schema``; tests/test_migrations.py
    checks the shipped file against a fresh run of the migrations."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        scratch = Path(d) / "schema.db"
        _migrate_new(scratch)
        con = sqlite3.connect(scratch)
        try:
            rev = con.execute("select version_num from alembic_version").fetchone()[0]
            body = "\n".join(con.iterdump())
        finally:
            con.close()
    return f"{_SCHEMA_HEADER}{rev} (generated: python -m profdb.store.db --write-schema)\n{body}\n"


def _create_from_schema(path: Path) -> bool:
    """Make the new store ``path`` from the shipped schema script when it is at this profdb's head
    (one ``executescript``: ~10 ms, where running the migrations imports Alembic and replays every
    step, ~0.5 s of each new store's ingest); False, and nothing made, when the script is missing or
    behind the migrations (a migration being written): the caller runs them."""
    try:
        text = sqlite_schema_path().read_text()
    except OSError:
        return False
    first, _, body = text.partition("\n")
    if not first.startswith(_SCHEMA_HEADER) or first[len(_SCHEMA_HEADER) :].split(" ", 1)[0] != scripted_head():
        return False
    con = sqlite3.connect(path, isolation_level=None)
    try:
        con.execute("PRAGMA journal_mode=WAL")
        con.executescript(body)
    finally:
        con.close()
    return True


def _remove_abandoned_builds(path: Path) -> None:
    """Remove the private builds of ``path`` (``create_sqlite_store``) whose process is gone: one
    SIGKILLed while building its store left it behind (nothing of it ran to remove it)."""
    for build in path.parent.glob(f".{glob.escape(path.name)}.*.new*"):
        pid = build.name[len(path.name) + 2 :].split(".", 1)[0]
        if pid.isdigit() and not _process_alive(int(pid)):
            build.unlink(missing_ok=True)


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


@dataclass(frozen=True)
class LoadTarget:
    engine: Engine
    #: this load created the SQLite file (``create_sqlite_store``): it is removed again if the load
    #: fails, and a bulk load may fill it with a rollback journal (bulk.load_transaction ``new_store``)
    created: bool


@contextmanager
def load_target(db: str | None, keep_on_error: Callable[[], bool] = lambda: False) -> Iterator[LoadTarget]:
    """The store a load (ingest, transfer) writes, opened (created if new) and disposed afterwards.
    When the load fails and this call created the SQLite file, the file (and its -wal, -shm and
    -journal) is removed again, unless ``keep_on_error()`` says some of the load was committed."""
    url = resolve_url(db)
    path = sqlite_path(url)
    created = path is not None and create_sqlite_store(path)
    engine: Engine | None = None
    try:
        engine = open_db(url)
        yield LoadTarget(engine, created)
    except BaseException:
        if engine is not None:
            engine.dispose()
            engine = None
        if created and path is not None and not keep_on_error():
            for suffix in ("", "-wal", "-shm", "-journal"):
                Path(str(path) + suffix).unlink(missing_ok=True)
        raise
    finally:
        if engine is not None:
            engine.dispose()


def migrations_dir() -> str:
    """The migrations folder, found next to this package: ``profdb/migrations`` of an installed wheel,
    or ``alembic/`` of the checkout in an editable install (there setuptools' import hook cannot serve
    ``profdb.migrations``, a folder without ``__init__.py``, below the regular package ``profdb``, api/)."""
    here = Path(__file__).resolve().parent
    for candidate in (here.parent / "migrations", here.parent / "alembic"):
        if (candidate / "env.py").is_file() and (candidate / "versions").is_dir():
            return str(candidate)
    raise StoreError("profdb's migrations are not installed; reinstall profdb (pip install .)")


def _sqlite_on_connect(dbapi_conn: Any, _record: Any) -> None:
    # Let SQLAlchemy's BEGIN (below) own transactions, so DDL and DML share one real transaction.
    dbapi_conn.isolation_level = None
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_S * 1000}")
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA cache_size=-65536")
    cur.execute("PRAGMA temp_store=MEMORY")
    cur.close()


def _sqlite_on_begin(conn: Any) -> None:
    conn.exec_driver_sql("BEGIN IMMEDIATE")


def check_sqlite_file(path: Path) -> None:
    """Refuse, without writing a byte, a file that is not a profdb store."""
    if not path.exists():
        parent = path.parent if str(path.parent) else Path(".")
        if not parent.exists():
            raise StoreError(f"{path}: folder {parent} does not exist; create it or choose another --db")
        return
    if path.is_dir():
        raise StoreError(f"{path} is a folder, not a database file; pass a file path with --db")
    if path.stat().st_size == 0:
        return
    with open(path, "rb") as f:
        magic = f.read(16)
    if magic != b"SQLite format 3\x00":
        raise StoreError(
            f"{path} is not a profdb database (not an SQLite file); choose another --db path "
            "or move that file away"
        )
    uri = f"file:{quote(str(path.resolve()))}?mode=ro"
    try:
        con = sqlite3.connect(uri, uri=True)
        try:
            tables = {r[0] for r in con.execute("select name from sqlite_master where type='table'")}
        finally:
            con.close()
    except sqlite3.OperationalError as e:
        if not os.access(path, os.R_OK):
            raise StoreError(f"{path}: permission denied; ask its owner for read access, or copy it") from e
        try:  # a WAL store in a folder this user cannot write: its -shm file cannot be made
            con = sqlite3.connect(uri + "&immutable=1", uri=True)
            try:
                tables = {r[0] for r in con.execute("select name from sqlite_master where type='table'")}
            finally:
                con.close()
        except sqlite3.DatabaseError as e2:
            raise StoreError(f"{path} is not a readable SQLite database ({e2}); choose another --db path") from e2
    except sqlite3.DatabaseError as e:
        raise StoreError(f"{path} is not a readable SQLite database ({e}); choose another --db path") from e
    if tables and "alembic_version" not in tables:
        foreign = sorted(tables - OWN_TABLES)[:5]
        raise StoreError(
            f"{path} is not a profdb database (it has tables {', '.join(foreign) or ', '.join(sorted(tables))}); "
            "choose another --db path"
        )


def sqlite_error(e: BaseException, path: Path | str | None, readonly: bool = False) -> StoreError | None:
    """The StoreError for a driver error that says what to do (disk full, read-only, locked), or None."""
    text = str(e)
    where = path or "database"
    if isinstance(e, sqlite3.OperationalError) and "database or disk is full" in text:
        return StoreError(
            f"the store {where} (or the temporary folder, $TMPDIR) ran out of space; nothing was written "
            "(the transaction was rolled back): free space, or point TMPDIR or --db at a larger disk"
        )
    if readonly and isinstance(e, sqlite3.OperationalError) and re.search("readonly|read-only|query_only", text):
        return StoreError(
            f"the store {where} is opened read-only by this command ({text}); nothing was written: "
            "to change it, pass --write (profdb sql --write)"
        )
    if isinstance(e, sqlite3.OperationalError) and ("readonly database" in text or "read-only" in text):
        return StoreError(
            f"the store {where} cannot be written (read-only file, folder or mount); nothing was written: "
            "read it with query/sql/report, or copy it somewhere writable to ingest into it"
        )
    if isinstance(e, sqlite3.OperationalError) and "locked" in text:
        return StoreError(
            f"the store {path or 'database'} is locked by another profdb; retry, or ingest into separate files "
            f"and merge them (`profdb merge A.db B.db --db ALL.db`) (waited {SQLITE_BUSY_S} s for the lock)"
        )
    return None


def _sqlite_locked_handler(path: Path | None, readonly: bool = False) -> Any:
    def on_error(ctx: Any) -> None:
        e = ctx.original_exception
        mapped = sqlite_error(e, path, readonly)
        if mapped is not None:
            raise mapped from e

    return on_error



def make_engine(url: str) -> Engine:
    from sqlalchemy import create_engine, event
    from sqlalchemy.engine import make_url

    u = make_url(url)
    if u.get_backend_name() == "sqlite":
        engine = create_engine(url)
        event.listen(engine, "connect", _sqlite_on_connect)
        event.listen(engine, "begin", _sqlite_on_begin)
        event.listen(engine, "handle_error", _sqlite_locked_handler(sqlite_path(url)))
        return engine
    if u.get_backend_name() == "postgresql":
        if u.get_driver_name() == "psycopg" and importlib.util.find_spec("psycopg") is None:
            raise StoreError(
                f"the store {display_url(url)} is PostgreSQL, and its driver psycopg is not installed; "
                "install it with `pip install 'profdb[postgresql]'` (or `pip install 'psycopg[binary]'`)"
            )
        connect_args: dict[str, Any] = {"connect_timeout": 15}
        if u.get_driver_name() == "psycopg":
            connect_args["application_name"] = "profdb"
        try:
            return create_engine(url, pool_pre_ping=True, connect_args=connect_args)
        except ImportError as e:
            raise StoreError(
                f"the store {display_url(url)} needs a database driver that is not installed ({e}); "
                "use postgresql+psycopg:// and `pip install 'profdb[postgresql]'`"
            ) from e
    try:
        return create_engine(url)
    except Exception as e:
        raise StoreError(
            f"cannot open the store {display_url(url)} ({e}); use an SQLite path or a postgresql+psycopg:// URL"
        ) from e


def _connect_error(url: str, e: BaseException) -> StoreError:
    """A clear message for a store that cannot be reached: the URL (password hidden), the cause, what to do."""
    from sqlalchemy.engine import make_url

    shown = display_url(url)
    orig = getattr(e, "orig", None) or e
    cause = " ".join(str(orig).split()) or type(orig).__name__
    if make_url(url).get_backend_name() != "postgresql":
        return StoreError(f"cannot open the store {shown}: {cause}")
    low = cause.lower()
    if "does not exist" in low and "database" in low:
        hint = f"create it (`createdb {make_url(url).database}`) or fix the database name in the URL"
    elif "password" in low or "authentication" in low or ("role" in low and "does not exist" in low):
        hint = "check the user and password in the URL (or in ~/.pgpass / $PGPASSWORD)"
    elif "permission denied" in low:
        hint = "ask the database owner to grant this user CREATE and USAGE on the schema, or use another database"
    else:
        hint = "check that the server is running and reachable, and the host, port, user and database in the URL"
    return StoreError(f"cannot open the store {shown}: {cause}; {hint}")


def open_db(db: str | None = None, *, upgrade: bool = True, readonly: bool = False) -> Engine:
    """Open (and create or upgrade) a profdb store. ``db``: path or URL; None = $PROFDB_DB or ./profdb.db.

    ``readonly``: for commands that only read (see ``open_readonly``)."""
    if readonly:
        return open_readonly(db)
    url = resolve_url(db)
    path = sqlite_path(url)
    if path is not None:
        check_sqlite_file(path)
        _check_writable(path)
        if upgrade:
            create_sqlite_store(path)  # a new file: made from the shipped schema, not by replaying the migrations
    engine = make_engine(url)
    if upgrade:
        try:
            upgrade_db(engine, path)
        except StoreError:
            engine.dispose()
            raise
        except Exception as e:  # driver errors: server down, auth, permissions
            engine.dispose()
            raise _connect_error(url, e) from e
    return engine


def _check_writable(path: Path) -> None:
    """A writing command on a store it cannot write (read-only mount, another user's file or folder;
    a WAL store needs its folder for the -wal and -shm files): say so before SQLite's 'unable to
    open database file'."""
    folder = path.parent if str(path.parent) else Path(".")
    if path.exists() and not (os.access(path, os.W_OK) and os.access(folder, os.W_OK)):
        raise StoreError(
            f"the store {path} cannot be written (read-only file, folder or mount); nothing was written: "
            "read it with query/sql/report, or copy it somewhere writable to ingest into it"
        )
    if not path.exists() and folder.is_dir() and not os.access(folder, os.W_OK):
        raise StoreError(f"{folder}: cannot create a store in this folder (read-only); pass --db in a writable folder")


def open_readonly(db: str | None = None) -> Engine:
    """A store opened for reading only, by construction: every transaction is read-only whatever
    SQL runs in it (``profdb sql`` needs no rollback to stay harmless), and no lock is taken, so a
    reader answers at once while an ingest is writing.

    SQLite: connections with ``mode=ro`` and ``PRAGMA query_only``, transactions begun DEFERRED
    (a WAL reader never waits for the writer); a store on a read-only mount or in a folder this user
    cannot write (no ``-shm`` file can be made) is opened ``immutable``. PostgreSQL:
    ``default_transaction_read_only``, so even ``commit; delete ...`` inside one statement string
    starts a read-only transaction. A store whose schema is behind is upgraded first when it can
    be written (as any command would), else refused with what to do."""
    from sqlalchemy.engine import make_url

    url = resolve_url(db)
    path = sqlite_path(url)
    if path is None:
        u = make_url(url)
        if u.get_backend_name() == "postgresql":
            given = u.query.get("options")
            options = " ".join([given] if isinstance(given, str) else []) + " -c default_transaction_read_only=on"
            url = u.update_query_dict({"options": options.strip()}).render_as_string(hide_password=False)
            engine = make_engine(url)
            _require_head(engine, url)
            return engine
        return open_db(db)
    if not path.exists():
        raise StoreError(
            f"{path}: no profdb store here; ingest profiles first (`profdb ingest ... --db {path}`) or pass --db"
        )
    check_sqlite_file(path)
    ro = _readonly_sqlite_engine(path)
    if current_revision(ro) != scripted_head():
        ro.dispose()
        if os.access(path, os.W_OK) and os.access(path.parent, os.W_OK):
            open_db(str(path)).dispose()  # upgrade (with its backup) as a writing command would
        else:
            raise StoreError(
                f"{path}: the store's schema is older than this profdb's and the store cannot be written here to "
                "upgrade it; copy it to a writable folder, or use the profdb version that wrote it"
            )
        ro = _readonly_sqlite_engine(path)
    return ro


def _readonly_sqlite(path: Path) -> sqlite3.Connection:
    """A read-only sqlite3 connection to the store at ``path`` (``mode=ro``, ``query_only``; autocommit:
    the caller begins its transactions)."""
    uri = "file:" + quote(str(path.resolve())) + "?mode=ro"
    try:
        con = sqlite3.connect(uri, uri=True, check_same_thread=False)
        con.execute("select count(*) from sqlite_master").fetchone()
    except sqlite3.OperationalError:
        # a WAL store whose folder cannot be written (read-only mount, another user's folder):
        # nothing can be writing it, so it is read as an immutable file
        con = sqlite3.connect(uri + "&immutable=1", uri=True, check_same_thread=False)
    con.isolation_level = None
    con.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_S * 1000}")
    con.execute("PRAGMA query_only=ON")
    con.execute("PRAGMA temp_store=MEMORY")
    return con


def _readonly_sqlite_engine(path: Path) -> Engine:
    from sqlalchemy import create_engine, event

    engine = create_engine("sqlite://", creator=lambda: _readonly_sqlite(path))
    event.listen(engine, "begin", lambda conn: conn.exec_driver_sql("BEGIN DEFERRED"))
    event.listen(engine, "handle_error", _sqlite_locked_handler(path, readonly=True))
    return engine


def open_raw_sqlite(db: str | None = None) -> RawSqlite | None:
    """The existing SQLite store ``db`` (a file path; None = $PROFDB_DB or ./profdb.db) opened read-only
    with the sqlite3 module alone, in one read transaction (a snapshot, as a reader's SQLAlchemy
    connection has): what a question reads without importing SQLAlchemy (reader.RawSqlite). None when
    ``db`` is a URL, no file is there, or the store's schema is not this profdb's: ``open_readonly``
    then says so, or upgrades it, as for any command."""
    db = given_store(db)
    if "://" in db:
        return None
    path = Path(db).expanduser()
    if not path.is_file():
        return None
    check_sqlite_file(path)
    con = _readonly_sqlite(path)
    try:
        con.execute("BEGIN DEFERRED")
        rev = con.execute("select version_num from alembic_version").fetchone()
    except sqlite3.Error:
        rev = None
    if rev is None or rev[0] != scripted_head():
        con.close()
        return None
    return RawSqlite(con, lambda e: sqlite_error(e, path, readonly=True), lambda: _sharing_engine(con, path).connect())


class _InTransaction:
    """``con`` as SQLAlchemy's driver connection, inside the read transaction its owner began: rollback
    and close are the owner's (RawSqlite.close), so SQLAlchemy's rollbacks (after its first connect, on
    returning a connection to the pool) do not end the snapshot."""

    def __init__(self, con: sqlite3.Connection) -> None:
        self._con = con

    def rollback(self) -> None:
        pass

    def close(self) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._con, name)


def _sharing_engine(con: sqlite3.Connection, path: Path) -> Engine:
    """An engine over ``con`` itself, inside the read transaction already begun on it: what a question
    computes through SQLAlchemy reads the same snapshot as what it read through sqlite3."""
    from sqlalchemy import create_engine, event
    from sqlalchemy.pool import StaticPool

    engine = create_engine("sqlite://", creator=lambda: _InTransaction(con), poolclass=StaticPool)
    event.listen(engine, "handle_error", _sqlite_locked_handler(path, readonly=True))
    return engine


def _require_head(engine: Engine, url: str) -> None:
    try:
        rev = current_revision(engine)
    except Exception as e:
        engine.dispose()
        raise _connect_error(url, e) from e
    if rev != scripted_head():
        engine.dispose()
        raise StoreError(
            f"{display_url(url)}: the store's schema is {rev or 'empty'}, not this profdb's {scripted_head()}; "
            "run a writing command (e.g. `profdb ingest`) once to create or upgrade it"
        )


def alembic_config(connection: Any = None) -> Any:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", migrations_dir())
    cfg.attributes["connection"] = connection
    return cfg


def head_revision() -> str:
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


def known_revision(rev: str) -> bool:
    """Whether this profdb has the migration ``rev`` (a store written by a newer profdb has not)."""
    from alembic.script import ScriptDirectory
    from alembic.util import CommandError

    try:
        return ScriptDirectory.from_config(alembic_config()).get_revision(rev) is not None
    except CommandError:
        return False


def current_revision(engine: Engine) -> str | None:
    from sqlalchemy import inspect

    with engine.connect() as conn:
        if not inspect(conn).has_table("alembic_version"):
            return None
        row = conn.exec_driver_sql("select version_num from alembic_version").first()
        return row[0] if row else None


_REVISION_LINE = re.compile(r"""^(down_revision|revision)\s*=\s*['"]?([\w]+)?['"]?""", re.M)


def scripted_head() -> str | None:
    """The head revision read straight from the migration files (no alembic import: opening a store
    that is already at head is on every command's path). tests/test_migrations.py checks it equals
    alembic's own head."""
    revisions: set[str] = set()
    downs: set[str] = set()
    versions = Path(migrations_dir()) / "versions"
    for f in versions.glob("*.py"):
        found = dict(_REVISION_LINE.findall(f.read_text()))
        if found.get("revision"):
            revisions.add(found["revision"])
        if found.get("down_revision") and found["down_revision"] != "None":
            downs.add(found["down_revision"])
    heads = revisions - downs
    return heads.pop() if len(heads) == 1 else None


def upgrade_db(engine: Engine, path: Path | None = None, revision: str = "head") -> None:
    if revision == "head" and current_revision(engine) == scripted_head():
        return
    from alembic import command

    if engine.dialect.name == "postgresql":
        _upgrade_pg(engine, revision)
        return
    current = current_revision(engine)
    head = head_revision()
    if current == head and revision == "head":
        return
    if current is not None:
        if not known_revision(current):
            where = path or display_url(str(engine.url))
            raise StoreError(
                f"{where} was written by a newer profdb (schema revision {current}); "
                "upgrade profdb (pip install -U profdb)"
            )
    if current is not None and path is not None and path.exists():
        backup = path.with_name(path.name + f".bak-{current}")
        engine.dispose()
        backup_sqlite(path, backup)
    with engine.connect() as conn:
        # a migration that copies a fact table (0005, 0010) sorts and journals beyond the page cache
        # (a 4M-row store's upgrade to 0010 peaked at 383 MB in memory, 79 MB with files)
        raw = conn.connection.driver_connection
        assert raw is not None
        with temporary_files(raw, UPGRADE_CACHE_KIB), conn.begin():
            command.upgrade(alembic_config(conn), revision)
            _after_upgrade(conn, current, revision)


#: SQLite's page cache while the migrations run (KiB, as PRAGMA cache_size takes it negated)
UPGRADE_CACHE_KIB = 8000


@contextmanager
def temporary_files(raw: Any, cache_kib: int) -> Iterator[None]:
    """For SQLite statements that sort or journal beyond the page cache (a bulk load's index builds, a
    migration's table copies): temporary storage in files, not in memory as profdb's connections keep
    it (``_sqlite_on_connect``), so memory does not grow with the table, and a page cache of
    ``cache_kib``; both given back after. ``raw``: the driver's connection, outside a transaction
    (SQLite refuses to change temporary storage inside one)."""
    store, cache = (int(raw.execute(f"PRAGMA {p}").fetchone()[0]) for p in ("temp_store", "cache_size"))
    raw.execute("PRAGMA temp_store=FILE")
    raw.execute(f"PRAGMA cache_size=-{cache_kib}")
    try:
        yield
    finally:
        with suppress(Exception):  # (a broken connection is discarded anyway: keep the first error)
            raw.execute(f"PRAGMA temp_store={store}")
            raw.execute(f"PRAGMA cache_size={cache}")


#: the revision that added the kept run analysis (run_analysis): a store upgraded past it analyses its runs
_ANALYSIS_REVISION = 7


def _after_upgrade(conn: Any, before: str | None, revision: str) -> None:
    """Data the schema's new tables need, computed by profdb's code (a migration does not import it),
    in the upgrade's transaction: a store with runs upgraded to ``0007`` keeps each run's analysis
    (timeline.store_analysis, as its next ingest would), so its questions are fast from the first."""
    if before is None or not before.isdigit() or int(before) >= _ANALYSIS_REVISION or revision != "head":
        return
    from . import runs, timeline

    for name in runs.run_names(conn):
        timeline.store_analysis(conn, name)


def backup_sqlite(path: Path, backup: Path) -> None:
    """A consistent copy of the store ``path``, including what is still in its ``-wal`` file (a
    file copy would miss the rows another open connection has not checkpointed yet): SQLite's
    online backup reads the database as one transaction sees it. Written to a temporary name and
    renamed, so a failed backup leaves no half file under the backup's name."""
    tmp = backup.with_name(backup.name + ".tmp")
    src = sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode=ro", uri=True)
    try:
        dst = sqlite3.connect(tmp)
        try:
            src.backup(dst)
        finally:
            dst.close()
        shutil.copystat(path, tmp)
        os.replace(tmp, backup)
    except (OSError, sqlite3.Error) as e:
        Path(tmp).unlink(missing_ok=True)
        raise StoreError(
            f"{path}: cannot back it up to {backup} before upgrading its schema ({e}); free space or "
            "make the folder writable, then retry (the store is unchanged)"
        ) from e
    finally:
        src.close()


def _upgrade_pg(engine: Engine, revision: str) -> None:
    """Migrate a PostgreSQL store under a transaction-scoped advisory lock: nodes opening a fresh team
    store at once wait for the first one's migration (DDL is transactional there) instead of racing
    to create the same tables. No backup: PostgreSQL rolls a failed migration back whole."""
    from sqlalchemy import inspect

    from alembic import command

    if current_revision(engine) == head_revision() and revision == "head":
        return
    with engine.begin() as conn:
        conn.exec_driver_sql("SELECT pg_advisory_xact_lock(%s)", (PG_MIGRATION_LOCK,))
        insp = inspect(conn)
        tables = set(insp.get_table_names())
        if tables and "alembic_version" not in tables:
            foreign = sorted(tables - OWN_TABLES)[:5] or sorted(tables)[:5]
            raise StoreError(
                f"{display_url(str(engine.url))} is not a profdb store (schema {insp.default_schema_name} has tables "
                f"{', '.join(foreign)}); use an empty database (`createdb NAME`) or another schema"
            )
        if "alembic_version" in tables:
            row = conn.exec_driver_sql("select version_num from alembic_version").first()
            if row and not known_revision(row[0]):
                raise StoreError(
                    f"{display_url(str(engine.url))} was written by a newer profdb (schema {row[0]}); "
                    "upgrade profdb (pip install -U profdb)"
                )
        before = row[0] if "alembic_version" in tables and row else None
        command.upgrade(alembic_config(conn), revision)
        _after_upgrade(conn, before, revision)


if __name__ == "__main__":  # python -m profdb.store.db --write-schema
    import sys

    if sys.argv[1:] != ["--write-schema"]:
        raise SystemExit("usage: python -m profdb.store.db --write-schema")
    target = sqlite_schema_path()
    target.write_text(sqlite_schema_script())
    print(f"wrote {target}")
