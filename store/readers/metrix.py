"""AMD Metrix (IntelliKit) results, JSON and CSV: per-kernel (or per-dispatch) statistics, no trace.

JSON: ``{"_rank": {global_rank, local_rank, world_size, hostname, launcher}, "<key>": {"duration_us":
{min, max, avg}, "metrics": {"<metric>": {min, max, avg, count, unit}}}}``. Keys are ``kernel``
(aggregated by kernel), ``dispatch_<id>:kernel`` (one entry per dispatch), either one prefixed with
``rank_<r>:`` in a merged file. CSV: ``global_rank, local_rank, world_size, hostname, dispatch_key,
duration_min_us, duration_max_us, duration_avg_us, <metric>_min, <metric>_max, <metric>_avg, ...``
(the rank columns are absent in older versions).

Records: one ``Aggregate`` per (rank, kernel) from the durations (integer ns): a dispatch entry counts
as one call of its average duration (min/max are the extremes seen over replays); an aggregated entry
carries the average duration per dispatch over replays and no call count, so it counts as
``dispatch_count`` calls when the entry has that field, else as one call. Each metric becomes a
``Counter`` (value = avg, samples = count, min/max), with the dispatch id for dispatch entries.

Identity: the ``_rank`` block / rank columns; ``rank_<r>:`` key prefixes override it (in
launcher-wrapper mode one merged file has ``_rank`` = rank 0 of world 1, the wrapper's, while the
prefixes carry the real ranks). A file whose prefixes name several ranks lists them in
``SourceInfo.ranks`` and is read per rank with ``read_rank``. The ``.rank0003.`` file name suffix
(Metrix's own naming) is left to the ingest's path rules; it is reported in
``metadata["file_name_rank"]``."""

from __future__ import annotations

import csv
import io
import math
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ijson

from ..errors import InputError
from ..records import Aggregate, Counter, RankHint, Record, SourceInfo
from .base import display_name, head, open_binary
from .json_guard import guarded

NAME = "metrix"
DESCRIPTION = "AMD Metrix (IntelliKit) JSON/CSV: per-kernel or per-dispatch durations and metrics, per rank"

_KEY = re.compile(r"^(?:rank_(\d+):)?(?:dispatch_(\d+):)?(?:rank_(\d+):)?(.*)$", re.DOTALL)
_FILE_RANK = re.compile(r"\.rank(\d+)\.(?:json|csv)$")
_CSV_MARKS = ("dispatch_key", "duration_avg_us")
_STATS = ("min", "max", "avg", "count")


def _is_json(data: bytes) -> bool:
    s = data.lstrip()
    if s[:1] != b"{" or b"rocprofiler-sdk-tool" in s[:256] or b'"traceEvents"' in s:
        return False
    return b'"duration_us"' in s or b'"_rank"' in s[:4096]


def _csv_header(data: bytes) -> list[str] | None:
    line = data.split(b"\n", 1)[0].decode("utf-8", "replace").strip("\r\ufeff")
    try:
        cols = next(csv.reader([line]))
    except (csv.Error, StopIteration):
        return None
    return [c.strip() for c in cols]


def detect(path: Path) -> bool:
    data = head(path, 65536)
    if _is_json(data):
        return True
    cols = _csv_header(data)
    return cols is not None and all(m in cols for m in _CSV_MARKS)


@dataclass
class _Entry:
    rank: int | None
    dispatch: int | None
    kernel: str
    duration: tuple[float, float, float] | None  # min, max, avg in us
    calls: int
    metrics: dict[str, dict[str, float]] = field(default_factory=dict)


def _num(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v) if math.isfinite(float(v)) else None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _split_key(key: str) -> tuple[int | None, int | None, str]:
    m = _KEY.match(key)
    assert m is not None  # the pattern matches any string
    rank = m.group(1) or m.group(3)
    return (int(rank) if rank else None, int(m.group(2)) if m.group(2) else None, m.group(4))


def _bad(path: Path, what: str) -> InputError:
    return InputError(
        f"{path}: {what}; not a Metrix results file profdb can read: re-run `metrix profile -o results.json` "
        "(or .csv), or re-copy the file"
    )


