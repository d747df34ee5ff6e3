"""``ingest_paths``: files, folders and globs -> one transaction in the store.

Phase 1 (no database): expand paths, detect formats, inspect each file (identity hints, time base),
hash it, resolve every rank and check the claims across files. Bad input stops here, before the store
is opened, so it is never touched. Phase 2 (one transaction): create the run and ranks, stream every
file's records in batches through the driver's executemany (no RETURNING), intern names in memory, keep
the per-(rank, name, kind) summary and the steps, and commit once. Any error rolls everything back; a
store file created by this call is removed again."""

from __future__ import annotations

import glob
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager, suppress
import hashlib
import json
import os
import weakref
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from sqlalchemy import Connection, Engine, select

from . import bulk, ingest_workers, readers
from .db import display_url, open_db, resolve_url, sqlite_path
from .errors import InputError, ProfdbError, RankIdentityError
from .identity import Identity, IdentityFlags, RankClaim, RankPlan, check_claims, missing_ranks, resolve_file
from .inventory import sources_by_kind
from .manifest import MANIFEST_NAME, RankManifest
from .models import Name, Rank, Run, SourceFile
from .readers.base import Reader, has_rank_sections
from .records import SourceInfo
from .validate import READ_FAILURES, inspect_file, regular_file

#: bulk loads of at least this many input bytes may rebuild the fact tables' indexes (_defer_indexes)
DEFER_INDEXES_MIN_BYTES = 16 << 20

#: progress(event, path, done_bytes, total_bytes): "start" once with total, "file" after each file
Progress = Callable[[str, str, int, int], None]


@dataclass
class InputFile:
    path: Path
    reader: Reader
    info: SourceInfo
    size: int
    sha256: str
    claim: RankClaim | None = None
    #: index into info.ranks for one rank section of a multi-rank file; None for a one-rank file
    section: int | None = None


@dataclass
class FileResult:
    path: str
    format: str
    content_kind: str
    global_rank: int
    rows: int
    skipped: bool = False


@dataclass
class IngestReport:
    run: str
    run_derived: bool
    db: str
    files: list[FileResult] = field(default_factory=list)
    unknown_files: list[str] = field(default_factory=list)
    rows_by_kind: dict[str, int] = field(default_factory=dict)
    ranks: list[tuple[int, str | None, int | None]] = field(default_factory=list)
    world_size: int | None = None
    missing_ranks: list[int] = field(default_factory=list)

    @property
    def ingested(self) -> list[FileResult]:
        return [f for f in self.files if not f.skipped]

    @property
    def duplicates(self) -> list[FileResult]:
        return [f for f in self.files if f.skipped]


# --------------------------------------------------------------------------- phase 1: inputs


def expand(paths: Sequence[str | Path], fmt: str | None = None) -> tuple[list[tuple[Path, Reader]], list[Path]]:
    """(files with their reader, unreadable files found inside folders). Explicit files that no
    reader recognises, missing paths and folders without any profile are errors."""
    forced = readers.by_name(fmt) if fmt else None
    found: list[tuple[Path, Reader]] = []
    unknown: list[Path] = []
    if not paths:
        raise InputError("no input paths given; pass profile files or folders, e.g. `profdb ingest out/rank*/`")
    for raw in paths:
        p = Path(raw)
        if not p.exists():
            matches = sorted(glob.glob(str(raw), recursive=True)) if glob.has_magic(str(raw)) else []
            if not matches:
                raise InputError(f"{raw}: no such file or folder; check the path (globs are expanded too)")
            expanded: list[Path] = [Path(m) for m in matches]
        else:
            expanded = [p]
        for q in expanded:
            if q.is_dir():
                folder_files = _walk(q)
                hits = 0
                for f in folder_files:
                    r = forced if (forced and forced.detect(f)) else (None if forced else readers.detect(f))
                    if r is None:
                        unknown.append(f)
                    else:
                        found.append((f, r))
                        hits += 1
                if hits == 0:
                    what = f"{len(folder_files)} files looked at" if folder_files else "it is empty"
                    raise InputError(
                        f"{q}: no profiler output profdb can read in this folder ({what}); "
                        f"supported formats: {', '.join(n for n, _ in readers.formats())} (see `profdb formats`)"
                    )
            elif q.is_file():
                r = forced or readers.detect(q)
                if r is None:
                    raise InputError(
                        f"{q}: not a profiler output profdb recognises; supported formats: "
                        f"{', '.join(n for n, _ in readers.formats())} (see `profdb formats`); "
                        "if it is one of them, pass --format NAME"
                    )
                found.append((q, r))
            else:
                raise InputError(f"{q}: not a regular file or folder")
    # the same file named twice (a folder and a file inside it) is read once
    seen: set[Path] = set()
    unique = []
    for f, r in found:
        key = f.resolve()
        if key not in seen:
            seen.add(key)
            unique.append((f, r))
    return unique, unknown


