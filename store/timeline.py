"""The collective timeline in the store: what ingest keeps per rank (``save_timelines``), the per-host
clock offsets and what the analysis of a run found (``store_analysis``, read back by
``findings.run_findings``, which also gives the run's one straggler verdict).

Ingest computes each rank's ``collectives.RankTimeline`` in the workers (one pass over the rank's
activity, in its own clock) and stores it in ``collective_call``, ``rank_timeline`` and
``step_timeline``; the cross-rank part (matching, clocks, attribution, verdict) is computed here from
those small tables, never from ``activity``: a run's calls are ~0.1% of its rows. After every ingest,
transfer or reclassify of the run, the clock offsets are written to ``host_clock`` (so `profdb runs` /
`profdb ranks` and the SQL views show them) and what the analysis found to ``run_analysis`` (so a
question reads a few rows instead of matching the run's collectives again)."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from itertools import islice
from operator import itemgetter
from typing import Any

from sqlalchemy import Connection, Engine, delete, insert, select
from sqlalchemy.exc import SQLAlchemyError

from . import collectives, runs, validate, verdict
from .bulk import insert_rows
from .collectives import Analysis, ClockOffset, Clocks, CollectiveCall, RankTimeline, Step
from .errors import ProfdbError, QueryError, mark_committed
from .findings import RANK_FIGURES, fingerprint, identities
from .models import CollectiveCall as CallRow
from .models import HostClock, Rank, SourceFile
from .models import RankAnalysis as RankAnalysisRow
from .models import RankTimeline as TimelineRow
from .models import RunAnalysis as RunAnalysisRow
from .models import Step as StepRow
from .models import StepAnalysis as StepAnalysisRow
from .models import StepTimeline as StepTimelineRow
from .scope import RunScope, resolve_run

_tl = TimelineRow.__table__
_stl = StepTimelineRow.__table__
_step = StepRow.__table__
_rank = Rank.__table__
_src = SourceFile.__table__


CALL_COLS = ("rank_id", "family", "group_name", "collective", "seq", "run_id", "start_ns", "end_ns", "bytes",
             "busy_before_ns", "window_ns")
TIMELINE_COLS = ("rank_id", "first_ns", "last_ns", "work_domain", "busy_ns", "comm_ns", "exposed_comm_ns")
STEP_TIMELINE_COLS = ("rank_id", "step", "busy_ns", "exposed_comm_ns")
#: collective calls written per insert by ``save_timelines``, and what ingest gathers from complete ranks
#: before it calls it (one rank at a time, a 512-rank run ran ~1,500 small statements)
SAVE_CALLS = 20000


def combine(parts: Sequence[RankTimeline], rank: int) -> RankTimeline:
    """One rank's timeline from the timelines of its files (a rank may have several: a kernel trace
    and an API trace, or files ingested at different times). Calls of a family are put in time order
    and numbered again; busy, communication and exposed time come from the files of the rank's work
    domain (device beats CPU) and are added (files of one domain hold different kinds, so they do
    not overlap); steps are merged by number, the same way."""
    parts = [p for p in parts if p.work_domain or p.calls or p.steps]
    if len(parts) == 1:  # one file: as it is (its calls are numbered already; ``rank`` is not stored per call)
        return replace(parts[0], rank=rank)
    domain = "device" if any(p.work_domain == "device" for p in parts) else (
        "cpu" if any(p.work_domain == "cpu" for p in parts) else "")
    work = [p for p in parts if p.work_domain == domain]
    by_family: dict[str, list[CollectiveCall]] = defaultdict(list)
    for p in parts:
        for family, some in p.calls.items():
            by_family[family].extend(some)
    calls: dict[str, tuple[CollectiveCall, ...]] = {}
    for family, items in by_family.items():
        items.sort(key=lambda c: (c.start_ns, c.end_ns))
        seqs: dict[tuple[str, str], int] = {}
        out = []
        for c in items:
            k = seqs.get((c.group, c.name), 0)
            seqs[(c.group, c.name)] = k + 1
            out.append(c._replace(rank=rank, seq=k))
        calls[family] = tuple(out)
    steps: dict[int, Step] = {}
    for p in parts:
        for s in p.steps:
            have = steps.get(s.number)
            if have is None:
                steps[s.number] = s if p.work_domain == domain else s._replace(busy_ns=0, exposed_comm_ns=0)
            elif p.work_domain == domain:
                steps[s.number] = have._replace(busy_ns=have.busy_ns + s.busy_ns,
                                                exposed_comm_ns=have.exposed_comm_ns + s.exposed_comm_ns)
    return RankTimeline(
        rank=rank,
        calls=calls,
        steps=tuple(s for _, s in sorted(steps.items())),
        first_ns=min((p.first_ns for p in parts), default=0),
        last_ns=max((p.last_ns for p in parts), default=0),
        work_domain=domain,
        busy_ns=sum(p.busy_ns for p in work),
        comm_ns=sum(p.comm_ns for p in work),
        exposed_comm_ns=sum(p.exposed_comm_ns for p in work),
    )


def _mark(conn: Connection) -> str:
    return "?" if conn.dialect.paramstyle == "qmark" else "%s"


@contextmanager
def _raw_cursor(conn: Connection) -> Iterator[Any]:
    """The driver's own cursor (plain tuples, no SQLAlchemy row per call), closed after use."""
    raw = conn.connection.driver_connection
    assert raw is not None
    cur = raw.cursor()
    try:
        yield cur
    finally:
        cur.close()


