"""One timeline for the whole job: a run's activity exported as one Chrome trace-event file (Perfetto,
chrome://tracing), every rank a process, on the common clock of the straggler analysis.

Not to be confused with ``timeline.py``, which keeps the per-rank collective timelines in the store;
this module reads those (for the flow arrows and the clock offsets) and streams ``activity``.

The file (``write_trace``):

- one process per rank: ``pid`` = global rank, named ``rank 3 (host node01, local_rank 3)``
  (``process_name`` metadata) and sorted by rank (``process_sort_index``); its threads are the
  source's threads (``thread <tid>``, host side) and devices' streams (``GPU <d> stream <s>``);
- one complete event (``ph: X``) per stored activity row, ``ts``/``dur`` in microseconds written
  with three decimals, so every nanosecond survives; ``cat`` is the Kineto category of the row's kind,
  so the file reads back as a Kineto trace;
- times on the common clock: a rank's own time minus its host's clock offset (``host_clock``), counted
  from ``baseTimeNanoseconds``, the run's earliest aligned activity;
- flow arrows (Chrome's "flow v2": ``bind_id`` + ``flow_in``/``flow_out`` on the events themselves)
  link the k-th call of each collective on every rank that made it, in arrival order, so the arrow
  ends on the rank the others waited for;
- the verdict and the offsets in ``otherData`` (shown by chrome://tracing's metadata view), and a
  top-level ``profdb`` block naming each process's rank (pid -> global_rank, local_rank, hostname):
  the explicit identity the Kineto reader needs to ingest the file back, split by rank.

The store is streamed rank by rank (a server-side cursor on PostgreSQL), and the JSON written as it
comes: memory holds one batch of rows and the run's collective calls, never the run's activity."""

from __future__ import annotations

import functools
import gzip
import json
import os
import re
import tempfile
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from sqlalchemy import ColumnElement, Connection, func, select
from sqlalchemy.sql.selectable import FromClause

from . import collectives, fact_spans, queries
from .errors import QueryError
from .identity import rank_ranges
from .models import Activity, Launch, Name, Origin, Rank, SourceFile, Step, Summary
from .scope import RankRef, RunScope, copies_notes, resolve_run, unread_notes, with_ranks
from .timeline import calls_by_family, load_timelines, match_stored
from .units import fmt_ns

_act = Activity.__table__
_launch = Launch.__table__
_origin = Origin.__table__
_name = Name.__table__
_src = SourceFile.__table__
_step = Step.__table__
_sum = Summary.__table__
_rank = Rank.__table__

#: the version of the ``profdb`` identity block (readers/kineto_json.py checks it)
BLOCK_VERSION = 1
#: the Kineto category written for each activity kind (readers/kineto_json.py maps them back)
KINETO_CATEGORY = {
    "kernel": "kernel",
    "memcpy": "gpu_memcpy",
    "memset": "gpu_memset",
    "cpu_op": "cpu_op",
    "annotation": "user_annotation",
    "gpu_annotation": "gpu_user_annotation",
    "api": "cuda_runtime",
    "python": "python_function",
}
#: kinds that run on a device stream (their thread is the stream); the others on a host thread
DEVICE_KINDS = frozenset(("kernel", "memcpy", "memset", "gpu_annotation"))
#: above this many events the command says the file will be large, and how to make it smaller
LARGE_EVENTS = 2_000_000
#: bytes per event in the file, roughly (uncompressed; gzip makes it ~10x smaller): for that warning
BYTES_PER_EVENT = 220
#: rows fetched per round trip (and per server-side cursor batch on PostgreSQL)
BATCH = 10_000

_JS = {True: "true", False: "false"}
_TIME = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ns|us|ms|s)\s*$")
_UNIT_NS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}


def parse_time(text: str) -> int:
    """``1.5s``, ``250ms``, ``120us``, ``800ns`` (or ``0``) -> nanoseconds. Raises ValueError with
    what to write instead."""
    if text.strip() == "0":
        return 0
    m = _TIME.match(text)
    if not m:
        raise ValueError(f"{text!r} is not a time; write a number with its unit: 1.5s, 250ms, 120us or 800ns")
    return round(float(m.group(1)) * _UNIT_NS[m.group(2)])