def _walk(folder: Path) -> list[Path]:
    out = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if name.startswith(".") or name == MANIFEST_NAME or not regular_file(Path(root) / name):
                continue
            out.append(Path(root) / name)
    return out


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def prepare(
    paths: Sequence[str | Path], flags: IdentityFlags, fmt: str | None = None
) -> tuple[list[InputFile], list[Path], RankPlan]:
    files, unknown = expand(paths, fmt)
    # hashing reads every byte: two threads (hashlib and file reads release the GIL) keep both cores
    # busy; each result is taken where it was computed before, so errors surface in the same order
    pool = ThreadPoolExecutor(max_workers=2)
    try:
        hashes = [pool.submit(sha256_of, path) for path, _ in files]
        return _prepare(files, hashes, unknown, flags)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _prepare(
    files: list[tuple[Path, Reader]], hashes: list[Future[str]], unknown: list[Path], flags: IdentityFlags
) -> tuple[list[InputFile], list[Path], RankPlan]:
    inputs: list[InputFile] = []
    manifests: dict[Path, RankManifest | None] = {}
    for (path, reader), sha_future in zip(files, hashes):
        info = inspect_file(reader, path)
        size, sha = path.stat().st_size, sha_future.result()
        if info.ranks and has_rank_sections(reader):
            if flags.rank is not None or flags.rank_from_path:
                raise RankIdentityError(
                    f"{path}: this {info.format} file holds {len(info.ranks)} ranks, each named inside it; "
                    "--rank / --rank-from-path cannot apply to it: ingest it without those flags"
                )
            for index, hint in enumerate(info.ranks):
                inp = InputFile(path, reader, info, size, sha, section=index)
                ident = resolve_file(path, hint, flags, manifests, section=True)
                inp.claim = RankClaim(path, info.format, info.kind, ident)
                inputs.append(inp)
            continue
        inp = InputFile(path, reader, info, size, sha)
        ident = resolve_file(path, info.hint, flags, manifests)
        inp.claim = RankClaim(path, info.format, info.kind, ident)
        inputs.append(inp)
    # identical content named twice for the same rank (copies) is ingested once
    by_key: dict[tuple[int, str], InputFile] = {}
    for inp in inputs:
        assert inp.claim is not None
        by_key.setdefault((inp.claim.identity.global_rank, inp.sha256), inp)
    inputs = list(by_key.values())
    plan = check_claims([i.claim for i in inputs if i.claim], flags)
    return inputs, unknown, plan


def derive_run_name(paths: Sequence[str | Path], inputs: list[InputFile]) -> str:
    names = {i.claim.identity.manifest.run for i in inputs if i.claim and i.claim.identity.manifest}
    names.discard(None)
    if len(names) == 1:
        return str(names.pop())
    parents = [Path(os.path.abspath(i.path)).parent for i in inputs]
    common = Path(os.path.commonpath([str(p) for p in parents])) if parents else Path.cwd()
    # a rank folder is not a run name: go up to the folder holding the ranks
    from .identity import RANK_DIR

    while RANK_DIR.match(common.name) and common.parent != common:
        common = common.parent
    return common.name or "run"


