"""The cross-rank questions: imbalance and stragglers, hotspots, steps, per-rank time split, plain SQL.

Every question returns a ``Result``: column ``headers``, ``rows`` (raw values: integer ns in
``*_ns`` columns, ratios as floats), a one-line ``headline`` (the verdict: most likely straggler and
why) and ``notes`` (choices made, data that is missing). The CLI prints headline and notes on stderr
and renders the rows; nothing here knows about output formats.

All figures come from the per-(rank, name, kind) ``summary`` table (and ``step``), never from a scan
of ``activity``, in SQL text that runs unchanged on SQLite and PostgreSQL (reader.py: through
SQLAlchemy, or through sqlite3 alone for a query process, which then never imports SQLAlchemy). The few per-name
numbers that need more than SUM/MAX/MIN (coefficient of variation, slowest rank, absent ranks) are
computed in Python on the small per-rank result of the top names. The metrics are defined once, in
``metrics.py``; the SQL views of migration 0002 (``imbalance_v``, ``hotspot_v``...) answer the same
questions for sqlite3/psql users and the tests check that both agree.

Communication (category ``communication`` from ``classify.py``: NCCL/RCCL kernels, ``gloo:*`` /
``nccl:*`` annotations, c10d ops) is reported apart and read inverted: time in a collective is mostly
waiting for the slowest peer, so the rank that waits *least* is the likely straggler."""

from __future__ import annotations

import re
import sqlite3
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any, NamedTuple

from . import reader
from .collectives import Analysis
from .errors import QueryError
from .findings import RunVerdict, profile_window, run_findings, run_verdict, window_notes
from .metrics import Spread, ratio, spread
from .reader import Db, RawSqlite, chunks, in_list
from .records import KINDS, NESTED_KINDS
from .scope import (
    RankRef,
    RunScope,
    copies_notes,
    digest_notes,
    missing_notes,
    scope_of,
    unread_notes,
    with_ranks,
)
from .units import fmt_ns
from .verdict import RankTotal

if TYPE_CHECKING:
    from sqlalchemy import Connection

COMM = "communication"
#: ``--kind gpu``: everything that runs on the device
GPU_KINDS: tuple[str, ...] = ("kernel", "memcpy", "memset")
KIND_ALIASES: dict[str, tuple[str, ...]] = {"gpu": GPU_KINDS}
#: CPU-only runs (e.g. torchrun with gloo) have no device activity: fall back to CPU operators
FALLBACK_KINDS: tuple[str, ...] = ("cpu_op",)
#: where collective waiting is best measured, best first: device kernels (NCCL/RCCL), device-side
#: annotations, host annotations (gloo:all_reduce runs on gloo's worker for the whole collective),
#: then host ops (c10d::allreduce_ is mostly the launch) and API calls
COMM_KIND_ORDER: tuple[str, ...] = ("kernel", "gpu_annotation", "annotation", "cpu_op", "api")
GROUP_BY = ("rank", "host", "local-rank")

#: a summary row's time: self (exclusive) time, which for kinds that do not nest is the total; stores
#: ingested before migration 0003 have no self time (NULL) and fall back to the inclusive total
SELF_NS = "COALESCE(summary.self_ns, summary.total_ns)"
#: summary rows with their rank (a run's rows: ``rank.run_id``)
_SUMMARY = "summary JOIN rank ON rank.id = summary.rank_id"


def _time(inclusive: bool) -> str:
    return "summary.total_ns" if inclusive else SELF_NS


@dataclass
class Result:
    headers: list[str]
    rows: list[tuple[Any, ...]]
    #: one line, the answer in words (e.g. the likely straggler and why); None when there is none
    headline: str | None = None
    #: further lines for the reader (stderr): choices made, missing data
    notes: list[str] = field(default_factory=list)

    def records(self) -> list[dict[str, Any]]:
        """The rows as dicts keyed by header (what ``--format json`` prints)."""
        return [dict(zip(self.headers, row)) for row in self.rows]

    def to_pandas(self) -> Any:
        """The rows as a pandas DataFrame, columns named and valued as in ``--format csv`` (needs the
        optional extra: ``pip install 'profdb[pandas]'``)."""
        try:
            import pandas
        except ImportError as e:
            raise ImportError("Result.to_pandas() needs pandas: pip install 'profdb[pandas]'") from e
        return pandas.DataFrame.from_records(self.rows, columns=self.headers)


# ---------------------------------------------------------------------------------------------
# kinds, name filter


def parse_kinds(kind: str | Sequence[str] | None) -> tuple[str, ...] | None:
    """``"kernel"``, ``"kernel,memcpy"``, ``"gpu"`` (kernel, memcpy, memset) or a list of those."""
    if kind is None:
        return None
    parts = [kind] if isinstance(kind, str) else list(kind)
    out: list[str] = []
    for part in parts:
        for k in (p.strip() for p in part.split(",")):
            if not k:
                continue
            for kk in KIND_ALIASES.get(k, (k,)):
                if kk not in KINDS:
                    raise QueryError(
                        f"unknown kind {kk!r}; choose from {', '.join(KINDS)} or 'gpu' (kernel, memcpy, memset)"
                    )
                if kk not in out:
                    out.append(kk)
    if not out:
        raise QueryError("--kind is empty; choose from " + ", ".join(KINDS))
    return tuple(out)


