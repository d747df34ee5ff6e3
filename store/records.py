"""What readers yield. Plain tuples: no database, no SQLAlchemy.

Every reader turns one input file into a stream of these records. Times are integer
nanoseconds (a reader converts microsecond floats once, at read time); the clock is the
file's own (BOOTTIME, session-relative, epoch, or relative to ``SourceInfo.time_base_ns``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, NamedTuple, cast

#: Kinds of timed activity. ``category`` is derived from kind and name when a reader leaves it None.
KINDS = ("kernel", "memcpy", "memset", "cpu_op", "annotation", "gpu_annotation", "api", "python")
#: kinds whose ranges nest on a lane (an op holds the ops it calls): their self time is kept beside the
#: inclusive total (intervals.self_times); for every other kind self time is the total
NESTED_KINDS = frozenset({"cpu_op", "annotation", "gpu_annotation", "python"})
CATEGORIES = ("compute", "communication", "memory", "other")


class Activity(NamedTuple):
    """One timed interval: a GPU kernel, a copy, a CPU op, an annotation range, an API call."""

    kind: str
    name: str
    start_ns: int
    duration_ns: int
    category: str | None = None
    device: int | None = None
    stream: int | None = None
    correlation: int | None = None
    pid: int | None = None
    tid: int | None = None
    grid_x: int | None = None
    grid_y: int | None = None
    grid_z: int | None = None
    block_x: int | None = None
    block_y: int | None = None
    block_z: int | None = None
    #: Extra attributes as a JSON object text (collective name, message sizes, bytes...), or None.
    args: str | None = None


#: An Activity of all its 17 fields, given as one tuple in field order, made in C: ``Activity(...)`` runs
#: its ``__new__`` (keywords, defaults) in Python, ~0.4 us a record, which a reader's hot loop pays for
#: every row (the Kineto, Nsight Systems and RPD readers build their records with this).
activity_of: Callable[[tuple[Any, ...]], Activity] = cast(
    "Callable[[tuple[Any, ...]], Activity]", partial(tuple.__new__, Activity)
)


class Counter(NamedTuple):
    """A hardware counter value for one dispatch (rocprofv3 counter_collection, rocpd counters)
    or a per-(rank, kernel) aggregate (Metrix: value = average over ``samples`` dispatches)."""

    kernel: str
    name: str
    value: float
    dispatch_id: int | None = None
    samples: int = 1
    min_value: float | None = None
    max_value: float | None = None


class Aggregate(NamedTuple):
    """Pre-aggregated timing of one name on this rank, for formats that only carry statistics
    (Metrix). Lands in the per-(rank, name) summary without fact rows."""

    kind: str
    name: str
    calls: int
    total_ns: int
    min_ns: int
    max_ns: int
    sum_sq_ns: float | None = None
    category: str | None = None


Record = Activity | Counter | Aggregate


@dataclass(slots=True)
class RankHint:
    """Identity found inside a file (or for one ``rank_<r>:`` section of a merged file).

    Every field is optional: None means the file does not say. ``origin`` says where the facts came
    from, for error messages (e.g. "distributedInfo", "rocpd_info_process.environment");
    ``device_origin`` the same for ``device``."""

    global_rank: int | None = None
    local_rank: int | None = None
    hostname: str | None = None
    world_size: int | None = None
    node_rank: int | None = None
    pid: int | None = None
    #: the GPU the process used (an index on its node: never a local rank), and where that came from
    device: int | None = None
    origin: str = ""
    device_origin: str = ""
    #: what a source said but was not taken, and why (ends up in the file's identity_origin)
    note: str = ""


@dataclass(slots=True)
class SourceInfo:
    """What a reader learns from a cheap look at a file before streaming it.

    ``kind`` names the file's content within its format (e.g. "kernel_trace"), so two files of the
    same kind claiming one rank can be told apart from a rank folder holding several kinds.
    ``time_base_ns`` is added to every timestamp the reader yields to get the file's absolute clock
    (Kineto's baseTimeNanoseconds; 0 when timestamps are already absolute).

    ``ranks`` is empty for the usual one-rank file. A file holding several ranks (a merged Metrix
    file with ``rank_<r>:`` key prefixes, a rocpd database of several processes) lists one hint per
    rank section here; the reader then also has ``read_rank(path, info, index)`` streaming only the
    records of ``info.ranks[index]`` (see readers/base.py). ``hint`` still describes the file as a
    whole (e.g. Metrix's ``_rank`` block, which is the writer's identity, not the sections')."""

    format: str
    kind: str = ""
    hint: RankHint = field(default_factory=RankHint)
    time_base_ns: int = 0
    metadata: dict[str, Any] = field(default_factory=dict)
    ranks: list[RankHint] = field(default_factory=list)
    #: what the file holds that the reader does not read, known from the cheap look (what -> count; e.g.
    #: an Nsight Systems export's CUDA graph executions), as ``base.BatchReader``'s ``unread`` while reading
    unread: dict[str, int] = field(default_factory=dict)
