"""Rendering rows for every command that prints them: four formats (the option: options.py).

Names are shown with their control characters escaped (units.visible) in tables, notes and on a
terminal, so a name holding terminal escape sequences cannot act on the terminal.

table: aligned columns for people; ``*_ns`` columns shown in readable units (us/ms/s) under a header
without the suffix. csv / json / jsonl: raw values (integer ns) for programs, streamed row by row.
Data goes to stdout; notes go to stderr, so ``profdb ... --format csv > x.csv`` stays clean."""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Iterable, Sequence
from typing import Any

import click

from profdb.store.units import fmt_ns, visible


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 1e6 else f"{v:.4g}"
    return visible(str(v))  # a name's escape sequences are shown, never sent to the terminal


def _json_value(v: Any) -> Any:
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    return str(v)


def render(headers: Sequence[str], rows: Iterable[Sequence[Any]], fmt: str = "table", out: Any = None) -> None:
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
    # table
    headers, rows = _fold_rank_places(list(headers), rows)
    ns_cols = [h.endswith("_ns") for h in headers]
    shown = [visible(h[:-3] if is_ns else h) for h, is_ns in zip(headers, ns_cols)]
    cells = [[fmt_ns(v, mode="table") if is_ns else _cell(v) for v, is_ns in zip(r, ns_cols)] for r in rows]
    widths = [len(h) for h in shown]
    for row in cells:
        for i, c in enumerate(row):
            if len(c) > widths[i]:
                widths[i] = len(c)
    widths = [min(w, 100) for w in widths]
    numeric = [
        all(_is_num(r[i]) for r in cells if r[i] != "") and any(r[i] != "" for r in cells) for i in range(len(shown))
    ]

    def line(vals: Sequence[str]) -> str:
        parts = []
        for i, v in enumerate(vals):
            v = v if len(v) <= widths[i] else v[: widths[i] - 1] + "…"
            parts.append(v.rjust(widths[i]) if numeric[i] else v.ljust(widths[i]))
        return "  ".join(parts).rstrip()

    out.write(line(shown) + "\n")
    out.write("  ".join("-" * w for w in widths) + "\n")
    for row in cells:
        out.write(line(row) + "\n")


def _fold_rank_places(headers: list[str], rows: Iterable[Sequence[Any]]) -> tuple[list[str], list[list[Any]]]:
    """Tables only: ``X_rank, X_host, X_local_rank`` become one column ``X`` shown as ``2 (node01:1)``
    (rank, hostname, local rank; ``2 (vm)`` when the local rank is unknown), so wide reports fit a
    terminal; machine formats keep all three columns."""
    out_rows = [list(r) for r in rows]
    triplets = [
        h[: -len("_rank")]
        for h in headers
        if h.endswith("_rank") and f"{h[:-5]}_host" in headers and f"{h[:-5]}_local_rank" in headers
    ]
    for p in triplets:
        i, j, k = headers.index(f"{p}_rank"), headers.index(f"{p}_host"), headers.index(f"{p}_local_rank")
        for r in out_rows:
            rank, host, local = r[i], r[j], r[k]
            place = "" if host is None and local is None else (host or "?") + ("" if local is None else f":{local}")
            r[i] = "" if rank is None else (f"{rank} ({place})" if place else str(rank))
        for idx in sorted((j, k), reverse=True):
            del headers[idx]
            for r in out_rows:
                del r[idx]
        headers[headers.index(f"{p}_rank")] = p
    return headers, out_rows


def _is_num(s: str) -> bool:
    s = s.split(" ")[0]
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