def like_pattern(name_like: str | None) -> str | None:
    """An SQL LIKE pattern, matched case-insensitively; without a ``%`` it matches a substring."""
    if name_like is None or name_like == "":
        return None
    return name_like if "%" in name_like else f"%{name_like}%"


@dataclass(frozen=True)
class RunFacts:
    """What a run holds, from one small query: summary rows and total ns per (kind, category)."""

    rows: dict[tuple[str, str], int]
    total_ns: dict[tuple[str, str], int]

    @property
    def kinds(self) -> set[str]:
        return {k for k, _c in self.rows}

    def comm_kind(self) -> str | None:
        have = {k for k, c in self.rows if c == COMM}
        for k in COMM_KIND_ORDER:
            if k in have:
                return k
        return sorted(have)[0] if have else None

    def kind_total(self, kinds: Iterable[str]) -> int:
        ks = set(kinds)
        return sum(v for (k, _c), v in self.total_ns.items() if k in ks)


def run_facts(db: Db, scope: RunScope) -> RunFacts:
    got = reader.rows(db, f"SELECT summary.kind, summary.category, COUNT(*), SUM({SELF_NS}) FROM {_SUMMARY} "
                          "WHERE rank.run_id = :run GROUP BY summary.kind, summary.category", {"run": scope.id})
    return RunFacts({(k, c): int(n) for k, c, n, _t in got}, {(k, c): int(t or 0) for k, c, _n, t in got})


def select_kinds(
    db: Db,
    scope: RunScope,
    kind: str | Sequence[str] | None,
    default: tuple[str, ...],
    facts: RunFacts | None = None,
) -> tuple[tuple[str, ...], list[str]]:
    """The kinds to report, and notes about the choice. Without ``kind``: ``default`` when the run has
    any of it, else CPU operators (a CPU-only run), else whatever kinds the run has."""
    chosen = parse_kinds(kind)
    present = (facts or run_facts(db, scope)).kinds
    if not present:
        raise QueryError(
            f"run {scope.name!r} has no timed activity in the store (no summary rows); "
            "ingest its profiles (profdb ingest PATH...) or choose another --run"
        )
    if chosen is not None:
        notes = []
        if not any(k in present for k in chosen):
            notes.append(
                f"run {scope.name!r} has no {'/'.join(chosen)} activity; it has: {', '.join(sorted(present))}"
            )
        return chosen, notes
    if any(k in present for k in default):
        return default, []
    fallback = tuple(k for k in FALLBACK_KINDS if k in present) or tuple(sorted(present))
    # (a run whose device events profdb does not read, another accelerator's, is not called CPU-only)
    none = "no GPU activity profdb reads" if scope.unread else "no GPU activity"
    return fallback, [
        f"run {scope.name!r} has {none} ({'/'.join(default)}); showing {'/'.join(fallback)} "
        "instead (pass --kind to choose)"
    ]


def comm_kind(db: Db, scope: RunScope, facts: RunFacts | None = None) -> str | None:
    """The kind whose communication rows best measure collective waiting in this run (see
    ``COMM_KIND_ORDER``), or None when the run has no communication at all."""
    return (facts or run_facts(db, scope)).comm_kind()


def _from_where(scope: RunScope, kinds: Iterable[str], pattern: str | None, params: dict[str, Any],
                with_name: bool = False) -> str:
    """``FROM`` the run's summary rows of ``kinds`` (and names, joined when asked or when matching
    ``pattern``: LIKE, case-insensitively) ``WHERE``..., its values added to ``params``."""
    params["run"] = scope.id
    sql = (f"FROM {_SUMMARY}{' JOIN name ON name.id = summary.name_id' if with_name or pattern is not None else ''} "
           f"WHERE rank.run_id = :run AND summary.kind IN ({in_list('kind', sorted(set(kinds)), params)})")
    if pattern is not None:
        params["pattern"] = pattern
        sql += " AND lower(name.value) LIKE lower(:pattern)"
    return sql


#: per rank id: total ns per (kind, category)
RankTotals = dict[int, dict[tuple[str, str], int]]


def rank_totals(db: Db, scope: RunScope, kinds: Iterable[str], pattern: str | None = None) -> RankTotals:
    """Per rank: total ns per (kind, category) over ``kinds`` (names LIKE ``pattern`` only, if given)."""
    params: dict[str, Any] = {}
    got = reader.rows(db, f"SELECT summary.rank_id, summary.kind, summary.category, SUM({SELF_NS}) "
                          f"{_from_where(scope, kinds, pattern, params)} "
                          "GROUP BY summary.rank_id, summary.kind, summary.category", params)
    out: RankTotals = defaultdict(dict)
    for rank_id, kind, cat, total in got:
        out[rank_id][(kind, cat)] = int(total or 0)
    return out


