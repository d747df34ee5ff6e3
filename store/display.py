"""How a table's columns read to people, the same in a terminal table (cli/output.py) and in the
HTML report (report.py): one rule per column, so a figure and its header never read two ways.

- a ``*_ns`` column is shown in readable units (``units.fmt_ns``) under its header without the
  suffix (``mean_per_rank_ns`` -> ``mean_per_rank``);
- a ``*_bytes`` column with thousands separators (``1,234,567``);
- other floats (ratios, percentages, cv) with 3 decimals (``1.564``), or 4 significant digits from a
  million on;
- text with its control characters escaped (``units.visible``);
- ``X_rank, X_host, X_local_rank`` folded into one column ``X``, shown ``2 (node01:1)``.

csv / json / jsonl never go through here: they carry the raw values and every column."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from .units import fmt_ns, visible

#: columns that hold a kernel / operator name (shortened to fit, full name kept for hover or --wide)
NAME_COLUMNS = ("name", "top_name")
#: on a narrow terminal or browser window, columns (as shown: ``min``, not ``min_ns``) left out first
#: to last until the table fits (only those present); ``--wide``, ``--format csv`` or a wide window
#: shows every column
DROP_ORDER = (
    "cv",
    "rank_cv",
    "fastest",
    "min",
    "rank_min",
    "calls",
    "category",
    "slowest",
    "kind",
    "max",
    "rank_max",
    "communication_vs_mean",
    "top_name_excess",
    "ranks",
    # profdb compare (either view): what moved stays, the before / after detail goes first
    "moved_share_pp",
    "base_imbalance",
    "base_comm_per_rank",
    "new_share_pct",
    "base_share_pct",
    "moved_rank",
    "delta_per_rank",
    "base_max",
    "new_imbalance",
    "new_max",
)


def shown_header(header: str) -> str:
    """The header of a column as people read it: ``*_ns`` without the suffix."""
    return visible(header[:-3] if header.endswith("_ns") else header)


def fmt_cell(header: str, v: Any) -> str:
    """The value ``v`` of column ``header`` as people read it (rules in the module doc)."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return str(v)
    if header.endswith("_ns") and isinstance(v, (int, float)):
        return fmt_ns(v)
    if header.endswith("_bytes") and isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 1e6 else f"{v:.4g}"
    return visible(str(v))


def is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def fold_rank_places(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> tuple[list[str], list[list[Any]]]:
    """``X_rank, X_host, X_local_rank`` become one column ``X`` shown as ``2 (node01:1)`` (rank,
    hostname, local rank; ``2 (vm)`` when the local rank is unknown), so wide reports fit a screen;
    machine formats keep all three columns."""
    headers = list(headers)
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