# --------------------------------------------------------------------------- phase 2: the store


class _Writer:
    """Streams records into one open transaction; keeps names, summaries and steps in memory."""

    ACTIVITY_COLS = (
        "rank_id", "source_id", "kind", "category", "name_id", "start_ns", "duration_ns", "device", "stream",
        "correlation", "pid", "tid", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "args",
    )
    COUNTER_COLS = (
        "rank_id", "source_id", "kernel_name_id", "counter_name_id", "dispatch_id", "value", "samples",
        "min_value", "max_value",
    )

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.dialect = conn.dialect.name
        self.names: dict[str, int] = {}
        # (rank_id, name_id, kind) -> [category, calls, total, min, max, sumsq]
        self.summary: dict[tuple[int, int, str], list[Any]] = {}
        self.steps: dict[tuple[int, int], tuple[int, int, int]] = {}
        self.mark = bulk.placeholder(conn)
        self._counter1_sql: str | None = None
        self._names_conn: Connection | None = None  # PostgreSQL: see bulk.names_connection
        self._close_names: Callable[[], Any] = lambda: None

    def name_ids(self, values: Iterable[str]) -> None:
        """Intern every new name in one round trip per batch (insert-or-ignore, then select)."""
        new = [v for v in set(values) if v not in self.names]
        if not new:
            return
        m = self.mark
        if self.dialect == "postgresql":
            if self._names_conn is None:
                self._names_conn = nc = bulk.names_connection(self.conn)
                assert nc is not None
                self._close_names = weakref.finalize(self, nc.close)
            self.names.update((v, i) for i, v in bulk.intern_names(self.conn, new, self._names_conn))
            return
        ins = f"INSERT OR IGNORE INTO name (value) VALUES ({m})"
        self.conn.exec_driver_sql(ins, [(v,) for v in new])
        for i in range(0, len(new), 500):
            chunk = new[i : i + 500]
            rows = self.conn.execute(select(Name.id, Name.value).where(Name.value.in_(chunk))).all()
            for nid, value in rows:
                self.names[value] = nid

    def answer_names(self, values: list[str]) -> list[int]:
        """Ids of ``values`` (interned now if new), for a parsing worker."""
        self.name_ids(values)
        return [self.names[v] for v in values]

    def insert(self, table: str, rows: list[tuple[Any, ...]]) -> None:
        """Rows a worker built, in ACTIVITY_COLS or COUNTER_COLS order; "counter1" rows are per-dispatch
        counters (the first six COUNTER_COLS; samples 1, no min/max), bound with fewer parameters."""
        if table == "counter1" and self.dialect != "sqlite":  # PostgreSQL loads through COPY: all columns
            bulk.insert_rows(self.conn, "counter", self.COUNTER_COLS, [r + (1, None, None) for r in rows])
            return
        if table == "counter1":
            if self._counter1_sql is None:
                m = self.mark
                self._counter1_sql = (
                    f"INSERT INTO counter ({', '.join(self.COUNTER_COLS)}) VALUES ({', '.join([m] * 6)}, 1, NULL, NULL)"
                )
            if rows:
                self.conn.exec_driver_sql(self._counter1_sql, rows)
            return
        cols = self.ACTIVITY_COLS if table == "activity" else self.COUNTER_COLS
        bulk.insert_rows(self.conn, table, cols, rows)

    def merge(self, rank_id: int, source_id: int, summary: list[Any], steps: list[tuple[int, int, int]]) -> None:
        """A worker's per-file summary rows (name_id, kind, category, calls, total, min, max, sumsq)
        and steps (step, start_ns, duration_ns), as ``ingest_workers._parse`` keeps them per file."""
        for nid, kind, cat, calls, total, mn, mx, sq in summary:
            key = (rank_id, nid, kind)
            s = self.summary.get(key)
            if s is None:
                self.summary[key] = [cat, calls, total, mn, mx, sq]
            else:
                s[1] += calls
                s[2] += total
                s[3] = min(s[3], mn)
                s[4] = max(s[4], mx)
                s[5] += sq
        for step, start, dur in steps:
            self.steps[(rank_id, step)] = (source_id, start, dur)

    def finish(self) -> None:
        """Merge the in-memory summaries and steps into the store (adding to earlier ingests)."""
        self._close_names()
        bulk.add_summaries(self.conn, [(k[0], k[1], k[2], *v) for k, v in self.summary.items()])
        bulk.add_steps(self.conn, [(k[0], k[1], *v) for k, v in self.steps.items()])


