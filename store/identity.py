"""Rank identity: which (global_rank, local_rank, hostname) wrote each input file.

Sources, strongest first (DESIGN.md): explicit flags (``--rank``, ``--local-rank``, ``--hostname``,
``--rank-from-path``), profdb's rank manifest, in-file metadata (the reader's RankHint), path
patterns. Flags override everything (they are the user's explicit word). Any other two sources that
disagree, two files claiming the same rank for the same kind of data, or a file whose rank no source
gives are errors that name the file and say how to fix it. Nothing here touches the database."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from .errors import RankIdentityError
from .manifest import RankManifest, find_manifest, read_manifest
from .records import RankHint
from .validate import MAX_RANK
from .validate import rank_hint as check_hint

#: rank folders: rank0003/, rank_3/, rank3/, rank-3/
RANK_DIR = re.compile(r"^rank[_-]?(\d+)$", re.IGNORECASE)
#: rank in a file name: rank-3.json, rank3_iter10_12.json, results.rank0003.json, sampled_rank-0.json.gz
RANK_FILE = re.compile(r"(?:^|[._-])rank[_-]?(\d+)(?=[._-]|$)", re.IGNORECASE)
#: rocprofv3's default layout %hostname%/%pid%_<kind>.csv|_results.db|_results.json
ROCPROF_PID_FILE = re.compile(r"^(\d+)_[a-z_]+\.(csv|db|json)(\.gz)?$")
#: torch.profiler.tensorboard_trace_handler: <hostname>_<pid>.<ns>.pt.trace.json
TENSORBOARD_FILE = re.compile(r"^(?P<host>.+)_(?P<pid>\d+)\.\d+\.pt\.trace\.json(\.gz)?$")

FIX_HINT = (
    "pass --rank N when all inputs come from one rank, or --rank-from-path REGEX "
    "(a regular expression whose first group, or group named 'rank', is the rank: "
    "e.g. --rank-from-path 'node\\d+_(\\d+)')"
)


@dataclass
class IdentityFlags:
    rank: int | None = None
    local_rank: int | None = None
    hostname: str | None = None
    rank_from_path: str | None = None
    allow_duplicate_ranks: bool = False
    #: split files holding several processes by this (``--rank-by gpu``: a merged rtl trace, one rank per
    #: gpuId); never done unless asked, since a gpuId is a device, not a rank
    rank_by: str | None = None

    def __post_init__(self) -> None:
        if self.rank_by is not None and self.hostname is None:
            raise RankIdentityError(
                f"--rank-by {self.rank_by} needs --hostname H: GPU ids name devices of one node, so the ranks "
                "they become must be placed on that node"
            )


@dataclass(slots=True)
class Identity:
    global_rank: int
    local_rank: int | None
    hostname: str | None
    world_size: int | None
    node_rank: int | None
    pid: int | None
    device: int | None
    origin: str
    manifest: RankManifest | None = None


@dataclass
class _Candidate:
    """One source's claim, with where it came from."""

    hint: RankHint
    origin: str


def path_hint(path: Path, file_pid: int | None = None) -> RankHint:
    """What the path alone says (weakest source).

    ``file_pid`` is the pid the file itself names (the reader's hint). A name shaped like the
    tensorboard handler's ``<hostname>_<pid>.<ns>.pt.trace.json`` is only that when its pid is the
    file's own: a custom worker name (``worker0_step_12.<ns>.pt.trace.json``) has the same shape, and
    taking ``worker0_step`` for a host would invent one. Otherwise nothing is taken from the name and
    ``hint.note`` says why (it ends up in the file's identity_origin)."""
    hint = RankHint(origin="path")
    m = RANK_FILE.search(path.name)
    if m:
        hint.global_rank = int(m.group(1))
        hint.origin = f"path ({path.name})"
    else:
        for parent in path.parents:
            m = RANK_DIR.match(parent.name)
            if m:
                hint.global_rank = int(m.group(1))
                hint.origin = f"path ({parent.name}/)"
                break
    tb = TENSORBOARD_FILE.match(path.name)
    if tb:
        name_pid = int(tb.group("pid"))
        if file_pid is not None and file_pid == name_pid:
            hint.hostname = tb.group("host")
            hint.pid = name_pid
        else:
            said = (
                f"the file's pid is {file_pid}" if file_pid is not None else "the file names no pid to check it against"
            )
            hint.note = (
                f"hostname not taken from the name {path.name!r}: it has the shape <hostname>_<pid>.<ns>.pt.trace.json "
                f"with pid {name_pid}, but {said}"
            )
    elif ROCPROF_PID_FILE.match(path.name):
        hint.pid = int(path.name.split("_", 1)[0])
        if path.parent.name and not RANK_DIR.match(path.parent.name):
            # rocprofv3 default %hostname%/%pid%: the folder holding <pid>_... is the hostname
            hint.hostname = path.parent.name
    return hint


