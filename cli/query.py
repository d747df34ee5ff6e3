"""``profdb query`` (the cross-rank questions) and ``profdb sql`` (any SQL). Parse, call the library
once, render: the headline (likely straggler and why) and notes go to stderr, rows to stdout.

The renderer at the bottom (``render``) is local until the shared cli/output.py lands: table with
readable units (``*_ns`` columns as ns/us/ms/s), or csv/json/jsonl streaming raw values."""

from __future__ import annotations

import csv
import json
import sys
from typing import IO, Any, Iterable, Sequence

import click

from ..store import queries
from ..store.db import open_db, resolve_url, sqlite_path
from ..store.errors import ProfdbError

FORMATS = ("table", "csv", "json", "jsonl")
QUESTIONS = ("imbalance", "hotspots", "steps", "ranks")


def _open(db: str | None) -> Any:
    path = sqlite_path(resolve_url(db))
    if path is not None and not path.exists():
        raise click.ClickException(
            f"no profdb store at {path}; ingest profiles first (profdb ingest PATH...) or pass --db / set PROFDB_DB"
        )
    try:
        return open_db(db)
    except ProfdbError as e:
        raise click.ClickException(str(e)) from e


def _emit(result: queries.Result, fmt: str) -> None:
    if result.headline:
        click.echo(result.headline, err=True)
    for note in result.notes:
        click.echo(f"note: {note}", err=True)
    if result.headers:
        render(result.headers, result.rows, fmt, sys.stdout)


db_option = click.option(
    "--db",
    envvar="PROFDB_DB",
    default=None,
    metavar="PATH|URL",
    help="Store: an SQLite file (default ./profdb.db) or a URL such as postgresql+psycopg://host/db.",
)
format_option = click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="table",
    show_default=True,
    help="table: aligned, readable units; csv/json/jsonl: raw values (times in integer ns).",
)


@click.command("query")
@click.option("--imbalance", "q_imbalance", is_flag=True, help="Names imbalanced across ranks; the likely straggler.")
@click.option("--hotspots", "q_hotspots", is_flag=True, help="Where the time goes, across all ranks.")
@click.option("--steps", "q_steps", is_flag=True, help="Per step (ProfilerStep#N): slowest rank, how often.")
@click.option("--ranks", "q_ranks", is_flag=True, help="Per rank: compute / communication / memory time.")
@click.option("--run", default=None, help="Run name (or id); default: the most recent run.")
@click.option(
    "--kind",
    default=None,
    help="Activity kind(s), comma-separated: kernel, memcpy, memset, cpu_op, annotation, gpu_annotation, api, "
    "python, or gpu (= kernel,memcpy,memset). Default: kernel (gpu for --ranks); cpu_op for CPU-only runs.",
)
@click.option("--top", default=20, show_default=True, type=click.IntRange(min=0), help="Rows per section (0 = all).")
@click.option("--name", "name_like", default=None, help="Only names LIKE this (case-insensitive; no %% = substring).")
@click.option(
    "--by",
    type=click.Choice(queries.GROUP_BY),
    default="rank",
    show_default=True,
    help="With --imbalance: per rank, or rolled up by host (slow node) or local-rank (slow GPU slot).",
)
@db_option
@format_option
def query_cmd(
    q_imbalance: bool,
    q_hotspots: bool,
    q_steps: bool,
    q_ranks: bool,
    run: str | None,
    kind: str | None,
    top: int,
    name_like: str | None,
    by: str,
    db: str | None,
    fmt: str,
) -> None:
    """Ask the cross-rank questions of one run.

    \b
      profdb query --imbalance                 # imbalanced kernels, likely straggler rank
      profdb query --imbalance --by host       # slow node?   (--by local-rank: slow GPU slot?)
      profdb query --hotspots --top 10
      profdb query --steps                     # per-step time: which rank is slowest, how often
      profdb query --ranks                     # per-rank compute / communication / memory
    """
    chosen = [q for q, on in zip(QUESTIONS, (q_imbalance, q_hotspots, q_steps, q_ranks)) if on]
    if len(chosen) != 1:
        raise click.UsageError("choose one question: --imbalance, --hotspots, --steps or --ranks")
    question = chosen[0]
    if by != "rank" and question != "imbalance":
        raise click.UsageError("--by goes with --imbalance")
    if question in ("steps", "ranks") and name_like is not None:
        raise click.UsageError(f"--name does not apply to --{question}")
    if question == "steps" and kind is not None:
        raise click.UsageError("--kind does not apply to --steps")
    engine = _open(db)
    try:
        with engine.connect() as conn:
            if question == "imbalance":
                result = queries.imbalance(conn, run, kind, top, name_like, by)
            elif question == "hotspots":
                result = queries.hotspots(conn, run, kind, top, name_like)
            elif question == "steps":
                result = queries.steps(conn, run)
            else:
                result = queries.rank_split(conn, run, kind)
    except ProfdbError as e:
        raise click.ClickException(str(e)) from e
    finally:
        engine.dispose()
    _emit(result, fmt)


