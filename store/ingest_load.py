"""Phase 2 of ``ingest.ingest_paths``: the store, in one transaction. Creates the run and ranks and a
source_file row per new file, sends the workers the store's ids (``Parsers.send_ids``: they forked
before, ``ingest._early_workers``), inserts their rows as they come (or parses the files here, for a
small input), merges each file's summaries, steps and timelines, stores the run's analysis, and
commits once."""

from __future__ import annotations

import gc
import json
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from sqlalchemy import Connection, Engine, bindparam, select, update

from . import bulk, classify, collectives, ingest_workers, reclassify, runs, timeline, validate
from .db import display_url, load_target, resolve_url
from .errors import InputError, ProfdbError
from .identity import Identity, IdentityFlags, RankPlan, missing_ranks
from .ingest import FileResult, IngestReport, task_of
from .inputs import ALGORITHM, ALGORITHMS, InputFile, Progress, algorithm_of, digest_of
from .manifest import RankEnd, rank_end
from .models import SourceFile
from .readers import others
from .scope import add_file_unread, copies_across_ranks, copies_notes, unread_notes

if TYPE_CHECKING:
    from pathlib import Path

    from .collectives import RankTimeline


def _new_run(name: str, plan: RankPlan, inputs: list[InputFile]) -> runs.NewRun:
    manifest = next((i.claim.identity.manifest for i in inputs if i.claim and i.claim.identity.manifest), None)
    return runs.NewRun(
        name=name,
        created_at=runs.now(),
        world_size=plan.world_size,
        launcher=manifest.launcher if manifest else None,
        command=json.dumps(manifest.command) if manifest and manifest.command else None,
    )


def _world_conflict(name: str, inputs: list[InputFile]) -> runs.WorldConflict:
    def message(stored: int, incoming: int) -> str:
        saying = [str(i.path) for i in inputs if i.claim and i.claim.identity.world_size == incoming]
        which = f" ({saying[0]}{f' and {len(saying) - 1} more' if len(saying) > 1 else ''})" if saying else ""
        return (
            f"run {name!r} has world size {stored} but these inputs say {incoming}{which}; "
            "they come from another job: pick another name with --run"
        )

    return message


def _rank_conflict(name: str, plan: RankPlan) -> runs.RankConflict:
    def message(g: int, f: str, have: Any, new: Any) -> str:
        return (
            f"rank {g} of run {name!r} is stored with {f} {have!r}, but the new input says {new!r} "
            f"({plan.ranks[g].origin}); fix the input, override with --{f.replace('_', '-')}, or use another --run"
        )

    return message


def _facts(ident: Identity) -> runs.RankFacts:
    end = rank_end(ident.manifest) if ident.manifest else RankEnd()
    # (the fields by name: dataclasses.asdict deep-copies each value, ~20 us a rank)
    return runs.RankFacts(
        ident.hostname, ident.local_rank, ident.node_rank, ident.pid, ident.device, exit_code=end.exit_code,
        signal=end.signal, started_at=end.started_at, ended_at=end.ended_at, end_status=end.end_status,
    )


def load(
    inputs: list[InputFile],
    unknown: list[Path],
    plan: RankPlan,
    run_name: str,
    run_derived: bool,
    db: str | None,
    flags: IdentityFlags,
    progress: Progress | None,
    parsers: ingest_workers.Parsers | None,
) -> IngestReport:
    """Phase 2 of ``ingest.ingest_paths`` over what phase 1 found; ``parsers``: the workers already
    forked (None: parse the files in this process)."""
    gc.freeze()  # (the store's modules, imported since ``quiet_gc`` froze the rest: kept out of collections too)
    report = IngestReport(
        run=run_name,
        run_derived=run_derived,
        db=display_url(resolve_url(db)),
        unknown_files=[str(u) for u in unknown],
        unknown_advice=others.summary(unknown),
        world_size=plan.world_size,
    )
    report.notes = list(
        dict.fromkeys(str(i.info.metadata["rank_by"]["note"]) for i in inputs if "rank_by" in i.info.metadata)
    )
    named: dict[int, str] = {}  # source_file id -> input path: a refused row's file is named
    with bulk.db_errors_explained(report.db, [str(i.path) for i in inputs], named):
        with load_target(db) as target:
            _load(
                target.engine, run_name, inputs, plan, report, progress, flags.allow_duplicate_ranks, target.created,
                named, parsers,
            )
    return report