def _busy(totals: RankTotals, scope: RunScope, kinds: Iterable[str], exclude: tuple[str, ...] = (COMM,)) -> list[int]:
    """Per rank, in rank order: time in ``kinds`` outside the ``exclude`` categories."""
    ks = set(kinds)
    return [
        sum(v for (k, c), v in totals.get(r.id, {}).items() if k in ks and c not in exclude) for r in scope.ranks
    ]


def _in_category(totals: RankTotals, scope: RunScope, kinds: Iterable[str], category: str) -> list[int]:
    ks = set(kinds)
    return [sum(v for (k, c), v in totals.get(r.id, {}).items() if k in ks and c == category) for r in scope.ranks]


# ---------------------------------------------------------------------------------------------
# the verdict: which rank is the likely straggler, and why


@dataclass(frozen=True)
class Verdict:
    """The run's one straggler verdict (``findings.run_verdict``), with the named rank resolved."""

    rank: RankRef | None
    line: str
    #: the verdict's evidence and the collective timeline it came from (None for a single rank)
    detail: RunVerdict | None = None


def straggler(
    db: Db,
    scope: RunScope,
    kinds: Sequence[str],
    facts: RunFacts | None = None,
    totals: RankTotals | None = None,
    analysis: Analysis | None = None,
) -> Verdict:
    """The one straggler verdict of the run (verdict.straggler_verdict): from the collective timeline
    (who entered collectives last, who waited on whom) when the run has one; otherwise the documented
    fallback on per-rank totals in ``kinds`` and communication (the rank that waits least in
    collectives, else the busiest), saying so. ``totals`` must cover ``kinds`` and the communication
    kind when given; ``analysis``: the run's, when the caller has it (findings.run_findings)."""
    if len(scope.ranks) < 2:
        return Verdict(None, f"no clear straggler: run {scope.name!r} has {len(scope.ranks)} rank, nothing to compare")
    ck = comm_kind(db, scope, facts)
    if totals is None:
        totals = rank_totals(db, scope, set(kinds) | ({ck} if ck else set()))
    busy = _busy(totals, scope, kinds)
    wait = _in_category(totals, scope, (ck,), COMM) if ck else [0] * len(busy)
    fallback = [
        RankTotal(r.global_rank, busy[i], wait[i] if ck and wait[i] else None) for i, r in enumerate(scope.ranks)
    ]
    rv = run_verdict(db, scope, fallback, analysis)
    named = next((r for r in scope.ranks if r.global_rank == rv.verdict.rank), None)
    return Verdict(named, rv.verdict.line, rv)


def _verdict_notes(verdict: Verdict, scope: RunScope) -> list[str]:
    """What the verdict's figures cover (the collective timeline's window and ranks), or why it fell back."""
    if verdict.detail is None:
        return []
    f = verdict.detail.findings
    return window_notes(f, scope) if f.has_timeline else list(f.notes)


def _time_note(kinds: Iterable[str], inclusive: bool) -> str:
    nested = sorted(set(kinds) & NESTED_KINDS)
    if not nested:
        return "times: total duration per (rank, name)"
    if inclusive:
        return (f"{'/'.join(nested)} times are inclusive (--inclusive): a nested op is counted again in each of its "
                "parents")
    return (f"{'/'.join(nested)} times are self time (the time in nested child ops is counted in the child only); "
            "--inclusive for inclusive times")


def _scope_notes(scope: RunScope) -> list[str]:
    return (missing_notes(scope) + end_notes(scope) + digest_notes(scope) + copies_notes(scope.name, scope.copies)
            + unread_notes(scope.unread))


def end_notes(scope: RunScope) -> list[str]:
    """A note naming the ranks whose command failed, was killed or never ended (manifest of `profdb
    record`): their profiles may stop early, so their figures may be low."""
    bad = scope.ended_abnormally()
    if not bad:
        return []
    return [
        f"run {scope.name!r}: {len(bad)} rank(s) did not end well, their profiles may be cut short (figures low): "
        + "; ".join(f"rank {r.global_rank} {r.end()}" for r in bad)
    ]


# ---------------------------------------------------------------------------------------------
# imbalance


#: where the largest and smallest T_r are (metrics.spread's argmax / argmin): rank, host, GPU slot
EXTREME_HEADERS = [
    "slowest_rank",
    "slowest_host",
    "slowest_local_rank",
    "fastest_rank",
    "fastest_host",
    "fastest_local_rank",
]

IMBALANCE_HEADERS = [
    "name",
    "kind",
    "category",
    "calls",
    "mean_per_rank_ns",
    "max_ns",
    "min_ns",
    "imbalance",
    "recoverable_ns",
    "cv",
    *EXTREME_HEADERS,
    "suspect_rank",
    "missing_ranks",
]


@dataclass(frozen=True)
class NameGroup:
    kind: str
    name_id: int
    name: str
    category: str
    calls: int
    total: int
    max: int


