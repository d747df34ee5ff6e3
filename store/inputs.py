"""Phase 1 of ingest, with no database: expand paths (folders, globs), detect each file's format,
inspect it (identity hints, time base), hash it, resolve every rank and check the claims across
files, and derive the run's name. Bad input stops here, before any store is opened. Many files are
looked at by helper processes too (``_Share``), with the same answers and errors as one process."""

from __future__ import annotations

import glob
import hashlib
import os
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import blake3

from . import readers
from .batches import cores
from .errors import InputError, RankIdentityError
from .identity import RANK_DIR, Identity, IdentityFlags, RankClaim, RankPlan, check_claims, resolve_file
from .manifest import MANIFEST_NAME, RankManifest, real_path, remembered_folders
from .readers import others
from .readers.base import Reader, has_rank_sections, remembered_heads, whole_file
from .records import SourceInfo
from .validate import check_readable, inspect_file, unreadable_folder


@dataclass(slots=True)
class InputFile:
    path: Path
    reader: Reader
    info: SourceInfo
    size: int
    #: its content's digest (``digest_of``: the store's ``content_hash``)
    digest: str
    #: its path with every link resolved, as phase 1 found it to make the inputs unique (the store's
    #: ``source_file.path``)
    real: str
    claim: RankClaim | None = None
    #: index into info.ranks for one rank section of a multi-rank file; None for a one-rank file
    section: int | None = None


@dataclass(frozen=True)
class _Step:
    """One step of ``expand``, in the order it takes them: a file to look at (``explicit``: named
    itself, not found in a folder), the end of a folder's files (``folder``, with how many it holds),
    or an error met while listing the inputs, raised when its turn comes (after the files before it)."""

    path: Path | None = None
    explicit: bool = False
    folder: Path | None = None
    files: int = 0
    error: InputError | None = None


def _steps(paths: Sequence[str | Path]) -> list[_Step]:
    """The inputs listed (folders walked, globs expanded), as ``expand`` takes them; nothing is read
    yet. The listing stops at its first error, which becomes the last step."""
    if not paths:
        raise InputError("no input paths given; pass profile files or folders, e.g. `profdb ingest out/rank*/`")
    steps: list[_Step] = []
    try:
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
                    steps.extend(_Step(f) for f in folder_files)
                    steps.append(_Step(folder=q, files=len(folder_files)))
                elif q.is_file():
                    steps.append(_Step(q, explicit=True))
                else:
                    raise InputError(f"{q}: not a regular file or folder")
    except InputError as e:
        steps.append(_Step(error=e))
    return steps


def _detected(path: Path, forced: Reader | None, explicit: bool) -> Reader | None:
    """The reader of ``path`` (None: no reader knows it), ``forced`` by --format if given: a file found
    in a folder must also look like that format, a file named itself is taken as it."""
    if explicit:
        return forced or readers.detect(path)
    return forced if (forced and forced.detect(path)) else (None if forced else readers.detect(path))


