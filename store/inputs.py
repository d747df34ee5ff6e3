"""Phase 1 of ingest, with no database: expand paths (folders, globs), detect each file's format,
inspect it (identity hints, time base), hash it, resolve every rank and check the claims across
files, and derive the run's name. Bad input stops here, before any store is opened."""

from __future__ import annotations

import glob
import hashlib
import os
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import blake3

from . import readers
from .errors import InputError, RankIdentityError
from .identity import RANK_DIR, IdentityFlags, RankClaim, RankPlan, check_claims, resolve_file
from .manifest import MANIFEST_NAME, RankManifest, real_path, remembered_folders
from .readers.base import Reader, has_rank_sections, remembered_heads, whole_file
from .records import SourceInfo
from .validate import check_readable, inspect_file, unreadable_folder


@dataclass
class InputFile:
    path: Path
    reader: Reader
    info: SourceInfo
    size: int
    #: its content's digest (``digest_of``: the store's ``content_hash``)
    digest: str
    claim: RankClaim | None = None
    #: index into info.ranks for one rank section of a multi-rank file; None for a one-rank file
    section: int | None = None


def expand(
    paths: Sequence[str | Path], fmt: str | None = None, found_one: Callable[[Path], None] | None = None
) -> tuple[list[tuple[Path, Reader]], list[Path]]:
    """(files with their reader, unreadable files found inside folders). Explicit files that no
    reader recognises, missing paths and folders without any profile are errors. ``found_one(path)``
    is called as each file's reader is found (its head just read)."""
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
                    check_readable(f, INLINE_HASH_BYTES)
                    r = forced if (forced and forced.detect(f)) else (None if forced else readers.detect(f))
                    if r is None:
                        unknown.append(f)
                    else:
                        found.append((f, r))
                        hits += 1
                        if found_one is not None:
                            found_one(f)
                if hits == 0:
                    what = f"{len(folder_files)} files looked at" if folder_files else "it is empty"
                    raise InputError(
                        f"{q}: no profiler output profdb can read in this folder ({what}); "
                        f"supported formats: {', '.join(n for n, _ in readers.formats())} (see `profdb formats`)"
                    )
            elif q.is_file():
                check_readable(q, INLINE_HASH_BYTES)
                r = forced or readers.detect(q)
                if r is None:
                    raise InputError(
                        f"{q}: not a profiler output profdb recognises; supported formats: "
                        f"{', '.join(n for n, _ in readers.formats())} (see `profdb formats`); "
                        "if it is one of them, pass --format NAME"
                    )
                found.append((q, r))
                if found_one is not None:
                    found_one(q)
            else:
                raise InputError(f"{q}: not a regular file or folder")
    # the same file named twice (a folder and a file inside it) is read once
    seen: set[str] = set()
    unique = []
    folders: dict[str, str] = {}
    for f, r in found:
        key = real_path(f, folders)
        if key not in seen:
            seen.add(key)
            unique.append((f, r))
    return unique, unknown


def _walk(folder: Path) -> list[Path]:
    """The regular files below ``folder`` (symlinks to files followed, to folders not walked; names
    starting with a dot and manifests left out), in ``os.walk``'s top-down order with names sorted.
    Its own walk over ``os.scandir``: an entry's type comes with the listing, so a regular file
    costs no ``stat`` (a link one), where ``os.walk`` and a ``stat`` per file took ~0.1 ms a file
    (2,048 rank folders: 0.2 -> 0.1 s)."""
    out: list[Path] = []
    stack = [(os.fspath(folder), folder)]
    while stack:
        top, base = stack.pop()
        try:
            with os.scandir(top) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as e:
            unreadable_folder(e)
            continue
        folders = []
        for entry in entries:
            name = entry.name
            if name.startswith("."):
                continue
            try:
                is_dir = entry.is_dir()
            except OSError:
                is_dir = False
            if is_dir:
                if not entry.is_symlink():
                    folders.append((entry.path, base / name))
            elif name != MANIFEST_NAME and entry.is_file():  # a regular file, links followed (a FIFO
                out.append(base / name)  # named *.csv would block, or never end, its first read)
        stack.extend(reversed(folders))
    return out


#: the digest of new inputs' content (``source_file.content_hash``: "blake3:" and the first 224 bits of
#: the file's BLAKE3 in hex, as ``b3sum`` begins). BLAKE3 is collision-resistant like sha256, and makes
#: ~4.4 GB/s a core with AVX-512 where sha256 makes ~190-370 MB/s without SHA instructions (0013)
ALGORITHM = "blake3"
_BLAKE3_BYTES = 28
#: the digest of the files stored before migration 0013: 64 hex digits with no prefix
LEGACY_ALGORITHM = "sha256"
#: the algorithms ``digest_of`` knows: ours, and the legacy one, with which an input is compared to a
#: stored file of that algorithm and of the input's size
ALGORITHMS = (ALGORITHM, LEGACY_ALGORITHM)


def digest_of(path: Path, algorithm: str = ALGORITHM) -> str:
    """The file's digest as ``content_hash`` holds it (see ``ALGORITHMS``)."""
    h: Any = blake3.blake3() if algorithm == ALGORITHM else hashlib.new(algorithm)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return _written(h, algorithm)