def calls_by_family(conn: Connection, run_id: int, rank_ids: Mapping[int, int]) -> dict[str, tuple[int, ...]]:
    """Per call family, the global ranks (of ``rank_ids``: rank id -> global rank) with calls of it:
    one primary-key probe per rank and family, never a scan of the calls."""
    out: dict[str, tuple[int, ...]] = {}
    m = _mark(conn)
    with _raw_cursor(conn) as cur:
        for family in collectives.FAMILIES:
            cur.execute(
                f"SELECT id FROM rank WHERE run_id = {m} AND EXISTS "
                f"(SELECT 1 FROM collective_call c WHERE c.rank_id = rank.id AND c.family = {m})",
                (run_id, family),
            )
            out[family] = tuple(sorted(rank_ids[rid] for (rid,) in cur.fetchall() if rid in rank_ids))
    return out


def _picker(positions: Sequence[int]) -> Callable[[tuple[Any, ...]], tuple[Any, ...]]:
    """A function taking these positions of a tuple, as a tuple (itemgetter, in C, for two or more)."""
    if len(positions) >= 2:
        return itemgetter(*positions)
    return lambda t: tuple(t[j] for j in positions)


def match_stored(conn: Connection, run_id: int, rank_ids: Mapping[int, int], family: str,
                 ranks: Sequence[int], used: Sequence[int]) -> collectives.Matching:
    """``collectives.match_instances`` on the stored calls of one family, done by the database's
    index (ix_collective_call_match: run, family, collective, group, seq): the k-th calls of a
    collective in a group come out together, so an instance is a run of consecutive rows, and its
    columns are sliced out of them with no object per call. ``ranks``: the run's ranks with a
    timeline, ``used``: those with calls of ``family``. Gives what ``match_instances`` gives on the
    same calls (tests/test_straggler_store.py)."""
    m = _mark(conn)
    where = f"FROM collective_call WHERE run_id = {m} AND family = {m}"
    order = "ORDER BY run_id, family, collective, group_name, seq"  # the index's order: no sort
    # per (group, collective): how many instances each participant tuple made (instances usually share one)
    made: dict[tuple[str, str], dict[tuple[int, ...], int]] = {}
    found = collectives.Instances()
    rids_before: tuple[int, ...] = ()
    rk: tuple[int, ...] = ()
    in_order: Callable[[tuple[Any, ...]], tuple[Any, ...]] | None = None
    with _raw_cursor(conn) as cur, _raw_cursor(conn) as sizes_cur:
        # the calls first: on SQLite the sizes below are then read while this statement is active, in
        # its read transaction (one snapshot); the seq of every row is checked against them anyway
        cur.execute(f"SELECT seq, rank_id, start_ns, end_ns, busy_before_ns, window_ns, bytes {where} {order}",
                    (run_id, family))
        # how many ranks made each k-th call (the index alone answers it)
        sizes_cur.execute(f"SELECT group_name, collective, seq, COUNT(*) {where} GROUP BY run_id, family, "
                          f"collective, group_name, seq {order}", (run_id, family))
        sizes = sizes_cur.fetchall()
        rows = iter(cur)
        for group, name, seq, n in sizes:
            chunk = list(islice(rows, n))
            seqs, rids, starts, ends, busy, window, nbytes = zip(*chunk) if len(chunk) == n else ((),) * 7
            if seqs.count(seq) != n:
                raise QueryError("the collective calls of this run changed while they were read (an ingest into "
                                 "it?): ask again when it is done")
            if rids != rids_before:  # instances usually share one participant tuple: looked up once
                rids_before = rids
                # the columns in rank order (the rows of an instance come in the table's order), without
                # ranks outside ``rank_ids`` (on PostgreSQL, ranks another node committed since the scope
                # was read)
                perm = sorted((j for j, rid in enumerate(rids) if rid in rank_ids), key=lambda j: rank_ids[rids[j]])
                rk = tuple(rank_ids[rids[j]] for j in perm)
                in_order = None if perm == list(range(n)) else _picker(perm)
            if in_order is not None:
                starts, ends, busy, window, nbytes = (in_order(starts), in_order(ends), in_order(busy),
                                                      in_order(window), in_order(nbytes))
            key = (group, name)
            tuples = made.get(key)
            if tuples is None:
                tuples = made[key] = {}
            tuples[rk] = tuples.get(rk, 0) + 1
            if len(rk) < 2:
                continue
            if nbytes.count(None) == len(nbytes):
                size = None
            else:
                size = max(b for b in nbytes if b is not None)
            found.add(group, name, seq, rk, starts, ends, busy, window, size)
        if next(rows, None) is not None:
            raise QueryError("the collective calls of this run changed while they were read (an ingest into "
                             "it?): ask again when it is done")
    counts: dict[tuple[str, str], Counter[int]] = {}
    for key, tuples in made.items():
        c = counts[key] = Counter()
        for participants, times in tuples.items():
            for r in participants:
                c[r] += times
    notes = collectives.matching_notes(family, ranks, used, counts)
    return collectives.Matching(family, found.time_sorted(), tuple(used), tuple(notes))