def _now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


def _get_or_create_run(conn: Connection, name: str, plan: RankPlan, inputs: list[InputFile]) -> tuple[int, bool]:
    """(run id, created). Two nodes creating the same run at once: one inserts, the other's insert
    does nothing (ON CONFLICT) and it reads the winner's row."""
    manifest = next((i.claim.identity.manifest for i in inputs if i.claim and i.claim.identity.manifest), None)
    created = False
    if conn.execute(select(Run.id).where(Run.name == name)).first() is None:
        res = conn.execute(
            bulk.insert_ignore(conn, Run.__table__).values(
                name=name,
                created_at=_now(),
                launcher=manifest.launcher if manifest else None,
                command=json.dumps(manifest.command) if manifest and manifest.command else None,
                world_size=plan.world_size,
            )
            .returning(Run.id)
        )
        created = res.first() is not None
    run_id, world = conn.execute(select(Run.id, Run.world_size).where(Run.name == name)).one()
    if plan.world_size is not None and world is not None and world != plan.world_size:
        raise RankIdentityError(
            f"run {name!r} has world size {world} but these inputs say {plan.world_size}; "
            "they come from another job: pick another name with --run"
        )
    if world is None and plan.world_size is not None:
        conn.execute(
            Run.__table__.update().where(Run.id == run_id, Run.world_size.is_(None)).values(world_size=plan.world_size)
        )
    return int(run_id), created


def _rank_ids(conn: Connection, run_id: int, run_name: str, plan: RankPlan) -> dict[int, int]:
    existing = {
        r.global_rank: r
        for r in conn.execute(
            select(Rank.id, Rank.global_rank, Rank.local_rank, Rank.hostname, Rank.pid, Rank.device, Rank.node_rank).where(
                Rank.run_id == run_id
            )
        )
    }
    ids: dict[int, int] = {}
    for g, ident in sorted(plan.ranks.items()):
        old = existing.get(g)
        if old is None:
            res = conn.execute(
                Rank.__table__.insert().values(
                    run_id=run_id,
                    global_rank=g,
                    local_rank=ident.local_rank,
                    hostname=ident.hostname,
                    node_rank=ident.node_rank,
                    pid=ident.pid,
                    device=ident.device,
                )
            )
            ids[g] = int(res.inserted_primary_key[0])  # type: ignore[index]
            continue
        for f in ("hostname", "local_rank"):
            new, have = getattr(ident, f), getattr(old, f)
            if new is not None and have is not None and new != have:
                raise RankIdentityError(
                    f"rank {g} of run {run_name!r} is stored with {f} {have!r}, but the new input says {new!r} "
                    f"({ident.origin}); fix the input, override with --{f.replace('_', '-')}, or use another --run"
                )
        fill = {
            f: getattr(ident, f)
            for f in ("hostname", "local_rank", "pid", "device", "node_rank")
            if getattr(old, f) is None and getattr(ident, f) is not None
        }
        if fill:
            conn.execute(Rank.__table__.update().where(Rank.id == old.id).values(**fill))
        ids[g] = int(old.id)
    return ids