def name_groups(
    db: Db, scope: RunScope, kinds: Iterable[str], pattern: str | None, inclusive: bool = False
) -> list[NameGroup]:
    """Per (kind, name) of ``kinds`` in the run: calls, total and largest T_r (one GROUP BY); T_r is
    self time (``inclusive``: the inclusive total, which counts nested CPU ops in their parents)."""
    params: dict[str, Any] = {}
    t = _time(inclusive)
    got = reader.rows(db, "SELECT summary.kind, summary.name_id, name.value, MIN(summary.category), "
                          f"SUM(summary.calls), SUM({t}), MAX({t}) "
                          f"{_from_where(scope, kinds, pattern, params, with_name=True)} "
                          "GROUP BY summary.kind, summary.name_id, name.value", params)
    return [NameGroup(k, int(i), v, c, int(n), int(t or 0), int(m or 0)) for k, i, v, c, n, t, m in got]


def _top(groups: Iterable[NameGroup], n_ranks: int, top: int, by: str) -> list[NameGroup]:
    """Largest recoverable time (n * max - total, exact in integers) or largest total; ties by name."""
    if by == "recoverable":
        ordered = sorted(groups, key=lambda g: (-(g.max * n_ranks - g.total), g.name, g.kind))
    else:
        ordered = sorted(groups, key=lambda g: (-g.total, g.name, g.kind))
    return ordered[:top] if top > 0 else ordered


def rank_values(
    db: Db, scope: RunScope, groups: Sequence[NameGroup], inclusive: bool = False
) -> dict[tuple[str, int], tuple[list[int], set[int]]]:
    """For each (kind, name_id): T_r in rank order (0 where absent) and the positions of the ranks
    that have the name."""
    pos = {r.id: i for i, r in enumerate(scope.ranks)}
    out = {(g.kind, g.name_id): ([0] * len(scope.ranks), set[int]()) for g in groups}
    name_ids = sorted({g.name_id for g in groups})
    kinds = sorted({g.kind for g in groups})
    for chunk in chunks(name_ids):
        params: dict[str, Any] = {}
        got = reader.rows(db, f"SELECT summary.kind, summary.name_id, summary.rank_id, {_time(inclusive)} "
                              f"{_from_where(scope, kinds, None, params)} "
                              f"AND summary.name_id IN ({in_list('name', chunk, params)})", params)
        for kind, name_id, rank_id, total in got:
            entry = out.get((kind, name_id))
            if entry is not None:
                entry[0][pos[rank_id]] = int(total)
                entry[1].add(pos[rank_id])
    return out


def _missing(scope: RunScope, present: set[int]) -> str:
    return ",".join(str(r.global_rank) for i, r in enumerate(scope.ranks) if i not in present)


def _imbalance_row(scope: RunScope, g: NameGroup, values: list[int], present: set[int]) -> tuple[Any, ...]:
    s = spread(values)
    slow = scope.ranks[s.argmax]
    fast = scope.ranks[s.argmin]
    suspect = fast if g.category == COMM else slow
    return (
        g.name,
        g.kind,
        g.category,
        g.calls,
        s.mean,
        s.max,
        s.min,
        s.imbalance,
        s.recoverable,
        s.cv,
        slow.global_rank,
        slow.hostname,
        slow.local_rank,
        fast.global_rank,
        fast.hostname,
        fast.local_rank,
        suspect.global_rank,
        _missing(scope, present),
    )


def imbalance(
    db: Db,
    run: str | RunScope | None = None,
    kind: str | Sequence[str] | None = None,
    top: int = 20,
    name_like: str | None = None,
    by: str = "rank",
    inclusive: bool = False,
) -> Result:
    """Which names are imbalanced across ranks, and which rank is the straggler (``by="rank"``);
    or the same rolled up by hostname (slow node) or local_rank (slow GPU slot). T_r of nested kinds
    (cpu_op, annotation) is self time; ``inclusive``: the inclusive total instead."""
    if by not in GROUP_BY:
        raise QueryError(f"unknown grouping {by!r}; choose from {', '.join(GROUP_BY)}")
    scope = with_ranks(scope_of(db, run))
    facts = run_facts(db, scope)
    kinds, notes = select_kinds(db, scope, kind, ("kernel",), facts)
    notes += _scope_notes(scope)
    pattern = like_pattern(name_like)
    ck = facts.comm_kind()
    if by != "rank":
        return _imbalance_by_group(db, scope, kinds, ck, pattern, by, notes)
    groups = name_groups(db, scope, set(kinds) | ({ck} if ck else set()), pattern, inclusive)
    n = len(scope.ranks)
    compute = _top([g for g in groups if g.kind in kinds and g.category != COMM], n, top, "recoverable")
    comm = _top([g for g in groups if g.kind == ck and g.category == COMM], n, top, "recoverable")
    values = rank_values(db, scope, compute + comm, inclusive)
    notes.append(_time_note(kinds, inclusive))
    rows = [_imbalance_row(scope, g, *values[(g.kind, g.name_id)]) for g in compute + comm]
    verdict = straggler(db, scope, kinds, facts)
    notes += _verdict_notes(verdict, scope)
    if ck is not None:
        notes.append(
            f"communication ({ck} rows, after the {'/'.join(kinds)} rows) is read inverted: the rank that "
            "waits least (fastest_rank) is the suspect"
        )
    if not rows:
        notes.append("no names match" + (f" {name_like!r}" if name_like else ""))
    return Result(list(IMBALANCE_HEADERS), rows, verdict.line, notes)