def load_timelines(conn: Connection, rank_ids: Mapping[int, int], with_calls: bool = True) -> dict[int, RankTimeline]:
    """The stored timelines of ``rank_ids`` (rank id -> global rank), keyed by rank id. Ranks with
    nothing stored (ingested before migration 0003, or without timed activity) are absent.
    ``with_calls=False``: without their calls (``calls`` empty), for ``analyze_run``, which matches
    the calls in SQL order (``match_stored``) instead of building an object per call."""
    ids = sorted(rank_ids)
    if not ids:
        return {}
    calls: dict[int, dict[str, list[CollectiveCall]]] = defaultdict(lambda: defaultdict(list))
    heads: dict[int, tuple[int, int, str, int, int, int]] = {}
    steps: dict[int, list[Step]] = defaultdict(list)
    for chunk in (ids[i : i + 500] for i in range(0, len(ids), 500)):
        marks = ", ".join([_mark(conn)] * len(chunk))
        if with_calls:
            # the driver's own cursor and tuples: a run's calls can be many
            with _raw_cursor(conn) as cur:
                cur.execute(
                    "SELECT rank_id, family, group_name, collective, seq, start_ns, end_ns, bytes, busy_before_ns, "
                    f"window_ns FROM collective_call WHERE rank_id IN ({marks}) "
                    "ORDER BY rank_id, family, group_name, collective, seq",  # the primary key's order: no sort
                    tuple(chunk),
                )
                rows = cur.fetchall()
            make = CollectiveCall._make
            for rid, family, group, coll, seq, start, end, nbytes, busy, window in rows:
                calls[rid][family].append(
                    make((rank_ids[rid], family, group, coll, seq, start, end, nbytes, busy, window)))
        for h in conn.execute(
            select(_tl.c.rank_id, _tl.c.first_ns, _tl.c.last_ns, _tl.c.work_domain, _tl.c.busy_ns, _tl.c.comm_ns,
                   _tl.c.exposed_comm_ns).where(_tl.c.rank_id.in_(chunk))
        ):
            heads[h[0]] = (int(h[1]), int(h[2]), str(h[3]), int(h[4]), int(h[5]), int(h[6]))
        for st in conn.execute(
            select(_step.c.rank_id, _step.c.step, _step.c.start_ns + _src.c.time_base_ns, _step.c.duration_ns,
                   _stl.c.busy_ns, _stl.c.exposed_comm_ns)
            .select_from(
                _step.join(_src, _src.c.id == _step.c.source_id)
                .outerjoin(_stl, (_stl.c.rank_id == _step.c.rank_id) & (_stl.c.step == _step.c.step))
            )
            .where(_step.c.rank_id.in_(chunk))
            .order_by(_step.c.rank_id, _step.c.step)
        ):
            steps[st[0]].append(Step(int(st[1]), int(st[2]), int(st[2]) + int(st[3]), int(st[4] or 0),
                                     int(st[5] or 0)))
    out: dict[int, RankTimeline] = {}
    for rid in ids:
        if rid not in heads and rid not in calls:
            continue
        first, last, domain, busy, comm, exposed = heads.get(rid, (0, 0, "", 0, 0, 0))
        out[rid] = RankTimeline(rank_ids[rid], {f: tuple(v) for f, v in calls.get(rid, {}).items()},
                                tuple(steps.get(rid, ())), first, last, domain, busy, comm, exposed)
    return out