def ingest_paths(
    paths: Sequence[str | Path],
    db: str | None = None,
    *,
    run: str | None = None,
    flags: IdentityFlags | None = None,
    fmt: str | None = None,
    progress: Progress | None = None,
) -> IngestReport:
    """Ingest profiler outputs into the store ``db`` (path or URL). One transaction; see module doc."""
    flags = flags or IdentityFlags()
    inputs, unknown, plan = prepare(paths, flags, fmt)
    run_name = run or derive_run_name(paths, inputs)
    url = resolve_url(db)
    path = sqlite_path(url)
    created = path is not None and not path.exists()
    report = IngestReport(
        run=run_name, run_derived=run is None, db=display_url(url), unknown_files=[str(u) for u in unknown], world_size=plan.world_size
    )
    engine: Engine | None = None
    try:
        engine = open_db(db)
        _load(engine, run_name, inputs, plan, report, progress, flags.allow_duplicate_ranks)
    except BaseException:
        if engine is not None:
            engine.dispose()
            engine = None
        if created and path is not None:
            for suffix in ("", "-wal", "-shm", "-journal"):
                Path(str(path) + suffix).unlink(missing_ok=True)
        raise
    finally:
        if engine is not None:
            engine.dispose()
    return report


def _load(
    engine: Engine,
    run_name: str,
    inputs: list[InputFile],
    plan: RankPlan,
    report: IngestReport,
    progress: Progress | None,
    allow_dupes: bool = False,
) -> None:
    total = sum(i.size for i in inputs)
    done = 0
    if progress:
        progress("start", "", 0, total)
    def find_or_create(c: Connection) -> tuple[int, bool]:
        return _get_or_create_run(c, run_name, plan, inputs)

    # PostgreSQL: the run is made and committed first, then held with this ingest's ranks (bulk.hold_run)
    with bulk.run_scope(engine, find_or_create) as early_id, _transaction(
        engine, bulk_load=total >= DEFER_INDEXES_MIN_BYTES
    ) as conn:
        run_id = bulk.hold_run(conn, early_id, plan.ranks, find_or_create)
        present = set(
            conn.execute(
                select(Rank.global_rank, SourceFile.sha256)
                .join(SourceFile, SourceFile.rank_id == Rank.id)
                .where(Rank.run_id == run_id)
            ).all()
        )
        todo = [i for i in inputs if i.claim and (i.claim.identity.global_rank, i.sha256) not in present]
        for i in inputs:
            if i.claim and (i.claim.identity.global_rank, i.sha256) in present:
                assert i.claim is not None
                report.files.append(
                    FileResult(str(i.path), i.info.format, i.info.kind, i.claim.identity.global_rank, 0, skipped=True)
                )
        todo_plan = RankPlan(
            ranks={g: ident for g, ident in plan.ranks.items() if any(t.claim and t.claim.identity.global_rank == g for t in todo)},
            world_size=plan.world_size,
        )
        _check_store_duplicates(conn, run_id, run_name, todo, allow_dupes)
        rank_ids = _rank_ids(conn, run_id, run_name, todo_plan)
        recreate = _defer_indexes(conn, sum(i.size for i in todo))
        writer = _Writer(conn)
        sources: list[tuple[InputFile, int, int]] = []
        for inp in todo:
            assert inp.claim is not None
            ident: Identity = inp.claim.identity
            rank_id = rank_ids[ident.global_rank]
            res = conn.execute(
                SourceFile.__table__.insert().values(
                    run_id=run_id,
                    rank_id=rank_id,
                    path=str(inp.path.resolve()),
                    sha256=inp.sha256,
                    size_bytes=inp.size,
                    format=inp.info.format,
                    content_kind=inp.info.kind,
                    rows=0,
                    time_base_ns=inp.info.time_base_ns,
                    identity_origin=ident.origin,
                    ingested_at=_now(),
                )
            )
            sources.append((inp, rank_id, int(res.inserted_primary_key[0])))  # type: ignore[index]

        def file_done(inp: InputFile, source_id: int, counts: dict[str, int]) -> None:
            nonlocal done
            assert inp.claim is not None
            rows = sum(counts.values())
            conn.execute(SourceFile.__table__.update().where(SourceFile.id == source_id).values(rows=rows))
            for k, v in counts.items():
                report.rows_by_kind[k] = report.rows_by_kind.get(k, 0) + v
            report.files.append(
                FileResult(str(inp.path), inp.info.format, inp.info.kind, inp.claim.identity.global_rank, rows)
            )
            done += inp.size
            if progress:
                progress("file", str(inp.path), done, total)

        n_workers = ingest_workers.worker_count(sum(i.size for i in todo), len(todo))
        if n_workers:
            for (inp, source_id), counts in zip(
                [(i, sid) for i, _, sid in sources], _parse_in_workers(writer, sources, n_workers)
            ):
                file_done(inp, source_id, counts)
        cats: dict[tuple[str, str], str] = {}
        for i, (inp, rank_id, source_id) in enumerate(sources if not n_workers else []):
            try:
                counts, summary, steps = ingest_workers.parse_here(
                    _task(i, inp, rank_id, source_id), writer.answer_names, writer.insert, cats
                )
            except Exception as e:
                err = _read_error(inp, e)
                if err is e:
                    raise
                raise err from e
            writer.merge(rank_id, source_id, summary, steps)
            file_done(inp, source_id, counts)
        for sql in recreate:  # (temporary storage is in files meanwhile: see _transaction)
            conn.exec_driver_sql(sql)
        writer.finish()
        stored = conn.execute(
            select(Rank.global_rank, Rank.hostname, Rank.local_rank).where(Rank.run_id == run_id).order_by(Rank.global_rank)
        ).all()
        world = conn.execute(select(Run.world_size).where(Run.id == run_id)).scalar()
        report.ranks = [(r[0], r[1], r[2]) for r in stored]
        report.world_size = world
        report.missing_ranks = missing_ranks([r[0] for r in stored], world)