# ---- JSON ------------------------------------------------------------------------------------


def _json_items(path: Path) -> Iterator[tuple[str, Any]]:
    try:
        with open_binary(path) as raw, guarded(raw, path) as f:
            yield from ijson.kvitems(f, "")
    except ijson.common.IncompleteJSONError as e:
        raise _bad(path, f"invalid or truncated JSON ({e})") from e
    except (OSError, EOFError, zlib.error) as e:
        raise InputError(f"{path}: cannot read the file ({e}); it is damaged: re-copy it") from e


def _json_entry(path: Path, key: str, value: Any) -> _Entry | None:
    if key.startswith("_") or not isinstance(value, dict):
        return None
    if "duration_us" not in value and "metrics" not in value:
        return None
    rank, dispatch, kernel = _split_key(key)
    duration = None
    d = value.get("duration_us")
    if isinstance(d, dict):
        lo, hi, avg = _num(d.get("min")), _num(d.get("max")), _num(d.get("avg"))
        if avg is None:
            raise _bad(path, f"entry {key!r} has duration_us without an 'avg'")
        duration = _duration(path, f"entry {key!r}", lo, hi, avg)
    elif d is not None:
        raise _bad(path, f"entry {key!r} has a duration_us that is not an object")
    calls = 1
    if dispatch is None and isinstance(value.get("dispatch_count"), int) and value["dispatch_count"] > 0:
        calls = value["dispatch_count"]
    metrics: dict[str, dict[str, float]] = {}
    m = value.get("metrics")
    if isinstance(m, dict):
        for name, stats in m.items():
            if isinstance(stats, dict):
                nums = {s: _num(stats.get(s)) for s in _STATS}
                metrics[str(name)] = {s: v for s, v in nums.items() if v is not None}
    return _Entry(rank, dispatch, kernel, duration, calls, metrics)


# ---- CSV -------------------------------------------------------------------------------------


def _csv_rows(path: Path) -> Iterator[tuple[dict[str, str], list[str]]]:
    try:
        with open_binary(path) as f:
            text = io.TextIOWrapper(f, encoding="utf-8", errors="replace", newline="")
            reader = csv.reader(text)
            cols = next(reader, None)
            if cols is None:
                raise _bad(path, "empty CSV")
            cols = [c.strip().lstrip("\ufeff") for c in cols]
            for lineno, row in enumerate(reader, start=2):
                if not row:
                    continue
                if len(row) != len(cols):
                    raise _bad(
                        path, f"line {lineno} has {len(row)} fields where the header has {len(cols)} (truncated?)"
                    )
                yield dict(zip(cols, row)), cols
    except csv.Error as e:
        raise _bad(path, f"malformed CSV ({e})") from e
    except (OSError, EOFError, zlib.error) as e:
        raise InputError(f"{path}: cannot read the file ({e}); it is damaged: re-copy it") from e


def _csv_metrics(cols: list[str]) -> list[str]:
    stems: list[str] = []
    for c in cols:
        for s in _STATS:
            if c.endswith("_" + s):
                stem = c[: -len(s) - 1]
                if stem != "duration" and not stem.startswith("duration_") and stem not in stems:
                    stems.append(stem)
    return stems


def _duration(path: Path, what: str, lo: float | None, hi: float | None, avg: float) -> tuple[float, float, float]:
    """An entry's (min, max, avg) duration in us, a missing extreme taken as the average; one that is
    infinite once in nanoseconds (finite in us, past 1.8e305: no clock gives it) is the file's error."""
    duration = (lo if lo is not None else avg, hi if hi is not None else avg, avg)
    if not all(math.isfinite(v * 1000) for v in duration):
        raise _bad(path, f"{what} has a duration of {max(duration, key=abs)!r} us, infinite in nanoseconds")
    return duration


def _csv_int(row: dict[str, str], col: str) -> int | None:
    v = row.get(col, "").strip()
    try:
        return int(float(v)) if v else None
    except (ValueError, OverflowError):  # (not a number, or an infinite one: "inf", "1e400")
        return None