@dataclass(frozen=True)
class Window:
    """What to export: some ranks (None: all), one step (``ProfilerStep#N``, each rank's own range),
    or a time window on the common clock (ns from the run's start; None: open)."""

    ranks: tuple[int, ...] | None = None
    step: int | None = None
    from_ns: int | None = None
    to_ns: int | None = None

    def describe(self) -> str:
        parts = []
        if self.step is not None:
            parts.append(f"step {self.step}")
        if self.from_ns is not None or self.to_ns is not None:
            lo = fmt_ns(self.from_ns) if self.from_ns else "start"
            hi = fmt_ns(self.to_ns) if self.to_ns is not None else "end"
            parts.append(f"{lo} to {hi} of the common clock")
        if self.ranks is not None:
            parts.append(f"ranks {rank_ranges(self.ranks)}")
        return ", ".join(parts) or "the whole run"


@dataclass(frozen=True)
class RankWindow:
    """One rank's part of the export: its own-clock bounds (start inclusive, end exclusive; None: open)
    and its clock offset (own time - offset = common time)."""

    rank: RankRef
    offset_ns: int
    lo_ns: int | None
    hi_ns: int | None


@dataclass(frozen=True)
class Plan:
    """The export decided before anything is written (``plan_export``)."""

    scope: RunScope
    window: Window
    ranks: tuple[RankWindow, ...]
    #: the common-clock instant the file's ``ts`` count from (its ``baseTimeNanoseconds``)
    origin_ns: int
    #: how many events will be written (from the summaries, or counted for a window)
    events: int
    reference_host: str
    #: host -> (offset, error, samples) of the hosts whose clocks are known
    offsets: Mapping[str, tuple[int, int, int]]
    verdict: str
    notes: tuple[str, ...]
    #: rank -> {(kind, own start, own end): [(flow id, flow_in, flow_out)]}
    flows: Mapping[int, Mapping[tuple[str, int, int], list[tuple[int, bool, bool]]]] = field(default_factory=dict)
    flow_count: int = 0

    @property
    def large(self) -> bool:
        return self.events > LARGE_EVENTS

    def size_note(self) -> str:
        return (f"about {self.events:,} events (~{self.events * BYTES_PER_EVENT / 1e6:,.0f} MB of JSON before gzip) "
                f"for {self.window.describe()}")


@dataclass
class RankCount:
    events: int = 0
    total_ns: int = 0


@dataclass(frozen=True)
class Written:
    """What ``write_trace`` wrote: per global rank the events and their total duration, the flow
    links (one per arrow), and the file's size."""

    path: Path
    per_rank: Mapping[int, RankCount]
    flows: int
    bytes: int

    @property
    def events(self) -> int:
        return sum(c.events for c in self.per_rank.values())