def _load(
    engine: Engine,
    run_name: str,
    inputs: list[InputFile],
    plan: RankPlan,
    report: IngestReport,
    progress: Progress | None,
    allow_dupes: bool = False,
    new_store: bool = False,
    named: dict[int, str] | None = None,
    parsers: ingest_workers.Parsers | None = None,
) -> None:
    total = sum(i.size for i in inputs)
    done = 0
    if progress:
        progress("start", "", 0, total)
    new_run = _new_run(run_name, plan, inputs)

    def find_or_create(c: Connection) -> tuple[int, bool]:
        return runs.find_or_create_run(c, new_run, _world_conflict(run_name, inputs))

    # PostgreSQL: the run is made and committed first, then held with this ingest's ranks (bulk.hold_run)
    with bulk.run_scope(engine, find_or_create) as early_id, bulk.load_transaction(
        engine, bulk_load=total >= bulk.DEFER_INDEXES_MIN_BYTES, new_store=new_store
    ) as conn:
        run_id = bulk.hold_run(conn, early_id, plan.ranks, find_or_create)
        present = runs.stored_files(conn, run_id)
        stored = _already_stored(present, inputs)
        todo = [i for i, there in zip(inputs, stored) if i.claim and not there]
        for i, there in zip(inputs, stored):
            if i.claim and there:
                assert i.claim is not None
                report.files.append(
                    FileResult(str(i.path), i.info.format, i.info.kind, i.claim.identity.global_rank, 0, skipped=True)
                )
        todo_ranks = {t.claim.identity.global_rank for t in todo if t.claim}  # (once: per rank, it was ranks x files)
        todo_plan = RankPlan(
            ranks={g: ident for g, ident in plan.ranks.items() if g in todo_ranks},
            world_size=plan.world_size,
        )
        _check_store_duplicates(conn, run_id, run_name, todo, allow_dupes)
        created: set[int] = set()
        rank_ids = runs.rank_ids(
            conn, run_id, {g: _facts(i) for g, i in todo_plan.ranks.items()}, _rank_conflict(run_name, todo_plan),
            created,
        )
        fresh = {rid: g for g, rid in rank_ids.items() if rid in created}  # (nothing stored for them yet)
        rules = reclassify.rules_id(conn, classify.active()) if todo else None
        recreate = bulk.defer_indexes(conn, sum(i.size for i in todo))
        writer = bulk.Writer(conn)
        sources = _add_sources(conn, run_id, todo, rank_ids, rules)
        if named is not None:
            named.update((source_id, str(inp.path)) for inp, _rank_id, source_id in sources)
        # (written in one statement once every file is read): its rows, and the events not read
        row_counts: list[dict[str, Any]] = []
        unread: dict[str, tuple[int, list[str]]] = {}  # what -> events, files
        # each source's result, in ``sources`` order whatever order the files are done in
        results: list[FileResult | None] = [None] * len(sources)
        empty: dict[int, str] = {}
        # the bytes read of each file being parsed (workers: ``RowsMsg.read``), so that the bar moves while
        # one large file is: before, a 600 MB trace showed 0% for its whole parse
        reading: dict[int, int] = {}
        read_now = 0

        def file_done(k: int, parsed: ingest_workers.Parsed) -> None:
            """Source ``k`` is read and merged (workers: as each file is, so the progress bar moves
            during the parse, not at its end)."""
            nonlocal done, read_now
            inp, _rank_id, source_id = sources[k]
            assert inp.claim is not None
            counts = parsed.counts
            rows = sum(counts.values())
            # (what the reader did not read: known at inspect, or counted as it read)
            left = dict(inp.info.unread)
            for what, n in (parsed.unread or {}).items():
                left[what] = left.get(what, 0) + n
            row_counts.append({"sid": source_id, "n": rows, "u": json.dumps(left, sort_keys=True) if left else None})
            add_file_unread(unread, str(inp.path), left)
            for kind, v in counts.items():
                report.rows_by_kind[kind] = report.rows_by_kind.get(kind, 0) + v
            results[k] = FileResult(str(inp.path), inp.info.format, inp.info.kind, inp.claim.identity.global_rank,
                                    rows)
            if rows == 0:
                empty[k] = f"{inp.path}: no rows ingested ({why_empty(inp)})"
            done += inp.size
            read_now -= reading.pop(k, 0)  # (its bytes are in ``done`` now)
            if progress:
                progress("file", str(inp.path), done + read_now, total)

        def file_read(k: int, read: int) -> None:
            """Source ``k``'s worker has read ``read`` bytes of it: "read" progress, the files done and the
            bytes read of those being parsed."""
            nonlocal read_now
            read_now += read - reading.get(k, 0)
            reading[k] = read
            if progress:
                progress("read", str(sources[k][0].path), done + read_now, total)

        files_left = Counter(rank_id for _inp, rank_id, _sid in sources)

        ready: dict[int, list[RankTimeline]] = {}  # complete ranks' timelines, not stored yet
        ready_calls = 0
        # the calls stored, as columns (~65 bytes a call, at most KEEP_CALLS): the run's analysis matches
        # them instead of reading them back when they are all the run has (timeline.analyze_run)
        kept = collectives.CallColumns(collectives.KEEP_CALLS)

        def save_ready() -> None:
            nonlocal ready_calls
            timeline.save_timelines(conn, run_id, ready, fresh, kept)
            ready.clear()
            ready_calls = 0

        def merged(rank_id: int) -> None:
            """A file of ``rank_id`` is merged: when it was the rank's last, its timelines are stored
            soon and let go, with other complete ranks' once they hold ``timeline.SAVE_CALLS`` calls (a
            run's calls grow with its input: holding every rank's until the end was ~85 MB of the
            ingest's peak at 4x the benchmark's 1M dispatches)."""
            nonlocal ready_calls
            files_left[rank_id] -= 1
            if files_left[rank_id]:
                return
            writer.rank_done(rank_id)  # (its summary rows: written soon and let go too)
            if rank_id in writer.timelines:
                ready[rank_id] = parts = writer.timelines.pop(rank_id)
                ready_calls += sum(len(calls) for t in parts for calls in t.calls.values()) + 1  # (+ its row)
                if ready_calls >= timeline.SAVE_CALLS:
                    save_ready()

        with _rank_files_named(sources, rank_ids, fresh):
            if parsers is not None:
                _parse_in_workers(writer, inputs, sources, parsers, merged, file_done, file_read)
            cats: dict[tuple[str, str], str] = {}
            for index, (inp, rank_id, source_id) in enumerate(sources if parsers is None else []):
                try:
                    parsed = ingest_workers.parse_here(
                        task_of(index, inp, rank_id, source_id), writer.answer_names, writer.insert, cats
                    )
                except Exception as e:
                    err = _read_error(inp, e)
                    if err is e:
                        raise
                    raise err from e
                _fits(inp, parsed)
                writer.merge(rank_id, source_id, parsed)
                merged(rank_id)
                file_done(index, parsed)
            report.files += [r for r in results if r is not None]  # (each source's: file_done was called for all)
            report.empty += [empty[k] for k in sorted(empty)]
            if row_counts:
                conn.execute(update(SourceFile).where(SourceFile.id == bindparam("sid"))
                             .values(rows=bindparam("n"), unread_json=bindparam("u")), row_counts)
            report.notes += [f"note: {n}" for n in unread_notes(unread)]
            save_ready()
            writer.finish()
            copies = copies_across_ranks(conn, run_id)  # (this load's files and those stored before)
            report.notes += [f"note: {n}" for n in copies_notes(run_name, copies)]
            bulk.check_summed(conn, set(rank_ids.values()) - set(fresh))  # (stored rows added to in SQL)
        assert not writer.timelines  # (each rank's were stored as its last file was merged: merged())
        bulk.rebuild_indexes(conn, recreate)  # (temporary storage is in files meanwhile: bulk.load_transaction)
        if progress:
            progress("analysis", run_name, done, total)
        scope = timeline.analyse_in_write(conn, run_name, kept)  # (may read ix_collective_call_match: after recreate)
        report.ranks, report.world_size = runs.ranks_of(conn, run_id)
        report.missing_ranks = missing_ranks([r[0] for r in report.ranks], report.world_size)
        report.ended_badly = [f"rank {r.global_rank} {r.end()}" for r in scope.ended_abnormally()]
    note = timeline.analyse_after_write(engine, run_name, f"its files were committed to run {run_name!r}", kept)
    if note:
        report.notes.append(note)