def regex_hint(path: Path, pattern: re.Pattern[str]) -> RankHint:
    m = pattern.search(str(path))
    if not m:
        raise RankIdentityError(
            f"{path}: --rank-from-path {pattern.pattern!r} does not match this path; "
            "fix the expression (it is searched in the whole path) or ingest this file separately"
        )
    groups = m.groupdict()
    raw = groups.get("rank") if groups.get("rank") is not None else (m.group(1) if m.groups() else None)
    if raw is None or not str(raw).isdigit():
        raise RankIdentityError(
            f"{path}: --rank-from-path {pattern.pattern!r} matched {m.group(0)!r} but captured no rank number; "
            "put the rank digits in the first group, e.g. 'rank(\\d+)'"
        )
    hint = RankHint(global_rank=int(raw), origin=f"--rank-from-path ({m.group(0)})")
    if groups.get("local_rank") is not None:
        hint.local_rank = int(groups["local_rank"])
    if groups.get("hostname"):
        hint.hostname = groups["hostname"]
    return hint


def _manifest_hint(m: RankManifest) -> RankHint:
    return RankHint(
        global_rank=m.global_rank,
        local_rank=m.local_rank,
        hostname=m.hostname,
        world_size=m.world_size,
        node_rank=m.node_rank,
        pid=m.pid,
        origin="rank manifest",
    )


_FIELDS = ("global_rank", "local_rank", "hostname", "world_size", "node_rank")


