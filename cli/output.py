"""Rendering rows for every command that prints them: four formats (the option: options.py).

Names are shown with their control characters escaped (units.visible) in tables, notes and on a
terminal, so a name holding terminal escape sequences cannot act on the terminal.

table: aligned columns for people; ``*_ns`` columns shown in readable units (us/ms/s) under a header
without the suffix; on a terminal it fits the terminal's width (names shortened readably, see
``store/names.py``, columns left out when it is very narrow), in a file or a pipe or with ``--wide``
it carries every column and the full names. csv / json / jsonl: raw values (integer ns, full names) for
programs, streamed row by row.
Data goes to stdout; notes go to stderr, so ``profdb ... --format csv > x.csv`` stays clean."""

from __future__ import annotations

import csv
import json
import shutil
import sys
from collections.abc import Iterable, Sequence
from typing import Any

import click

from profdb.store.display import DROP_ORDER, NAME_COLUMNS, fmt_cell, fold_rank_places, shown_header
from profdb.store.names import MIN_WIDTH, shorten_all
from profdb.store.units import visible

#: ctx.meta key set by --wide (options.output_options)
WIDE_KEY = "profdb.wide"


def _json_value(v: Any) -> Any:
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    return str(v)


# name columns (display.NAME_COLUMNS) take the width the other columns leave (store.names.shorten_all)
#: a name column is never narrower than this while columns can still be left out
MIN_NAME_WIDTH = 24
AUTO = "auto"
#: on a terminal, other text columns (a run's command, its metadata) are cut at this width
MAX_TEXT_WIDTH = 60


def table_width(out: Any) -> int | None:
    """The width a table must fit: the terminal's (``COLUMNS`` if set) when ``out`` is a terminal and
    ``--wide`` was not given; None (full names, every column) when writing to a file or a pipe."""
    ctx = click.get_current_context(silent=True)
    if ctx is not None and ctx.find_root().meta.get(WIDE_KEY):
        return None
    isatty = getattr(out, "isatty", None)
    if isatty is None or not isatty():
        return None
    return shutil.get_terminal_size().columns


def render(
    headers: Sequence[str],
    rows: Iterable[Sequence[Any]],
    fmt: str = "table",
    out: Any = None,
    width: int | None | str = AUTO,
) -> None:
    """Write ``rows`` to ``out`` (stdout) as ``fmt``. A table fits ``width`` columns (``AUTO``: see
    ``table_width``; None: no limit): the name column takes the width the others leave, its names
    shortened so that no two read the same; if that is under MIN_NAME_WIDTH, columns are left out in
    DROP_ORDER (said on stderr). csv/json/jsonl always carry every column and the full names."""
    out = out or sys.stdout
    if fmt == "csv":
        w = csv.writer(out, lineterminator="\n")
        tty = hasattr(out, "isatty") and out.isatty()  # raw bytes for programs, escaped on a terminal
        w.writerow([visible(h) for h in headers] if tty else headers)
        for r in rows:
            w.writerow(["" if v is None else (visible(v) if tty and isinstance(v, str) else v) for v in r])
        return
    if fmt == "jsonl":
        for r in rows:
            out.write(json.dumps({h: _json_value(v) for h, v in zip(headers, r)}) + "\n")
        return
    if fmt == "json":
        out.write("[")
        first = True
        for r in rows:
            out.write(("\n" if first else ",\n") + json.dumps({h: _json_value(v) for h, v in zip(headers, r)}))
            first = False
        out.write("\n]\n" if not first else "]\n")
        return
    limit = table_width(out) if width == AUTO else width
    assert limit is None or isinstance(limit, int)
    for line in table_lines(headers, rows, limit):
        out.write(line + "\n")


def table_lines(headers: Sequence[str], rows: Iterable[Sequence[Any]], width: int | None = None) -> list[str]:
    """The lines of an aligned table (header, rule, rows) that fits ``width`` (None: no limit); every
    cell as ``store.display`` shows it (the report's rule): ``*_ns`` columns in readable units under a
    header without the suffix, names' control characters escaped."""
    folded_headers, folded_rows = fold_rank_places(headers, rows)
    shown = [shown_header(h) for h in folded_headers]
    cells = [[fmt_cell(h, v) for h, v in zip(folded_headers, r)] for r in folded_rows]
    if width is not None:
        shown, cells = _fit(shown, cells, width)
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(shown)]
    numeric = [
        all(_is_num(r[i]) for r in cells if r[i] != "") and any(r[i] != "" for r in cells) for i in range(len(shown))
    ]

    def line(vals: Sequence[str]) -> str:
        return "  ".join(v.rjust(widths[i]) if numeric[i] else v.ljust(widths[i]) for i, v in enumerate(vals)).rstrip()

    return [line(shown), "  ".join("-" * w for w in widths), *(line(row) for row in cells)]


def _fit(shown: list[str], cells: list[list[str]], width: int) -> tuple[list[str], list[list[str]]]:
    """Leave out columns (DROP_ORDER) until the name columns get MIN_NAME_WIDTH, then shorten the names
    to the width left. Other text columns are cut to the width left too (with …)."""
    dropped: list[str] = []

    def natural(i: int) -> int:
        return max([len(shown[i])] + [len(r[i]) for r in cells])

    def need(names_at: int) -> int:
        return sum(
            min(natural(i), names_at) if shown[i] in NAME_COLUMNS else natural(i) for i in range(len(shown))
        ) + 2 * (len(shown) - 1)

    empty = [h for i, h in enumerate(shown) if h not in NAME_COLUMNS and all(r[i] == "" for r in cells)]
    for h in [*empty, *(d for d in DROP_ORDER if d not in empty)]:
        if need(MIN_NAME_WIDTH) <= width:
            break
        if h in shown and len(shown) > 2:
            i = shown.index(h)
            del shown[i]
            for r in cells:
                del r[i]
            dropped.append(h)
    if dropped:
        note(f"columns left out to fit {width} columns: {', '.join(dropped)} (--wide or --format csv shows all)")
    name_cols = [i for i, h in enumerate(shown) if h in NAME_COLUMNS]
    for i in range(len(shown)):
        if i not in name_cols and natural(i) > MAX_TEXT_WIDTH:
            for r in cells:
                if len(r[i]) > MAX_TEXT_WIDTH:
                    r[i] = r[i][: MAX_TEXT_WIDTH - 1] + "…"
    others = sum(natural(i) for i in range(len(shown)) if i not in name_cols) + 2 * (len(shown) - 1)
    if name_cols:
        each = max((width - others) // len(name_cols), MIN_WIDTH)
        for i in name_cols:
            if natural(i) > each:
                short = shorten_all([r[i] for r in cells], each)
                for r, v in zip(cells, short):
                    r[i] = v
    return shown, cells


def _is_num(s: str) -> bool:
    s = s.split(" ")[0].replace(",", "")
    try:
        float(s)
        return True
    except ValueError:
        return False


def note(msg: str) -> None:
    click.echo(visible(msg), err=True)


def emit(result: Any, fmt: str) -> None:
    """Print a query result: its headline and notes to stderr, its rows to stdout."""
    if result.headline:
        note(result.headline)
    for line in result.notes:
        note(f"note: {line}")
    if result.headers:
        render(result.headers, result.rows, fmt)
