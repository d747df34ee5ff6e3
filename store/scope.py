"""Which run a question means: ``resolve_run`` turns a run's name (or id, or nothing: the newest run)
into a ``RunScope``, its id and ranks, resolved once and taken by every question. Read-only SQL
as text (reader.py), so a question on a SQLite store needs no SQLAlchemy; runs.py, the run and
rank catalog, creates, lists, tags and merges runs."""

from __future__ import annotations

import json
from dataclasses import dataclass

from .errors import QueryError
from .manifest import ABNORMAL, RankEnd, describe_end
from .reader import Db, first, rows, scalars

#: a run is there for readers once its first ranks are committed: on PostgreSQL a load commits its run
#: row early (bulk.run_scope) and its ranks and rows with its data, so until then (or forever, when that
#: load was SIGKILLed: the next load removes such rows, bulk.remove_abandoned_runs) the run is hidden
LOADED = "EXISTS (SELECT 1 FROM rank WHERE rank.run_id = run.id)"
LOADING = (
    "run {name!r} has no data yet: an ingest is loading it (on PostgreSQL a run's name is taken when its "
    "load starts), or that ingest was killed; wait for it, or ingest the run again"
)
_NEWEST = "ORDER BY run.created_at DESC, run.id DESC"


@dataclass(frozen=True)
class RankRef:
    id: int
    global_rank: int
    hostname: str | None
    local_rank: int | None
    #: how the rank ended (manifest.RankEnd.end_status; None: nothing recorded), its exit status and signal
    end_status: str | None = None
    exit_code: int | None = None
    signal: int | None = None

    def ended_abnormally(self) -> bool:
        return self.end_status in ABNORMAL

    def end(self) -> str:
        """How the rank ended, in words (``killed by signal 9 (SIGKILL)``)."""
        return describe_end(RankEnd(self.exit_code, self.signal, end_status=self.end_status))

    def label(self) -> str:
        where = ", ".join(
            p
            for p in (
                f"host {self.hostname}" if self.hostname is not None else "",
                f"local_rank {self.local_rank}" if self.local_rank is not None else "",
            )
            if p
        )
        return f"rank {self.global_rank}" + (f" ({where})" if where else "")


#: events not read, by what they are: (what, events, paths of the files holding them), most events first
Unread = tuple[tuple[str, int, tuple[str, ...]], ...]


@dataclass(frozen=True)
class RunScope:
    """A resolved run: what every question takes instead of a run name."""

    id: int
    name: str
    world_size: int | None
    #: ranks that have data, ordered by global rank
    ranks: tuple[RankRef, ...]
    #: digests of the classification rules its files were classified with (None: not recorded)
    rule_digests: tuple[str | None, ...] = ()
    #: files of one content stored for several ranks (``copies_across_ranks``)
    copies: tuple[tuple[tuple[int, str], ...], ...] = ()
    #: events of the run's files their readers did not read (``unread_in_run``)
    unread: Unread = ()

    def ended_abnormally(self) -> list[RankRef]:
        """Ranks whose command failed, was killed or never ended: their profiles may be cut short."""
        return [r for r in self.ranks if r.ended_abnormally()]

    def missing_ranks(self) -> list[int]:
        """Ranks 0..world_size-1 with no data at all (nothing ingested for them)."""
        if not self.world_size:
            return []
        have = {r.global_rank for r in self.ranks}
        return [g for g in range(self.world_size) if g not in have]


