"""The run and rank catalog: the one place that creates, finds, lists, tags and merges runs and
their ranks. Ingest and transfer create runs and ranks here; questions resolve a run once in scope.py
(``resolve_run`` -> ``RunScope``) and take the scope; compare finds and tags runs here.

Run metadata (``run.metadata_json``, the tags ``profdb tag`` sets) has one policy everywhere
(compare, trend, report, transfer, tag): it is empty (NULL) or a JSON object. Anything else was
written by hand and is an error naming the run and saying how to fix it (``run_metadata``); nothing
falls back to a default or keeps one side silently. Merging the same run from two stores
(``profdb merge``/``export``) unites the keys; where both set one, the destination's value stays.

A run's world size and a rank's hostname/local_rank are facts of the job: a load that says
otherwise than the store is refused (the caller words the message: ingest names its flags, transfer
its stores), never overwritten; unknown facts (NULL) are filled in."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import Connection, func, select, text, update

from . import bulk
from .collectives import ClockOffset
from .errors import QueryError, RankIdentityError
from .identity import missing_ranks, rank_ranges, rank_spans, span_text
from .manifest import ABNORMAL, RankEnd, describe_end
from .models import HostClock, Rank, Run, SourceFile
from .scope import LOADED, LOADING, RunScope, resolve_run
from .units import fmt_ns

_run = Run.__table__
_rank = Rank.__table__

#: the runs readers see (scope.LOADED: those with committed ranks), in the listings' SELECTs on ``run``
_loaded = text(LOADED)

Table = tuple[list[str], list[tuple[Any, ...]]]


def now() -> datetime:
    """A run's or file's timestamp: UTC, stored without a zone."""
    return datetime.now(timezone.utc).replace(tzinfo=None)


# ---------------------------------------------------------------------------------------------
# metadata: the one policy


def run_metadata(text: str | None, run: str) -> dict[str, Any]:
    """A run's metadata as a dict ({} when there is none). Text that is not a JSON object is an error
    (QueryError) naming the run and the two ways to fix it."""
    if not text:
        return {}
    fix = (
        f"fix it with `profdb sql --write \"UPDATE run SET metadata_json = NULL WHERE name = '{run}'\"`, "
        "then set its tags again with `profdb tag`"
    )
    try:
        value = json.loads(text)
    except ValueError as e:
        raise QueryError(f"run {run!r} has metadata that is not JSON ({e}); {fix}") from e
    if not isinstance(value, dict):
        raise QueryError(f"run {run!r} has metadata that is not a JSON object; {fix}")
    return value


def dump_metadata(meta: Mapping[str, Any]) -> str | None:
    return json.dumps(dict(meta), sort_keys=True) if meta else None


def merge_metadata(have: str | None, new: str | None, run: str) -> str | None:
    """The same run's metadata from two stores: the keys of both, ``have``'s value where both set one."""
    a, b = run_metadata(have, run), run_metadata(new, run)
    if not have:
        return new
    return dump_metadata({**b, **a})


@dataclass(frozen=True)
class RunInfo:
    id: int
    name: str
    created_at: datetime
    world_size: int | None
    metadata: dict[str, Any]


@dataclass(frozen=True)
class RunDetails:
    """The descriptive columns of one run (for the report's header)."""

    created_at: datetime
    launcher: str | None
    command: str | None
    metadata: dict[str, Any]


def run_details(conn: Connection, scope: RunScope) -> RunDetails:
    r = conn.execute(
        select(_run.c.created_at, _run.c.launcher, _run.c.command, _run.c.metadata_json).where(_run.c.id == scope.id)
    ).one()
    return RunDetails(r.created_at, r.launcher, r.command, run_metadata(r.metadata_json, scope.name))


def all_runs(conn: Connection) -> list[RunInfo]:
    """Every run with data, oldest first (by created_at, then id)."""
    rows = conn.execute(
        select(_run.c.id, _run.c.name, _run.c.created_at, _run.c.world_size, _run.c.metadata_json)
        .where(_loaded)
        .order_by(_run.c.created_at, _run.c.id)
    ).all()
    return [RunInfo(r.id, r.name, r.created_at, r.world_size, run_metadata(r.metadata_json, r.name)) for r in rows]


def find_run(conn: Connection, runs: Sequence[RunInfo], name: str | None) -> RunInfo:
    """The run named ``name`` (or with that id), or the newest run when None."""
    scope = resolve_run(conn, name)
    return next(r for r in runs if r.id == scope.id)


def parse_filters(items: Iterable[str]) -> dict[str, str]:
    """``["branch=main", "gpu=mi300"]`` -> ``{"branch": "main", "gpu": "mi300"}``."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise QueryError(f"{item!r} is not KEY=VALUE (e.g. branch=main)")
        out[key.strip()] = value
    return out


def matches(run: RunInfo, where: dict[str, str]) -> bool:
    """True when the run's metadata has every key with that value (compared as text)."""
    for k, v in where.items():
        if k not in run.metadata:
            return False
        have = run.metadata[k]
        text = have if isinstance(have, str) else json.dumps(have)
        if text != v:
            return False
    return True


def tag_run(conn: Connection, run: str, values: dict[str, str], remove: Sequence[str] = ()) -> dict[str, Any]:
    """Set (and remove) keys of a run's metadata (run.metadata_json); returns the new metadata."""
    info = find_run(conn, all_runs(conn), run)
    meta = dict(info.metadata)
    for k in remove:
        if k not in meta:
            raise QueryError(f"run {info.name!r} has no tag {k!r}; its tags: {', '.join(sorted(meta)) or 'none'}")
        del meta[k]
    meta.update(values)
    conn.execute(update(Run).where(Run.id == info.id).values(metadata_json=dump_metadata(meta)))
    return meta


def run_names(conn: Connection) -> list[str]:
    """Every run's name, oldest first."""
    return list(conn.execute(select(Run.name).where(_loaded).order_by(Run.created_at, Run.id)).scalars())


# ---------------------------------------------------------------------------------------------
# listing (`profdb runs`, `profdb ranks`)


def _fmt_missing(missing: list[int]) -> str:
    """Missing ranks as ranges: ``126 (2-127)``, or the list when it is short (``1, 3``)."""
    if not missing:
        return ""
    text = rank_ranges(missing)
    return text if len(missing) <= 3 else f"{len(missing)} ({text})"


def _fmt_ended(ends: list[tuple[int, str]]) -> str:
    """``killed: 1; failed: 2, 5``: the ranks whose command did not end well, by how it ended."""
    by: dict[str, list[int]] = {}
    for g, status in ends:
        by.setdefault(status, []).append(g)
    return "; ".join(f"{status}: {rank_ranges(gs)}" for status, gs in sorted(by.items()))


def _clock_offsets(conn: Connection) -> dict[int, list[ClockOffset]]:
    """Per run: its hosts' clock offsets against the reference host, with their error bounds and samples
    (host_clock, written at ingest); none for runs on one host or without a collective timeline."""
    out: dict[int, list[ClockOffset]] = {}
    for run_id, host, off, err, samples in conn.execute(
        select(HostClock.run_id, HostClock.hostname, HostClock.offset_ns, HostClock.error_ns, HostClock.samples)
        .where(HostClock.samples > 0)
        .order_by(HostClock.run_id, HostClock.hostname)
    ):
        out.setdefault(run_id, []).append(ClockOffset(host, int(off), int(err), int(samples)))
    return out


def _clock_text(offsets: list[ClockOffset], run: str) -> str:
    """A run's ``clock_offsets`` cell: every host, or past ``findings.CLOCK_HOSTS_LISTED`` hosts summed up as
    the questions' clock note is (a 1,024-node run's cell was 40 kB): how many, the least certain, and
    the statement that lists them all."""
    from .findings import CLOCK_HOSTS_LISTED, clocks_summed

    if len(offsets) > CLOCK_HOSTS_LISTED:
        return clocks_summed(offsets, run)
    return "; ".join(f"{o.host} {fmt_ns(o.offset_ns)} +- {fmt_ns(o.error_ns)}" for o in offsets)


def list_runs(conn: Connection) -> Table:
    headers = [
        "run",
        "created_at",
        "launcher",
        "world_size",
        "ranks",
        "missing_ranks",
        "ended_abnormally",
        "sources",
        "rows",
        "clock_offsets",
    ]
    clocks = _clock_offsets(conn)
    ranks: dict[int, int] = {
        run_id: n for run_id, n in conn.execute(select(Rank.run_id, func.count()).group_by(Rank.run_id))
    }
    rank_lists: dict[int, list[int]] = {}
    ended: dict[int, list[tuple[int, str]]] = {}
    for run_id, g, status in conn.execute(select(Rank.run_id, Rank.global_rank, Rank.end_status)):
        rank_lists.setdefault(run_id, []).append(g)
        if status in ABNORMAL:
            ended.setdefault(run_id, []).append((g, status))
    src = {
        r[0]: (r[1], r[2])
        for r in conn.execute(
            select(SourceFile.run_id, func.count(), func.coalesce(func.sum(SourceFile.rows), 0)).group_by(
                SourceFile.run_id
            )
        )
    }
    rows = []
    for run in conn.execute(
        select(Run.id, Run.name, Run.created_at, Run.launcher, Run.world_size)
        .where(_loaded)
        .order_by(Run.created_at, Run.id)
    ):
        missing = missing_ranks(rank_lists.get(run.id, []), run.world_size)
        n_src, n_rows = src.get(run.id, (0, 0))
        rows.append(
            (
                run.name,
                run.created_at.isoformat(sep=" ", timespec="seconds"),
                run.launcher,
                run.world_size,
                ranks.get(run.id, 0),
                _fmt_missing(missing),
                _fmt_ended(ended.get(run.id, [])),
                n_src,
                int(n_rows),
                _clock_text(clocks.get(run.id, []), run.name),
            )
        )
    return headers, rows


def latest_run(conn: Connection) -> str:
    name = conn.execute(
        select(Run.name).where(_loaded).order_by(Run.created_at.desc(), Run.id.desc()).limit(1)
    ).scalar()
    if name is None:
        raise QueryError("the store has no runs yet; ingest some with `profdb ingest PATH...`")
    return str(name)


def run_id(conn: Connection, name: str) -> int:
    rid = conn.execute(select(Run.id).where(Run.name == name, _loaded)).scalar()
    if rid is None:
        if conn.execute(select(Run.id).where(Run.name == name)).first() is not None:
            raise QueryError(LOADING.format(name=name))
        known = conn.execute(select(Run.name).where(_loaded).order_by(Run.created_at.desc()).limit(10)).scalars().all()
        raise QueryError(f"no run named {name!r}; runs in this store: {', '.join(known) or 'none'} (see `profdb runs`)")
    return int(rid)


def list_ranks(conn: Connection, run: str | None = None) -> tuple[list[str], list[tuple[Any, ...]], list[str]]:
    """(headers, rows, notes): one row per rank, with how its command ended (``end``: from the
    manifest `profdb record` wrote; empty without one); ranks 0..world_size-1 that are missing get one
    row per range of consecutive ranks (global_rank "2-127"), and a note. Ranks that failed, were
    killed or never ended get a note too: their profiles may be cut short."""
    name = run or latest_run(conn)
    rid = run_id(conn, name)
    headers = ["global_rank", "hostname", "local_rank", "pid", "device", "end", "rows", "sources", "clock_offset_ns",
               "clock_error_ns", "files"]
    notes: list[str] = []
    present_hosts: set[str] = set()
    clocks = {
        h: (int(o), int(e))
        for h, o, e in conn.execute(
            select(HostClock.hostname, HostClock.offset_ns, HostClock.error_ns).where(HostClock.run_id == rid)
        )
    }
    world = conn.execute(select(Run.world_size).where(Run.id == rid)).scalar()
    files: dict[int, list[str]] = {}
    rows_by: dict[int, int] = {}
    for rank_id, path, nrows in conn.execute(
        select(SourceFile.rank_id, SourceFile.path, SourceFile.rows)
        .where(SourceFile.run_id == rid)
        .order_by(SourceFile.path)
    ):
        files.setdefault(rank_id, []).append(path)
        rows_by[rank_id] = rows_by.get(rank_id, 0) + int(nrows)
    out: list[tuple[int, tuple[Any, ...]]] = []
    present = []
    abnormal: list[str] = []
    for r in conn.execute(
        select(
            Rank.id,
            Rank.global_rank,
            Rank.hostname,
            Rank.local_rank,
            Rank.pid,
            Rank.device,
            Rank.end_status,
            Rank.exit_code,
            Rank.signal,
        )
        .where(Rank.run_id == rid)
        .order_by(Rank.global_rank)
    ):
        present.append(r.global_rank)
        fl = files.get(r.id, [])
        end = RankEnd(r.exit_code, r.signal, end_status=r.end_status)
        end_text = describe_end(end) if r.end_status else ""
        if end.abnormal:
            abnormal.append(f"rank {r.global_rank} {end_text}")
        off, err = clocks.get(r.hostname or "", (None, None))
        present_hosts.add(r.hostname or "")
        out.append(
            (
                r.global_rank,
                (r.global_rank, r.hostname, r.local_rank, r.pid, r.device, end_text, rows_by.get(r.id, 0), len(fl),
                 off, err, "; ".join(fl)),
            )
        )
    missing = missing_ranks(present, world)
    for first, last in rank_spans(missing):
        what = "this rank" if first == last else f"these {last - first + 1} ranks"
        label: int | str = first if first == last else span_text(first, last)
        out.append(
            (first, (label, None, None, None, None, "", 0, 0, None, None, f"MISSING: no profile ingested for {what}"))
        )
    out.sort(key=lambda t: t[0])
    notes.append(f"run {name}: {len(present)} ranks" + (f" of world size {world}" if world else ""))
    if clocks:
        unknown = sorted(h for h in present_hosts if h not in clocks)
        notes.append(
            "clock_offset: the host's clock minus the reference host's, from the ends of blocking collectives "
            "(clock_error: its bound); used for every cross-rank time comparison"
        )
        if unknown:
            notes.append(
                f"no clock offset for host(s) {', '.join(unknown)}: no blocking collective in common with the "
                "other hosts; their ranks are left out of cross-rank time comparisons"
            )
    if missing:
        notes.append(f"missing ranks: {_fmt_missing(missing)}")
    if abnormal:
        notes.append(
            f"{len(abnormal)} rank(s) did not end well, their profiles may be cut short: " + "; ".join(abnormal)
        )
    return headers, [row for _, row in out], notes


# ---------------------------------------------------------------------------------------------
# creating runs and ranks (ingest, transfer)


@dataclass(frozen=True)
class NewRun:
    """A run as a load knows it: the columns (same names) to create it with."""

    name: str
    created_at: datetime
    world_size: int | None
    launcher: str | None = None
    command: str | None = None
    metadata_json: str | None = None


NEW_RUN_COLUMNS = tuple(f.name for f in fields(NewRun))

#: conflict(what, stored, incoming) -> the error message, worded by the caller (ingest names its
#: flags, transfer its stores); ``what`` is "world_size" or a rank field, ``rank`` set for ranks
WorldConflict = Callable[[int, int], str]
RankConflict = Callable[[int, str, Any, Any], str]


def find_or_create_run(conn: Connection, run: NewRun, conflict: WorldConflict) -> tuple[int, bool]:
    """(run id, created). Two loads creating the same run at once: one inserts, the other's insert
    does nothing (ON CONFLICT) and it reads the winner's row. A stored world size that differs from
    the run's is a RankIdentityError (``conflict(stored, incoming)``); a missing one is filled in.
    Metadata of a run that existed is merged (``merge_metadata``)."""
    created = False
    if conn.execute(select(Run.id).where(Run.name == run.name)).first() is None:
        res = conn.execute(
            bulk.insert_ignore(conn, _run).values(**asdict(run)).returning(Run.id)
        )
        created = res.first() is not None
    run_id, world, have_meta = conn.execute(
        select(Run.id, Run.world_size, Run.metadata_json).where(Run.name == run.name)
    ).one()
    if run.world_size is not None and world is not None and world != run.world_size:
        raise RankIdentityError(conflict(world, run.world_size))
    if world is None and run.world_size is not None:
        conn.execute(update(Run).where(Run.id == run_id, Run.world_size.is_(None)).values(world_size=run.world_size))
    if not created and run.metadata_json:
        merged = merge_metadata(have_meta, run.metadata_json, run.name)
        if merged != have_meta:
            conn.execute(update(Run).where(Run.id == run_id).values(metadata_json=merged))
    return int(run_id), created


@dataclass(frozen=True)
class RankFacts:
    """What a load knows of one rank (None: unknown)."""

    hostname: str | None = None
    local_rank: int | None = None
    node_rank: int | None = None
    pid: int | None = None
    device: int | None = None
    exit_code: int | None = None
    signal: int | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    end_status: str | None = None


RANK_FIELDS = (
    "hostname",
    "local_rank",
    "node_rank",
    "pid",
    "device",
    "exit_code",
    "signal",
    "started_at",
    "ended_at",
    "end_status",
)
#: the fields that identify a rank: a load disagreeing with the store on one is refused
RANK_IDENTITY = ("hostname", "local_rank")


def rank_ids(
    conn: Connection,
    run_id: int,
    ranks: Mapping[int, RankFacts],
    conflict: RankConflict,
    created: set[int] | None = None,
) -> dict[int, int]:
    """global rank -> rank id for ``ranks`` of the run: new ranks are created (their ids added to
    ``created`` when given), stored ones checked (``RANK_IDENTITY``: ``conflict(rank, field, stored,
    incoming)``) and their unknown fields filled."""
    existing = {r.global_rank: r for r in conn.execute(select(_rank).where(_rank.c.run_id == run_id))}
    ids: dict[int, int] = {}
    new: list[dict[str, Any]] = []
    for g, facts in sorted(ranks.items()):
        old = existing.get(g)
        if old is None:
            new.append(dict(run_id=run_id, global_rank=g, **{f: getattr(facts, f) for f in RANK_FIELDS}))
            continue
        for f in RANK_IDENTITY:
            value, have = getattr(facts, f), getattr(old, f)
            if value is not None and have is not None and value != have:
                raise RankIdentityError(conflict(g, f, have, value))
        fill = {f: getattr(facts, f) for f in RANK_FIELDS if getattr(old, f) is None and getattr(facts, f) is not None}
        if fill:
            conn.execute(update(Rank).where(Rank.id == old.id).values(**fill))
        ids[g] = int(old.id)
    if new:  # one executemany for all, their ids read back (RETURNING ran one statement per rank on SQLite)
        bulk.insert_dicts(conn, _rank, new)
        made = {g for g in ranks if g not in existing}
        for rid, g in conn.execute(select(_rank.c.id, _rank.c.global_rank).where(_rank.c.run_id == run_id)):
            if g in made:
                ids[int(g)] = int(rid)
                if created is not None:
                    created.add(int(rid))
    return dict(sorted(ids.items()))


def stored_files(conn: Connection, run_id: int) -> dict[tuple[int, str], int]:
    """(global_rank, content hash) -> size in bytes of every file already stored in the run: a load
    skips these."""
    rows = conn.execute(
        select(Rank.global_rank, SourceFile.content_hash, SourceFile.size_bytes)
        .join(SourceFile, SourceFile.rank_id == Rank.id)
        .where(Rank.run_id == run_id)
    )
    return {(int(g), str(digest)): int(size) for g, digest, size in rows}


def sources_by_kind(conn: Connection, run_id: int) -> dict[tuple[int, str, str], str]:
    """(global_rank, format, content kind) -> path of a file already stored in the run: what ingest and
    transfer check a new file against (one file of a kind per rank unless several windows are allowed)."""
    rows = conn.execute(
        select(Rank.global_rank, SourceFile.format, SourceFile.content_kind, SourceFile.path)
        .join(SourceFile, SourceFile.rank_id == Rank.id)
        .where(Rank.run_id == run_id)
    )
    return {(g, fmt, kind): path for g, fmt, kind, path in rows}


def check_duplicate_kinds(
    conn: Connection,
    run_id: int,
    run_name: str,
    new: Iterable[tuple[str, int, str, str]],
    *,
    where: str = "",
    advice: str,
) -> None:
    """Each new file (path, global_rank, format, kind) whose rank already has a file of that format
    and kind in the run is a RankIdentityError: ``where`` says which store, ``advice`` what to do."""
    have: dict[tuple[int, str, str], str] | None = None
    for path, g, fmt, kind in new:
        if have is None:
            have = sources_by_kind(conn, run_id)
        stored = have.get((g, fmt, kind))
        if stored is not None:
            raise RankIdentityError(
                f"{path}: rank {g} of run {run_name!r} already has a {fmt} {kind} from {stored}{where}; {advice}"
            )


def ranks_of(conn: Connection, run_id: int) -> tuple[list[tuple[int, str | None, int | None]], int | None]:
    """((global_rank, hostname, local_rank) of every stored rank, the run's world size)."""
    stored = conn.execute(
        select(Rank.global_rank, Rank.hostname, Rank.local_rank).where(Rank.run_id == run_id).order_by(Rank.global_rank)
    ).all()
    world = conn.execute(select(Run.world_size).where(Run.id == run_id)).scalar()
    return [(r[0], r[1], r[2]) for r in stored], world
