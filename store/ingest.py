"""``ingest_paths``: files, folders and globs -> one transaction in the store.

Phase 1 (no database): expand paths, detect formats, inspect each file (identity hints, time base),
hash it, resolve every rank and check the claims across files. Bad input stops here, before the store
is opened, so it is never touched. Then, when the input is large enough, the parsing workers fork
(``ingest_workers``), before SQLAlchemy and the store's modules are imported: they parse while this
process imports them and opens the store. Phase 2 (``ingest_load``, one transaction): create the run
and ranks, stream every file's records in batches through the driver's executemany (no RETURNING),
intern names in memory, keep the per-(rank, name, kind) summary and the steps, and commit once. Any
error rolls everything back; a store file created by this call is removed again.

This module imports no SQLAlchemy, numpy or pyarrow (``tests/test_startup.py``)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from . import ingest_workers
from .identity import IdentityFlags
from .inputs import InputFile, Progress, Scan, derive_run_name, prepare
from .readers.base import GZIP_MAGIC


@dataclass(slots=True)
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
    #: what some of ``unknown_files`` are and what to do with them (``readers.others``: Nsight Systems
    #: reports to export to SQLite...), one line per kind
    unknown_advice: list[str] = field(default_factory=list)
    rows_by_kind: dict[str, int] = field(default_factory=dict)
    ranks: list[tuple[int, str | None, int | None]] = field(default_factory=list)
    world_size: int | None = None
    missing_ranks: list[int] = field(default_factory=list)
    #: what the user should know about how inputs were read (e.g. the gpuId -> rank mapping of --rank-by)
    notes: list[str] = field(default_factory=list)
    #: one line per file that produced no rows: which file, and why
    empty: list[str] = field(default_factory=list)
    #: "rank 1 killed by signal 9 (SIGKILL)" for each rank of the run whose command did not end well
    ended_badly: list[str] = field(default_factory=list)

    @property
    def ingested(self) -> list[FileResult]:
        return [f for f in self.files if not f.skipped]

    @property
    def duplicates(self) -> list[FileResult]:
        return [f for f in self.files if f.skipped]


def ingest_paths(
    paths: Sequence[str | Path] | Scan,
    db: str | None = None,
    *,
    run: str | None = None,
    flags: IdentityFlags | None = None,
    fmt: str | None = None,
    progress: Progress | None = None,
) -> IngestReport:
    """Ingest profiler outputs into the store ``db`` (path or URL). One transaction; see module doc.
    ``paths`` may be an ``inputs.Scan`` of them begun earlier (the CLI's, so hashing overlaps its imports)."""
    flags = flags or IdentityFlags()
    scan = paths if isinstance(paths, Scan) else Scan(paths, fmt, flags)
    inputs, unknown, plan = prepare(scan, flags, progress=progress)
    run_name = run or derive_run_name(scan.paths, inputs)
    with ingest_workers.quiet_gc(), _early_workers(inputs) as parsers:
        from . import ingest_load  # (SQLAlchemy and the store's modules: imported while the workers parse)

        return ingest_load.load(inputs, unknown, plan, run_name, run is None, db, flags, progress, parsers)


@contextmanager
def _early_workers(inputs: list[InputFile]) -> Iterator[ingest_workers.Parsers | None]:
    """The parsing workers of these inputs, forked now when the input is large enough
    (``ingest_workers.worker_count``), before the store is opened: the store's ids of each file come
    later (``Parsers.send_ids``); None: the files are parsed in this process."""
    n = ingest_workers.worker_count(content_bytes(inputs), len(inputs))
    if not n:
        yield None
        return
    with ingest_workers.Parsers([task_of(index, inp) for index, inp in enumerate(inputs)], n) as parsers:
        yield parsers


def content_bytes(inputs: Sequence[InputFile], enough: int = ingest_workers.ALL_CORES_MIN_BYTES) -> int:
    """The inputs' bytes as their readers parse them, counted until ``enough``: a gzip file's
    uncompressed size (its trailer's ISIZE: exact below 4 GiB, and a larger file is enough anyway), else
    its size. A real one-step profile is often a few hundred KB of .json.gz and 8 MB of JSON to parse."""
    total = sum(i.size for i in inputs)
    if total >= enough:
        return total
    total = 0
    for i in inputs:
        size = i.size
        if size >= 18:  # (the smallest gzip file: a header and a trailer)
            try:
                with open(i.path, "rb") as f:
                    if f.read(2) == GZIP_MAGIC:
                        f.seek(-4, 2)
                        size = max(size, int.from_bytes(f.read(4), "little"))
            except OSError:
                pass
        total += size
        if total >= enough:
            break
    return total


def task_of(index: int, inp: InputFile, rank_id: int = ingest_workers.NO_ID,
            source_id: int = ingest_workers.NO_ID) -> ingest_workers.Task:
    """The parsing task of ``inp`` (``index``: its number among the ingest's inputs, or its files')."""
    return ingest_workers.Task(
        index, inp.path, inp.reader.NAME, inp.info, rank_id, source_id, inp.section, inp.size
    )