class GroupRow(NamedTuple):
    """A row of ``imbalance(by="host" | "local-rank")``; the first column is named after the group."""

    group: Any
    ranks: int
    compute_ns: int
    compute_vs_mean: float | None
    communication_ns: int
    communication_vs_mean: float | None
    slowest_rank: int
    top_name: str | None
    top_name_excess_ns: int | None


GROUP_HEADERS = {
    "host": "hostname",
    "local-rank": "local_rank",
}


def _imbalance_by_group(
    db: Db,
    scope: RunScope,
    kinds: Sequence[str],
    ck: str | None,
    pattern: str | None,
    by: str,
    notes: list[str],
) -> Result:
    key_col = GROUP_HEADERS[by]

    def key_of(r: RankRef) -> Any:
        return r.hostname if by == "host" else r.local_rank

    totals = rank_totals(db, scope, set(kinds) | ({ck} if ck else set()), pattern)
    busy = _busy(totals, scope, kinds)
    wait = _in_category(totals, scope, (ck,), COMM) if ck else [0] * len(busy)
    overall_busy = spread(busy)
    overall_wait = spread(wait)
    groups: dict[Any, list[int]] = defaultdict(list)
    for i, r in enumerate(scope.ranks):
        groups[key_of(r)].append(i)

    # per (name, group) totals, for the name that most exceeds its run-wide mean on each group
    col = "rank.hostname" if by == "host" else "rank.local_rank"
    params: dict[str, Any] = {"comm": COMM}
    per_name = reader.rows(db, f"SELECT name.value, {col}, SUM({SELF_NS}) "
                               f"{_from_where(scope, kinds, pattern, params, with_name=True)} "
                               "AND summary.category <> :comm "
                               f"GROUP BY summary.kind, summary.name_id, name.value, {col}", params)
    n = len(scope.ranks)
    name_total: dict[str, int] = defaultdict(int)
    for name, _g, total in per_name:
        name_total[name] += int(total)
    best: dict[Any, tuple[int, str]] = {}
    for name, g, total in per_name:
        excess = int(total) // len(groups[g]) - name_total[name] // n
        cur = best.get(g)
        if cur is None or excess > cur[0] or (excess == cur[0] and name < cur[1]):
            best[g] = (excess, name)

    rows: list[GroupRow] = []
    for g, members in groups.items():
        sb = sum(busy[i] for i in members)
        sw = sum(wait[i] for i in members)
        slow_i = max(members, key=lambda i: (busy[i], -i))
        top_excess, top_name = best.get(g, (0, None))
        rows.append(
            GroupRow(
                g,
                len(members),
                sb // len(members),
                ratio(sb * n, overall_busy.total * len(members)),
                sw // len(members),
                ratio(sw * n, overall_wait.total * len(members)) if ck else None,
                scope.ranks[slow_i].global_rank,
                top_name,
                top_excess if top_name is not None else None,
            )
        )
    rows.sort(key=lambda r: (-r.compute_ns, str(r.group)))
    headers = [key_col, *GroupRow._fields[1:]]
    what = "host" if by == "host" else "GPU slot (local_rank)"
    if all(r.group is None for r in rows):
        field_name = "hostname" if by == "host" else "local_rank"
        headline = (
            f"the ranks of run {scope.name!r} have no {field_name}: nothing to roll up (ingest with rank manifests "
            f"from profdb record, or --rank-from-path with (?P<{field_name}>...))"
        )
    elif len(rows) < 2:
        headline = f"one {what} only ({rows[0].group if rows else 'none'}): nothing to compare"
    else:
        slow = rows[0]
        label = f"{slow.group}" if by == "host" else f"local_rank {slow.group}"
        why = (
            f"{fmt_ns(slow.compute_ns)} of {'/'.join(kinds)} per rank, {slow.compute_vs_mean:.2f}x the mean"
            if slow.compute_vs_mean
            else "no busy time"
        )
        least_wait = min(rows, key=lambda r: (r.communication_ns, str(r.group)))
        if ck and overall_wait.total:
            lw = least_wait.communication_vs_mean or 0.0
            if least_wait.group == slow.group:
                why += f"; its ranks wait least in collectives ({lw:.2f}x the mean)"
            else:
                why += f"; ranks waiting least in collectives: {least_wait.group} ({lw:.2f}x the mean)"
        if slow.top_name is not None and slow.top_name_excess_ns is not None:
            why += f"; most excess in {slow.top_name} (+{fmt_ns(slow.top_name_excess_ns)} per rank)"
        headline = f"slowest {what}: {label}: {why}"
        if by == "host" and any(r.group is None for r in rows):
            notes.append("some ranks have no hostname (row with an empty hostname)")
        if by == "local-rank" and any(r.group is None for r in rows):
            notes.append("some ranks have no local_rank (row with an empty local_rank)")
    notes.append(
        "compute_ns / communication_ns: mean per rank of the group; *_vs_mean: against the mean over all ranks"
    )
    return Result(headers, list(rows), headline, notes)