def save_timelines(
    conn: Connection,
    run_id: int,
    new: Mapping[int, Sequence[RankTimeline]],
    fresh: Mapping[int, int] | None = None,
    kept: collectives.CallColumns | None = None,
) -> None:
    """Store the timelines ingest computed per file (rank id -> the rank's files' timelines), merged
    with what the store already holds for those ranks (``combine``). ``fresh``: rank id -> global
    rank of ranks created by the caller's transaction, which hold nothing yet: for them nothing is
    read back or deleted first (a 512-rank ingest spent ~2 s in those six statements per rank).
    ``kept``: the collective_call rows written are also added to it, as columns (``store_analysis``)."""
    if not new:
        return
    fresh = fresh or {}
    old = sorted(rid for rid in new if rid not in fresh)
    globals_ = {rid: fresh[rid] for rid in new if rid in fresh}
    stored: dict[int, RankTimeline] = {}
    if old:
        globals_.update(
            (int(rid), int(g))
            for rid, g in conn.execute(select(_rank.c.id, _rank.c.global_rank).where(_rank.c.id.in_(old))).all()
        )
        stored = load_timelines(conn, {rid: globals_[rid] for rid in old})
        conn.execute(delete(CallRow).where(CallRow.rank_id.in_(old)))
        conn.execute(delete(TimelineRow).where(TimelineRow.rank_id.in_(old)))
        conn.execute(delete(StepTimelineRow).where(StepTimelineRow.rank_id.in_(old)))
    tl_rows: list[tuple[Any, ...]] = []
    step_rows: list[tuple[Any, ...]] = []
    call_rows: list[tuple[Any, ...]] = []
    for rid in sorted(new):
        parts = [*([stored[rid]] if rid in stored else []), *new[rid]]
        t = combine(parts, globals_[rid])
        if len(parts) > 1:
            _check_summed(rid, t)
        mine = [
            (rid, c.family, c.group[:255], c.name[:60], c.seq, run_id, c.start_ns, c.end_ns, c.bytes,
             c.busy_before_ns, c.window_ns)
            for family_calls in t.calls.values() for c in family_calls
        ]
        # in the primary key's order (calls come in time order, collectives interleaved): each row then
        # lands at the end of its index instead of anywhere in it (measured: ~20% less CPU for the inserts)
        mine.sort(key=itemgetter(1, 2, 3, 4))
        call_rows += mine
        if len(call_rows) >= SAVE_CALLS:  # (bounded here too: a transfer passes every copied rank at once)
            _insert_calls(conn, call_rows, kept)
            call_rows = []
        tl_rows.append((rid, t.first_ns, t.last_ns, t.work_domain, t.busy_ns, t.comm_ns, t.exposed_comm_ns))
        step_rows.extend((rid, s.number, s.busy_ns, s.exposed_comm_ns) for s in t.steps)
    # the ranks of one call together, in inserts of SAVE_CALLS rows and one rank's more at most (ranks in
    # id order: the whole stays in key order): a run's calls grow with its input (at 4x the benchmark's
    # 1M dispatches, gathering all of them raised the ingest's peak by ~80 MB)
    _insert_calls(conn, call_rows, kept)
    insert_rows(conn, "rank_timeline", TIMELINE_COLS, tl_rows)
    insert_rows(conn, "step_timeline", STEP_TIMELINE_COLS, step_rows)


def _check_summed(rank_id: int, t: RankTimeline) -> None:
    """The times ``combine`` added up over a rank's files fit the store's BIGINT (``validate.merged``)."""
    for what, value in (
        ("the busy time", t.busy_ns), ("the communication time", t.comm_ns),
        ("the exposed communication time", t.exposed_comm_ns),
        *((f"step {s.number}'s busy time", s.busy_ns) for s in t.steps),
        *((f"step {s.number}'s exposed communication time", s.exposed_comm_ns) for s in t.steps),
    ):
        validate.merged(rank_id, what, value)