def expand(
    steps: list[_Step], fmt: str | None, found_one: Callable[[Path, str | None], None], share: _Share | None
) -> tuple[list[tuple[Path, Reader]], list[Path], list[str]]:
    """(files with their reader, unreadable files found inside folders, each file's path with its links
    resolved), from the inputs' ``_steps`` taken in order. Explicit files that no reader recognises, missing
    paths and folders without any profile are errors. ``found_one(path, digest)`` is called as each file's
    reader is found (its head just read; the digest when a helper took it, else None). A file a helper process
    looked at (``share``) is not looked at again, except when it found a problem: then this process does, and
    raises what it finds."""
    forced = readers.by_name(fmt) if fmt else None
    found: list[tuple[Path, Reader]] = []
    unknown: list[Path] = []
    reals: dict[Path, str] = {}  # (the resolved paths helpers found)
    hits = 0
    skipped = 0  # (how many of the last ``unknown`` are the folder being walked's)
    for index, step in enumerate(steps):
        if step.error is not None:
            raise step.error
        if step.path is None:  # a folder's end
            if hits == 0:
                what = f"{step.files} files looked at" if step.files else "it is empty"
                known = others.summary(unknown[len(unknown) - skipped :])
                raise InputError(
                    f"{step.folder}: no profiler output profdb can read in this folder ({what}"
                    + "".join(f"; {line}" for line in known)
                    + f"); supported formats: {', '.join(n for n, _ in readers.formats())} (see `profdb formats`)"
                )
            hits = skipped = 0
            continue
        f = step.path
        seen = share.first(index) if share is not None else None
        if seen is not None:
            r = readers.by_name(seen.reader) if seen.reader else None
        else:
            check_readable(f, INLINE_HASH_BYTES)
            r = _detected(f, forced, step.explicit)
        if r is None:
            cut = others.damaged(f)
            if cut is not None:  # (a profile cut short: in a folder too, never skipped, its rank then missing)
                raise InputError(f"{f}: {cut}")
            if step.explicit:
                advice = others.advice(f)
                if advice is not None:
                    raise InputError(f"{f}: {advice}")
                raise InputError(
                    f"{f}: not a profiler output profdb recognises; supported formats: "
                    f"{', '.join(n for n, _ in readers.formats())} (see `profdb formats`); "
                    "if it is one of them, pass --format NAME"
                )
            unknown.append(f)
            skipped += 1
            continue
        found.append((f, r))
        if not step.explicit:
            hits += 1
        if seen is not None and seen.real is not None:
            reals[f] = seen.real
        found_one(f, seen.digest if seen is not None else None)
    # the same file named twice (a folder and a file inside it) is read once
    seen_paths: set[str] = set()
    unique = []
    resolved = []
    folders: dict[str, str] = {}
    for f, r in found:
        key = reals.get(f) or real_path(f, folders)
        if key not in seen_paths:
            seen_paths.add(key)
            unique.append((f, r))
            resolved.append(key)
    return unique, unknown, resolved


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


def digest_of(path: Path, algorithm: str = ALGORITHM, hashed: list[int] | None = None) -> str:
    """The file's digest as ``content_hash`` holds it (see ``ALGORITHMS``); ``hashed[0]``: the bytes
    hashed so far, for another thread to read (``Scan.hashed``)."""
    h: Any = blake3.blake3() if algorithm == ALGORITHM else hashlib.new(algorithm)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
            if hashed is not None:
                hashed[0] += len(chunk)  # (this thread alone writes it)
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
#: a file's digest as ``Scan`` has it: known, or to come from a hashing thread (or to raise its error)
Hash = str | Future[str]
#: an ingest's progress(event, path, done_bytes, total_bytes): "hash" while phase 1 waits for large files'
#: hashes (the bytes hashed of those files, and their total: ``Scan.digest``), then "start" once with the
#: inputs' total, "file" after each file, "read" as a file's parsing worker reads on (done_bytes: the files
#: done and the bytes read of those being parsed), "analysis" (path: the run's name) as the run's
#: collectives are analysed, after the last file (``ingest.ingest_paths``)
Progress = Callable[[str, str, int, int], None]
#: seconds between two progress reports while a file's hash is waited for
HASH_PROGRESS_S = 0.1


