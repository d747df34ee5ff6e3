"""Values for people: the one formatter of nanoseconds (sentences, tables, the report), and the
one escaping of control characters in names shown on a terminal or in a chart (``visible``)."""

from __future__ import annotations

import re
from typing import Any, Literal

#: C0 and C1 control characters (ESC, CSI 0x9b...), DEL, surrogates and the non-characters XML refuses
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")


def visible(text: str) -> str:
    """``text`` with each control character written as its escape (``\\x1b``, ``\\n``...), so a
    name holding terminal escape sequences cannot recolour or rewrite the terminal, and an SVG chart
    with it stays valid XML. Printable text, including any non-ASCII letter, is unchanged."""
    return _CONTROL.sub(_escape, text) if _CONTROL.search(text) else text


def _escape(m: re.Match[str]) -> str:
    c = m.group()
    return repr(c)[1:-1] if ord(c) < 0x100 else f"\\u{ord(c):04x}"

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