def plan_export(conn: Connection, run: str | RunScope | None, window: Window) -> Plan:
    """Resolve the run, its ranks and their windows, the clocks, the verdict and the flows."""
    scope = with_ranks(run if isinstance(run, RunScope) else resolve_run(conn, run))
    ranks = list(scope.ranks)
    if window.ranks is not None:
        have = {r.global_rank for r in ranks}
        unknown = [g for g in window.ranks if g not in have]
        if unknown:
            raise QueryError(
                f"run {scope.name!r} has no rank(s) {rank_ranges(unknown)}; its ranks are {rank_ranges(sorted(have))} "
                "(see profdb ranks)"
            )
        ranks = [r for r in ranks if r.global_rank in set(window.ranks)]
    kinds, _ = queries.select_kinds(conn, scope, None, ("kernel",))
    verdict = queries.straggler(conn, scope, kinds)
    # (what the merged trace cannot show: events the readers did not read, a rank's copied file)
    notes: list[str] = unread_notes(scope.unread) + copies_notes(scope.name, scope.copies)
    clocks = verdict.detail.findings.clocks if verdict.detail is not None else collectives.Clocks("", {})
    offsets = {h: (o.offset_ns, o.error_ns, o.samples) for h, o in clocks.offsets.items()}
    unplaced = sorted({r.hostname or "" for r in ranks} - set(offsets)) if len(
        {r.hostname or "" for r in scope.ranks}) > 1 else []
    if unplaced:
        notes.append(
            "no clock offset for host(s) " + ", ".join(repr(h) for h in unplaced)
            + ": their times are as recorded, not aligned (the run has no blocking collectives to align them on)"
        )

    def offset_of(r: RankRef) -> int:
        return offsets.get(r.hostname or "", (0, 0, 0))[0]

    firsts = _first_starts(conn, scope.ranks)
    aligned_first = [firsts[r.id] - offset_of(r) for r in scope.ranks if r.id in firsts]
    if not aligned_first:
        raise QueryError(f"run {scope.name!r} has no timed activity in the store; nothing to put on a timeline")
    origin = min(aligned_first)
    windows: list[RankWindow] = []
    if window.step is not None:
        steps = _step_ranges(conn, [r.id for r in ranks], window.step)
        if not steps:
            known = _known_steps(conn, [r.id for r in ranks])
            raise QueryError(
                f"run {scope.name!r} has no step {window.step} on the chosen ranks; "
                + (f"its steps are {rank_ranges(known)}" if known else
                   "it has no steps at all (steps come from ProfilerStep#N annotations): use --from/--to instead")
            )
        missing = [r.global_rank for r in ranks if r.id not in steps]
        if missing:
            notes.append(f"rank(s) {rank_ranges(missing)} did not record step {window.step}: left out")
        for r in ranks:
            if r.id in steps:
                lo, hi = steps[r.id]
                windows.append(RankWindow(r, offset_of(r), lo, hi))
    else:
        for r in ranks:
            off = offset_of(r)
            start = origin + window.from_ns + off if window.from_ns is not None else None
            end = origin + window.to_ns + off if window.to_ns is not None else None
            windows.append(RankWindow(r, off, start, end))
    if not windows:
        raise QueryError(f"nothing to export for {window.describe()} of run {scope.name!r}")
    if window.step is not None or window.from_ns is not None or window.to_ns is not None:
        counts = _count(conn, windows)
        empty = [w.rank.global_rank for w in windows if not counts[w.rank.id]]
        if len(empty) == len(windows):
            raise QueryError(f"no activity in {window.describe()} of run {scope.name!r}; widen the window "
                             "(--from/--to count from the run's first event)")
        if empty:
            notes.append(f"rank(s) {rank_ranges(empty)} have no activity in the window: left out")
            windows = [w for w in windows if counts[w.rank.id]]
        events = sum(counts.values())
    else:
        events = int(conn.execute(
            select(func.coalesce(func.sum(_sum.c.calls), 0)).where(_sum.c.rank_id.in_([w.rank.id for w in windows]))
        ).scalar_one())
    flows, flow_count = _flows(conn, scope.id, windows, verdict.detail.findings.family if verdict.detail else None)
    if verdict.detail is not None:
        notes.extend(verdict.detail.findings.clocks.notes)
    return Plan(scope, window, tuple(windows), origin, events, clocks.reference, offsets, verdict.line,
                tuple(notes), flows, flow_count)


def _first_starts(conn: Connection, ranks: Sequence[RankRef]) -> dict[int, int]:
    """Rank id -> its earliest activity on its own clock: one aggregate over ``activity`` per source file
    (no join; ~0.25 s per million rows, small beside writing those rows). ``rank_timeline.first_ns`` is
    not used: it leaves out files without work, calls or steps (an API-only trace), which can start first."""
    ids = [r.id for r in ranks]
    base = {int(sid): (int(rid), int(tb)) for sid, rid, tb in conn.execute(
        select(_src.c.id, _src.c.rank_id, _src.c.time_base_ns).where(_src.c.rank_id.in_(ids)))}
    out: dict[int, int] = {}
    frm, cond = fact_spans.scoped(conn, _act, sources=list(base))
    for sid, first in conn.execute(
        select(_act.c.source_id, func.min(_act.c.start_ns)).select_from(frm).where(*cond).group_by(_act.c.source_id)
    ):
        if first is None:
            continue
        rid, tb = base[int(sid)]
        t = int(first) + tb
        out[rid] = min(out.get(rid, t), t)
    return out


def _step_ranges(conn: Connection, rank_ids: Sequence[int], step: int) -> dict[int, tuple[int, int]]:
    """Rank id -> (start, end) of ``ProfilerStep#step`` on the rank's own clock (the ``step`` table,
    as ``profdb query --steps`` reads it)."""
    return {
        int(rid): (int(start), int(start) + int(dur))
        for rid, start, dur in conn.execute(
            select(_step.c.rank_id, _step.c.start_ns + _src.c.time_base_ns, _step.c.duration_ns)
            .select_from(_step.join(_src, _src.c.id == _step.c.source_id))
            .where(_step.c.rank_id.in_(rank_ids), _step.c.step == step)
        )
    }


def _known_steps(conn: Connection, rank_ids: Sequence[int]) -> list[int]:
    return [int(s) for s in conn.execute(
        select(_step.c.step).where(_step.c.rank_id.in_(rank_ids)).distinct().order_by(_step.c.step)).scalars()]