def resolve_run(db: Db, run: str | None = None) -> RunScope:
    """The run named ``run`` (or with that id), or the most recent run when None."""
    q = f"SELECT id, name, world_size FROM run WHERE {LOADED}"
    if run is None:
        row = first(db, f"{q} {_NEWEST} LIMIT 1")
        if row is None:
            raise QueryError("the store has no runs yet; ingest some profiles first (profdb ingest PATH...)")
    else:
        row = first(db, f"{q} AND name = :name", {"name": run})
        if row is None and run.isdigit():
            row = first(db, f"{q} AND id = :id", {"id": int(run)})
        if row is None:
            if first(db, "SELECT id FROM run WHERE name = :name", {"name": run}) is not None:
                raise QueryError(LOADING.format(name=run))
            names = scalars(db, f"SELECT name FROM run WHERE {LOADED} {_NEWEST} LIMIT 8")
            known = ", ".join(names) if names else "none: ingest some profiles first"
            raise QueryError(f"no run named {run!r} in the store; known runs (newest first): {known}")
    run_id, name, world_size = row
    ranks = rows(db, "SELECT id, global_rank, hostname, local_rank, end_status, exit_code, signal FROM rank "
                     "WHERE run_id = :run ORDER BY global_rank", {"run": run_id})
    digests = scalars(db, "SELECT DISTINCT classification_rules.digest FROM source_file LEFT OUTER JOIN "
                          "classification_rules ON classification_rules.id = source_file.rules_id "
                          "WHERE source_file.run_id = :run", {"run": run_id})
    return RunScope(
        id=run_id,
        name=name,
        world_size=world_size,
        ranks=tuple(RankRef(*r) for r in ranks),
        rule_digests=tuple(sorted(digests, key=lambda d: (d is None, d or ""))),
        copies=copies_across_ranks(db, run_id),
        unread=unread_in_run(db, run_id),
    )


def missing_notes(scope: RunScope) -> list[str]:
    """A note naming the ranks of the run's world size with no data: no figure covers them."""
    missing = scope.missing_ranks()
    if not missing:
        return []
    shown = ", ".join(map(str, missing[:20])) + (" ..." if len(missing) > 20 else "")
    return [
        f"run {scope.name!r}: world_size {scope.world_size} but {len(missing)} rank(s) have no data "
        f"and are not in these figures: {shown}"
    ]


def unread_in_run(db: Db, run_id: int) -> Unread:
    """What the run's files hold that their readers did not read (``source_file.unread_json``): e.g.
    the device events of a Kineto trace of another accelerator."""
    found = rows(db, "SELECT path, unread_json FROM source_file WHERE run_id = :run AND unread_json IS NOT NULL "
                     "ORDER BY path", {"run": run_id})
    by_what: dict[str, tuple[int, list[str]]] = {}
    for path, text in found:
        try:
            counts = json.loads(text)
            if type(counts) is not dict or not all(type(n) is int for n in counts.values()):
                raise ValueError("not an object of counts")
        except ValueError as e:  # (profdb writes an object of integers: the store was edited or damaged)
            raise QueryError(
                f"source_file.unread_json of {path} is {str(text)[:80]!r}, not a JSON object of counts ({e}); "
                "the store was edited or is damaged: set it to NULL, or ingest the file into a new store"
            ) from None
        add_file_unread(by_what, str(path), counts)
    return unread_of(by_what)


def add_file_unread(by_what: dict[str, tuple[int, list[str]]], path: str, counts: dict[str, int]) -> None:
    """One file's unread counts (what -> events) added to ``by_what`` (what -> events, paths): as the
    ingest gathers its files', and as a question gathers the stored ones."""
    for what, n in counts.items():
        events, paths = by_what.get(what, (0, []))
        paths.append(path)
        by_what[what] = (events + n, paths)


def unread_of(by_what: dict[str, tuple[int, list[str]]]) -> Unread:
    """``by_what`` (what -> events, paths) as ``Unread``: most events first."""
    return tuple(sorted(((w, n, tuple(p)) for w, (n, p) in by_what.items()), key=lambda u: (-u[1], u[0])))


def unread_notes(unread: Unread | dict[str, tuple[int, list[str]]]) -> list[str]:
    """A note naming the events the readers did not read, how many and in which files, so that a run
    whose device events profdb does not read (another accelerator's) is not taken for a CPU-only one.
    The ingest says it, and every question."""
    if isinstance(unread, dict):
        unread = unread_of(unread)
    if not unread:
        return []
    parts = [f"{events:,} {what}" for what, events, _paths in unread[:4]]
    if len(unread) > 4:
        parts.append(f"{sum(u[1] for u in unread[4:]):,} more of {len(unread) - 4} other kinds")
    paths = sorted({p for u in unread for p in u[2]})
    shown = ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
    return [
        f"not read, in no figure: {'; '.join(parts)}; in {len(paths)} file{'s' if len(paths) > 1 else ''}: "
        f"{shown}. profdb reads the kernels, copies and sets of CUDA and ROCm GPUs and the host's operators, "
        "annotations and runtime calls"
    ]