# ---------------------------------------------------------------------------------------------
# hotspots


HOTSPOT_HEADERS = [
    "name",
    "kind",
    "category",
    "total_ns",
    "share_pct",
    "calls",
    "mean_per_call_ns",
    "ranks",
    "rank_min_ns",
    "rank_max_ns",
    "rank_cv",
]


def hotspots(
    db: Db,
    run: str | RunScope | None = None,
    kind: str | Sequence[str] | None = None,
    top: int = 20,
    name_like: str | None = None,
    inclusive: bool = False,
) -> Result:
    """Where the time goes: total across ranks, share of the kinds' total, calls, mean duration,
    and how the name's time is spread over the ranks. Nested kinds (cpu_op, annotation) count self
    time, so the shares of one kind add up to 100%; ``inclusive``: inclusive totals (they do not)."""
    scope = with_ranks(scope_of(db, run))
    facts = run_facts(db, scope)
    kinds, notes = select_kinds(db, scope, kind, ("kernel",), facts)
    notes += _scope_notes(scope)
    grand_total = facts.kind_total(kinds)
    if inclusive:
        params: dict[str, Any] = {}
        grand_total = int(reader.rows(db, "SELECT COALESCE(SUM(summary.total_ns), 0) "
                                          f"{_from_where(scope, kinds, None, params)}", params)[0][0] or 0)
    groups = _top(name_groups(db, scope, kinds, like_pattern(name_like), inclusive), len(scope.ranks), top, "total")
    values = rank_values(db, scope, groups, inclusive)
    notes.append(_time_note(kinds, inclusive))
    rows = []
    for g in groups:
        v, present = values[(g.kind, g.name_id)]
        s = spread(v)
        rows.append(
            (
                g.name,
                g.kind,
                g.category,
                s.total,
                100.0 * s.total / grand_total if grand_total else None,
                g.calls,
                s.total // g.calls if g.calls else None,
                len(present),
                s.min,
                s.max,
                s.cv,
            )
        )
    headline = None
    if rows and grand_total:
        headline = (
            f"run {scope.name!r}: {fmt_ns(grand_total)} of {'/'.join(kinds)} time over {len(scope.ranks)} ranks; "
            f"top: {rows[0][0]} ({rows[0][4]:.1f}%)"
        )
    notes.append(
        f"share_pct: of all {'/'.join(kinds)} time in the run; "
        "rank_*: T_r over ranks (0 where absent)"
    )
    return Result(list(HOTSPOT_HEADERS), rows, headline, notes)


# ---------------------------------------------------------------------------------------------
# steps


STEP_HEADERS = [
    "step",
    "ranks",
    "waited_on_rank",
    "waited_on_host",
    "waited_on_local_rank",
    "wait_caused_ns",
    "entered_last",
    "mean_per_rank_ns",
    "max_ns",
    "min_ns",
    "imbalance",
    "recoverable_ns",
    *EXTREME_HEADERS,
]


