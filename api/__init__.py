"""profdb from Python (a notebook, a script): the questions of the CLI, answered as tables.

    import profdb
    db = profdb.connect("profdb.db")                  # an SQLite file, or "postgresql+psycopg://host/db"
    db.runs().to_pandas()                             # profdb runs
    db.imbalance(run="llama-tp8").to_pandas()         # profdb query --imbalance --run llama-tp8
    db.hotspots(top=10, kind="gpu").headline          # the verdict line the CLI prints on stderr
    db.sql("select * from imbalance_v limit 5")       # profdb sql

Every answer is a ``Result`` (``headers``, ``rows``, ``headline``, ``notes``) with the column names and
units of the CLI's ``--format csv`` (integer nanoseconds in ``*_ns`` columns, full names);
``.to_pandas()`` needs the optional extra ``pip install 'profdb[pandas]'``. The questions of
``profdb query`` are methods under their flag's name (``imbalance``, ``hotspots``, ``steps``, ``ranks``
...), taken from the CLI's registry (``profdb.cli.query.QUESTIONS``), so a new question is here too;
``db.questions()`` lists them with their options. Nothing is written to the store, except by
``sql(..., write=True)``."""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any

from profdb.store.errors import ProfdbError, QueryError, StoreError

if TYPE_CHECKING:
    from profdb.store.queries import Result

__all__ = ["ProfdbError", "Result", "Store", "connect"]


def __getattr__(name: str) -> Any:
    # ``profdb.Result`` on first use: ``import profdb`` (which every ``profdb.cli`` and ``profdb.store``
    # import runs first) loads no SQLAlchemy, and a ``profdb query`` process only what its question needs
    if name == "Result":
        from profdb.store.queries import Result

        return Result
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def connect(db: str | None = None) -> Store:
    """The store ``db``: an SQLite file (default ``./profdb.db`` or ``$PROFDB_DB``) or a database URL.
    An SQLite file must exist (ingest first with ``profdb ingest``); an older store is upgraded."""
    return Store(db)


class Store:
    """An open profdb store. Each question opens a connection for its own duration; ``close()`` (or a
    ``with`` block) releases the engine."""

    def __init__(self, db: str | None = None) -> None:
        from profdb.store.db import open_db, resolve_url, sqlite_path

        url = resolve_url(db)
        path = sqlite_path(url)
        if path is not None and not path.exists():
            raise StoreError(f"no profdb store at {path}; ingest profiles first (profdb ingest --db {path} PATH...)")
        self.url = url
        self._engine = open_db(db)

    def __repr__(self) -> str:
        return f"profdb.Store({self._engine.url.render_as_string(hide_password=True)!r})"

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()

    def _read(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        with self._engine.connect() as conn:
            try:
                return fn(conn, *args, **kwargs)
            finally:
                conn.rollback()

    # --- the listings -------------------------------------------------------------------------

    def runs(self) -> Result:
        """``profdb runs``: the runs, oldest first: world size, ranks found and missing, sources, rows."""
        from profdb.store import runs
        from profdb.store.queries import Result

        headers, rows = self._read(runs.list_runs)
        return Result(list(headers), [tuple(r) for r in rows])

    def list_ranks(self, run: str | None = None) -> Result:
        """``profdb ranks --run RUN``: the ranks of a run (hostname, local rank, pid, device, rows,
        files), missing ranks flagged. (``ranks()`` is the question ``profdb query --ranks``.)"""
        from profdb.store import runs
        from profdb.store.queries import Result

        headers, rows, notes = self._read(runs.list_ranks, run)
        return Result(list(headers), [tuple(r) for r in rows], None, list(notes))

    def trend(
        self,
        name_like: str | None = None,
        last: int = 20,
        kind: str | None = None,
        where: dict[str, str] | None = None,
        until: str | None = None,
    ) -> Result:
        """``profdb trend``: per run, oldest first, the time of the names LIKE ``name_like`` (or the
        busy time) per rank, its slowest rank and imbalance."""
        from profdb.store import trend

        result: Result = self._read(trend.trend, name_like, last, kind, where=where, until=until)
        return result

    def sql(self, statement: str, params: dict[str, Any] | None = None, write: bool = False) -> Result:
        """``profdb sql``: any statement; the views (``imbalance_v``, ``hotspot_v``, ...) need no joins.
        Read-only (rolled back) unless ``write=True``."""
        from profdb.store.queries import run_sql

        with self._engine.connect() as conn:
            result = run_sql(conn, statement, params)
            if write:
                conn.commit()
            else:
                conn.rollback()
        return result

    # --- the questions of `profdb query` ------------------------------------------------------

    def questions(self) -> list[tuple[str, str, tuple[str, ...]]]:
        """(name, help, keyword options) of each question of ``profdb query``, in its --help order."""
        return [(q.name, q.help, q.options) for q in _questions()]

    def ask(self, question: str, run: str | None = None, **options: Any) -> Result:
        """The question named as its ``profdb query --NAME`` flag, of ``run`` (default: the newest),
        with the options it takes (``kind``, ``top``, ``name_like``, ``by``, as ``questions()`` lists)."""
        q = {q.name: q for q in _questions()}.get(question)
        if q is None:
            raise QueryError(f"no question {question!r}; choose from {', '.join(q.name for q in _questions())}")
        unknown = sorted(set(options) - set(q.options))
        if unknown:
            takes = ", ".join(q.options) or "no other option"
            raise TypeError(f"{question}() takes run and {takes}; not {', '.join(unknown)}")
        result: Result = self._read(q.ask, run, **options)
        return result

    def __getattr__(self, name: str) -> Callable[..., Result]:
        if name.startswith("_") or name not in {q.name for q in _questions()}:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

        def question(run: str | None = None, **options: Any) -> Result:
            return self.ask(name, run, **options)

        question.__name__ = name
        question.__doc__ = next(q.help for q in _questions() if q.name == name)
        return question

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | {q.name for q in _questions()})


def _questions() -> tuple[Any, ...]:
    # the registry of `profdb query` (cli/query.py): one list of questions for the CLI and for Python
    from profdb.cli.query import QUESTIONS

    return QUESTIONS