def _fits(inp: InputFile, parsed: ingest_workers.Parsed) -> None:
    """The file's timeline, as a worker made it, fits the store (``validate.spanned``)."""
    if parsed.timeline is not None:
        validate.spanned(inp.path, parsed.timeline.first_ns, parsed.timeline.last_ns)


@contextmanager
def _rank_files_named(
    sources: list[tuple[InputFile, int, int]], rank_ids: dict[int, int], fresh: dict[int, int]
) -> Iterator[None]:
    """A rank's figure added up over its files past 64 bits (``validate.PastInt64``, raised where
    the files meet) is reported naming them (``sources``: (input, rank id, source id); ``rank_ids``:
    global rank -> rank id; ``fresh``: the ranks this load created)."""
    try:
        yield
    except validate.PastInt64 as e:
        rank = next(g for g, rid in rank_ids.items() if rid == e.rank_id)
        files = [inp.path for inp, rid, _sid in sources if rid == e.rank_id]
        raise validate.past_int64(e, files, rank, e.rank_id not in fresh) from None


def _already_stored(present: dict[tuple[int, str], int], inputs: list[InputFile]) -> list[bool]:
    """For each input, whether its rank already stores its content in the run (``present``: (global rank, content
    hash) -> size, ``runs.stored_files``): by their digest, or, for a file stored with a digest of
    another algorithm (sha256, before migration 0013) and of the input's size, by that algorithm's
    digest of the input, computed here (only for inputs of such a size: usually none)."""
    other: dict[tuple[int, int], set[str]] = {}  # (rank, size) -> algorithms of stored files not blake3
    for (g, digest), size in present.items():
        algorithm = algorithm_of(digest)
        if algorithm != ALGORITHM:
            other.setdefault((g, size), set()).add(algorithm)
    out: list[bool] = []
    for i in inputs:
        g = i.claim.identity.global_rank if i.claim else -1
        out.append((g, i.digest) in present or any(
            (g, digest_of(i.path, a)) in present for a in sorted(other.get((g, i.size), ())) if a in ALGORITHMS
        ))
    return out