def _in_window(conn: Connection, w: RankWindow) -> tuple[FromClause, list[ColumnElement[bool]]]:
    """The rank's activity rows (``fact_spans.scoped``) joined to their source files, and the
    conditions that keep those in its window."""
    frm, cond = fact_spans.scoped(conn, _act, ranks=[w.rank.id])
    t = _act.c.start_ns + _src.c.time_base_ns
    if w.lo_ns is not None:
        cond.append(t >= w.lo_ns)
    if w.hi_ns is not None:
        cond.append(t < w.hi_ns)
    return frm.join(_src, _src.c.id == _act.c.source_id), cond


def _count(conn: Connection, windows: Sequence[RankWindow]) -> dict[int, int]:
    """Rank id -> its events in its window."""
    out: dict[int, int] = {}
    for w in windows:
        frm, cond = _in_window(conn, w)
        out[w.rank.id] = int(conn.execute(select(func.count()).select_from(frm).where(*cond)).scalar_one())
    return out


def _flows(
    conn: Connection, run_id: int, windows: Sequence[RankWindow], family: str | None
) -> tuple[dict[int, dict[tuple[str, int, int], list[tuple[int, bool, bool]]]], int]:
    """The flow links: each matched collective instance (the store's matching of the stored calls of
    the windows' ranks, ``timeline.match_stored``; the verdict's call family, else the one
    ``collectives.choose_family_of`` picks) whose calls fall in the ranks' windows, chained in arrival order
    on the common clock (ties by rank). Keyed per global rank by the call's (kind, own start, own end),
    which is its activity row's (family = kind; collective_call keeps the row's times)."""
    if not windows:
        return {}, 0
    rank_ids = {w.rank.id: w.rank.global_rank for w in windows}
    ranks = sorted(rank_ids[rid] for rid in load_timelines(conn, rank_ids, with_calls=False))
    if len(ranks) < 2:
        return {}, 0
    having = calls_by_family(conn, run_id, rank_ids)
    if family:
        used = having.get(family, ())
    else:
        family, used = collectives.choose_family_of(having, len(ranks))
    if not family:
        return {}, 0
    matching = match_stored(conn, run_id, rank_ids, family, ranks, used)
    win = {w.rank.global_rank: w for w in windows}
    out: dict[int, dict[tuple[str, int, int], list[tuple[int, bool, bool]]]] = defaultdict(lambda: defaultdict(list))
    flow_id = 0
    links = 0
    for inst in matching.instances:
        calls = []
        for rank, start, end in zip(inst.ranks, inst.starts, inst.ends):
            w = win[rank]
            if (w.lo_ns is None or start >= w.lo_ns) and (w.hi_ns is None or start < w.hi_ns):
                calls.append((start - w.offset_ns, rank, start, end))
        if len(calls) < 2:
            continue
        calls.sort(key=lambda x: (x[0], x[1]))
        flow_id += 1
        last = len(calls) - 1
        for i, (_t, rank, start, end) in enumerate(calls):
            out[rank][(matching.family, start, end)].append((flow_id, i > 0, i < last))
        links += last
    return out, links


def fmt_us(ns: int) -> str:
    """Integer ns as microseconds with exactly three decimals (no float rounding): 1234567 -> 1234.567."""
    sign = "-" if ns < 0 else ""
    q, r = divmod(abs(ns), 1000)
    return f"{sign}{q}.{r:03d}"


def _identity_block(plan: Plan) -> dict[str, Any]:
    return {
        "version": BLOCK_VERSION,
        "run": plan.scope.name,
        "world_size": plan.scope.world_size,
        "ranks": [
            {"pid": w.rank.global_rank, "global_rank": w.rank.global_rank, "local_rank": w.rank.local_rank,
             "hostname": w.rank.hostname}
            for w in plan.ranks
        ],
        "clock": {
            "reference_host": plan.reference_host,
            "origin_ns": plan.origin_ns,
            "offsets": [{"host": h, "offset_ns": o, "error_ns": e, "samples": n}
                        for h, (o, e, n) in sorted(plan.offsets.items())],
        },
        "window": {"step": plan.window.step, "from_ns": plan.window.from_ns, "to_ns": plan.window.to_ns,
                   "ranks": list(plan.window.ranks) if plan.window.ranks is not None else None},
        "verdict": plan.verdict,
    }


