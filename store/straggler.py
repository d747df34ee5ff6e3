"""The straggler questions from the collective timeline: ``stragglers`` (per rank: collectives entered
last, wait caused, wait suffered, busy, idle, exposed communication) and ``collectives`` (per matched
instance: arrival skew, the last rank, the wait, bytes). Both read only the small tables ingest fills
(``collective_call``, ``rank_timeline``, ``step``/``step_timeline``), never ``activity``; the headline
is the run's one verdict (findings.run_verdict). Metrics are defined in store/collectives.py and the
README ("Metrics")."""

from __future__ import annotations

import operator
from dataclasses import replace
from typing import Any

from . import queries
from .collectives import Analysis
from .findings import RunVerdict, profile_window, run_verdict, window_notes
from .queries import Result
from .reader import Db, connection
from .scope import RunScope, scope_of, with_ranks

STRAGGLER_HEADERS = [
    "global_rank",
    "hostname",
    "local_rank",
    "clock_offset_ns",
    "collectives",
    "entered_last",
    "tied_last",
    "wait_caused_ns",
    "wait_suffered_ns",
    "busy_ns",
    "idle_ns",
    "exposed_comm_ns",
    "work_domain",
]

COLLECTIVE_HEADERS = [
    "collective",
    "group",
    "seq",
    "ranks",
    "at_ns",
    "skew_ns",
    "last_rank",
    "last_host",
    "last_local_rank",
    "wait_ns",
    "bytes",
]


def _verdict(db: Db, scope: RunScope, analysis: Analysis | None = None) -> RunVerdict:
    """The run's one verdict (with the totals of its default kinds for the fallback); ``analysis``:
    the run's, when the caller has it (not analysed again when the kept findings are stale)."""
    kinds, _ = queries.select_kinds(db, scope, None, ("kernel",))
    v = queries.straggler(db, scope, kinds, analysis=analysis)
    if v.detail is not None:
        return v.detail
    # a single rank: the analysis says what is missing, the line why
    rv = run_verdict(db, scope, analysis=analysis)
    return replace(rv, verdict=replace(rv.verdict, line=v.line))


def stragglers(db: Db, run: str | RunScope | None = None, top: int = 0) -> Result:
    """Per rank: collectives entered last (alone and tied), the wait it caused the others and the
    wait it suffered, its busy and idle time and its exposed communication; headline: the verdict."""
    scope = with_ranks(scope_of(db, run))
    rv = _verdict(db, scope)
    a = rv.findings
    notes = list(a.notes) + window_notes(a, scope)
    rows: list[tuple[Any, ...]] = []
    for r in scope.ranks:
        x = a.ranks.get(r.global_rank)
        off = a.clocks.offsets.get(r.hostname or "")
        if x is None:
            rows.append((r.global_rank, r.hostname, r.local_rank, None, 0, 0, 0, 0, 0, None, None, None, None))
            continue
        rows.append((r.global_rank, r.hostname, r.local_rank, off.offset_ns if off else None, x.instances, x.last,
                     x.tied_last, x.wait_caused_ns, x.wait_suffered_ns, x.busy_ns, x.idle_ns, x.exposed_comm_ns,
                     x.work_domain))
    rows.sort(key=lambda t: (-(t[7] or 0), t[0]))
    if top > 0:
        rows = rows[:top]
    if not a.instances:
        notes.append("no collective timeline: the verdict is from per-rank totals (profdb query --ranks)")
        if a.ranks:
            notes.append(profile_window(a, scope))
    return Result(list(STRAGGLER_HEADERS), rows, rv.verdict.line, notes)


def collectives(db: Db, run: str | RunScope | None = None, top: int = 20) -> Result:
    """Per matched collective instance, largest arrival skew first: when it started (at_ns: the first
    arrival, from the run's first arrival), the skew, the rank the others waited for (empty on a
    tie), the total wait it caused and the message size where the profiler records it."""
    scope = with_ranks(scope_of(db, run))
    from .timeline import analyze_run  # the timeline's SQL (SQLAlchemy): only this question matches instances

    a = analyze_run(connection(db), scope)  # every instance (the verdict's findings keep none)
    rv = _verdict(db, scope, a)
    notes = list(rv.findings.notes) + window_notes(rv.findings, scope)
    by_rank = {r.global_rank: r for r in scope.ranks}
    res = a.instances
    firsts = list(map(operator.sub, res.latest, res.skew))
    t0 = min(firsts, default=0)
    # sorted by their columns: only the instances shown are built
    order = sorted(range(len(res)), key=lambda k: (-res.skew[k], firsts[k]))
    if top > 0:
        order = order[:top]
    rows: list[tuple[Any, ...]] = []
    for i in map(res.__getitem__, order):
        last = by_rank.get(i.last_rank) if i.last_rank is not None else None
        rows.append((
            i.name, i.group, i.seq, len(i.ranks), i.first_ns - t0, i.skew_ns,
            i.last_rank if i.last_rank is not None else "tie " + ",".join(map(str, i.tied)),
            last.hostname if last else None, last.local_rank if last else None, i.wait_total_ns, i.bytes,
        ))
    if not a.instances:
        notes.append("no collective instances to show (see the notes above)")
    else:
        notes.append("wait_ns: total time the other ranks waited for the last arrival; bytes: largest message "
                     "size any rank recorded (empty when the profiler does not say)")
    return Result(list(COLLECTIVE_HEADERS), rows, rv.verdict.line, notes)