def digest_of_bytes(data: bytes) -> str:
    """``digest_of`` a file whose bytes are these."""
    return _written(blake3.blake3(data), ALGORITHM)


def algorithm_of(digest: str) -> str:
    """The algorithm of a stored ``content_hash``."""
    return digest.partition(":")[0] if ":" in digest else LEGACY_ALGORITHM


def _written(h: Any, algorithm: str) -> str:
    if algorithm == ALGORITHM:
        return f"{ALGORITHM}:{h.hexdigest(length=_BLAKE3_BYTES)}"
    return str(h.hexdigest())


#: files smaller than this are hashed by the main thread as they are found (``Scan``), larger ones
#: on the two hashing threads
INLINE_HASH_BYTES = 1 << 20


class Scan:
    """Phase 1's first step: the inputs expanded (``expand``), and their hashes under way on two
    threads (hashing reads every byte; BLAKE3 and file reads release the GIL, so both cores work).
    ``prepare`` takes the hashes where it needs them. The CLI scans before it imports the store's
    modules (SQLAlchemy, numpy, pyarrow: ~0.3 s in one thread), so the hashing runs meanwhile instead
    of after. Files up to ``INLINE_HASH_BYTES`` are hashed at once by this thread instead, as each
    is found, from the bytes its readability check read (the whole file, ``check_readable``): on
    2,048 files of 80 kB the threads' opens and reads, each taking and giving back the GIL, slowed
    this thread's own work on every file (phase 1 before the store is opened: 1.30 -> 1.06 s, CPU
    -0.45 s). A context manager: leaving it stops the hashing not yet begun."""

    def __init__(self, paths: Sequence[str | Path], fmt: str | None = None) -> None:
        self.paths = list(paths)
        self._pool = ThreadPoolExecutor(max_workers=2)
        hashing: dict[Path, Future[str]] = {}

        def hash_of(path: Path) -> None:
            if path in hashing:
                return
            data = whole_file(path)
            if data is None and os.stat(path).st_size >= INLINE_HASH_BYTES:
                hashing[path] = self._pool.submit(digest_of, path)
                return
            done: Future[str] = Future()
            hashing[path] = done
            try:
                done.set_result(digest_of(path) if data is None else digest_of_bytes(data))
            except Exception as e:  # (raised where prepare takes the hash, as a thread's would be)
                done.set_exception(e)

        try:
            with remembered_heads():
                self.files, self.unknown = expand(self.paths, fmt, hash_of)
        except BaseException:
            self.close()
            raise
        self.hashes: list[Future[str]] = [hashing[path] for path, _ in self.files]

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> Scan:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def prepare(
    paths: Sequence[str | Path] | Scan, flags: IdentityFlags, fmt: str | None = None
) -> tuple[list[InputFile], list[Path], RankPlan]:
    """Phase 1 (see the module doc) over ``paths``, or over a ``Scan`` of them (``fmt`` then unused:
    the scan applied it). The scan is closed on return: no hashing thread outlives this phase (the
    ingest's workers fork after it)."""
    with paths if isinstance(paths, Scan) else Scan(paths, fmt) as scan:
        # (each file's head is read once, not once per reader asked; each folder looked for a manifest
        # once; each hash is taken where it was computed before, so errors surface in the same order)
        with remembered_heads(), remembered_folders():
            return _prepare(scan.files, scan.hashes, scan.unknown, flags)


def _prepare(
    files: list[tuple[Path, Reader]], hashes: list[Future[str]], unknown: list[Path], flags: IdentityFlags
) -> tuple[list[InputFile], list[Path], RankPlan]:
    inputs: list[InputFile] = []
    manifests: dict[Path, RankManifest | None] = {}
    for (path, reader), digest_future in zip(files, hashes):
        info = inspect_file(reader, path)
        if flags.rank_by is not None:
            info = readers.split_ranks(reader, path, info, flags.rank_by)
        size, digest = path.stat().st_size, digest_future.result()
        if info.ranks and has_rank_sections(reader):
            if flags.rank is not None or flags.rank_from_path:
                raise RankIdentityError(
                    f"{path}: this {info.format} file holds {len(info.ranks)} ranks, each named inside it; "
                    "--rank / --rank-from-path cannot apply to it: ingest it without those flags"
                )
            for index, hint in enumerate(info.ranks):
                inp = InputFile(path, reader, info, size, digest, section=index)
                ident = resolve_file(path, hint, flags, manifests, section=True)
                inp.claim = RankClaim(path, info.format, info.kind, ident)
                inputs.append(inp)
            continue
        inp = InputFile(path, reader, info, size, digest)
        ident = resolve_file(path, info.hint, flags, manifests)
        inp.claim = RankClaim(path, info.format, info.kind, ident)
        inputs.append(inp)
    # identical content named twice for the same rank (copies) is ingested once
    by_key: dict[tuple[int, str], InputFile] = {}
    for inp in inputs:
        assert inp.claim is not None
        by_key.setdefault((inp.claim.identity.global_rank, inp.digest), inp)
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
    while RANK_DIR.match(common.name) and common.parent != common:
        common = common.parent
    return common.name or "run"