def _insert_calls(conn: Connection, rows: list[tuple[Any, ...]], kept: collectives.CallColumns | None) -> None:
    """Insert collective_call ``rows`` (CALL_COLS), and add them to ``kept`` as they were written."""
    insert_rows(conn, "collective_call", CALL_COLS, rows)
    if kept is not None and rows:
        # (a column at a time: zip(*rows) was slower)
        rid, family, group, name, seq, start, end, nbytes, busy, window = (
            list(map(itemgetter(i), rows)) for i in (0, 1, 2, 3, 4, 6, 7, 8, 9, 10))
        kept.add(family, group, name, seq, rid, start, end, nbytes, busy, window)


def stored_clocks(conn: Connection, scope: RunScope, hosts: set[str]) -> Clocks | None:
    """The run's clock offsets as the last ingest or transfer estimated them (``host_clock``), when
    they cover ``hosts`` (else None: estimate them again). A host the estimate could not place is
    absent from the table, so a run with such a host is estimated again, and its note given."""
    rows = conn.execute(
        select(HostClock.hostname, HostClock.offset_ns, HostClock.error_ns, HostClock.samples)
        .where(HostClock.run_id == scope.id)
    ).all()
    offsets = {h: ClockOffset(h, int(o), int(e), int(n)) for h, o, e, n in rows}
    refs = [h for h, o in offsets.items() if o.samples == 0]
    if not offsets or not hosts <= set(offsets) or len(refs) != 1:
        return None
    return Clocks(refs[0], offsets)


def analyze_run(conn: Connection, scope: RunScope, fresh_clocks: bool = False,
                kept: collectives.CallColumns | None = None) -> Analysis:
    """Match, align and attribute the run's collectives (collectives.analyze) from the stored
    timelines, with the stored clock offsets unless ``fresh_clocks`` (or they do not cover the run).
    ``kept``: collective_call rows the caller's transaction wrote (``save_timelines``); when they are
    every stored call of the family matched (``_holds_all``), they are matched instead of the stored
    ones, which are then not read back (on 1M CSV rows, reading their 62k calls was ~0.2 s of CPU
    after the last file, half the analysis)."""
    rank_ids = {r.id: r.global_rank for r in scope.ranks}
    stored = load_timelines(conn, rank_ids, with_calls=False)
    timelines = [stored[r.id] for r in scope.ranks if r.id in stored]
    if not timelines:
        return Analysis("", collectives.InstanceResults(), {}, (), collectives.Clocks("", {}), (
            "no collective timeline stored for this run (its profiles have no timed activity, or were ingested "
            "before this profdb version: re-ingest them)",))
    having = calls_by_family(conn, scope.id, rank_ids)
    with_calls = sorted({r for rs in having.values() for r in rs})
    have = {t.rank for t in timelines}
    # a rank with calls has a rank_timeline row (save_timelines writes both); if not, it still takes part
    timelines += [RankTimeline(r, {}, (), 0, 0, "", 0, 0, 0) for r in with_calls if r not in have]
    all_ranks = sorted(t.rank for t in timelines)
    family, used = collectives.choose_family_of(having, len(timelines))
    if family and kept is not None and kept.worth_matching() and _holds_all(conn, scope.id, kept, family):
        matching = collectives.match_calls(kept, family, rank_ids, all_ranks, used)
    elif family:
        matching = match_stored(conn, scope.id, rank_ids, family, all_ranks, used)
    else:
        matching = collectives.Matching("", collectives.Instances(), (),
                                        collectives.no_family_notes(all_ranks, with_calls))
    ids = identities(scope)
    clocks = None if fresh_clocks else stored_clocks(conn, scope, {ids[t.rank].host for t in timelines})
    a = collectives.analyze_matched(timelines, matching, ids, clocks)
    missing = [r.global_rank for r in scope.ranks if r.id not in stored]
    if missing and timelines:
        shown = ", ".join(map(str, missing[:20])) + (" ..." if len(missing) > 20 else "")
        note = (f"rank(s) {shown} have no stored timeline (ingested before this profdb version, or no timed "
                "activity): left out of the collective timeline; re-ingest them to include them")
        a = replace(a, notes=(*a.notes, note))
    return a


