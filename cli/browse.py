"""``profdb browse``: the store in Datasette, in a browser (parse, call profdb.store.browse once)."""

from __future__ import annotations

import click

from profdb.store import browse
from profdb.store.db import resolve_url, sqlite_path

from .options import db_option
from .output import note


@click.command("browse")
@db_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (0.0.0.0: every one).")
@click.option("--port", default=8001, show_default=True, type=click.IntRange(0, 65535), help="Port to listen on.")
def browse_command(db: str | None, host: str, port: int) -> None:
    """Browse the store in Datasette: runs, ranks, kernels; every view as a query with a run field,
    the README's notes on each. An SQLite store only (a PostgreSQL store: profdb export it to a
    file first). Needs Datasette: pip install 'profdb[browse]'.

    \b
      profdb browse                        # the store ./profdb.db; then open http://127.0.0.1:8001/
    """
    path = sqlite_path(resolve_url(db))
    if path is None:
        raise click.UsageError(
            "profdb browse reads an SQLite store; copy a PostgreSQL store into a file first: "
            "profdb export --db URL --to team.db, then profdb browse --db team.db"
        )
    note(f"serving {path} at http://{host}:{port}/ (Ctrl-C stops)")
    browse.serve(path, host, port)