def _other_data(plan: Plan) -> dict[str, str]:
    offsets = "; ".join(
        f"{h or '(no hostname)'}: {fmt_ns(o)} +- {fmt_ns(e)} ({n} samples)"
        + (" (reference)" if h == plan.reference_host else "")
        for h, (o, e, n) in sorted(plan.offsets.items())
    )
    data = {
        "profdb_run": plan.scope.name,
        "straggler_verdict": plan.verdict,
        "window": plan.window.describe(),
        "clock_offsets": offsets or "one host: no offsets needed",
        "time_origin": f"ts 0 = {plan.origin_ns} ns on host {plan.reference_host or '(no hostname)'}'s clock",
    }
    if plan.notes:
        data["notes"] = "; ".join(plan.notes)
    return data


def _open_text(path: Path) -> tuple[Any, Path]:
    """A temporary file next to ``path`` for the text (gzip when ``path`` ends in .gz), renamed into place
    by the caller when complete."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    if path.name.endswith(".gz"):
        raw = os.fdopen(fd, "wb")
        gz = gzip.GzipFile(filename=path.name[:-3], mode="wb", fileobj=raw, compresslevel=6)
        return _GzipText(gz, raw), Path(tmp)
    return os.fdopen(fd, "w", encoding="utf-8", buffering=1 << 20), Path(tmp)


class _GzipText:
    """Text writes into a GzipFile, closing the gzip stream and then its file."""

    def __init__(self, gz: gzip.GzipFile, raw: IO[bytes]) -> None:
        self.gz, self.raw = gz, raw
        self.buf: list[str] = []
        self.size = 0

    def write(self, s: str) -> int:
        self.buf.append(s)
        self.size += len(s)
        if self.size >= 1 << 20:
            self.flush()
        return len(s)

    def flush(self) -> None:
        if self.buf:
            self.gz.write("".join(self.buf).encode("utf-8"))
            self.buf.clear()
            self.size = 0

    def close(self) -> None:
        self.flush()
        self.gz.close()
        self.raw.close()


Progress = Callable[[int, int, RankWindow, int], None]


def write_trace(conn: Connection, plan: Plan, path: Path, progress: Progress | None = None) -> Written:
    """Write the plan's trace to ``path`` (gzip when it ends in .gz), streaming the store rank by rank.
    The file appears only when complete (a partial file is removed on error or interruption).
    ``progress(done, total, rank window, events so far)`` is called as ranks and batches are written."""
    path = Path(path)
    if path.is_dir():
        raise QueryError(f"{path} is a folder; give the trace file's name, e.g. -o {path / 'timeline.json.gz'}")
    if not path.parent.exists():
        raise QueryError(f"{path.parent}: no such folder; create it or write the trace elsewhere")
    out, tmp = _open_text(path)
    try:
        counts = _write(conn, plan, out, progress)
        out.close()
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # as an ordinary new file (mkstemp makes it private)
        os.replace(tmp, path)
    except BaseException:
        try:
            out.close()
        finally:
            tmp.unlink(missing_ok=True)
        raise
    flows = plan.flow_count
    return Written(path, counts, flows, path.stat().st_size)


def _write(conn: Connection, plan: Plan, out: Any, progress: Progress | None) -> dict[int, RankCount]:
    dumps = json.dumps
    out.write('{"profdb": ' + dumps(_identity_block(plan)) + ",\n")
    out.write('"displayTimeUnit": "ns",\n"baseTimeNanoseconds": ' + str(plan.origin_ns) + ",\n")
    out.write('"otherData": ' + dumps(_other_data(plan)) + ',\n"traceEvents": [\n')
    first = True

    def emit(text: str) -> None:
        nonlocal first
        out.write(text if first else ",\n" + text)
        first = False

    counts: dict[int, RankCount] = {}
    total = len(plan.ranks)
    for done, w in enumerate(plan.ranks):
        g = w.rank.global_rank
        emit(dumps({"ph": "M", "name": "process_name", "pid": g, "tid": 0, "args": {"name": w.rank.label()}}))
        emit(dumps({"ph": "M", "name": "process_sort_index", "pid": g, "tid": 0, "args": {"sort_index": g}}))
        count = counts[g] = RankCount()
        flows = plan.flows.get(g, {})
        pending = {k: list(v) for k, v in flows.items()}
        threads: dict[tuple[Any, ...], int] = {}
        shift = w.offset_ns + plan.origin_ns  # own time - shift = ts on the file's clock
        for row in _rows(conn, w):
            kind = row.kind
            if kind in DEVICE_KINDS and (row.stream is not None or row.device is not None):
                key: tuple[Any, ...] = ("gpu", row.device, row.stream)
            else:
                key = ("cpu", row.pid, row.tid)
            tid = threads.get(key)
            if tid is None:
                tid = threads[key] = len(threads) + 1
                emit(dumps({"ph": "M", "name": "thread_name", "pid": g, "tid": tid,
                            "args": {"name": _thread_name(key)}}))
                emit(dumps({"ph": "M", "name": "thread_sort_index", "pid": g, "tid": tid,
                            "args": {"sort_index": tid + (1000 if key[0] == "gpu" else 0)}}))
            start = int(row.own_ns)
            dur = int(row.duration_ns)
            args = _args(row)
            ev = (f'{{"ph":"X","pid":{g},"tid":{tid},"ts":{fmt_us(start - shift)},"dur":{fmt_us(dur)},'
                  f'"cat":"{KINETO_CATEGORY.get(kind, kind)}","name":{_json(row.name)}')
            links = pending.get((kind, start, start + dur)) if pending else None
            if links:
                fid, fin, fout = links.pop(0)
                ev += f',"bind_id":{fid},"flow_in":{_JS[fin]},"flow_out":{_JS[fout]}'
            if args:
                ev += ',"args":' + args
            emit(ev + "}")
            count.events += 1
            count.total_ns += dur
            if progress is not None and count.events % 100_000 == 0:
                progress(done, total, w, count.events)
        if progress is not None:
            progress(done + 1, total, w, count.events)
    out.write("\n]}\n")
    return counts


def _thread_name(key: tuple[Any, ...]) -> str:
    if key[0] == "gpu":
        _, device, stream = key
        return f"GPU {device if device is not None else '?'} stream {stream if stream is not None else '?'}"
    _, pid, tid = key
    if tid is None:
        return "host" if pid is None else f"process {pid}"
    return f"thread {tid}" + (f" (pid {pid})" if pid is not None else "")


def _args(row: Any) -> str:
    """The event's args as Kineto writes them (device, stream, correlation, grid/block, and the collective
    args kept at ingest), as JSON object text ("" for none): built by hand, the export's hot loop."""
    parts: list[str] = []
    if row.device is not None:
        parts.append(f'"device":{int(row.device)}')
    if row.stream is not None:
        parts.append(f'"stream":{int(row.stream)}')
    if row.correlation is not None:
        parts.append(f'"correlation":{int(row.correlation)}')
    if row.grid_x is not None or row.grid_y is not None or row.grid_z is not None:
        parts.append('"grid":' + json.dumps([row.grid_x, row.grid_y, row.grid_z]))
    if row.block_x is not None or row.block_y is not None or row.block_z is not None:
        parts.append('"block":' + json.dumps([row.block_x, row.block_y, row.block_z]))
    if row.args:
        try:
            kept = json.loads(row.args)
        except ValueError:
            kept = None
        if isinstance(kept, dict):
            parts.extend(_json(str(k)) + ":" + json.dumps(v) for k, v in kept.items()
                         if k not in _FIXED_ARGS)
    return "{" + ",".join(parts) + "}" if parts else ""