class Scan:
    """Phase 1's first step: the inputs expanded (``expand``), and their hashes under way on two
    threads (hashing reads every byte; BLAKE3 and file reads release the GIL, so both cores work).
    ``prepare`` takes the hashes where it needs them. The CLI scans before it imports the store's
    modules (SQLAlchemy, numpy, pyarrow: ~0.3 s in one thread), so the hashing runs meanwhile instead
    of after. Files up to ``INLINE_HASH_BYTES`` are hashed at once by this thread instead, as each
    is found, from the bytes its readability check read (the whole file, ``check_readable``): on
    2,048 files of 80 kB the threads' opens and reads, each taking and giving back the GIL, slowed
    this thread's own work on every file (phase 1 before the store is opened: 1.30 -> 1.06 s, CPU
    -0.45 s). With many files (``SHARE_MIN_FILES``), helper processes look at the later ones
    meanwhile, each a run of them (``_Share``: readable, format, hash, and with ``flags`` also what
    ``prepare`` looks at inside them). A context manager: leaving it stops the hashing not yet begun
    and the helpers."""

    def __init__(
        self, paths: Sequence[str | Path], fmt: str | None = None, flags: IdentityFlags | None = None
    ) -> None:
        self.paths = list(paths)
        self._pool = ThreadPoolExecutor(max_workers=2)
        # (a file's digest, or the future of a large file's on a thread: most are known at once; a future
        # each, with its Condition, was ~1.3 kB a file made and dropped, on one core before the workers
        # fork: phase 1 on 2,048 small files 0.595 -> 0.545 s)
        hashing: dict[Path, Hash] = {}
        #: each file hashed on a thread: its size, and the bytes hashed so far (``hashed``)
        self._hashing: list[tuple[int, list[int]]] = []

        def hash_of(path: Path, digest: str | None) -> None:
            if path in hashing:
                return
            if digest is not None:  # (a helper hashed it)
                hashing[path] = digest
                return
            data = whole_file(path)
            size = os.stat(path).st_size if data is None else 0
            if size >= INLINE_HASH_BYTES:
                hashed = [0]
                self._hashing.append((size, hashed))
                hashing[path] = self._pool.submit(digest_of, path, ALGORITHM, hashed)
                return
            try:
                hashing[path] = digest_of(path) if data is None else digest_of_bytes(data)
            except Exception as e:  # (raised where prepare takes the hash, as a thread's would be)
                failed: Future[str] = Future()
                failed.set_exception(e)
                hashing[path] = failed

        #: helper processes looking at later files meanwhile (``_Share``; ``flags``: they also look
        #: inside them as ``prepare`` will with these flags), or None
        self.share: _Share | None = None
        try:
            steps = _steps(self.paths)
            self.share = _Share.start(steps, fmt, flags)
            with remembered_heads():
                self.files, self.unknown, self.reals = expand(steps, fmt, hash_of, self.share)
        except BaseException:
            self.close()
            raise
        self.hashes: list[Hash] = [hashing[path] for path, _ in self.files]

    def hashed(self) -> tuple[int, int]:
        """(bytes hashed so far, bytes to hash) of the files hashed on threads (the large ones: the
        others are hashed as they are found)."""
        return sum(h[0] for _size, h in self._hashing), sum(size for size, _h in self._hashing)

    def digest(self, path: Path, h: Hash, progress: Progress | None) -> str:
        """``path``'s digest, waited for if a thread is still computing it: meanwhile ``progress("hash",
        path, bytes hashed, bytes to hash)`` every ``HASH_PROGRESS_S`` (hashing reads every byte: 5 GB
        of files not in the page cache took ~10 s before anything else was said)."""
        if isinstance(h, str):
            return h
        while True:
            try:
                return h.result(timeout=HASH_PROGRESS_S if progress else None)
            except FutureTimeout:
                assert progress is not None
                progress("hash", str(path), *self.hashed())

    def close(self) -> None:
        """Stop the helpers and the hashing, and let go of each file's hash (a digest, or a future: a
        future each was ~1.3 kB a file, which the CLI's scan held for the whole ingest: 11 MB of 8,192
        files)."""
        if self.share is not None:
            self.share.close()
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.hashes = []
        self._hashing = []

    def __enter__(self) -> Scan:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def prepare(
    paths: Sequence[str | Path] | Scan, flags: IdentityFlags, fmt: str | None = None,
    progress: Progress | None = None,
) -> tuple[list[InputFile], list[Path], RankPlan]:
    """Phase 1 (see the module doc) over ``paths``, or over a ``Scan`` of them (``fmt`` then unused:
    the scan applied it). The scan is closed on return: no hashing thread outlives this phase (the
    ingest's workers fork after it). ``progress``: told how the hashing goes while it is waited for
    (``Scan.digest``)."""
    with paths if isinstance(paths, Scan) else Scan(paths, fmt, flags) as scan:
        # (each file's head is read once, not once per reader asked; each folder looked for a manifest
        # once; each hash is taken where it was computed before, so errors surface in the same order)
        with remembered_heads(), remembered_folders():
            return _prepare(scan, flags, progress)


def _prepare(
    scan: Scan, flags: IdentityFlags, progress: Progress | None
) -> tuple[list[InputFile], list[Path], RankPlan]:
    files, hashes, unknown, share, reals = scan.files, scan.hashes, scan.unknown, scan.share, scan.reals
    inputs: list[InputFile] = []
    manifests: dict[Path, RankManifest | None] = {}
    for (path, reader), digest_future, real in zip(files, hashes, reals):
        inside = share.inside(path, flags) if share is not None else None
        if inside is not None:
            info, size = inside.info, inside.size
        else:
            info, size = _inspected(path, reader, flags)
        digest = scan.digest(path, digest_future, progress)
        idents = inside.identities if inside is not None else _identities(path, reader, info, flags, manifests)
        sections = bool(info.ranks and has_rank_sections(reader))
        for index, ident in enumerate(idents):
            inp = InputFile(path, reader, info, size, digest, real, section=index if sections else None)
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


