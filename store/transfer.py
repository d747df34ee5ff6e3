"""Moving runs between stores: local SQLite files into the team's PostgreSQL store (``profdb export``),
or several per-node SQLite files into one (``profdb merge``); any engine to any engine.

A run is copied whole: the run row, its ranks, source files, names (re-interned in the destination),
activity, counters, summaries and steps. Source files already in the destination run (same rank, same
content hash) are skipped, so repeating a transfer adds nothing; ranks of the same run coming from several
stores are united, as when several nodes ingest their own ranks. Each run is one transaction in the
destination, with the same locks as ``ingest`` (bulk.run_scope / hold_run), so nodes can export into
the team store at the same time. Before the first of them, every check a copy makes (world size, rank
facts, duplicate profiles, metadata) is made for all runs of all sources in one transaction that is
rolled back (``_preflight``): a conflict in any run stops the transfer with nothing committed. Rows
are streamed in batches and written through bulk.insert_rows (COPY on PostgreSQL)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Engine, Float, cast, func, insert, select
from sqlalchemy.exc import DBAPIError

from . import bulk, errors, fact_spans, reclassify, runs, timeline
from .batches import SHAPE_TABLES
from .collectives import RankTimeline, TimelineBuilder
from .db import display_url, load_target, open_db, resolve_url, sqlite_path
from .errors import ProfdbError, QueryError, StoreError, mark_committed
from .fact_spans import Spans
from .ingest_workers import NESTED_KINDS
from .intervals import SelfTotals
from .models import Activity, Base, Counter, Name, Origin, Rank, Run, SourceFile, Step, Summary
from .records import Activity as ActivityRecord

BATCH = 20000

#: progress(run, done_files, total_files)
Progress = Callable[[str, int, int], None]

_ACT = Activity.__table__
_CTR = Counter.__table__
ACTIVITY_COLS = tuple(c.name for c in _ACT.columns if c.name != "id")
COUNTER_COLS = tuple(c.name for c in _CTR.columns if c.name != "id")


@dataclass
class RunTransfer:
    run: str
    status: str  # "created", "added" (to a run the destination had), "present" (nothing new)
    files: int = 0
    skipped_files: int = 0
    ranks: list[int] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)
    #: why the run's analysis was not kept, if it was not (``timeline.keep_analysis``)
    note: str | None = None


@dataclass
class TransferReport:
    source: str
    destination: str
    runs: list[RunTransfer] = field(default_factory=list)


# --------------------------------------------------------------------------- entry points


def transfer_runs(
    src: str | None,
    dst: str,
    runs: Sequence[str] | None = None,
    *,
    allow_duplicate_ranks: bool = False,
    progress: Progress | None = None,
) -> TransferReport:
    """Copy ``runs`` (default: all) from the store ``src`` (path or URL; None = $PROFDB_DB or
    ./profdb.db) into the store ``dst`` (created if new)."""
    src_url, dst_url = resolve_url(src), resolve_url(dst)
    _check_distinct(src_url, dst_url)
    _check_source_exists(src_url)
    src_engine = open_db(src_url, readonly=True)
    try:
        names = _run_names(src_engine, runs, src_url, required=True)
        return _transfer([(src_url, src_engine, names)], dst_url, allow_duplicate_ranks, progress)[0]
    finally:
        src_engine.dispose()


def merge_stores(
    sources: Sequence[str],
    dst: str | None,
    runs: Sequence[str] | None = None,
    *,
    allow_duplicate_ranks: bool = False,
    progress: Progress | None = None,
) -> list[TransferReport]:
    """Copy every run (or the named ``runs``) of each store in ``sources`` into ``dst``. A named run
    needs to be in at least one source."""
    if not sources:
        raise StoreError("no stores to merge; pass one or more store files or URLs")
    dst_url = resolve_url(dst)
    src_urls = [resolve_url(s) for s in sources]
    for u in src_urls:
        _check_distinct(u, dst_url)
        _check_source_exists(u)
    engines = [open_db(u, readonly=True) for u in src_urls]
    try:
        found: set[str] = set()
        plan = []
        for u, e in zip(src_urls, engines):
            names = _run_names(e, runs, u, required=False)
            found.update(names)
            plan.append((u, e, names))
        if runs:
            missing = [r for r in runs if r not in found]
            if missing:
                raise QueryError(
                    f"no run named {', '.join(map(repr, missing))} in {', '.join(display_url(u) for u in src_urls)}; "
                    "see `profdb runs --db STORE`"
                )
        return _transfer(plan, dst_url, allow_duplicate_ranks, progress)
    finally:
        for e in engines:
            e.dispose()


# --------------------------------------------------------------------------- checks


def _same_store(a: str, b: str) -> bool:
    pa, pb = sqlite_path(a), sqlite_path(b)
    if pa is not None and pb is not None:
        return pa.resolve() == pb.resolve()
    return display_url(a) == display_url(b)


def _check_distinct(src_url: str, dst_url: str) -> None:
    if _same_store(src_url, dst_url):
        raise StoreError(f"{display_url(src_url)} is both the source and the destination; name another store")


def _check_source_exists(url: str) -> None:
    path = sqlite_path(url)
    if path is not None and not path.exists():
        raise StoreError(f"{path}: no such store; name an existing profdb file (or URL) to copy from")


def _run_names(engine: Engine, wanted: Sequence[str] | None, url: str, *, required: bool) -> list[str]:
    with engine.connect() as conn:
        have = runs.run_names(conn)
    if not wanted:
        return have
    missing = [r for r in wanted if r not in have]
    if missing and required:
        raise QueryError(
            f"no run named {', '.join(map(repr, missing))} in {display_url(url)}; runs there: "
            f"{', '.join(have[:10]) or 'none'} (see `profdb runs`)"
        )
    return [r for r in have if r in wanted]


# --------------------------------------------------------------------------- copying


#: (source url, its engine, the names of its runs to copy)
Plan = list[tuple[str, Engine, list[str]]]


def _transfer(plan: Plan, dst_url: str, allow_dupes: bool, progress: Progress | None) -> list[TransferReport]:
    reports = [TransferReport(display_url(u), display_url(dst_url)) for u, _, _ in plan]

    def committed() -> list[str]:
        return [f"{r.run!r} from {rep.source}" for rep in reports for r in rep.runs if r.files]

    with load_target(dst_url, keep_on_error=lambda: bool(committed())) as target:
        dst = target.engine
        try:
            _preflight(dst, plan, allow_dupes)
        except DBAPIError as e:  # (a concurrent writer, a lost server...: nothing was written yet)
            what = [f"the runs of {display_url(u)}" for u, _, _ in plan]
            explained = bulk.explain_db_error(e, display_url(dst_url), what)
            if explained is None:
                raise
            raise explained from e
        for report, (src_url, src, names) in zip(reports, plan):
            for name in names:
                try:
                    report.runs.append(_copy_run(src, dst, name, allow_dupes, progress))
                except (ProfdbError, DBAPIError) as e:  # after the preflight: a concurrent writer, a full disk...
                    if isinstance(e, DBAPIError):
                        what = [f"run {name!r} of {display_url(src_url)}"]
                        explained = bulk.explain_db_error(e, display_url(dst_url), what)
                        if explained is None:
                            raise
                        err: ProfdbError = explained
                    else:
                        err = e
                    done = committed()
                    if done:
                        raise type(err)(f"{err} (run {name!r} not copied; already committed: {', '.join(done)})") from e
                    raise err from e
                except BaseException as e:  # (an interrupt: what earlier runs committed stays)
                    done = committed()
                    if done:
                        said = errors.committed(e)
                        mark_committed(e, f"runs already committed: {', '.join(done)}" + (f"; {said}" if said else ""))
                    raise
    return reports


def _run_rows(s: Connection, name: str) -> tuple[Any, dict[int, Any], list[Any]]:
    """A source run: its row, its ranks by id, its source files."""
    run = s.execute(select(Run.__table__).where(Run.name == name)).one()
    ranks = {r.id: r for r in s.execute(select(Rank.__table__).where(Rank.run_id == run.id))}
    files = list(s.execute(select(SourceFile.__table__).where(SourceFile.run_id == run.id).order_by(SourceFile.id)))
    return run, ranks, files


def _preflight(dst: Engine, plan: Plan, allow_dupes: bool) -> None:
    """The checks of every run's copy, all runs of all sources in one destination transaction that
    is rolled back: runs and ranks are made and the file rows written (so a run coming from two
    sources is checked against itself too), no activity is copied. On PostgreSQL each run's ranks are
    held as a load holds them (``bulk.hold_run``), so that a node loading one of them meanwhile commits
    first (else its rank row and this one's collide); runs are taken in name order, so two copies of
    several runs at once hold them in the same order (never a deadlock)."""
    ordered = sorted(((name, i) for i, (_, _, names) in enumerate(plan) for name in names))
    with dst.connect() as d:
        trans = d.begin()
        try:
            for name, i in ordered:
                with plan[i][1].connect() as s:
                    run, ranks, files = _run_rows(s, name)
                runs.run_metadata(run.metadata_json, run.name)
                find = _find_or_create_run(run)
                run_id = find(d)[0]
                if d.dialect.name == "postgresql":
                    run_id = bulk.hold_run(d, run_id, [r.global_rank for r in ranks.values()], find)
                present = runs.stored_files(d, run_id)
                todo = [f for f in files if (ranks[f.rank_id].global_rank, f.content_hash) not in present]
                if not todo:
                    continue
                _check_duplicates(d, run_id, name, todo, ranks, allow_dupes)
                rank_map = _map_ranks(d, run_id, name, {f.rank_id: ranks[f.rank_id] for f in todo})
                for f in todo:
                    d.execute(insert(SourceFile).values(**_file_values(f, run_id, rank_map[f.rank_id])))
        finally:
            trans.rollback()


def _file_values(f: Any, run_id: int, rank_id: int) -> dict[str, Any]:
    return dict(
        run_id=run_id, rank_id=rank_id, path=f.path, content_hash=f.content_hash, size_bytes=f.size_bytes,
        format=f.format, content_kind=f.content_kind, rows=f.rows, time_base_ns=f.time_base_ns,
        identity_origin=f.identity_origin, ingested_at=f.ingested_at, unread_json=f.unread_json,
    )


def _find_or_create_run(run: Any) -> Callable[[Connection], tuple[int, bool]]:
    new_run = runs.NewRun(**{c: getattr(run, c) for c in runs.NEW_RUN_COLUMNS})

    def conflict(stored: int, incoming: int) -> str:
        return (
            f"run {run.name!r} has world size {stored} in the destination but {incoming} in the source; "
            "they are different jobs: rename one (ingest it again with another --run) before merging"
        )

    def find_or_create(conn: Connection) -> tuple[int, bool]:
        return runs.find_or_create_run(conn, new_run, conflict)

    return find_or_create


def _copy_run(src: Engine, dst: Engine, name: str, allow_dupes: bool, progress: Progress | None) -> RunTransfer:
    with src.connect() as s:
        run, ranks, files = _run_rows(s, name)
        runs.run_metadata(run.metadata_json, run.name)  # the one metadata policy (runs.py), before any write
        find_or_create = _find_or_create_run(run)
        with bulk.run_scope(dst, find_or_create) as early_id, dst.begin() as d:
            run_id = bulk.hold_run(d, early_id, [r.global_rank for r in ranks.values()], find_or_create)
            existed = d.execute(select(Rank.id).where(Rank.run_id == run_id).limit(1)).first() is not None
            present = runs.stored_files(d, run_id)
            todo = [f for f in files if (ranks[f.rank_id].global_rank, f.content_hash) not in present]
            result = RunTransfer(name, "added" if existed else "created", skipped_files=len(files) - len(todo))
            if not todo:
                result.status = "present" if existed else "created"
                return result
            _check_duplicates(d, run_id, name, todo, ranks, allow_dupes)
            rank_map = _map_ranks(d, run_id, name, {f.rank_id: ranks[f.rank_id] for f in todo})
            names = _NameMap(s, d)
            try:
                _copy_files(s, d, run, run_id, files, todo, ranks, rank_map, names, result, progress)
            finally:
                names.close()
            result.files = len(todo)
            result.ranks = sorted({ranks[f.rank_id].global_rank for f in todo})
        result.note = timeline.analyse_after_write(dst, name, f"run {name!r} was copied")
        return result


def _check_duplicates(
    d: Connection, run_id: int, run_name: str, todo: list[Any], ranks: dict[int, Any], allow: bool
) -> None:
    """As at ingest: a rank that already has a different file of the same format and kind in the
    destination run is a conflict (two jobs named alike), unless several windows are allowed."""
    if allow:
        return

    runs.check_duplicate_kinds(
        d,
        run_id,
        run_name,
        [(f.path, ranks[f.rank_id].global_rank, f.format, f.content_kind) for f in todo],
        where=" in the destination",
        advice="these are different profiles of one rank: merge into another store, rename the run in one of them, "
        "or pass --allow-duplicate-ranks if they are several windows of the same rank",
    )


def _map_ranks(d: Connection, run_id: int, run_name: str, src_ranks: dict[int, Any]) -> dict[int, int]:
    """src rank id -> destination rank id (runs.rank_ids: existing ranks checked and filled, new ones created)."""

    def conflict(g: int, f: str, have: Any, new: Any) -> str:
        return (
            f"rank {g} of run {run_name!r} has {f} {have!r} in the destination but {new!r} in the "
            "source; they are different jobs: rename the run in one of the stores before merging"
        )

    facts = {r.global_rank: runs.RankFacts(**{f: getattr(r, f) for f in runs.RANK_FIELDS}) for r in src_ranks.values()}
    ids = runs.rank_ids(d, run_id, facts, conflict)
    return {sid: ids[r.global_rank] for sid, r in src_ranks.items()}


class _NameMap:
    """Source name id -> destination name id, interning the values in the destination on first use."""

    def __init__(self, s: Connection, d: Connection) -> None:
        self.s, self.d = s, d
        self.ids: dict[int, int] = {}
        #: "launch" and "origin" (SHAPE_TABLES) -> source id -> destination id
        self.shape_ids: dict[str, dict[int, int]] = {t: {} for t in SHAPE_TABLES}
        self.names_conn = bulk.names_connection(d)

    def ensure(self, src_ids: Iterable[int]) -> None:
        missing = sorted({i for i in src_ids if i not in self.ids})
        if not missing:
            return
        values: dict[int, str] = {}
        for i in range(0, len(missing), 500):
            chunk = missing[i : i + 500]
            values.update((int(a), b) for a, b in self.s.execute(select(Name.id, Name.value).where(Name.id.in_(chunk))))
        got = {v: i for i, v in bulk.intern_names(self.d, list(values.values()), self.names_conn)}
        for sid, v in values.items():
            self.ids[sid] = got[v]

    def ensure_shapes(self, table: str, src_ids: Iterable[int]) -> None:
        """The same for launch shapes or origins (``table``: "launch" or "origin"): ``shape_ids[table]``
        maps source to destination ids."""
        have = self.shape_ids[table]
        missing = sorted({i for i in src_ids if i not in have})
        if not missing:
            return
        t = Base.metadata.tables[table]
        shapes: dict[int, tuple[Any, ...]] = {}
        for i in range(0, len(missing), 500):
            q = select(t.c.id, *[t.c[c] for c in SHAPE_TABLES[table]]).where(t.c.id.in_(missing[i : i + 500]))
            shapes.update((int(r[0]), tuple(r[1:])) for r in self.s.execute(q))
        got = bulk.intern_shapes(self.d, table, list(shapes.values()), self.names_conn)
        for sid, shape in shapes.items():
            have[sid] = got[shape]

    def close(self) -> None:
        if self.names_conn is not None:
            self.names_conn.close()


def _copy_files(
    s: Connection,
    d: Connection,
    run: Any,
    run_id: int,
    files: list[Any],
    todo: list[Any],
    ranks: dict[int, Any],
    rank_map: dict[int, int],
    names: _NameMap,
    result: RunTransfer,
    progress: Progress | None,
) -> None:
    source_map: dict[int, int] = {}
    rules_map: dict[int, int] = {}
    rows = result.rows
    spans = Spans(d)
    for n, f in enumerate(todo, 1):
        res = d.execute(
            insert(SourceFile)
            .values(
                **_file_values(f, run_id, rank_map[f.rank_id]),
                rules_id=reclassify.copy_rules(s, d, f.rules_id, rules_map),
            )
            .returning(SourceFile.id)
        )
        source_map[f.id] = int(res.scalar_one())
        rows["activity"] = rows.get("activity", 0) + _stream(
            s, d, _ACT, ACTIVITY_COLS, f.id, ("name_id",), rank_map, source_map, names, spans
        )
        rows["counter"] = rows.get("counter", 0) + _stream(
            s, d, _CTR, COUNTER_COLS, f.id, ("kernel_name_id", "counter_name_id"), rank_map, source_map, names,
            spans,
        )
        if progress:
            progress(run.name, n, len(todo))
    spans.write()
    # steps of the copied files
    ids = list(source_map)
    steps: list[tuple[int, ...]] = []
    for i in range(0, len(ids), 500):
        q = select(Step.rank_id, Step.step, Step.source_id, Step.start_ns, Step.duration_ns)
        steps += [tuple(r) for r in s.execute(q.where(Step.source_id.in_(ids[i : i + 500])))]
    bulk.add_steps(d, [(rank_map[r[0]], r[1], source_map[r[2]], r[3], r[4]) for r in steps])
    rows["step"] = len(steps)
    rows["summary"] = _copy_summaries(s, d, run, files, todo, ranks, rank_map, names)
    rows["collective_call"] = _copy_timelines(s, d, run_id, files, todo, ranks, rank_map)
    timeline.analyse_in_write(d, run.name)  # (PostgreSQL: after the commit, _copy_run)


def _copy_timelines(
    s: Connection,
    d: Connection,
    run_id: int,
    files: list[Any],
    todo: list[Any],
    ranks: dict[int, Any],
    rank_map: dict[int, int],
) -> int:
    """The collective timelines of the copied ranks: a rank whose files are all copied brings its
    stored timeline as it is; a rank with some files in the destination already gets the new files'
    timelines computed from their activity rows (as ingest does), merged there (timeline.save_timelines).
    Returns the number of collective calls copied."""
    todo_by_rank: dict[int, list[Any]] = {}
    for f in todo:
        todo_by_rank.setdefault(f.rank_id, []).append(f)
    all_by_rank: dict[int, int] = {}
    for f in files:
        all_by_rank[f.rank_id] = all_by_rank.get(f.rank_id, 0) + 1
    whole = [rid for rid, fs in todo_by_rank.items() if len(fs) == all_by_rank[rid]]
    stored = timeline.load_timelines(s, {rid: ranks[rid].global_rank for rid in whole})
    new: dict[int, list[RankTimeline]] = {rank_map[rid]: [t] for rid, t in stored.items()}
    for rid, fs in todo_by_rank.items():
        if rid in whole:
            continue
        for f in fs:
            t, _own = _from_activity(s, f)
            if t is not None:
                new.setdefault(rank_map[rid], []).append(t)
    timeline.save_timelines(d, run_id, new)
    return sum(len(c) for ts in new.values() for t in ts for c in t.calls.values())


def _from_activity(s: Connection, f: Any) -> tuple[RankTimeline | None, dict[tuple[int, str], int]]:
    """One source file's collective timeline and self time per (name id, kind), from its activity rows
    (for a transfer that cannot copy them as they are)."""
    b = TimelineBuilder(int(f.time_base_ns or 0))
    nested = SelfTotals()
    _o = Origin.__table__
    frm, cond = fact_spans.scoped(s, _ACT, sources=[f.id])
    q = (
        select(_ACT.c.kind, Name.value, _ACT.c.start_ns, _ACT.c.duration_ns, _ACT.c.category, _o.c.device,
               _o.c.stream, _ACT.c.correlation, _o.c.pid, _o.c.tid, _ACT.c.args, _ACT.c.name_id)
        .select_from(frm.join(Name.__table__, Name.__table__.c.id == _ACT.c.name_id)
                     .join(_o, _o.c.id == _ACT.c.origin_id))
        .where(*cond)
        .order_by(_ACT.c.id)
    )
    for r in s.execute(q.execution_options(yield_per=BATCH)):
        a = ActivityRecord(r[0], r[1], int(r[2]), int(r[3]), r[4], r[5], r[6], r[7], r[8], r[9], args=r[10])
        b.add(a)
        if a.kind in NESTED_KINDS:
            nested.add((a.kind, a.pid, a.tid, a.device), a.start_ns, a.duration_ns, (int(r[11]), a.kind))
    own = {k: v for k, v in nested.totals().items() if isinstance(k, tuple)}
    return b.file_timeline(), own


def _stream(
    s: Connection,
    d: Connection,
    table: Any,
    cols: tuple[str, ...],
    src_source_id: int,
    name_cols: tuple[str, ...],
    rank_map: dict[int, int],
    source_map: dict[int, int],
    names: _NameMap,
    spans: Spans,
) -> int:
    """Copy one source file's rows of ``table`` in batches, ids remapped; returns the row count."""
    ri, si = cols.index("rank_id"), cols.index("source_id")
    ni = [cols.index(c) for c in name_cols]
    # (launch shapes and origins: their columns' positions)
    shaped = [(cols.index(f"{t}_id"), t) for t in SHAPE_TABLES if f"{t}_id" in cols]
    frm, cond = fact_spans.scoped(s, table, sources=[src_source_id])
    q = select(*[table.c[c] for c in cols]).select_from(frm).where(*cond).order_by(table.c.id)
    total = 0
    result = s.execute(q.execution_options(yield_per=BATCH))
    for part in result.partitions():
        names.ensure({r[i] for r in part for i in ni})
        for i, t in shaped:
            names.ensure_shapes(t, {r[i] for r in part})
        m = names.ids
        shape_maps = [(i, names.shape_ids[t]) for i, t in shaped]
        out = []
        for r in part:
            row = list(r)
            row[ri] = rank_map[row[ri]]
            row[si] = source_map[row[si]]
            for i in ni:
                row[i] = m[row[i]]
            for i, sm in shape_maps:
                row[i] = sm[row[i]]
            out.append(tuple(row))
        bulk.insert_rows(d, table.name, cols, out)
        spans.added_rows(table.name, out)  # (cols start with rank_id, source_id)
        total += len(out)
    return total


def _copy_summaries(
    s: Connection,
    d: Connection,
    run: Any,
    files: list[Any],
    todo: list[Any],
    ranks: dict[int, Any],
    rank_map: dict[int, int],
    names: _NameMap,
) -> int:
    """Per rank: when all of its source files are copied, its summary rows are added as they are;
    when some were in the destination already, the new files' share is summed from their activity
    rows (a file holding per-kernel aggregates only, such as Metrix, has no rows to sum from: that
    case is refused rather than guessed)."""
    out: list[tuple[Any, ...]] = []
    todo_by_rank: dict[int, list[Any]] = {}
    for f in todo:
        todo_by_rank.setdefault(f.rank_id, []).append(f)
    all_by_rank: dict[int, int] = {}
    for f in files:
        all_by_rank[f.rank_id] = all_by_rank.get(f.rank_id, 0) + 1
    S = Summary.__table__
    for rid, fs in sorted(todo_by_rank.items()):
        if len(fs) == all_by_rank[rid]:
            q = select(S.c.name_id, S.c.kind, S.c.category, S.c.calls, S.c.total_ns, S.c.min_ns, S.c.max_ns,
                       S.c.sum_sq_ns, S.c.self_ns).where(S.c.rank_id == rid)
            part: list[tuple[Any, ...]] = [tuple(r) for r in s.execute(q).all()]
        else:
            ids = [f.id for f in fs]
            counted, counters = _rows_per_file(s, _ACT, ids), _rows_per_file(s, _CTR, ids)
            for f in fs:
                if f.rows > counted.get(f.id, 0) + counters.get(f.id, 0):
                    raise StoreError(
                        f"run {run.name!r}, rank {ranks[rid].global_rank}: the destination already has some of this "
                        f"rank's files, and {f.path} holds per-kernel aggregates whose share of the rank's summary "
                        "cannot be told apart; merge into a store without this run, or ingest the file there directly"
                    )
            dur = _ACT.c.duration_ns
            frm, cond = fact_spans.scoped(s, _ACT, sources=ids)
            q = (
                select(_ACT.c.name_id, _ACT.c.kind, func.max(_ACT.c.category), func.count(), func.sum(dur),
                       func.min(dur), func.max(dur), func.sum(cast(dur, Float) * dur))
                .select_from(frm)
                .where(*cond)
                .group_by(_ACT.c.name_id, _ACT.c.kind)
            )
            own: dict[tuple[int, str], int] = {}
            for f in fs:
                for k, v in _from_activity(s, f)[1].items():
                    own[k] = own.get(k, 0) + v
            part = [(*r, own.get((int(r[0]), r[1]), int(r[4]))) for r in s.execute(q).all()]
        names.ensure(r[0] for r in part)
        out += [(rank_map[rid], names.ids[r[0]], r[1], r[2], int(r[3]), int(r[4]), int(r[5]), int(r[6]), float(r[7]),
                 None if r[8] is None else int(r[8]))
                for r in part]
    bulk.add_summaries(d, out)
    bulk.check_summed(d, {r[0] for r in out})
    return len(out)


def _rows_per_file(s: Connection, table: Any, ids: list[int]) -> dict[int, int]:
    """Source file id -> its rows in the fact ``table`` (files without rows are absent)."""
    frm, cond = fact_spans.scoped(s, table, sources=ids)
    counts = select(table.c.source_id, func.count()).select_from(frm).where(*cond).group_by(table.c.source_id)
    return {int(sid): int(n) for sid, n in s.execute(counts).all()}