def steps(db: Db, run: str | RunScope | None = None) -> Result:
    """Per step (ProfilerStep#N): the rank the others waited on in the step's collectives (most wait
    caused; empty when none or tied) and how long, beside the step durations, whose longest is
    usually a *victim* (it waited) rather than the cause. Headline: the run's one verdict."""
    scope = scope_of(db, run)
    notes = _scope_notes(scope)
    by_id = {r.id: r for r in scope.ranks}
    by_global = {r.global_rank: r for r in scope.ranks}
    data = reader.rows(db, "SELECT step.step, step.rank_id, step.duration_ns FROM step "
                           "JOIN rank ON rank.id = step.rank_id WHERE rank.run_id = :run "
                           "ORDER BY step.step, rank.global_rank", {"run": scope.id})
    per_step: dict[int, list[tuple[RankRef, int]]] = defaultdict(list)
    for step, rank_id, dur in data:
        per_step[int(step)].append((by_id[rank_id], int(dur)))
    if not per_step:
        notes.append(
            f"run {scope.name!r} has no steps: steps come from ProfilerStep#N annotations "
            "(torch.profiler with a schedule and prof.step())"
        )
        return Result(list(STEP_HEADERS), [], None, notes)
    verdict = straggler(db, scope, select_kinds(db, scope, None, ("kernel",))[0]) if len(scope.ranks) > 1 else None
    analysis = verdict.detail.findings if verdict is not None and verdict.detail is not None else None
    attributed = {s.step: s for s in analysis.steps} if analysis is not None else {}
    rows = []
    slowest_count: dict[int, int] = defaultdict(int)
    waited_count: dict[int, int] = defaultdict(int)
    for step in sorted(per_step):
        entries = per_step[step]
        s = spread([d for _r, d in entries])
        slow = entries[s.argmax][0]
        fast = entries[s.argmin][0]
        if len(entries) > 1:
            slowest_count[slow.global_rank] += 1
        att = attributed.get(step)
        on = by_global.get(att.waited_on) if att is not None and att.waited_on is not None else None
        if on is not None:
            waited_count[on.global_rank] += 1
        rows.append(
            (
                step,
                len(entries),
                on.global_rank if on else None,
                on.hostname if on else None,
                on.local_rank if on else None,
                att.wait_caused_ns if att is not None and on is not None else None,
                att.ranks[on.global_rank].last if att is not None and on is not None else None,
                s.mean,
                s.max,
                s.min,
                s.imbalance,
                s.recoverable,
                slow.global_rank,
                slow.hostname,
                slow.local_rank,
                fast.global_rank,
                fast.hostname,
                fast.local_rank,
            )
        )
    compared = sum(slowest_count.values())
    if not compared:
        notes.append("each step was seen on one rank only: nothing to compare")
    else:
        if waited_count:
            ranked_w = sorted(waited_count.items(), key=lambda kv: (-kv[1], kv[0]))
            notes.append(
                "waited on (the rank whose late arrival at the step's collectives caused the most wait): "
                + ", ".join(f"rank {g} in {c}" for g, c in ranked_w[:6]) + f" of {len(rows)} steps"
            )
        elif analysis is not None and not analysis.has_timeline:
            notes.append("no collective timeline: waited_on_* are empty (" + "; ".join(analysis.notes) + ")")
        ranked = sorted(slowest_count.items(), key=lambda kv: (-kv[1], kv[0]))
        g, count = ranked[0]
        worst = max((r[10] for r in rows if r[10] is not None), default=1.0)
        notes.append(
            f"longest step (slowest_rank) most often: rank {g} in {count} of {compared} steps"
            + (f" (then {', '.join(f'rank {gg} in {c}' for gg, c in ranked[1:4])})" if len(ranked) > 1 else "")
            + f"; largest step imbalance {worst:.3f}. The longest step is usually a rank that waited, not the one "
            "waited on"
        )
    if analysis is not None:
        notes += [n for n in analysis.notes if n not in notes]
    partial = [st for st, e in per_step.items() if len(e) < len(scope.ranks)]
    if partial:
        notes.append(
            f"{len(partial)} step(s) were not recorded on every rank; their figures use the ranks that have them"
        )
    return Result(list(STEP_HEADERS), rows, verdict.line if verdict is not None else None, notes)


# ---------------------------------------------------------------------------------------------
# per-rank split


RANK_HEADERS = [
    "global_rank",
    "hostname",
    "local_rank",
    "compute_ns",
    "communication_ns",
    "memory_ns",
    "busy_ns",
    "exposed_comm_ns",
    "compute_vs_mean",
    "communication_vs_mean",
]


def rank_split(db: Db, run: str | RunScope | None = None, kind: str | Sequence[str] | None = None) -> Result:
    """Per rank: the time in compute / communication / memory rows (each their durations added up, as
    a kernel breakdown does), the rank's busy time and exposed communication (the collective
    timeline's: unions, never sums; only for the run's default kinds, which are the timeline's work),
    and compute and communication against the mean rank. Until session 43, ``busy_ns`` was the sum of
    the three: communication that overlaps compute was counted twice (a real DeepSeek-V3 trace: 244 ms
    "busy" in a profile of 129 ms)."""
    scope = with_ranks(scope_of(db, run))
    facts = run_facts(db, scope)
    kinds, notes = select_kinds(db, scope, kind, GPU_KINDS, facts)
    default_kinds = kind is None or set(kinds) == set(select_kinds(db, scope, None, GPU_KINDS, facts)[0])
    notes += _scope_notes(scope)
    ck = facts.comm_kind()
    totals = rank_totals(db, scope, set(kinds) | ({ck} if ck else set()))
    compute = _busy(totals, scope, kinds, exclude=(COMM, "memory"))
    memory = _in_category(totals, scope, kinds, "memory")
    comm = _in_category(totals, scope, (ck,), COMM) if ck else [0] * len(scope.ranks)
    cs = spread(compute)
    ms = spread(comm)
    n = len(scope.ranks)
    verdict = straggler(db, scope, kinds, facts, totals)
    found = verdict.detail.findings if verdict.detail is not None else run_findings(db, scope)
    timeline = found.ranks
    rows = []
    for i, r in enumerate(scope.ranks):
        t = timeline.get(r.global_rank) if default_kinds else None
        rows.append((
            r.global_rank,
            r.hostname,
            r.local_rank,
            compute[i],
            comm[i],
            memory[i],
            t.busy_ns if t is not None else None,
            t.exposed_comm_ns if t is not None else None,
            ratio(compute[i], cs.total / n),
            ratio(comm[i], ms.total / n) if ck else None,
        ))
    notes += _verdict_notes(verdict, scope)
    notes.append(
        f"compute/memory: {'/'.join(kinds)} rows; communication: "
        + (f"{ck} rows of category communication" if ck else "none in this run")
    )
    if set(kinds) & NESTED_KINDS:
        notes.append(_time_note(kinds, False).replace("; --inclusive for inclusive times", ""))
    if not default_kinds:
        notes.append("busy_ns / exposed_comm_ns are the collective timeline's, of the run's default kinds: "
                     "not shown for other kinds")
    elif any(row[6] is not None for row in rows):
        if not found.has_timeline:  # (else the window note says it)
            notes.append(profile_window(found, scope))
        notes.append("busy_ns: the union of each rank's work (overlapping streams or threads count once); "
                     "exposed_comm_ns: its communication not overlapped by work; the three columns before them add "
                     "up durations, so they exceed busy + exposed_comm by the communication that overlaps work")
    return Result(list(RANK_HEADERS), rows, verdict.line, notes)


