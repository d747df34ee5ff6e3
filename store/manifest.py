"""profdb's rank manifest: the authoritative identity of a rank folder.

``profdb record`` writes ``<rank_dir>/profdb-rank.json``; ``profdb ingest`` applies it to every
file below that folder. Format (JSON object, version 1):

    {
      "profdb_manifest": 1,
      "run": "llama-tp8" | null,          # run name given to `profdb record --run`, if any
      "global_rank": 3, "local_rank": 1, "world_size": 8, "node_rank": 1,
      "hostname": "nid001234",
      "launcher": "torchrun" | "openmpi" | "mpich" | "slurm" | "horovod" | "single",
      "command": ["rocprofv3", "--kernel-trace", ...],
      "pid": 12345,                        # pid of the profiled command (null until started)
      "started_at": "2026-11-22T14:00:00+00:00",
      "ended_at": "2026-11-22T14:05:00+00:00" | null,
      "exit_code": 0 | null                # null while running or when killed before exit
    }

Required: profdb_manifest, global_rank. Everything else may be null.
"""

from __future__ import annotations

import functools
import json
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .errors import InputError
from .validate import INT64_MAX, INT64_MIN

MANIFEST_NAME = "profdb-rank.json"
MANIFEST_VERSION = 1


@dataclass
class RankManifest:
    global_rank: int
    local_rank: int | None = None
    world_size: int | None = None
    node_rank: int | None = None
    hostname: str | None = None
    launcher: str | None = None
    run: str | None = None
    command: list[str] = field(default_factory=list)
    pid: int | None = None
    started_at: str | None = None
    ended_at: str | None = None
    exit_code: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"profdb_manifest": MANIFEST_VERSION, **asdict(self)}


@dataclass(frozen=True)
class RankEnd:
    """How a rank's command ended, as its manifest says (every field None without one)."""

    exit_code: int | None = None
    #: the signal that killed it (exit status 128+N)
    signal: int | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    #: ok | failed (exit status != 0) | killed (by a signal) | unfinished (started, never ended:
    #: `profdb record` itself was killed, or the job still runs); None: nothing recorded
    end_status: str | None = None

    @property
    def abnormal(self) -> bool:
        return self.end_status in ABNORMAL


#: the end statuses flagged in runs, ranks, notes and the report (the profile may be cut short)
ABNORMAL = ("failed", "killed", "unfinished")
#: the highest signal number an exit status 128+N is read as
_MAX_SIGNAL = 64


def _utc(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        return None
    return t.astimezone(timezone.utc).replace(tzinfo=None) if t.tzinfo else t


def rank_end(m: RankManifest) -> RankEnd:
    """How the rank of manifest ``m`` ended (see ``RankEnd.end_status``)."""
    started, ended = _utc(m.started_at), _utc(m.ended_at)
    code = m.exit_code
    if code is None:
        return RankEnd(None, None, started, ended, "unfinished" if started else None)
    if code == 0:
        return RankEnd(0, None, started, ended, "ok")
    if 128 < code <= 128 + _MAX_SIGNAL:
        return RankEnd(code, code - 128, started, ended, "killed")
    return RankEnd(code, None, started, ended, "failed")


def describe_end(end: RankEnd) -> str:
    """``killed by signal 9 (SIGKILL)`` / ``failed with exit status 3`` / ``ok`` / ..."""
    if end.end_status == "killed" and end.signal is not None:
        try:
            name = f" ({signal.Signals(end.signal).name})"
        except ValueError:
            name = ""
        return f"killed by signal {end.signal}{name}"
    if end.end_status == "failed":
        return f"failed with exit status {end.exit_code}"
    if end.end_status == "unfinished":
        return "never ended (no exit status recorded: its recorder was killed, or it still runs)"
    return end.end_status or "unknown"


def write_manifest(rank_dir: Path, manifest: RankManifest) -> Path:
    """Write atomically (temp file + rename) so a reader never sees half a manifest."""
    rank_dir.mkdir(parents=True, exist_ok=True)
    path = rank_dir / MANIFEST_NAME
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(manifest.to_json(), indent=2) + "\n")
    os.replace(tmp, path)
    return path


def read_manifest(path: Path) -> RankManifest:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise InputError(
            f"{path}: not a readable profdb rank manifest ({e}); delete it or rerun `profdb record`"
        ) from e
    if not isinstance(data, dict) or data.get("profdb_manifest") != MANIFEST_VERSION:
        raise InputError(
            f"{path}: not a profdb rank manifest (expected \"profdb_manifest\": {MANIFEST_VERSION}); "
            "delete it or rerun `profdb record`"
        )
    if type(data.get("global_rank")) is not int:
        raise InputError(f"{path}: rank manifest has no integer global_rank; rerun `profdb record`")
    known = {f for f in RankManifest.__dataclass_fields__}
    fields = {k: v for k, v in data.items() if k in known}
    for k, v in fields.items():
        want = _FIELD_TYPES.get(k, str)
        ok = v is None or type(v) is want
        if k == "command":
            ok = type(v) is list and all(type(a) is str for a in v)
        if not ok:
            raise InputError(
                f"{path}: rank manifest field {k!r} is {v!r}, "
                f"not {'a list of strings' if k == 'command' else want.__name__}; "
                "fix or delete the manifest, or rerun `profdb record`"
            )
    code = fields.get("exit_code")
    if code is not None and not INT64_MIN <= code <= INT64_MAX:  # (the other integers: validate.rank_hint)
        raise InputError(
            f"{path}: rank manifest field 'exit_code' is {code}, beyond 64 bits (the rank table's column); "
            "fix or delete the manifest, or rerun `profdb record`"
        )
    return RankManifest(**fields)