def _add_sources(
    conn: Connection, run_id: int, todo: list[InputFile], rank_ids: dict[int, int], rules: int | None
) -> list[tuple[InputFile, int, int]]:
    """A source_file row for every input to read, in one statement (a run of 512 files spent ~0.5 s
    CPU in one compiled INSERT per file); returns (input, rank id, source id) in ``todo`` order. The
    ids are read back by the rows' unique key (rank, content hash): inputs were made unique by it, and
    files already stored were left out of ``todo``."""
    rows: list[dict[str, object]] = []
    keys: list[tuple[int, str]] = []
    now = runs.now()  # (one ingest, one transaction: one time for its files)
    for inp in todo:
        assert inp.claim is not None
        ident: Identity = inp.claim.identity
        keys.append((rank_ids[ident.global_rank], inp.digest))
        rows.append(dict(
            run_id=run_id,
            rank_id=keys[-1][0],
            path=inp.real,
            content_hash=inp.digest,
            size_bytes=inp.size,
            format=inp.info.format,
            content_kind=inp.info.kind,
            rows=0,
            time_base_ns=inp.info.time_base_ns,
            identity_origin=ident.origin,
            ingested_at=now,
            rules_id=rules,
        ))
    if not rows:
        return []
    bulk.insert_dicts(conn, SourceFile.__table__, rows)
    ids = {
        (int(rank_id), str(sha)): int(sid)
        for sid, rank_id, sha in conn.execute(
            select(SourceFile.id, SourceFile.rank_id, SourceFile.content_hash).where(SourceFile.run_id == run_id)
        )
    }
    return [(inp, key[0], ids[key]) for inp, key in zip(todo, keys)]


