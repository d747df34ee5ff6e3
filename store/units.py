"""Durations for people: the one formatter of nanoseconds (sentences, tables, the report)."""

from __future__ import annotations

from typing import Any, Literal

_UNITS = (("s", 1e9), ("ms", 1e6), ("us", 1e3))


def fmt_ns(v: Any, mode: Literal["sentence", "table"] = "sentence") -> str:
    """Nanoseconds in the largest unit (s, ms, us) that keeps the number at least 1, else ns.

    ``sentence``: 3 significant digits (``1.23 ms``), for headlines, notes and the report;
    ``table``: 3 decimals (``1.235 ms``), so a column's numbers line up. None is "" and anything
    that is not a number is shown as it is."""
    if v is None:
        return ""
    if not isinstance(v, (int, float)):
        return str(v)
    x = float(v)
    for unit, scale in _UNITS:
        if abs(x) >= scale:
            return f"{x / scale:.3g} {unit}" if mode == "sentence" else f"{x / scale:.3f} {unit}"
    return f"{x:.0f} ns"