def _holds_all(conn: Connection, run_id: int, kept: collectives.CallColumns, family: str) -> bool:
    """Whether ``kept`` holds exactly the run's stored calls of ``family``: as many per rank (rows
    ``kept`` has were written by this transaction, so equal counts are the same rows; a rank of an
    earlier ingest, or on PostgreSQL of another node, makes them differ). One count per rank by the
    primary key's index."""
    m = _mark(conn)
    with _raw_cursor(conn) as cur:
        cur.execute(f"SELECT rank.id, (SELECT COUNT(*) FROM collective_call c WHERE c.rank_id = rank.id AND "
                    f"c.family = {m}) FROM rank WHERE rank.run_id = {m}", (family, run_id))
        stored = {int(rid): int(n) for rid, n in cur.fetchall() if n}
    return stored == kept.counts(family)


#: high bits of the advisory lock key under which a run's host_clock and run_analysis rows are rewritten
#: (``store_analysis``)
CLOCK_LOCK_SPACE = 0x70726F66 << 32


def store_analysis(conn: Connection, run: str, kept: collectives.CallColumns | None = None) -> RunScope:
    """Analyse run ``run`` from its stored timelines once, after an ingest, transfer or reclassify into
    it, in the caller's transaction: rewrite its ``host_clock`` rows (the clock offsets) and keep what
    the analysis found (``run_analysis``, ``rank_analysis``, ``step_analysis``; ``save_findings``), so
    questions read it instead of matching every collective again. Returns the run as analysed.

    PostgreSQL: nodes ingesting ranks of one run at once each rewrite the run's rows. Without a lock both
    delete (seeing none of the other's rows) and both insert the same keys: the second fails on the
    primary key. A transaction advisory lock per run (one bigint key: a lock space apart from the
    (run, rank) pairs of bulk.hold_run, and taken after them, so never a deadlock) makes them take turns.
    The run is resolved after the lock is held, so the later one's statements see the earlier one's
    committed ranks, files and timelines, and its rows cover both. (Ingest, transfer and reclassify keep
    the analysis after their commit there instead, ``keep_analysis``: under this lock, nodes committed
    one after another.) ``kept``: the calls this transaction stored (``analyze_run``)."""
    run_id = runs.run_id(conn, run)
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql("SELECT pg_advisory_xact_lock(%s::int8)", (CLOCK_LOCK_SPACE | run_id,))
    return _analyse_and_keep(conn, run, kept)


def _analyse_and_keep(conn: Connection, run: str, kept: collectives.CallColumns | None) -> RunScope:
    """``store_analysis``' work, under the run's lock (which the caller holds)."""
    scope = resolve_run(conn, run)
    run_id = scope.id
    conn.execute(delete(HostClock).where(HostClock.run_id == run_id))
    a = analyze_run(conn, scope, fresh_clocks=True, kept=kept)
    rows = [dict(run_id=run_id, hostname=o.host[:255], offset_ns=o.offset_ns, error_ns=o.error_ns, samples=o.samples)
            for o in a.clocks.offsets.values()]
    clamped = fit_bigint(rows)
    if rows and a.instances:
        conn.execute(insert(HostClock), rows)
    save_findings(conn, scope, verdict.findings_of(a, identities(scope)), clamped)
    return scope


def analysed_after_commit(conn: Connection | Engine) -> bool:
    """Whether a write into a run (ingest, transfer, reclassify) keeps the run's analysis after its commit
    (``keep_analysis``) instead of in its own transaction (``store_analysis``): on PostgreSQL, where nodes
    write ranks of one run at once."""
    return conn.dialect.name == "postgresql"


def analyse_in_write(conn: Connection, run: str, kept: collectives.CallColumns | None = None) -> RunScope:
    """The end of a write into run ``run`` (ingest, transfer, reclassify), in its transaction: the run's
    analysis kept (``store_analysis``), or on PostgreSQL only the run as it stands (its analysis comes after
    the commit: ``analyse_after_write``). Returns the run."""
    if analysed_after_commit(conn):
        return resolve_run(conn, run)
    return store_analysis(conn, run, kept)


def analyse_after_write(engine: Engine, run: str, done: str, kept: collectives.CallColumns | None = None) -> str | None:
    """After a write into run ``run`` committed ``done`` (what it wrote, as a sentence): on PostgreSQL, the
    run's analysis kept (``keep_analysis``; its note, if it was not kept); elsewhere nothing (it was kept in
    the write's transaction, ``analyse_in_write``). An exception meanwhile (an interrupt) is marked with
    ``done`` (``errors.mark_committed``): the rows are in, whatever it stops."""
    if not analysed_after_commit(engine):
        return None
    try:
        return keep_analysis(engine, run, kept)
    except BaseException as e:
        mark_committed(e, f"{done}; the run's analysis was not kept (the questions compute it until the next write "
                          "into the run keeps it)")
        raise