#: manifest fields that are not strings (every other field is a string or null)
_FIELD_TYPES: dict[str, type] = {
    "global_rank": int,
    "local_rank": int,
    "world_size": int,
    "node_rank": int,
    "pid": int,
    "exit_code": int,
    "command": list,
}

#: how many folders above an input file a manifest may be: a profiler writes at most a few levels
#: below ``profdb record``'s rank folder (rocprofv3: <rank_dir>/<hostname>/<pid>_kernel_trace.csv)
MANIFEST_MAX_LEVELS = 3


def _shared_folders() -> frozenset[str]:
    """Folders whose manifest can never speak for what is below them: home, temp, filesystem root."""
    import tempfile

    return _resolved_shared(os.environ.get("HOME"), tempfile.gettempdir())


@functools.lru_cache(maxsize=4)
def _resolved_shared(home: str | None, temp: str) -> frozenset[str]:
    """(Resolved once per home and temporary folder: three resolves per input file were 0.4 s of
    looking through 1,024 ranks' traces.)"""
    out = {"/", os.path.realpath(temp), os.path.realpath("/tmp")}
    if home:
        out.add(os.path.realpath(home))
    return frozenset(out)


#: find_manifest's answers (by resolved folder, resolved stop and levels left) and resolved folders,
#: while ``remembered_folders`` is active; None otherwise (a long-lived process sees files change)
_memo: tuple[dict[tuple[str, str | None, int], str | None], dict[str, str]] | None = None


@contextmanager
def remembered_folders() -> Iterator[None]:
    """Within: ``find_manifest`` remembers what it found from each folder and each folder's resolved
    path, so the files of one folder, or of sibling rank folders, do not stat and resolve the same
    folders again (2,048 rank folders: 4 stats and 2 resolves per file, ~0.3 s of looking through
    the inputs). For one pass over the inputs (``inputs.prepare``), not across ingests."""
    global _memo
    outer = _memo
    _memo = ({}, {})
    try:
        yield
    finally:
        _memo = outer


def _absolute(path: Path) -> str:
    """``path`` made absolute as ``Path.cwd() / path`` would (no ``..`` collapsed: a link's parent is
    not the folder above its name)."""
    p = os.fspath(path)
    return p if os.path.isabs(p) else os.path.join(os.getcwd(), p)


def _resolve(d: str, resolved: dict[str, str] | None) -> str:
    """``os.path.realpath(d)`` of an absolute, normalised folder path; with a memo, a folder that is
    not a link is its resolved parent's child (one lstat instead of one per component)."""
    if resolved is None:
        return os.path.realpath(d)
    got = resolved.get(d)
    if got is None:
        parent, name = os.path.split(d)
        if parent != d and name not in ("", ".", "..") and not os.path.islink(d):
            got = os.path.join(_resolve(parent, resolved), name)
        else:
            got = os.path.realpath(d)
        resolved[d] = got
    return got


def real_path(path: Path, folders: dict[str, str]) -> str:
    """``os.path.realpath(path)``, the resolved folders remembered in ``folders`` (a dict the caller
    keeps for one pass over its inputs): one lstat for a file that is not a link instead of one per
    component of its path (~9 on 2,048 rank folders' files)."""
    p = _absolute(path)
    if os.path.islink(p):
        return os.path.realpath(p)
    folder, name = os.path.split(p)
    return os.path.join(_resolve(folder, folders), name) if name not in ("", ".", "..") else os.path.realpath(p)


def find_manifest(path: Path, stop: Path | None = None, *, is_file: bool = False) -> Path | None:
    """The nearest manifest in ``path``'s folder or its parents: at most ``MANIFEST_MAX_LEVELS``
    folders up, not above ``stop``, and never one in a shared folder (``$HOME``, the temporary
    folder, ``/``): a stray manifest there would relabel every input below it. ``is_file``: the
    caller knows ``path`` is a file (not looked at again). Works on strings: pathlib's parsing and
    hashing were most of its ~0.2 ms a file on 2,048 rank folders."""
    answers, resolved = _memo if _memo is not None else (None, None)
    p = _absolute(path)
    d = _resolve(p if not is_file and os.path.isdir(p) else os.path.dirname(p), resolved)
    stop_r = _resolve(_absolute(stop), resolved) if stop else None
    shared = _shared_folders()
    walked: list[tuple[str, str | None, int]] = []  # (every folder walked has the same answer)
    found: str | None = None
    for level in range(MANIFEST_MAX_LEVELS + 1):
        key = (d, stop_r, MANIFEST_MAX_LEVELS - level)
        if answers is not None and key in answers:
            found = answers[key]
            break
        walked.append(key)
        if d in shared:
            break
        candidate = os.path.join(d, MANIFEST_NAME)
        if os.path.isfile(candidate):
            found = candidate
            break
        parent = os.path.dirname(d)
        if parent == d or (stop_r is not None and d == stop_r):
            break
        d = parent
    if answers is not None:
        answers.update((k, found) for k in walked)
    return Path(found) if found is not None else None
