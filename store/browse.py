"""``profdb browse``: the store in Datasette (the optional extra ``profdb[browse]``), so a team can click
through runs, ranks and kernels in a browser. Every view of the store becomes a canned query with a
``run`` field (empty: every run), and the views' notes come from the README's schema tables (the
installed package's description), so the README stays their one home."""

from __future__ import annotations

import importlib.metadata
import re
import sqlite3
from pathlib import Path
from typing import Any

from .errors import StoreError

#: a row of a README table that documents a view: | `name_v` | one row per | columns |
_NOTE_ROW = re.compile(r"^\|\s*`(\w+)`\s*\|\s*([^|]+?)\s*\|\s*([^|]+?)\s*\|\s*$")


def schema_notes(readme: str | None = None) -> dict[str, str]:
    """view name -> "One row per X. Columns: ..." from the README's tables of views (``readme``:
    its text; default: the installed package's METADATA, whose description is the README)."""
    if readme is None:
        try:
            readme = importlib.metadata.distribution("profdb").read_text("METADATA")
        except importlib.metadata.PackageNotFoundError:
            readme = None
    notes: dict[str, str] = {}
    for line in str(readme or "").splitlines():
        m = _NOTE_ROW.match(line.strip())
        if m and m.group(1).endswith("_v") and m.group(2) != "one row per":
            notes[m.group(1)] = f"One row per {m.group(2)}. Columns: {m.group(3)}"
    return notes


def views(path: Path) -> dict[str, list[str]]:
    """The views of the SQLite store at ``path`` and their columns."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        names = [r[0] for r in con.execute("select name from sqlite_master where type = 'view' order by name")]
        return {v: [r[1] for r in con.execute(f'pragma table_info("{v}")')] for v in names}
    finally:
        con.close()


def metadata(path: Path, readme: str | None = None) -> dict[str, Any]:
    """Datasette metadata for the store: its title, each view's note, and one canned query per view
    (named as the view without ``_v``; with a ``run`` field when the view has a run column)."""
    notes = schema_notes(readme)
    tables: dict[str, Any] = {}
    queries: dict[str, Any] = {}
    for view, columns in views(path).items():
        note = notes.get(view, "")
        tables[view] = {"description": note} if note else {}
        where = " where :run = '' or run = :run" if "run" in columns else ""
        queries[view[:-2] if view.endswith("_v") else f"{view}_q"] = {
            "title": f"{view}" + (" of a run (empty: every run)" if where else ""),
            "sql": f"select * from {view}{where}",
            "description": note,
        }
    return {
        "title": f"profdb store {path.name}",
        "description": "Runs, ranks and kernels of distributed GPU profiles (profdb). The views need no joins; "
        "times are integer nanoseconds.",
        "databases": {path.stem: {"tables": tables, "queries": queries}},
    }


def serve(path: Path, host: str = "127.0.0.1", port: int = 8001) -> None:
    """Serve the store at ``path`` with Datasette until interrupted."""
    try:
        import uvicorn
        from datasette.app import Datasette
    except ImportError as e:
        raise StoreError("profdb browse needs Datasette: pip install 'profdb[browse]'") from e
    if not path.is_file():
        raise StoreError(f"no profdb store at {path}; ingest profiles first (profdb ingest PATH...) or pass --db")
    ds = Datasette(files=[str(path)], metadata=metadata(path))
    uvicorn.run(ds.app(), host=host, port=port, log_level="warning")