def keep_analysis(engine: Engine, run: str, kept: collectives.CallColumns | None = None) -> str | None:
    """PostgreSQL, after a write into run ``run`` committed: keep its analysis current (``store_analysis``'s
    rows) without making the nodes that write one run at once take turns.

    Why: in the write's own transaction, the analysis of the whole run ran under the run's lock, so nodes
    committed one after another, each analysing every rank committed before it. The analysis grows with the
    run (~3 us a collective call: 1,024 ranks of 10,000 calls ~30 s), so the last of 128 nodes waited for
    ~128 of them. Here the write is committed first, and one analysis of every committed write is enough.

    How (the run's session advisory lock, the key ``store_analysis`` takes; each check and analysis in a
    REPEATABLE READ transaction, so its rows and the fingerprint it keeps are of one snapshot):
    1. if the kept analysis has the run's current fingerprint (``findings.fingerprint``), return;
    2. try the lock; if another writer holds it, return: that writer checks again after it lets go (3),
       which is after this write's commit (it committed before its try failed), so the analysis covers it;
    3. holding it, analyse and keep until the kept analysis is current; let go; then 1 again.
    So after every commit some analysis begins after it, and a burst of nodes' commits costs about two
    analyses, not one per node. A holder analyses once per change of the run (the writes committed during
    its analyses: finite for a job's nodes), and stops if what it kept is not current although the run did
    not change (another process replaced it: no loop).
    Meanwhile, and if this fails, the questions see a fingerprint that is not current and compute the
    analysis themselves (``findings.stored_findings``): slower, never wrong.

    The lock is a session's: behind a pooler that moves transactions between server sessions the unlock
    finds nothing to let go of, and the note says so.

    Returns None, or a note saying the analysis was not kept and why (the write stays committed)."""
    analysed: str | None = None  # the run's fingerprint as this call last analysed it
    try:
        with engine.connect() as conn:
            conn.execution_options(isolation_level="REPEATABLE READ")
            while True:
                with conn.begin():
                    if _is_current(conn, run):
                        return None
                    key = CLOCK_LOCK_SPACE | runs.run_id(conn, run)
                with conn.begin():
                    if not conn.exec_driver_sql("SELECT pg_try_advisory_lock(%s::int8)", (key,)).scalar():
                        return None
                stuck = False
                try:
                    while True:  # (one analysis per change of the run: as many as writes commit meanwhile)
                        with conn.begin():
                            now, kept_fp = _fingerprints(conn, run)
                            if now == kept_fp:
                                break
                            if now == analysed:  # not current, though the run is as this call analysed it
                                stuck = True
                                break
                            _analyse_and_keep(conn, run, kept)
                            analysed = now
                        kept = None  # (of this write only: the run may hold others' calls now)
                    with conn.begin():
                        let_go = conn.exec_driver_sql("SELECT pg_advisory_unlock(%s::int8)", (key,)).scalar()
                    if not let_go:  # (not this session's: a pooler that moves transactions between sessions)
                        conn.invalidate()
                        return (f"run {run!r}: the run's lock was not this connection's to let go of (a connection "
                                "pooler in transaction mode between profdb and PostgreSQL?); connect profdb "
                                "directly or in session mode")
                except BaseException:
                    conn.invalidate()  # (closing the session lets go of its lock, whatever state it is in)
                    raise
                if stuck:
                    return (f"run {run!r}: its analysis was not kept (another process replaced or removed it "
                            "while the run stayed the same); its questions compute it until the next write into "
                            "it keeps it")
    except (ProfdbError, SQLAlchemyError) as e:
        return (f"run {run!r}: its analysis was not kept ({' '.join(str(e).split())[:300]}); its questions "
                "compute it until the next ingest, transfer or reclassify into it keeps it")


def _is_current(conn: Connection, run: str) -> bool:
    """Whether the run's kept analysis is of the run as the store holds it now (its fingerprint)."""
    now, kept = _fingerprints(conn, run)
    return now == kept


def _fingerprints(conn: Connection, run: str) -> tuple[str, str | None]:
    """The run's fingerprint now, and that of its kept analysis (None: none kept)."""
    scope = resolve_run(conn, run)
    got = conn.execute(select(RunAnalysisRow.fingerprint).where(RunAnalysisRow.run_id == scope.id)).first()
    return fingerprint(conn, scope), None if got is None else str(got[0])