#: phase 1's look at each file (readable, its format, its hash, inside it: its rank) is shared with
#: helper processes when the inputs hold at least this many files and the machine more than one core:
#: a large job's thousands of small files cost ~0.25 ms each, on one core while the other waits for
#: the parsing workers, which fork after it (``ingest._early_workers``)
SHARE_MIN_FILES = 256
#: files each process takes at least (the helpers' start and their answers cost ~5-10 ms each)
SHARE_FILES_EACH = 128
#: most helper processes
SHARE_MAX_HELPERS = 7


class _First(NamedTuple):
    """What a helper found of one file in ``expand``'s look: its reader's name (None: not a profile),
    its digest and its resolved path (both None for a file that is not a profile)."""

    reader: str | None
    digest: str | None
    real: str | None


class _Inside(NamedTuple):
    """What a helper found inside one file in ``prepare``'s look: the reader's inspection, the file's
    size and its identities (one, or one per rank section)."""

    info: SourceInfo
    size: int
    identities: list[Identity]


class _Share:
    """Helper processes, each looking at one run of the inputs' files as this process would (``_look``),
    their answers taken as this process reaches those files. A helper says nothing of a file where it
    met a problem, and this process looks at that file itself, so what it raises, and in which order,
    is what it would raise alone; a helper that fails or dies costs only time (its files are looked at
    here). Started before this process looks at any file, so no hashing thread exists yet when they fork."""

    def __init__(self, flags: IdentityFlags | None) -> None:
        self.flags = flags
        self.runs: list[tuple[int, int, Any, Any]] = []  # (first step, end, pipe, process)
        self.firsts: dict[int, _First] = {}
        self.insides: dict[str, _Inside] = {}
        self.helper_of: dict[str, int] = {}  # (the helper of each of the helpers' files)
        self._got_first: set[int] = set()
        self._got_inside: set[int] = set()

    @classmethod
    def start(cls, steps: list[_Step], fmt: str | None, flags: IdentityFlags | None) -> _Share | None:
        """Helpers for the later runs of ``steps`` (this process keeps the first), or None when the
        inputs are too few, there is one core, or this platform cannot fork."""
        import multiprocessing as mp

        files = [i for i, s in enumerate(steps) if s.path is not None]
        processes = min(cores(), len(files) // SHARE_FILES_EACH, SHARE_MAX_HELPERS + 1)
        if len(files) < SHARE_MIN_FILES or processes < 2 or "fork" not in mp.get_all_start_methods() or _threads():
            return None
        from . import lifetime

        ctx: Any = mp.get_context("fork")
        share = cls(flags)
        cuts = [files[len(files) * k // processes] for k in range(processes)] + [len(steps)]
        try:
            with lifetime.starting_workers():
                for k in range(1, processes):
                    mine, theirs = ctx.Pipe(duplex=False)
                    items = [(i, s.path, s.explicit) for i, s in enumerate(steps[cuts[k] : cuts[k + 1]], cuts[k])
                             if s.path is not None]
                    share.helper_of.update((str(path), k - 1) for _i, path, _explicit in items)
                    p = ctx.Process(target=_look, args=(items, fmt, flags, theirs), daemon=True)
                    p.start()
                    theirs.close()
                    share.runs.append((cuts[k], cuts[k + 1], mine, p))
        except BaseException:
            share.close()
            raise
        return share

    def _run_of(self, index: int) -> int | None:
        for k, (lo, hi, _conn, _p) in enumerate(self.runs):
            if lo <= index < hi:
                return k
        return None

    def _receive(self, k: int) -> Any:
        """The next answer of helper ``k``, or None when it has none (it failed or died)."""
        try:
            return self.runs[k][2].recv()
        except Exception:  # (EOFError: it ended without answering; or an answer that does not unpickle)
            return None

    def first(self, index: int) -> _First | None:
        """What a helper found of step ``index``'s file in ``expand``'s look, or None: look at it here."""
        k = self._run_of(index)
        if k is None:
            return None
        self._take_first(k)
        return self.firsts.get(index)

    def _take_first(self, k: int) -> None:
        if k in self._got_first:
            return
        self._got_first.add(k)
        got = self._receive(k)
        if isinstance(got, dict):
            self.firsts.update(got)

    def inside(self, path: Path, flags: IdentityFlags) -> _Inside | None:
        """What a helper found inside ``path`` in ``prepare``'s look with these ``flags``, or None: look
        inside it here. (Helpers look inside only when they were given the flags, without --rank-by.)"""
        if self.flags is None or flags != self.flags or flags.rank_by is not None:
            return None
        k = self.helper_of.get(str(path))
        if k is None:
            return None
        if k not in self._got_inside:  # (taken as this process reaches the helper's files: it looks
            self._take_first(k)  # inside its own first, meanwhile)
            self._got_inside.add(k)
            got = self._receive(k)
            if isinstance(got, dict):
                self.insides.update(got)
        return self.insides.get(str(path))

    def close(self) -> None:
        for _lo, _hi, conn, p in self.runs:
            conn.close()
            if p.is_alive():
                p.terminate()
        for _lo, _hi, _conn, p in self.runs:
            p.join(10)
        self.runs = []
        # (what the helpers found is the inputs' now: their answers are let go, ~1 kB a file they looked at)
        self.firsts, self.insides, self.helper_of = {}, {}, {}


def _threads() -> bool:
    """Whether this process runs other threads: a fork copies only the calling thread, and a lock
    another one holds would stay held in the copy, so no helper is forked beside them (the CLI runs
    none; a program calling the API may)."""
    import threading

    return threading.active_count() > 1


def _look(items: list[tuple[int, Path, bool]], fmt: str | None, flags: IdentityFlags | None, conn: Any) -> None:
    """A helper process of ``_Share``: ``expand``'s and then ``prepare``'s look at each of ``items``
    (step index, path, named itself), sent as two answers, keyed by step index then by path. A file
    where anything goes wrong is left out of the answers (the parent looks at it again)."""
    from . import lifetime

    lifetime.leave_signals_to_parent()
    lifetime.die_with_parent()
    forced = readers.by_name(fmt) if fmt else None
    try:
        firsts: dict[int, _First] = {}
        found: list[tuple[Path, Reader]] = []
        with remembered_heads(), remembered_folders():
            folders: dict[str, str] = {}
            for index, path, explicit in items:
                try:
                    check_readable(path, INLINE_HASH_BYTES)
                    r = _detected(path, forced, explicit)
                    if r is None:
                        firsts[index] = _First(None, None, None)
                        continue
                    data = whole_file(path)
                    digest = digest_of(path) if data is None else digest_of_bytes(data)
                    firsts[index] = _First(r.NAME, digest, real_path(path, folders))
                    found.append((path, r))
                except Exception:
                    continue
            conn.send(firsts)
            if flags is None or flags.rank_by is not None:
                return
            insides: dict[str, _Inside] = {}
            manifests: dict[Path, RankManifest | None] = {}
            for path, r in found:
                try:
                    info, size = _inspected(path, r, flags)
                    insides[str(path)] = _Inside(info, size, _identities(path, r, info, flags, manifests))
                except Exception:
                    continue
            conn.send(insides)
    finally:
        conn.close()


def _inspected(path: Path, reader: Reader, flags: IdentityFlags) -> tuple[SourceInfo, int]:
    """``prepare``'s look inside one file: the reader's inspection (its rank sections by --rank-by), and
    its size."""
    info = inspect_file(reader, path)
    if flags.rank_by is not None:
        info = readers.split_ranks(reader, path, info, flags.rank_by)
    return info, path.stat().st_size


def _identities(
    path: Path, reader: Reader, info: SourceInfo, flags: IdentityFlags, manifests: dict[Path, RankManifest | None]
) -> list[Identity]:
    """The identity of the rank that wrote ``path``, or of each rank section it holds."""
    if info.ranks and has_rank_sections(reader):
        if flags.rank is not None or flags.rank_from_path:
            raise RankIdentityError(
                f"{path}: this {info.format} file holds {len(info.ranks)} ranks, each named inside it; "
                "--rank / --rank-from-path cannot apply to it: ingest it without those flags"
            )
        return [resolve_file(path, hint, flags, manifests, section=True) for hint in info.ranks]
    return [resolve_file(path, info.hint, flags, manifests)]


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