# ---------------------------------------------------------------------------------------------
# plain SQL


def run_sql(db: Db, sql: str, params: dict[str, Any] | None = None, *, max_rows: int | None = None) -> Result:
    """Run one SQL statement; rows come back with the statement's own column names. ``max_rows``:
    fetch at most this many rows (streamed, so a recursive CTE without end stops there) and say so
    in a note. PostgreSQL: a query (select, with, values, table) on a read-only connection is read
    through a server-side cursor (psycopg would otherwise fetch every row before the first). A raw
    SQLite store (reader.RawSqlite) runs it through sqlite3, with the same messages."""
    if not sql.strip():
        raise QueryError("empty SQL; pass a statement, e.g. profdb sql \"select * from imbalance_v limit 5\"")
    if isinstance(db, RawSqlite):
        return _run_sql_raw(db, sql, params, max_rows)
    from sqlalchemy import text  # any SQL, with SQLAlchemy's errors
    from sqlalchemy.exc import DBAPIError, SQLAlchemyError

    conn = db
    stream = max_rows is not None and conn.dialect.name == "postgresql" and _QUERY.match(sql) and _read_only(conn)
    try:
        res = conn.execution_options(stream_results=stream).execute(text(sql), params or {})
    except DBAPIError as e:
        raise _sql_error(str(e.orig) if e.orig is not None else str(e)) from e
    except SQLAlchemyError as e:
        raise QueryError(f"SQL error: {e}") from e
    if not res.returns_rows:
        return Result([], [], None, [f"{res.rowcount} row(s) affected"])
    headers = list(res.keys())
    if max_rows is None:
        return Result(headers, [tuple(_plain(v) for v in r) for r in res.all()])
    try:
        got = res.fetchmany(max_rows + 1)
    except DBAPIError as e:
        raise _fetch_error(str(e.orig) if e.orig is not None else str(e)) from e
    res.close()
    return _capped(headers, [tuple(_plain(v) for v in r) for r in got], max_rows)


def _run_sql_raw(db: RawSqlite, sql: str, params: dict[str, Any] | None, max_rows: int | None) -> Result:
    try:
        cur = db.cursor(sql, params)
    except sqlite3.Error as e:
        raise _sql_error(str(e)) from e
    if cur.description is None:
        return Result([], [], None, [f"{cur.rowcount} row(s) affected"])
    headers = [d[0] for d in cur.description]
    try:
        got = cur.fetchall() if max_rows is None else cur.fetchmany(max_rows + 1)
    except sqlite3.Error as e:
        raise _fetch_error(str(e)) from e
    finally:
        cur.close()
    return Result(headers, got) if max_rows is None else _capped(headers, got, max_rows)


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text


def _sql_error(text: str) -> QueryError:
    msg = _first_line(text)
    if re.search(r"read-?only|query_only", msg):
        return QueryError(
            f"SQL error: {msg}: the store is opened read-only by this command; nothing was written: "
            "to change it, pass --write (profdb sql --write)"
        )
    return QueryError(
        f"SQL error: {msg}; the views are listed by "
        "`profdb sql \"select name from sqlite_master where type='view'\"` (SQLite) "
        "and in the README's section 'Cross-rank questions'"
    )


def _fetch_error(text: str) -> QueryError:
    return QueryError(f"SQL error while fetching rows: {_first_line(text)}")


def _capped(headers: list[str], got: list[tuple[Any, ...]], max_rows: int) -> Result:
    notes = []
    if len(got) > max_rows:
        got = got[:max_rows]
        notes.append(f"stopped after {max_rows:,} rows; add a LIMIT, or raise the cap with --max-rows")
    return Result(headers, got, None, notes)


#: the statements a server-side cursor can hold (DECLARE ... CURSOR FOR <query>)
_QUERY = re.compile(r"\s*(\(\s*)*(select|with|values|table)\b", re.IGNORECASE)


def _read_only(conn: Connection) -> bool:
    return bool(conn.exec_driver_sql("show transaction_read_only").scalar() == "on")


def _plain(v: Any) -> Any:
    """PostgreSQL NUMERIC (SUM of BIGINT) comes back as Decimal: give ints and floats, like SQLite."""
    if isinstance(v, Decimal):
        return int(v) if v == v.to_integral_value() else float(v)
    return v


__all__ = [
    "Result",
    "Spread",
    "Verdict",
    "comm_kind",
    "hotspots",
    "imbalance",
    "parse_kinds",
    "rank_split",
    "run_sql",
    "select_kinds",
    "steps",
    "straggler",
]