def why_empty(inp: InputFile) -> str:
    """Why ``inp`` produced no rows: what its reader found (``SourceInfo.metadata["why_empty"]``), else
    what the format holds that profdb reads."""
    why = inp.info.metadata.get("why_empty") or getattr(inp.reader, "EMPTY_WHY", None)
    if why:
        return str(why)
    section = f" (rank section {inp.section})" if inp.section is not None else ""
    return (
        f"its {inp.info.format} {inp.info.kind or 'content'}{section} holds no events profdb reads "
        f"(see `profdb formats`); it is recorded as a source with 0 rows"
    )


def _read_error(inp: InputFile, e: BaseException) -> BaseException:
    """What a failure while reading ``inp`` becomes: profdb's own errors as they are, a reader's
    unexpected ValueError & co. an InputError naming the file, anything else unchanged."""
    if isinstance(e, ProfdbError):
        return e
    if isinstance(e, validate.READ_FAILURES):
        return InputError(
            f"{inp.path}: cannot read it as {inp.info.format} ({type(e).__name__}: {e}); "
            "the file is damaged or of an unsupported variant: re-copy it or pass --format"
        )
    return e


T = TypeVar("T")


class InOrderPerRank(Generic[T]):
    """Items done in any order (files parsed by workers), handed out in their order within each rank:
    item ``i`` of rank ``ranks[i]`` comes out once every earlier item of that rank has."""

    def __init__(self, ranks: list[int]) -> None:
        self.rank = ranks
        self.queues: dict[int, list[int]] = {}  # per rank: its items' indexes, in order
        for i, r in enumerate(ranks):
            self.queues.setdefault(r, []).append(i)
        self.heads = dict.fromkeys(self.queues, 0)
        self.pending: dict[int, T] = {}

    def done(self, index: int, item: T) -> list[tuple[int, T]]:
        """Item ``index`` is done: the items (index, item) now ready, in order."""
        self.pending[index] = item
        r = self.rank[index]
        queue, out = self.queues[r], []
        while self.heads[r] < len(queue) and queue[self.heads[r]] in self.pending:
            i = queue[self.heads[r]]
            self.heads[r] += 1
            out.append((i, self.pending.pop(i)))
        return out


