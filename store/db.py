"""Opening a store: engine, pragmas, safety checks, upgrade to the head migration.

``open_db(url)`` accepts a file path (SQLite, the default ``./profdb.db``) or an SQLAlchemy URL
(``sqlite:///x.db``, ``postgresql+psycopg://user@host/db``). It refuses a file that is not a
profdb store, backs up a SQLite store whose schema is behind before upgrading it, and leaves the
engine ready for one-transaction-per-command use."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sqlite3
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, inspect
from sqlalchemy.engine import make_url

from .errors import StoreError

DEFAULT_DB = "profdb.db"
ENV_DB = "PROFDB_DB"
#: tables profdb owns; a database holding other tables (and no alembic_version) is not ours
OWN_TABLES = {"alembic_version", "run", "rank", "source_file", "name", "activity", "counter", "summary", "step"}


def resolve_url(db: str | None) -> str:
    """``--db`` value (or $PROFDB_DB, or ./profdb.db) as an SQLAlchemy URL."""
    db = db or os.environ.get(ENV_DB) or DEFAULT_DB
    if "://" in db:
        return db
    return f"sqlite:///{Path(db).expanduser()}"


def sqlite_path(url: str) -> Path | None:
    u = make_url(url)
    if u.get_backend_name() != "sqlite" or not u.database or u.database == ":memory:":
        return None
    return Path(u.database)


def migrations_dir() -> str:
    spec = importlib.util.find_spec("profdb.migrations")
    if spec is None or not spec.submodule_search_locations:
        raise StoreError("profdb's migrations are not installed; reinstall profdb (pip install .)")
    return str(list(spec.submodule_search_locations)[0])


def _sqlite_on_connect(dbapi_conn: Any, _record: Any) -> None:
    # Let SQLAlchemy's BEGIN (below) own transactions, so DDL and DML share one real transaction.
    dbapi_conn.isolation_level = None
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=30000")
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
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in con.execute("select name from sqlite_master where type='table'")}
    except sqlite3.DatabaseError as e:
        raise StoreError(f"{path} is not a readable SQLite database ({e}); choose another --db path") from e
    finally:
        con.close()
    if tables and "alembic_version" not in tables:
        foreign = sorted(tables - OWN_TABLES)[:5]
        raise StoreError(
            f"{path} is not a profdb database (it has tables {', '.join(foreign) or ', '.join(sorted(tables))}); "
            "choose another --db path"
        )


def make_engine(url: str) -> Engine:
    u = make_url(url)
    if u.get_backend_name() == "sqlite":
        engine = create_engine(url)
        event.listen(engine, "connect", _sqlite_on_connect)
        event.listen(engine, "begin", _sqlite_on_begin)
        return engine
    return create_engine(url, pool_pre_ping=True)


def open_db(db: str | None = None, *, upgrade: bool = True) -> Engine:
    """Open (and create or upgrade) a profdb store. ``db``: path or URL; None = $PROFDB_DB or ./profdb.db."""
    url = resolve_url(db)
    path = sqlite_path(url)
    if path is not None:
        check_sqlite_file(path)
    engine = make_engine(url)
    if upgrade:
        try:
            upgrade_db(engine, path)
        except StoreError:
            engine.dispose()
            raise
        except Exception as e:  # driver errors: server down, auth, permissions
            engine.dispose()
            raise StoreError(f"cannot open the store {engine.url.render_as_string(hide_password=True)}: {e}") from e
    return engine


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


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        if not inspect(conn).has_table("alembic_version"):
            return None
        row = conn.exec_driver_sql("select version_num from alembic_version").first()
        return row[0] if row else None


def upgrade_db(engine: Engine, path: Path | None = None, revision: str = "head") -> None:
    from alembic import command

    current = current_revision(engine)
    head = head_revision()
    if current == head and revision == "head":
        return
    if current is not None:
        from alembic.script import ScriptDirectory
        from alembic.util import CommandError

        try:
            known = ScriptDirectory.from_config(alembic_config()).get_revision(current) is not None
        except CommandError:
            known = False
        if not known:
            where = path or engine.url.render_as_string(hide_password=True)
            raise StoreError(
                f"{where} was written by a newer profdb (schema revision {current}); upgrade profdb (pip install -U profdb)"
            )
    if current is not None and path is not None and path.exists():
        backup = path.with_name(path.name + f".bak-{current}")
        engine.dispose()
        shutil.copy2(path, backup)
    with engine.begin() as conn:
        command.upgrade(alembic_config(conn), revision)
