"""Durations for people: the one formatter of nanoseconds (sentences, tables, the report)."""

from __future__ import annotations

from typing import Any

_UNITS = (("s", 1e9), ("ms", 1e6), ("us", 1e3))


def fmt_ns(v: Any) -> str:
    """Nanoseconds in the largest unit (s, ms, us) that keeps the number at least 1, else ns, with 3
    significant digits: ``1.23 ms``, ``12.3 ms``, ``123 ms``, ``1.00 s`` (``3200 s`` above 1000 s).
    One rule for headlines, terminal tables and the report, so a figure reads the same everywhere;
    csv/json carry the exact integer. None is "" and anything that is not a number is shown as it is."""
    if v is None:
        return ""
    if not isinstance(v, (int, float)):
        return str(v)
    x = float(v)
    for unit, scale in _UNITS:
        if abs(x) >= scale:
            return _three_digits(x / scale, unit)
    return f"{x:.0f} ns"


def _three_digits(x: float, unit: str) -> str:
    """``x`` (1 <= |x|) to 3 significant digits; 999.7 ms rounds to ``1 s``, not ``1e+03 ms``."""
    text = f"{x:#.3g}".rstrip(".")  # 1.50 (not 1.5), 123 (not 123.)
    if "e" in text:  # 999.5 and above: the next unit up, or plain digits beyond seconds
        if unit != "s":
            bigger = {"us": "ms", "ms": "s"}[unit]
            return _three_digits(x / 1000, bigger)
        return f"{x:.0f} {unit}"
    return f"{text} {unit}"