def _csv_entries(path: Path) -> Iterator[tuple[_Entry, dict[str, str]]]:
    stems: list[str] | None = None
    for row, cols in _csv_rows(path):
        if stems is None:
            missing = [
                c for c in ("dispatch_key", "duration_min_us", "duration_max_us", "duration_avg_us") if c not in cols
            ]
            if missing:
                raise _bad(path, f"CSV header lacks {', '.join(missing)}")
            stems = _csv_metrics(cols)
        rank, dispatch, kernel = _split_key(row["dispatch_key"])
        if rank is None:
            rank = _csv_int(row, "global_rank")
        avg = _num(row["duration_avg_us"])
        if avg is None:
            raise _bad(path, f"row {row['dispatch_key']!r} has no numeric duration_avg_us")
        lo, hi = _num(row["duration_min_us"]), _num(row["duration_max_us"])
        duration = _duration(path, f"row {row['dispatch_key']!r}", lo, hi, avg)
        metrics: dict[str, dict[str, float]] = {}
        for stem in stems:
            vals = {s: _num(row.get(f"{stem}_{s}")) for s in _STATS}
            if vals["avg"] is not None:
                metrics[stem] = {s: v for s, v in vals.items() if v is not None}
        yield _Entry(rank, dispatch, kernel, duration, 1, metrics), row


# ---- identity --------------------------------------------------------------------------------


def _is_csv(path: Path) -> bool:
    return not _is_json(head(path, 65536))


def _rank_block(block: Any) -> RankHint:
    hint = RankHint(origin="_rank block")
    if isinstance(block, dict):
        for attr in ("global_rank", "local_rank", "world_size", "node_rank"):
            if isinstance(block.get(attr), int) and not isinstance(block.get(attr), bool):
                setattr(hint, attr, block[attr])
        if isinstance(block.get("hostname"), str) and block["hostname"]:
            hint.hostname = block["hostname"]
    return hint


def inspect(path: Path) -> SourceInfo:
    if not head(path, 1):
        raise InputError(f"{path}: cannot read the file (empty, or a corrupt gzip stream); re-copy it")
    file_rank = _FILE_RANK.search(display_name(path))
    metadata: dict[str, Any] = {"file_name_rank": int(file_rank.group(1)) if file_rank else None}
    block: RankHint | None = None
    entries = 0
    prefixed: set[int] = set()
    unprefixed = 0
    row_hints: dict[int, RankHint] = {}
    if _is_csv(path):
        kind = "metrix-csv"
        for entry, row in _csv_entries(path):
            entries += 1
            r = entry.rank
            if r is None:
                unprefixed += 1
                continue
            if r not in row_hints:
                row_hints[r] = RankHint(
                    global_rank=r,
                    local_rank=_csv_int(row, "local_rank"),
                    world_size=_csv_int(row, "world_size"),
                    hostname=row.get("hostname") or None,
                    origin="global_rank/local_rank/hostname columns",
                )
        prefixed = set(row_hints)
    else:
        kind = "metrix-json"
        for key, value in _json_items(path):
            if key == "_rank":
                block = _rank_block(value)
                metadata["_rank"] = value
                continue
            found = _json_entry(path, key, value)
            if found is None:
                continue
            entries += 1
            if found.rank is None:
                unprefixed += 1
            else:
                prefixed.add(found.rank)
    if entries == 0:
        raise _bad(path, "no kernel entries (no key with duration_us or metrics)")
    ranks = sorted(prefixed)
    if unprefixed and ranks:
        owner = block.global_rank if block is not None else None
        if owner is None:
            raise _bad(path, "it mixes rank_<r>: prefixed keys with keys of no rank")
        ranks = sorted(set(ranks) | {owner})
    metadata["section_ranks"] = ranks
    if not ranks:
        # One rank, described by the _rank block (a ``.rank0003.`` name is the path layer's business:
        # it is only reported in metadata["file_name_rank"]).
        return SourceInfo(format=NAME, kind=kind, hint=block or RankHint(), metadata=metadata)
    sections = [_section(r, block, row_hints, ranks) for r in ranks]
    if len(sections) == 1:
        return SourceInfo(format=NAME, kind=kind, hint=sections[0], metadata=metadata)
    # The file as a whole is no single rank: keep only the writer's host (the block stays in metadata).
    whole = RankHint(hostname=block.hostname if block else None, origin="_rank block (writer's host)" if block else "")
    return SourceInfo(format=NAME, kind=kind, hint=whole, metadata=metadata, ranks=sections)