#: args written from the row's own columns (a kept arg of the same name is not written twice)
_FIXED_ARGS = frozenset(("device", "stream", "correlation", "grid", "block"))
#: JSON text of a string: names repeat (a few thousand names over millions of rows)
_json = functools.lru_cache(maxsize=65536)(json.dumps)


def _rows(conn: Connection, w: RankWindow) -> Iterator[Any]:
    """The rank's activity rows in its window, streamed (``yield_per``: a server-side cursor on
    PostgreSQL, batches of BATCH rows; SQLite's cursor steps through the table as it is read)."""
    a, lc, oc = _act.c, _launch.c, _origin.c  # (the launch shape and origin: migrations 0005, 0011)
    frm, cond = _in_window(conn, w)
    stmt = (
        select(a.kind, _name.c.value.label("name"), (a.start_ns + _src.c.time_base_ns).label("own_ns"), a.duration_ns,
               oc.device, oc.stream, a.correlation, oc.pid, oc.tid, lc.grid_x, lc.grid_y, lc.grid_z, lc.block_x,
               lc.block_y, lc.block_z, a.args)
        .select_from(frm.join(_name, _name.c.id == a.name_id).join(_launch, _launch.c.id == a.launch_id)
                     .join(_origin, _origin.c.id == a.origin_id))
        .where(*cond)
    )
    result = conn.execution_options(yield_per=BATCH).execute(stmt)
    try:
        yield from result
    finally:
        result.close()