def resolve_file(
    path: Path,
    file_hint: RankHint,
    flags: IdentityFlags,
    manifest_cache: dict[Path, RankManifest | None] | None = None,
    stop: Path | None = None,
    section: bool = False,
) -> Identity:
    """Combine every source for one file. Raises RankIdentityError naming the file.

    ``section``: the hint is one rank section of a file holding several ranks (a merged Metrix
    file): the file's own path and manifest speak for the file as a whole, not for this section."""
    cache = manifest_cache if manifest_cache is not None else {}
    mpath = None if section else find_manifest(path, stop, is_file=True)
    manifest = None
    if mpath is not None:
        if mpath not in cache:
            cache[mpath] = read_manifest(mpath)
        manifest = cache[mpath]
    if manifest is not None and flags.rank is not None and manifest.global_rank != flags.rank:
        # --rank says this file is another rank's: that manifest describes another rank folder, so
        # none of its facts (run, world size, hostname) belong to this file
        manifest = None
    candidates: list[_Candidate] = []  # strongest first, flags excluded
    notes: list[str] = []  # what a source said that was not taken, and why
    if manifest is not None:
        candidates.append(_Candidate(_manifest_hint(manifest), f"rank manifest {mpath}"))
    if file_hint.origin or any(getattr(file_hint, f) is not None for f in _FIELDS):
        # a section made by --rank-by is the user's word on the file, not something the file says
        where = (
            file_hint.origin
            if file_hint.origin.startswith("--rank-by")
            else f"in-file metadata ({file_hint.origin or 'file'})"
        )
        candidates.append(_Candidate(file_hint, where))
    if section:
        pass
    elif flags.rank_from_path:
        candidates.insert(0, _Candidate(regex_hint(path, re.compile(flags.rank_from_path)), "--rank-from-path"))
    else:
        ph = path_hint(path, file_hint.pid)
        candidates.append(_Candidate(ph, ph.origin))
        if ph.note:
            notes.append(ph.note)

    resolved: dict[str, object] = {}
    origin_of: dict[str, str] = {}
    overridden = {
        f
        for f, v in (("global_rank", flags.rank), ("local_rank", flags.local_rank), ("hostname", flags.hostname))
        if v is not None
    }
    for cand in candidates:  # what a flag overrides is not used, so not checked either
        check_hint(cand.hint, path, cand.origin, skip=overridden)
    check_hint(RankHint(flags.rank, flags.local_rank, flags.hostname), path, "the command line")
    for cand in candidates:
        for f in _FIELDS:
            v = getattr(cand.hint, f)
            if v is None or f in overridden:
                continue
            # the path's hostname guess (rocprofv3 %hostname% folder) never conflicts, it only fills in
            weak = cand.origin.startswith("path") and f == "hostname"
            if f in resolved:
                if resolved[f] != v and not weak:
                    raise RankIdentityError(
                        f"{path}: {origin_of[f]} says {f} = {resolved[f]!r} but {cand.origin} says {v!r}; "
                        f"fix or remove the wrong source, or override with --{f.replace('_', '-')}"
                        if f in ("local_rank", "hostname")
                        else f"{path}: {origin_of[f]} says {f} = {resolved[f]!r} but {cand.origin} says {v!r}; "
                        f"fix or remove the wrong source, or override with --rank / --rank-from-path"
                    )
                continue
            resolved[f] = v
            origin_of[f] = cand.origin
    # explicit flags win over everything
    if flags.rank is not None:
        resolved["global_rank"], origin_of["global_rank"] = flags.rank, "--rank"
    if flags.local_rank is not None:
        resolved["local_rank"], origin_of["local_rank"] = flags.local_rank, "--local-rank"
    if flags.hostname is not None:
        resolved["hostname"], origin_of["hostname"] = flags.hostname, "--hostname"
    if "global_rank" not in resolved:
        raise RankIdentityError(
            f"{path}: cannot tell which rank wrote this file (no rank manifest, no rank inside the file, "
            f"no rank in its path); {FIX_HINT}"
        )
    pid = file_hint.pid
    if pid is None:
        for cand in candidates:
            if cand.hint.pid is not None:
                pid = cand.hint.pid
                break
    said = [f"{f} from {origin_of[f]}" for f in ("global_rank", "local_rank", "hostname") if f in origin_of]
    if file_hint.device is not None:
        said.append(f"device from {file_hint.device_origin or 'in-file metadata'}")
    origin = "; ".join(said + notes)
    return Identity(
        global_rank=int(resolved["global_rank"]),  # type: ignore[call-overload]
        local_rank=resolved.get("local_rank"),  # type: ignore[arg-type]
        hostname=resolved.get("hostname"),  # type: ignore[arg-type]
        world_size=resolved.get("world_size"),  # type: ignore[arg-type]
        node_rank=resolved.get("node_rank"),  # type: ignore[arg-type]
        pid=pid,
        device=file_hint.device,
        origin=origin,
        manifest=manifest,
    )


@dataclass(slots=True)
class RankClaim:
    """A file's resolved identity, for cross-file checks."""

    path: Path
    format: str
    content_kind: str
    identity: Identity


@dataclass
class RankPlan:
    """The merged identity of each rank over all inputs."""

    ranks: dict[int, Identity] = field(default_factory=dict)
    world_size: int | None = None