@contextmanager
def _transaction(engine: Engine, bulk_load: bool) -> Iterator[Connection]:
    """The ingest's one transaction. For a bulk load into SQLite, foreign key checks are off while it
    runs (each inserted row would otherwise look up its rank, source and names: half the cost of
    inserting a counter row) and back on afterwards, commit or not. The ingest itself creates every
    row those keys point to, under BEGIN IMMEDIATE, so no other writer can remove them meanwhile.
    Temporary storage goes to files meanwhile: rebuilding an index sorts beyond the page cache's worth
    of memory in temporary files, which with temp_store=MEMORY are memory too, so the peak would grow
    with the table (measured on 10M rows: 550 MB, 150 MB with files).
    (SQLite refuses or ignores both pragmas inside a transaction: they are set before BEGIN.)"""
    with engine.connect() as conn:
        raw = conn.connection.driver_connection if bulk_load and engine.dialect.name == "sqlite" else None
        if raw is not None:
            raw.execute("PRAGMA foreign_keys=OFF")
            raw.execute("PRAGMA temp_store=FILE")
        try:
            with conn.begin():
                yield conn
        finally:
            if raw is not None:
                with suppress(Exception):  # a broken connection is discarded anyway: keep the first error
                    raw.execute("PRAGMA foreign_keys=ON")
                    raw.execute("PRAGMA temp_store=MEMORY")