@click.command("sql")
@click.argument("statement")
@click.option("--write", is_flag=True, help="Commit the statement's changes (default: read-only, rolled back).")
@db_option
@format_option
def sql_cmd(statement: str, write: bool, db: str | None, fmt: str) -> None:
    """Run any SQL against the store; the views (imbalance_v, hotspot_v, rank_total_v, step_v...)
    need no joins. Example: profdb sql "select * from imbalance_v order by recoverable_ns desc limit 5"
    """
    engine = _open(db)
    try:
        with engine.connect() as conn:
            result = queries.run_sql(conn, statement)
            if write:
                conn.commit()
            else:
                conn.rollback()
    except ProfdbError as e:
        raise click.ClickException(str(e)) from e
    finally:
        engine.dispose()
    _emit(result, fmt)


# ---------------------------------------------------------------------------------------------
# rendering (local until cli/output.py lands)

TABLE_CELL_MAX = 60


def fmt_time(ns: int | float) -> str:
    v = float(ns)
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if abs(v) >= scale:
            return f"{v / scale:.3g} {unit}" if abs(v) < 1000 * scale or unit == "s" else f"{v / scale:.0f} {unit}"
    return f"{v:.0f} ns"


def _cell(header: str, value: Any) -> str:
    if value is None:
        return ""
    if header.endswith("_ns") and isinstance(value, (int, float)) and not isinstance(value, bool):
        return fmt_time(value)
    if isinstance(value, float):
        return f"{value:.0f}" if abs(value) >= 1000 else f"{value:.3g}"
    text = str(value)
    if len(text) > TABLE_CELL_MAX:
        return text[: TABLE_CELL_MAX - 1] + "\u2026"
    return text


def _json_value(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "isoformat"):
        return value.isoformat()
    try:
        return int(value) if int(value) == value else float(value)
    except (TypeError, ValueError):
        return str(value)


def render(headers: Sequence[str], rows: Iterable[Sequence[Any]], fmt: str, out: IO[str]) -> None:
    if fmt == "csv":
        w = csv.writer(out, lineterminator="\n")
        w.writerow(headers)
        for row in rows:
            w.writerow(["" if v is None else v for v in row])
    elif fmt == "jsonl":
        for row in rows:
            out.write(json.dumps({h: _json_value(v) for h, v in zip(headers, row)}) + "\n")
    elif fmt == "json":
        out.write("[")
        first = True
        for row in rows:
            out.write(("\n" if first else ",\n") + json.dumps({h: _json_value(v) for h, v in zip(headers, row)}))
            first = False
        out.write("\n]\n" if not first else "]\n")
    else:
        rows = list(rows)
        titles = [h[:-3] if h.endswith("_ns") else h for h in headers]
        cells = [[_cell(h, v) for h, v in zip(headers, row)] for row in rows]
        numeric = [
            bool(rows) and all(isinstance(row[i], (int, float)) or row[i] is None for row in rows)
            for i in range(len(headers))
        ]
        data_w = [max([0] + [len(c[i]) for c in cells]) for i in range(len(headers))]
        # a title much wider than its values goes on two lines, split at an underscore
        top, bottom = [], []
        for t, w in zip(titles, data_w):
            cut = [i for i, ch in enumerate(t) if ch == "_"]
            if len(t) > max(w, 6) and cut:
                i = min(cut, key=lambda i: max(i, len(t) - i - 1))
                top.append(t[:i])
                bottom.append(t[i + 1 :])
            else:
                top.append("")
                bottom.append(t)
        widths = [max(len(a), len(b), w) for a, b, w in zip(top, bottom, data_w)]

        def line(parts: Sequence[str]) -> str:
            return "  ".join(
                p.rjust(w) if numeric[i] else p.ljust(w) for i, (p, w) in enumerate(zip(parts, widths))
            ).rstrip()

        if any(top):
            out.write(line(top) + "\n")
        out.write(line(bottom) + "\n")
        for c in cells:
            out.write(line(c) + "\n")
        if not rows:
            out.write("(no rows)\n")