def copies_across_ranks(db: Db, run_id: int) -> tuple[tuple[tuple[int, str], ...], ...]:
    """Files of one content stored for several ranks of the run, each with rows: per content, its
    (global rank, path) in rank order. Two processes' profiles are never byte-identical (their pids,
    times and counts differ), so such a file was copied to a rank it is not from, and every cross-rank
    answer counts one process's work twice. Left out: files with no rows (a header alone, as a rank
    that ran no kernel writes: alike by nature), and one file of several ranks' sections (a merged
    Metrix file, a rocpd database of several processes: one path)."""
    found = rows(
        db,
        "SELECT s.content_hash, r.global_rank, s.path FROM source_file s JOIN rank r ON r.id = s.rank_id "
        "WHERE s.run_id = :run AND s.content_hash IN (SELECT s2.content_hash FROM source_file s2 JOIN rank r2 "
        "ON r2.id = s2.rank_id WHERE s2.run_id = :run AND s2.rows > 0 GROUP BY s2.content_hash "
        "HAVING COUNT(DISTINCT r2.global_rank) > 1 AND COUNT(DISTINCT s2.path) > 1) "
        "ORDER BY s.content_hash, r.global_rank, s.path",
        {"run": run_id},
    )
    out: dict[str, list[tuple[int, str]]] = {}
    for digest, g, path in found:
        out.setdefault(str(digest), []).append((int(g), str(path)))
    return tuple(sorted(tuple(c) for c in out.values()))


def copies_notes(run_name: str, copies: tuple[tuple[tuple[int, str], ...], ...]) -> list[str]:
    """A note when run ``run_name`` stores byte-identical files for different ranks
    (``copies_across_ranks``): the first few, and what to do. The ingest says it, and every question."""
    if not copies:
        return []
    shown = "; ".join(
        f"ranks {', '.join(str(g) for g, _p in c[:4])}{' ...' if len(c) > 4 else ''}: {c[0][1]} and {c[1][1]}"
        for c in copies[:3]
    )
    more = f" (and {len(copies) - 3} more contents)" if len(copies) > 3 else ""
    return [
        f"run {run_name!r} stores byte-identical files for different ranks ({shown}){more}. Two processes' "
        "profiles never are: one was copied to a rank it is not from, and the cross-rank figures count its work "
        "twice. Ingest each rank's own files into a new run (--run NAME)"
    ]


def scope_of(db: Db, run: str | RunScope | None) -> RunScope:
    """A question's run: the scope as given (resolved once by the caller, as the report does for its
    several questions), or resolved from a name or id (None: the newest run)."""
    return run if isinstance(run, RunScope) else resolve_run(db, run)


def with_ranks(scope: RunScope) -> RunScope:
    """``scope`` itself, or a QueryError when the run has no ranks (nothing to ask about)."""
    if not scope.ranks:
        raise QueryError(f"run {scope.name!r} has no ranks; ingest its profiles first")
    return scope


def digest_notes(scope: RunScope) -> list[str]:
    """A note when the run's files were classified with several rule sets (ingested in parts)."""
    digests = [d for d in scope.rule_digests if d]
    unknown = None in scope.rule_digests
    if len(digests) + int(unknown) <= 1:
        return []
    named = ", ".join(digests) + (" and unrecorded rules (stored before 0003)" if unknown else "")
    return [
        f"run {scope.name!r} was classified with {len(digests) + int(unknown)} rule sets ({named}): communication "
        f"vs compute may differ between its files; `profdb reclassify --run {scope.name}` makes them one"
    ]