#: said in the kept analysis's notes when ``fit_bigint`` changed a figure
CLAMPED_NOTE = ("some of this analysis's figures are beyond what a 64-bit integer holds (292 years: the ranks' "
                "clocks are not comparable); the store keeps the largest one instead")


def fit_bigint(rows: Sequence[dict[str, Any]]) -> bool:
    """Clamps, in place, the integers of ``rows`` outside BIGINT's range to its nearest end, and says
    whether there were any. Files' timestamps are checked to fit in 64 bits, but figures derived from
    several ranks need not: a difference of two ranks' times (an arrival minus a clock offset, a wait)
    on clocks hundreds of years apart (a trace with no time base beside one with), or a sum of them."""
    clamped = False
    for row in rows:
        for key, value in row.items():
            if type(value) is int and not validate.INT64_MIN <= value <= validate.INT64_MAX:
                row[key] = validate.INT64_MAX if value > 0 else validate.INT64_MIN
                clamped = True
    return clamped


def save_findings(conn: Connection, scope: RunScope, f: verdict.Findings, clamped: bool = False) -> None:
    """Replace the run's ``run_analysis`` row (and its rank and step rows) with ``f``, under the
    fingerprint of the run as ``scope`` and the store hold it now. Figures past BIGINT's range are
    kept as its nearest end (``fit_bigint``), and the notes say so (also when ``clamped``: the
    caller's rows were)."""
    # the rank and step rows would go with it (ON DELETE CASCADE), but SQLite's keys are off in a bulk load
    for model in (RunAnalysisRow, RankAnalysisRow, StepAnalysisRow):
        conn.execute(delete(model).where(model.run_id == scope.id))
    d = f.decided
    w = f.window
    clocks = {"reference": f.clocks.reference,
              "offsets": [[o.host, o.offset_ns, o.error_ns, o.samples] for o in f.clocks.offsets.values()],
              "notes": list(f.clocks.notes)}
    run_row = dict(
        run_id=scope.id, fingerprint=fingerprint(conn, scope), computed_at=runs.now(), family=f.family,
        instances=f.instances, tied_instances=f.tied, window_first_ns=w.first_ns if w else None,
        window_last_ns=w.last_ns if w else None, window_ranks_json=json.dumps(list(w.ranks)) if w else None,
        end_spread_ns=f.end_spread_ns, duration_ns=f.duration_ns, apart=f.apart,
        verdict_rank=d.rank if d else None, verdict_line=d.line if d else None, verdict_cause=d.cause if d else None,
        verdict_last=d.last if d else None, verdict_instances=d.instances if d else None,
        p_value=d.p_value if d else None, wait_share=d.wait_share if d else None,
        time_share=d.time_share if d else None, work_ratio=d.work_ratio if d else None,
        lateness=d.lateness if d else None, clocks_json=json.dumps(clocks),
    )
    ids = {r.global_rank: r.id for r in scope.ranks}
    rank_rows = [dict(rank_id=ids[g], run_id=scope.id, clock_offset_ns=f.clocks.offset(x.host),
                      **{c: getattr(x, "last" if c == "entered_last" else c) for c in RANK_FIGURES})
                 for g, x in f.ranks.items()]
    step_rows = [dict(rank_id=ids[g], step=s.step, run_id=scope.id, duration_ns=x.duration_ns, entered_last=x.last,
                      wait_caused_ns=x.wait_caused_ns, wait_suffered_ns=x.wait_suffered_ns, busy_ns=x.busy_ns,
                      idle_ns=x.idle_ns, exposed_comm_ns=x.exposed_comm_ns)
                 for s in f.steps for g, x in s.ranks.items()]
    clamped = fit_bigint([run_row, *rank_rows, *step_rows]) or clamped
    run_row["notes_json"] = json.dumps([*f.notes, CLAMPED_NOTE] if clamped else list(f.notes))
    conn.execute(insert(RunAnalysisRow).values(**run_row))
    if rank_rows:
        conn.execute(insert(RankAnalysisRow), rank_rows)
    if step_rows:
        conn.execute(insert(StepAnalysisRow), step_rows)


def forget_findings(conn: Connection) -> None:
    """Drop every kept analysis (after SQL written by hand, ``profdb sql --write``: it may have changed
    timelines the fingerprint does not cover); the questions compute until the next ingest, transfer
    or reclassify of each run keeps it again."""
    for model in (StepAnalysisRow, RankAnalysisRow, RunAnalysisRow):
        conn.execute(delete(model))