def _section(rank: int, block: RankHint | None, row_hints: dict[int, RankHint], ranks: list[int]) -> RankHint:
    if rank in row_hints:
        return row_hints[rank]
    hint = RankHint(global_rank=rank, origin="rank_<r>: key prefix")
    if block is not None:
        consistent = block.world_size is not None and block.world_size > max(ranks)
        if len(ranks) == 1 and block.global_rank == rank:
            # the writer's own rank: its whole block applies
            return RankHint(rank, block.local_rank, block.hostname, block.world_size if consistent else None,
                            block.node_rank, None, None, "_rank block + rank_<r>: key prefix")  # fmt: skip
        # A merged file: the block is the launcher wrapper's (often rank 0 of world 1), not the ranks'.
        if consistent:
            hint.world_size = block.world_size
        if block.hostname:
            # A merged file is written on one host by the wrapper of the ranks it holds.
            hint.hostname = block.hostname
            hint.origin += "; hostname from the _rank block (the writer's host)"
    return hint


# ---- records ---------------------------------------------------------------------------------


def _entries(path: Path, info: SourceInfo) -> Iterator[_Entry]:
    if info.kind == "metrix-csv":
        for entry, _row in _csv_entries(path):
            yield entry
    else:
        for key, value in _json_items(path):
            found = _json_entry(path, key, value)
            if found is not None:
                yield found


def read(path: Path, info: SourceInfo) -> Iterator[Record]:
    yield from _records(path, info, None)


def read_rank(path: Path, info: SourceInfo, index: int) -> Iterator[Record]:
    if not 0 <= index < len(info.ranks):
        raise InputError(
            f"{path}: rank section {index} does not exist (the file holds {len(info.ranks)} rank sections)"
        )
    yield from _records(path, info, info.ranks[index].global_rank)


def _records(path: Path, info: SourceInfo, only_rank: int | None) -> Iterator[Record]:
    block = info.metadata.get("_rank")
    owner = info.hint.global_rank
    if owner is None and isinstance(block, dict) and isinstance(block.get("global_rank"), int):
        owner = block["global_rank"]  # unprefixed keys of a merged file belong to its writer
    # per (rank, kernel): calls, total_ns, min_ns, max_ns, sum of squares (None once unknown)
    agg: dict[tuple[int | None, str], list[Any]] = {}
    for e in _entries(path, info):
        rank = e.rank if e.rank is not None else owner
        if only_rank is not None and rank != only_rank:
            continue
        for name, stats in e.metrics.items():
            if "avg" not in stats:
                continue
            count = stats.get("count")
            yield Counter(
                e.kernel, name, stats["avg"], e.dispatch,
                int(count) if count is not None and count >= 1 else 1, stats.get("min"), stats.get("max"),
            )  # fmt: skip
        if e.duration is None:
            continue
        lo, hi, avg = (round(v * 1000) for v in e.duration)
        slot = agg.get((rank, e.kernel))
        sq = float(avg) * avg * e.calls if e.calls == 1 else None
        if slot is None:
            agg[(rank, e.kernel)] = [e.calls, avg * e.calls, lo, hi, sq]
        else:
            slot[0] += e.calls
            slot[1] += avg * e.calls
            slot[2] = min(slot[2], lo)
            slot[3] = max(slot[3], hi)
            slot[4] = None if slot[4] is None or sq is None else slot[4] + sq
    for (_rank, kernel), (calls, total, lo, hi, sq) in agg.items():
        yield Aggregate("kernel", kernel, calls, total, lo, hi, sq)