def _parse_in_workers(
    writer: bulk.Writer,
    inputs: list[InputFile],
    sources: list[tuple[InputFile, int, int]],
    parsers: ingest_workers.Parsers,
    merged: Callable[[int], None],
    file_done: Callable[[int, ingest_workers.Parsed], None],
    file_read: Callable[[int, int], None],
) -> None:
    """Parse every source in the worker processes (forked over ``inputs``, whose numbers are their
    tasks'); this process inserts their rows (see ingest_workers). The workers learn here which inputs
    to read and their ids in the store (``Parsers.send_ids``; the others, stored already, they leave).
    Each file's summaries, steps and timeline are merged into ``writer`` as soon as its rank's files
    before it (in ``sources`` order) are, then ``merged(rank_id)`` and ``file_done(its place in sources,
    its row counts)`` are called (until session 42 the counts were returned at the end, so a progress
    bar sat at its start for the whole parse). Per rank, not over the whole run: the workers take the largest
    files first, so the run's first file in ``sources`` order may finish late, and every timeline
    parsed meanwhile waited for it (at 4x the benchmark's long-counters input, the kernel traces of 25
    ranks: the ingest's peak grew 104 -> 158 MB). A rank's figures depend only on its own files, merged
    in the same order as before. ``file_read(its place in sources, bytes)`` hears how far a file's
    worker has read it, with each batch of its rows."""
    number = {id(inp): i for i, inp in enumerate(inputs)}
    ids: list[tuple[int, int] | None] = [None] * len(inputs)
    at: dict[int, int] = {}  # task (input number) -> its place in sources
    for k, (inp, rank_id, source_id) in enumerate(sources):
        ids[number[id(inp)]] = (rank_id, source_id)
        at[number[id(inp)]] = k
    order = InOrderPerRank[ingest_workers.Parsed]([rank_id for _inp, rank_id, _sid in sources])
    files = 0

    def merge_ready(index: int, parsed: ingest_workers.Parsed) -> None:
        nonlocal files
        for i, p in order.done(index, parsed):
            rank_id = sources[i][1]
            _fits(sources[i][0], p)
            writer.merge(rank_id, sources[i][2], p)
            merged(rank_id)
            file_done(i, p)
            files += 1

    parsers.send_ids(ids)
    try:
        for msg in parsers.messages(writer.answer_names):
            if isinstance(msg, ingest_workers.RowsMsg):
                writer.insert(msg.table, msg.rows)
                if msg.read:
                    file_read(at[msg.task], msg.read)
            else:
                merge_ready(at[msg.task], msg.parsed)
    except ingest_workers.WorkerError as e:
        if isinstance(e.error, ingest_workers.WorkerDied):
            where, which = "", "that file alone"
            if 0 <= e.index < len(inputs) and 0 <= e.last < len(inputs):
                where = (f" while reading {e.files} small files together ({inputs[e.index].path} ... "
                         f"{inputs[e.last].path})")
                which = "those files"
            elif 0 <= e.index < len(inputs):
                where = f" while parsing {inputs[e.index].path}"
            raise InputError(
                f"{e.error}{where}; nothing was written (the ingest was rolled back): check memory limits "
                f"(dmesg, the job's log), or ingest {which} with PROFDB_INGEST_WORKERS=0 to see the error"
            ) from None
        if 0 <= e.index < len(inputs):
            err = _read_error(inputs[e.index], e.error)
            if err is e.error and not isinstance(err, ProfdbError):
                raise RuntimeError(f"{inputs[e.index].path}: {e.error!r}\n{e.trace}") from e.error
            raise err from e.error
        raise RuntimeError(f"{e.error}\n{e.trace}") from e.error
    assert files == len(sources)


def _check_store_duplicates(conn: Connection, run_id: int, run_name: str, todo: list[InputFile], allow: bool) -> None:
    """A rank already holding a different file of the same format and kind in this run is a conflict."""
    if allow:
        return
    runs.check_duplicate_kinds(
        conn,
        run_id,
        run_name,
        [(str(i.path), i.claim.identity.global_rank, i.info.format, i.info.kind) for i in todo if i.claim],
        advice="ingest this one into another run (--run NAME), or pass --allow-duplicate-ranks if it is another "
        "window or process of the same rank",
    )