def check_claims(claims: Iterable[RankClaim], flags: IdentityFlags) -> RankPlan:
    """Cross-file rules: one file per (rank, format, kind of data) unless allowed; a rank has one
    hostname and local rank; all files agree on the world size; ranks fit in the world size."""
    plan = RankPlan()
    seen: dict[tuple[int, str, str], Path] = {}
    world_from: Path | None = None
    path_of: dict[int, Path] = {}
    for c in claims:
        ident = c.identity
        key = (ident.global_rank, c.format, c.content_kind)
        if key in seen and not flags.allow_duplicate_ranks:
            raise RankIdentityError(
                f"{c.path} and {seen[key]} both claim rank {ident.global_rank} ({c.format} {c.content_kind}); "
                "if they are different ranks, fix their rank (e.g. --rank-from-path REGEX); if they are separate "
                "windows or processes of the same rank, pass --allow-duplicate-ranks; "
                "or ingest them as separate runs with --run"
            )
        seen.setdefault(key, c.path)
        if ident.world_size is not None:
            if plan.world_size is not None and plan.world_size != ident.world_size:
                raise RankIdentityError(
                    f"{c.path}: world size {ident.world_size} but {world_from} says {plan.world_size}; "
                    "these files come from different jobs: ingest them as separate runs with --run"
                )
            plan.world_size, world_from = ident.world_size, c.path
        merged = plan.ranks.get(ident.global_rank)
        if merged is None:
            plan.ranks[ident.global_rank] = replace(ident)
            path_of[ident.global_rank] = c.path
            continue
        for f in ("local_rank", "hostname"):
            new, old = getattr(ident, f), getattr(merged, f)
            if new is not None and old is not None and new != old:
                raise RankIdentityError(
                    f"{c.path}: rank {ident.global_rank} has {f} {new!r} here but {old!r} in another input; "
                    f"fix the wrong source or override with --{f.replace('_', '-')}"
                )
            if old is None and new is not None:
                setattr(merged, f, new)
        for f in ("pid", "device", "node_rank"):
            if getattr(merged, f) is None and getattr(ident, f) is not None:
                setattr(merged, f, getattr(ident, f))
    if plan.world_size is not None:
        for r, ident in plan.ranks.items():
            if r >= plan.world_size:
                raise RankIdentityError(
                    f"{path_of[r]}: rank {r} is outside the world size {plan.world_size} ({ident.origin}); "
                    "fix the rank source or ingest these files as separate runs"
                )
    return plan


def missing_ranks(present: Iterable[int], world_size: int | None) -> list[int]:
    if not world_size:
        return []
    have = set(present)
    return [r for r in range(world_size) if r not in have]


def rank_spans(ranks: Iterable[int]) -> list[tuple[int, int]]:
    """``[2, 3, 4, 7]`` -> ``[(2, 4), (7, 7)]``: consecutive ranks as (first, last)."""
    spans: list[list[int]] = []
    for g in sorted(set(ranks)):
        if spans and spans[-1][1] == g - 1:
            spans[-1][1] = g
        else:
            spans.append([g, g])
    return [(a, b) for a, b in spans]


def span_text(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}-{last}"


def rank_ranges(ranks: Iterable[int]) -> str:
    """``[2, 3, 4, 7]`` -> ``"2-4, 7"``."""
    return ", ".join(span_text(a, b) for a, b in rank_spans(ranks))


def parse_ranks(text: str) -> frozenset[int]:
    """``"0,3,8-11"`` -> {0, 3, 8, 9, 10, 11}. Raises ValueError on anything else."""
    ranks: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            raise ValueError(f"empty item in rank list {text!r}; write e.g. 0,3 or 0-3")
        lo_s, dash, hi_s = part.partition("-")
        try:
            lo = int(lo_s)
            hi = int(hi_s) if dash else lo
        except ValueError:
            raise ValueError(f"{part!r} in rank list {text!r} is not a rank or a range like 0-3") from None
        if lo < 0 or hi < lo:
            raise ValueError(f"{part!r} in rank list {text!r} is not a rank or an increasing range like 0-3")
        if hi > MAX_RANK:
            raise ValueError(f"{part!r} in rank list {text!r} goes beyond rank {MAX_RANK}, profdb's largest rank")
        ranks.update(range(lo, hi + 1))
    return frozenset(ranks)