def _defer_indexes(conn: Connection, incoming_bytes: int) -> list[str]:
    """For a bulk load into an SQLite store that holds little next to the input: drop the secondary
    indexes of the fact tables (activity, counter) now and return their CREATE statements, to run
    before commit. Building an index once over the rows costs less than updating it row by row
    (measured: inserts twice as fast) when the table already holds fewer rows than about twice
    the rows coming in. DDL is transactional in SQLite: a failed ingest gets the indexes back."""
    if conn.dialect.name != "sqlite" or incoming_bytes < DEFER_INDEXES_MIN_BYTES:
        return []
    existing = sum(
        int(conn.exec_driver_sql(f"SELECT COALESCE(MAX(id), 0) FROM {t}").scalar() or 0) for t in ("activity", "counter")
    )
    if existing > 2 * (incoming_bytes // 200):  # ~200 input bytes per row in rocprofv3 CSV and Kineto JSON
        return []
    indexes = conn.exec_driver_sql(
        "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name IN ('activity', 'counter') "
        "AND sql IS NOT NULL ORDER BY name"
    ).all()
    for name, _sql in indexes:
        conn.exec_driver_sql(f'DROP INDEX "{name}"')
    return [str(sql) for _name, sql in indexes]


def _read_error(inp: InputFile, e: BaseException) -> BaseException:
    """What a failure while reading ``inp`` becomes: profdb's own errors as they are, a reader's
    unexpected ValueError & co. an InputError naming the file, anything else unchanged."""
    if isinstance(e, ProfdbError):
        return e
    if isinstance(e, READ_FAILURES):
        return InputError(
            f"{inp.path}: cannot read it as {inp.info.format} ({type(e).__name__}: {e}); "
            "the file is damaged or of an unsupported variant: re-copy it or pass --format"
        )
    return e


def _task(index: int, inp: InputFile, rank_id: int, source_id: int) -> ingest_workers.Task:
    return ingest_workers.Task(index, inp.path, inp.reader.NAME, inp.info, rank_id, source_id, inp.section)


def _parse_in_workers(writer: _Writer, sources: list[tuple[InputFile, int, int]], workers: int) -> list[dict[str, int]]:
    """Parse every source in worker processes; this process inserts their rows (see ingest_workers).
    Returns each source's row counts, in ``sources`` order, after merging summaries and steps."""
    tasks = [_task(i, inp, rank_id, source_id) for i, (inp, rank_id, source_id) in enumerate(sources)]
    results: dict[int, tuple[dict[str, int], list[Any], list[tuple[int, int, int]]]] = {}
    with ingest_workers.Parsers(tasks, workers) as parsers:
        try:
            for msg in parsers.messages(writer.answer_names):
                if msg[0] == "rows":
                    writer.insert(msg[2], msg[3])
                elif msg[0] == "done":
                    results[msg[1]] = (msg[2], msg[3], msg[4])
        except ingest_workers.WorkerError as e:
            if 0 <= e.index < len(sources):
                err = _read_error(sources[e.index][0], e.error)
                if err is e.error and not isinstance(err, ProfdbError):
                    raise RuntimeError(f"{sources[e.index][0].path}: {e.error!r}\n{e.trace}") from e.error
                raise err from e.error
            raise RuntimeError(f"{e.error}\n{e.trace}") from e.error
    out = []
    for i, (_inp, rank_id, source_id) in enumerate(sources):
        counts, summary, steps = results[i]
        writer.merge(rank_id, source_id, summary, steps)
        out.append(counts)
    return out


def _check_store_duplicates(conn: Connection, run_id: int, run_name: str, todo: list[InputFile], allow: bool) -> None:
    """A rank already holding a different file of the same format and kind in this run is a conflict."""
    if not todo:
        return
    have = sources_by_kind(conn, run_id)
    for inp in todo:
        assert inp.claim is not None
        key = (inp.claim.identity.global_rank, inp.info.format, inp.info.kind)
        if key in have and not allow:
            raise RankIdentityError(
                f"{inp.path}: rank {key[0]} of run {run_name!r} already has a {key[1]} {key[2]} from {have[key]}; "
                "ingest this one into another run (--run NAME), or pass --allow-duplicate-ranks if it is another "
                "window or process of the same rank"
            )

