"""Format readers: a plain registry list, detection by content, ``--format NAME`` override.

Each reader module follows ``base.Reader`` (detect / inspect / read) and knows nothing of the
database. To add a format: write ``store/readers/<format>.py`` and append it to ``READERS``.
Order matters only for detection: more specific readers first."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import cast

from ..errors import InputError
from ..records import SourceInfo
from . import kineto_json, metrix, nsys_sqlite, rocpd_sqlite, rocprof_csv, rocprof_json, rpd_sqlite
from .base import Reader, has_rank_sections

# SQLite formats first (detected by their tables), then JSON/CSV formats detected by their head.
READERS: list[Reader] = [
    cast(Reader, m)
    for m in (rocpd_sqlite, rpd_sqlite, nsys_sqlite, rocprof_json, metrix, rocprof_csv, kineto_json)
]


def by_name(name: str) -> Reader:
    for r in READERS:
        if r.NAME == name:
            return r
    raise InputError(f"unknown format {name!r}; known formats: {', '.join(r.NAME for r in READERS)}")


def detect(path: Path) -> Reader | None:
    """The first reader that recognises the file, or None."""
    for r in READERS:
        if r.detect(path):
            return r
    return None


def split_ranks(reader: Reader, path: Path, info: SourceInfo, by: str) -> SourceInfo:
    """``info`` split into rank sections by ``by`` (``--rank-by``: e.g. "gpu" for a merged rtl trace),
    for readers that can (they provide ``split_ranks`` and ``read_rank``)."""
    split = getattr(reader, "split_ranks", None)
    if split is None or not has_rank_sections(reader):
        able = [r.NAME for r in READERS if callable(getattr(r, "split_ranks", None))]
        raise InputError(
            f"{path}: --rank-by {by} does not apply to {reader.NAME} files (only to: {', '.join(able)}); "
            "ingest the other files without --rank-by"
        )
    return cast(SourceInfo, split(path, info, by))


def formats() -> list[tuple[str, str]]:
    return [(r.NAME, r.DESCRIPTION) for r in READERS]


__all__ = ["READERS", "Reader", "by_name", "detect", "formats", "has_rank_sections", "split_ranks", "ModuleType"]
