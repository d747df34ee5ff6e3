"""What the commands share, defined once: the options (--db, --format, --run, --kind, --name, --top)
and the store's lifetime. A command gets its connection from ``connect(db)``: the store is opened
on first use and closed (connection, then engine) by click when the command ends, error or not;
nothing is committed unless the command calls ``conn.commit()``."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from profdb.store import classify
from profdb.store.db import open_db, open_raw_sqlite, resolve_url, sqlite_path
from profdb.store.reader import Db

if TYPE_CHECKING:
    from sqlalchemy import Connection

from .output import WIDE_KEY

F = TypeVar("F", bound=Callable[..., Any])

FORMATS = ("table", "csv", "json", "jsonl")

#: --kind's help, the part every command shares; a command may say what its default is
KIND_HELP = "Activity kind(s), comma-separated"
RUN_HELP = "Run name (or id); default: the most recent run."


def _set_wide(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value:
        ctx.find_root().meta[WIDE_KEY] = True


def output_options(f: F) -> F:
    """``--format`` and ``--wide`` (tables only; read by output.render, not passed to the command)."""
    f = click.option(
        "--wide",
        is_flag=True,
        expose_value=False,
        callback=_set_wide,
        help="Tables: every column and full names, however wide (the default on a terminal fits its width).",
    )(f)
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(FORMATS),
        default="table",
        show_default=True,
        help="Output format: aligned table with readable units, or raw values (full names) as csv / json / jsonl.",
    )(f)


def db_option(f: F) -> F:
    return click.option(
        "--db",
        envvar="PROFDB_DB",
        default=None,
        metavar="PATH|URL",
        help="Store: an SQLite file (default ./profdb.db, or $PROFDB_DB) or a URL such as postgresql+psycopg://host/db.",
    )(f)


def run_option(help: str = RUN_HELP) -> Callable[[F], F]:
    return click.option("--run", default=None, help=help)


def kind_option(
    help: str = f"{KIND_HELP} (kernel, memcpy, memset, cpu_op, annotation, ...; gpu = kernel,memcpy,memset). "
    "Default: kernel, or cpu_op for CPU-only runs.",
) -> Callable[[F], F]:
    return click.option("--kind", default=None, help=help)


def name_option(f: F) -> F:
    # click does not %-format help texts: a single % is printed as it is
    return click.option(
        "--name",
        "name_like",
        default=None,
        help="Only names LIKE this (case-insensitive; without % it matches a substring).",
    )(f)


def top_option(default: int, help: str, min: int = 0) -> Callable[[F], F]:
    return click.option("--top", default=default, show_default=True, type=click.IntRange(min=min), help=help)


def connect(db: str | None, *, write: bool = False) -> Connection:
    """A connection to the existing store ``db`` for the running command (asking questions must not
    create an empty store); click closes it, and disposes of the engine, when the command ends.
    Read-only unless ``write`` (db.open_readonly): a reader never waits for an ingest, and a store
    on a read-only mount or in a folder this user cannot write can still be queried."""
    path = sqlite_path(resolve_url(db))
    if path is not None and not path.exists():
        raise click.ClickException(
            f"no profdb store at {path}; ingest profiles first (profdb ingest PATH...) or pass --db / set PROFDB_DB"
        )
    ctx = click.get_current_context()
    engine = open_db(db, readonly=not write)
    ctx.call_on_close(engine.dispose)
    return ctx.with_resource(engine.connect())


def read(db: str | None) -> Db:
    """What a question reads, for the running command: an SQLite store at a file path through the
    sqlite3 module alone (db.open_raw_sqlite: the process never imports SQLAlchemy unless the question
    must compute what the store did not keep), else ``connect(db)``; closed when the command ends."""
    raw = open_raw_sqlite(db)
    if raw is None:
        return connect(db)
    click.get_current_context().call_on_close(raw.close)
    return raw


def comm_pattern_option(f: F) -> F:
    return click.option(
        "--comm-pattern",
        "comm_patterns",
        multiple=True,
        metavar="REGEX",
        help="Also class names matching REGEX as communication (before the shipped rules; repeatable). "
        "Rule files: PROFDB_COMM_RULES=FILE.toml or [classify] in ./profdb.toml (see README).",
    )(f)


def comm_rules(patterns: tuple[str, ...]) -> classify.Rules:
    """The communication rules in force: --comm-pattern first, then the user's files, then the shipped ones."""
    for p in patterns:
        try:
            re.compile(p)
        except re.error as e:
            msg = f"{p!r} is not a valid regular expression: {e}"
            raise click.BadParameter(msg, param_hint="--comm-pattern") from e
    return classify.load_rules(patterns)
