"""Across runs: compare a run with a baseline and the regression gate (a name's trend: trend.py).

Engineers profile the same job again and again (nightly, per commit, per config). These functions
answer "what got slower, on which ranks, since when" from the ``summary``, ``rank`` and ``run``
tables only (never ``activity``), with SQLAlchemy Core that runs unchanged on SQLite and PostgreSQL.

Figures per run and name (kind + interned name, matched across runs by name; ranks by global_rank),
with T_r the name's total time on rank r (0 where the rank never ran it) over the run's N ranks:

- ``mean`` = sum_r T_r / N: the name's time per rank (equal to total / N; comparable across world sizes);
- ``max`` = max_r T_r: the slowest rank's time (what the job waits for);
- ``imbalance`` = max / mean; ``share`` = the name's total / the run's total over the chosen kinds.

The run's own figures use busy time B_r: all its non-communication time in the chosen kinds
(communication is mostly waiting for the slowest peer, so it is reported apart): run imbalance =
max_r B_r / mean_r B_r.

A baseline is one run, or the median of several (``last:N``): each figure is the median over those
runs of the figure (a run without the name counts 0), so one noisy run does not move it.

Regression (``regressions``; ``profdb compare --fail-on-regression X``), with threshold X:

1. a name with a share of at least ``min_share`` (noise floor; default 1%) in the baseline or the new
   run whose ``mean`` or ``max`` grew by more than X (new / base - 1 > X). It is reported as a
   "slowest-rank time" regression, naming that rank, when ``max`` grew more than X and either the
   name's imbalance also grew more than X or its ``mean`` did not (a straggler); else as a "time per
   rank" regression (slower on every rank);
2. a name absent from the baseline whose ``mean`` alone is more than X of the baseline's busy time per
   rank (new work that costs more than X);
3. the run's imbalance grew by more than X (new / base - 1 > X).

Communication names are included (a slower all-reduce is a regression too); their per-name imbalance
is not gated (their time is waiting, so a straggler elsewhere shows there first)."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import Connection, select

from . import queries
from .errors import QueryError
from .metrics import spread
from .models import Name, Rank, Run, Summary
from .queries import COMM, Result, like_pattern
from .runs import RunInfo, all_runs, find_run, matches, parse_filters
from .scope import RankRef, RunScope, copies_notes, missing_notes, resolve_run, unread_notes
from .units import fmt_ns

_run = Run.__table__
_rank = Rank.__table__
_name = Name.__table__
_sum = Summary.__table__

BY = ("kernel", "rank", "host", "local-rank")


# ---------------------------------------------------------------------------------------------
# runs, tags, baselines


@dataclass(frozen=True)
class Baseline:
    runs: tuple[RunInfo, ...]
    #: how it was asked for and what it is, for headlines ("last:5 (runs a, b, c, d, e)")
    label: str


def resolve_baseline(conn: Connection, runs: Sequence[RunInfo], spec: str | None, new: RunInfo) -> Baseline:
    """The baseline runs for ``new``.

    ``spec``: a run name; ``last:N`` (the N runs before ``new`` by created_at, compared as their
    median); ``tag:KEY=VALUE`` (the latest run before ``new`` with that metadata); terms combine with
    commas: ``last:5,tag:branch=main``. None: the run just before ``new``."""
    if spec is not None and not any(spec.startswith(p) for p in ("last:", "tag:")):
        base = find_run(conn, runs, spec)
        if base.id == new.id:
            raise QueryError(f"the baseline and the new run are the same run ({new.name!r}); pick another baseline")
        return Baseline((base,), f"run {base.name!r}")
    last: int | None = None
    where: dict[str, str] = {}
    for term in (spec or "").split(","):
        term = term.strip()
        if not term:
            continue
        if term.startswith("last:"):
            count = term[5:]
            if not count.isdigit() or int(count) < 1:
                raise QueryError(f"baseline {term!r}: N must be a positive integer (e.g. last:5)")
            last = int(count)
        elif term.startswith("tag:"):
            where.update(parse_filters([term[4:]]))
        else:
            raise QueryError(f"baseline term {term!r}: use a run name, last:N, tag:KEY=VALUE, or last:N,tag:KEY=VALUE")
    before = [r for r in runs if (r.created_at, r.id) < (new.created_at, new.id) and matches(r, where)]
    n = last or 1
    chosen = tuple(before[-n:])
    filt = (" with " + ", ".join(f"{k}={v}" for k, v in where.items())) if where else ""
    if not chosen:
        raise QueryError(
            f"no run{filt} before {new.name!r} to compare with; name a baseline run (profdb runs lists them)"
        )
    names = ", ".join(r.name for r in chosen)
    if last is None and not where:
        label = f"previous run {chosen[0].name!r}"
    elif len(chosen) == 1:
        label = f"run {names!r} ({spec})"
    else:
        label = f"median of {len(chosen)} runs ({spec}: {names})"
    if last is not None and len(chosen) < last:
        label += f" [only {len(chosen)} of {last} runs{filt} exist before {new.name!r}]"
    return Baseline(chosen, label)


# ---------------------------------------------------------------------------------------------
# one run's figures, from the summary table


@dataclass
class NameFigures:
    kind: str
    name_id: int
    name: str
    category: str
    calls: float
    total: float
    mean: float
    max: float
    imbalance: float | None
    share: float


@dataclass
class RunFigures:
    """Figures of one run, or the median of several (the baseline)."""

    label: str
    runs: tuple[RunInfo, ...]
    scopes: tuple[RunScope, ...]
    #: global_rank -> rank (hostname, local_rank)
    ranks: dict[int, RankRef]
    #: (kind, name_id) -> figures
    names: dict[tuple[str, int], NameFigures]
    #: global_rank -> busy (non-communication) and communication time
    busy: dict[int, float]
    comm: dict[int, float]
    total: float
    busy_mean: float
    imbalance: float | None


def imbalance_of(values: Sequence[float]) -> float | None:
    return spread([round(v) for v in values]).imbalance if values else None


def _one_run(conn: Connection, run: RunInfo, kinds: Sequence[str], pattern: str | None) -> RunFigures:
    scope = resolve_run(conn, run.name)
    n = len(scope.ranks) or 1
    groups = queries.name_groups(conn, scope, kinds, pattern)
    grand = sum(g.total for g in groups)
    names = {
        (g.kind, g.name_id): NameFigures(
            g.kind,
            g.name_id,
            g.name,
            g.category,
            g.calls,
            g.total,
            g.total / n,
            g.max,
            g.max * n / g.total if g.total else None,
            g.total / grand if grand else 0.0,
        )
        for g in groups
    }
    totals = queries.rank_totals(conn, scope, kinds, pattern)
    busy = {
        r.global_rank: float(sum(v for (_k, c), v in totals.get(r.id, {}).items() if c != COMM)) for r in scope.ranks
    }
    comm = {
        r.global_rank: float(sum(v for (_k, c), v in totals.get(r.id, {}).items() if c == COMM)) for r in scope.ranks
    }
    b = list(busy.values())
    return RunFigures(
        f"run {run.name!r}",
        (run,),
        (scope,),
        {r.global_rank: r for r in scope.ranks},
        names,
        busy,
        comm,
        float(grand),
        sum(b) / n if b else 0.0,
        imbalance_of(b),
    )


def _kinds_of(conn: Connection, scope: RunScope) -> set[str]:
    ids = [r.id for r in scope.ranks]
    return set(conn.execute(select(Summary.kind).where(Summary.rank_id.in_(ids)).distinct()).scalars())


def comparability_notes(
    conn: Connection, bases: Sequence[RunScope], new: RunScope, kinds: Sequence[str]
) -> list[str]:
    """What makes the two sides not like for like, and what the figures then mean: world sizes,
    hosts, the kinds of rows each run holds, the rules that classified them, ranks without data,
    copied files and events not read, ranks that ended badly."""
    notes: list[str] = []

    def sides(f: Callable[[RunScope], str]) -> str:
        base = sorted({f(b) for b in bases})
        return f"baseline {' / '.join(base)}, new {f(new)}"

    def world(sc: RunScope) -> str:
        return str(sc.world_size) if sc.world_size else f"unknown ({len(sc.ranks)} ranks stored)"

    if any(world(b) != world(new) for b in bases):
        notes.append(
            f"world sizes differ ({sides(world)}): the figures are per rank (total / ranks), so they compare "
            "per-rank work; a collective's time and the share of time spent communicating depend on the "
            "world size, and a different job split gives each rank other work: read a change as the cost of "
            "the other configuration, not as a regression of the same job"
        )

    def hosts(sc: RunScope) -> str:
        names = sorted({r.hostname for r in sc.ranks if r.hostname})
        return ", ".join(names[:4]) + (f" (+{len(names) - 4})" if len(names) > 4 else "") if names else "unknown"

    if any(hosts(b) != hosts(new) for b in bases):
        notes.append(
            f"the runs ran on different hosts ({sides(hosts)}): hardware, drivers and placement differ, so part "
            "of any change may come from the machines"
        )
    new_kinds = _kinds_of(conn, new)
    for b in bases:
        bk = _kinds_of(conn, b)
        if bk != new_kinds:
            lacking = [k for k in kinds if k not in bk]
            notes.append(
                f"the runs hold different kinds of rows (baseline {b.name!r}: {', '.join(sorted(bk)) or 'none'}; "
                f"new: {', '.join(sorted(new_kinds)) or 'none'}): they were profiled differently"
                + (
                    f"; the baseline has no {'/'.join(lacking)} rows, so every such name shows as new and "
                    "its busy time as 0"
                    if lacking
                    else ""
                )
            )
    for b in bases:
        if set(b.rule_digests) != set(new.rule_digests):
            notes.append(
                f"the runs were classified with different communication rules (baseline {b.name!r}: "
                f"{', '.join(d or 'not recorded' for d in b.rule_digests) or 'none'}; new: "
                f"{', '.join(d or 'not recorded' for d in new.rule_digests) or 'none'}): busy and comm time may "
                "differ for that reason alone; `profdb reclassify --run NAME` both with the same rules"
            )
    for sc in [*bases, new]:  # (what each side's figures leave out: ranks without data, events not read)
        notes += missing_notes(sc) + copies_notes(sc.name, sc.copies)
        notes += [f"run {sc.name!r}: {n}" for n in unread_notes(sc.unread)]
    for sc in [*bases, new]:
        bad = sc.ended_abnormally()
        if bad:
            notes.append(
                f"run {sc.name!r}: {len(bad)} rank(s) did not end well, their profiles may be cut short: "
                + "; ".join(f"rank {r.global_rank} {r.end()}" for r in bad)
            )
    return notes


def kinds_for(conn: Connection, run: RunInfo, kind: str | None) -> tuple[tuple[str, ...], list[str]]:
    """``kind`` as given, or kernels when ``run`` has any, else CPU operators (a CPU-only run)."""
    return queries.select_kinds(conn, resolve_run(conn, run.name), kind, ("kernel",))


def _median(values: list[float]) -> float:
    return float(statistics.median(values))


def _median_of(figs: list[RunFigures], label: str) -> RunFigures:
    """The baseline: each figure is the median over the runs (absent names and ranks count 0)."""
    if len(figs) == 1:
        return replace(figs[0], label=label)
    keys = {k for f in figs for k in f.names}
    names = {}
    for key in keys:
        ref = [f.names[key] for f in figs if key in f.names][-1]

        def med(attr: str, key: tuple[str, int] = key) -> float:
            return _median([float(getattr(f.names[key], attr)) if key in f.names else 0.0 for f in figs])

        imb = [i for i in (f.names[key].imbalance for f in figs if key in f.names) if i is not None]
        names[key] = NameFigures(
            ref.kind, ref.name_id, ref.name, ref.category, med("calls"), med("total"), med("mean"), med("max"),
            _median(imb) if imb else None, med("share"),
        )
    ranks: dict[int, RankRef] = {}
    for f in figs:
        ranks.update(f.ranks)
    busy = {g: _median([f.busy.get(g, 0.0) for f in figs]) for g in ranks}
    comm = {g: _median([f.comm.get(g, 0.0) for f in figs]) for g in ranks}
    run_imbs = [f.imbalance for f in figs if f.imbalance is not None]
    return RunFigures(
        label,
        tuple(r for f in figs for r in f.runs),
        tuple(sc for f in figs for sc in f.scopes),
        ranks,
        names,
        busy,
        comm,
        _median([f.total for f in figs]),
        _median([f.busy_mean for f in figs]),
        _median(run_imbs) if run_imbs else None,
    )


def _rank_vectors(
    conn: Connection, figs: RunFigures, keys: Sequence[tuple[str, int]]
) -> dict[tuple[str, int], dict[int, float]]:
    """global_rank -> T_r for each (kind, name_id) in ``keys``; the element-wise median over the runs."""
    known = [figs.names[k] for k in keys if k in figs.names]
    if not known:
        return {}
    groups = [queries.NameGroup(f.kind, f.name_id, f.name, f.category, 0, 0, 0) for f in known]
    per_run = []
    for scope in figs.scopes:
        values = queries.rank_values(conn, scope, groups)
        per_run.append(
            {
                key: {r.global_rank: float(v) for r, v in zip(scope.ranks, vals)}
                for key, (vals, _present) in values.items()
            }
        )
    out: dict[tuple[str, int], dict[int, float]] = {}
    for f in known:
        key = (f.kind, f.name_id)
        ranks = {g for pr in per_run for g in pr.get(key, {})}
        out[key] = {g: _median([pr.get(key, {}).get(g, 0.0) for pr in per_run]) for g in ranks}
    return out


def run_figures(
    conn: Connection, runs: Sequence[RunInfo], label: str, kinds: Sequence[str], pattern: str | None = None
) -> RunFigures:
    return _median_of([_one_run(conn, r, kinds, pattern) for r in runs], label)


# ---------------------------------------------------------------------------------------------
# regressions: the gate


@dataclass(frozen=True)
class Regression:
    #: "mean" | "max" | "new" | "imbalance"
    metric: str
    #: (kind, name_id) of the name; None for the run's imbalance
    key: tuple[str, int] | None
    name: str | None
    kind: str | None
    base: float
    new: float
    #: new / base - 1
    growth: float
    rank: int | None = None

    def line(self) -> str:
        if self.metric == "imbalance":
            return f"run imbalance {self.base:.3f} -> {self.new:.3f} ({self.growth * 100:+.1f}%)"
        what = {
            "mean": "time per rank",
            "max": "slowest-rank time",
            "new": "new, time per rank",
        }[self.metric]
        where = f" on rank {self.rank}" if self.rank is not None else ""
        if self.metric == "new":
            return (
                f"{self.name} ({self.kind}): {what} {fmt_ns(self.new)} = {self.growth * 100:.1f}% of the baseline's "
                "busy time per rank"
            )
        return (
            f"{self.name} ({self.kind}): {what} {fmt_ns(self.base)} -> {fmt_ns(self.new)}{where} "
            f"({self.growth * 100:+.1f}%)"
        )


def regressions(base: RunFigures, new: RunFigures, threshold: float, min_share: float = 0.01) -> list[Regression]:
    """What got worse by more than ``threshold`` (a fraction: 0.1 = 10%); see the module doc.
    Worst first: names by growth, then the run's imbalance."""
    out: list[Regression] = []
    for key, nf in new.names.items():
        bf = base.names.get(key)
        if bf is None or bf.mean <= 0:
            if base.busy_mean > 0 and nf.mean / base.busy_mean > threshold:
                out.append(Regression("new", key, nf.name, nf.kind, 0.0, nf.mean, nf.mean / base.busy_mean))
            continue
        if max(bf.share, nf.share) < min_share:
            continue
        mean_g = nf.mean / bf.mean - 1
        max_g = nf.max / bf.max - 1 if bf.max > 0 else 0.0
        if mean_g <= threshold and max_g <= threshold:
            continue
        # grew on some ranks more than on others (its imbalance grew too): a straggler, name the
        # slowest rank; else it got slower on every rank
        concentrated = bool(bf.imbalance and nf.imbalance and nf.imbalance / bf.imbalance - 1 > threshold)
        if max_g > threshold and (concentrated or mean_g <= threshold):
            out.append(Regression("max", key, nf.name, nf.kind, bf.max, nf.max, max_g))
        else:
            out.append(Regression("mean", key, nf.name, nf.kind, bf.mean, nf.mean, mean_g))
    out.sort(key=lambda r: (-r.growth, r.name or ""))
    if base.imbalance and new.imbalance and new.imbalance / base.imbalance - 1 > threshold:
        out.append(
            Regression("imbalance", None, None, None, base.imbalance, new.imbalance, new.imbalance / base.imbalance - 1)
        )
    return out


def _with_ranks(conn: Connection, new: RunFigures, regs: list[Regression]) -> list[Regression]:
    """Name the slowest rank of each slowest-rank regression."""
    keys = [r.key for r in regs if r.metric == "max" and r.key is not None]
    vectors = _rank_vectors(conn, new, keys)
    out = []
    for r in regs:
        if r.metric == "max" and r.key is not None:
            r = replace(r, rank=slowest_rank(vectors.get(r.key, {}), comm=False))
        out.append(r)
    return out


def gate_line(regs: Sequence[Regression], threshold: float, baseline: str) -> str:
    """One line for CI: the worst regression, and how many more."""
    head = f"regression over {threshold * 100:g}% vs {baseline}: {regs[0].line()}"
    if len(regs) > 1:
        more = "; ".join(r.name or "run imbalance" for r in regs[1:4])
        head += f"; {len(regs) - 1} more: {more}" + (" ..." if len(regs) > 4 else "")
    return head


# ---------------------------------------------------------------------------------------------
# compare


@dataclass
class Comparison:
    result: Result
    regressions: list[Regression]
    baseline: str
    new: str


def ratio_of(new: float, base: float) -> float | None:
    return new / base if base else None


STATUS_ORDER = ("slower", "new", "vanished", "faster", "same")


def _status(bf: NameFigures | None, nf: NameFigures | None, threshold: float) -> str:
    if bf is None or bf.mean <= 0:
        return "new"
    if nf is None or nf.mean <= 0:
        return "vanished"
    if nf.mean / bf.mean - 1 > threshold or (bf.max > 0 and nf.max / bf.max - 1 > threshold):
        return "slower"
    if nf.mean / bf.mean - 1 < -threshold:
        return "faster"
    return "same"


KERNEL_HEADERS = [
    "name",
    "kind",
    "category",
    "status",
    "base_mean_per_rank_ns",
    "new_mean_per_rank_ns",
    "delta_per_rank_ns",
    "ratio",
    "base_max_ns",
    "new_max_ns",
    "max_ratio",
    "base_imbalance",
    "new_imbalance",
    "new_share_pct",
    "new_suspect_rank",
    "moved_rank",
    "moved_share_pp",
]


def _moved(base_v: dict[int, float], new_v: dict[int, float]) -> tuple[int | None, float | None]:
    """The rank whose share of the name's time changed most, and by how many percentage points."""
    bt, nt = sum(base_v.values()), sum(new_v.values())
    if not bt or not nt:
        return None, None
    best: tuple[float, int] | None = None
    for g in sorted(set(base_v) | set(new_v)):
        d = new_v.get(g, 0.0) / nt - base_v.get(g, 0.0) / bt
        if best is None or abs(d) > abs(best[0]):
            best = (d, g)
    assert best is not None
    return best[1], best[0] * 100


def slowest_rank(vec: dict[int, float], comm: bool) -> int | None:
    if not vec:
        return None
    # communication is waiting: the rank that waits least is the suspect
    return (min if comm else max)(sorted(vec), key=lambda g: vec[g])


def _kernel_rows(
    conn: Connection, base: RunFigures, new: RunFigures, threshold: float, top: int
) -> list[tuple[Any, ...]]:
    def order(k: tuple[str, int]) -> tuple[int, float, tuple[str, int]]:
        bf, nf = base.names.get(k), new.names.get(k)
        d_mean = (nf.mean if nf else 0.0) - (bf.mean if bf else 0.0)
        d_max = (nf.max if nf else 0.0) - (bf.max if bf else 0.0)
        return STATUS_ORDER.index(_status(bf, nf, threshold)), -max(abs(d_mean), abs(d_max)), k

    # what got slower first, then new, vanished, faster, same; the largest change first in each
    keys = sorted(set(base.names) | set(new.names), key=order)
    if top > 0:
        keys = keys[:top]
    bv = _rank_vectors(conn, base, keys)
    nv = _rank_vectors(conn, new, keys)
    rows = []
    for k in keys:
        bf, nf = base.names.get(k), new.names.get(k)
        ref = nf or bf
        assert ref is not None
        s = slowest_rank(nv.get(k, {}), ref.category == COMM)
        moved, pp = _moved(bv.get(k, {}), nv.get(k, {}))
        b_mean = bf.mean if bf else 0.0
        n_mean = nf.mean if nf else 0.0
        b_max = bf.max if bf else 0.0
        n_max = nf.max if nf else 0.0
        rows.append(
            (
                ref.name,
                ref.kind,
                ref.category,
                _status(bf, nf, threshold),
                round(b_mean),
                round(n_mean),
                round(n_mean - b_mean),
                ratio_of(n_mean, b_mean),
                round(b_max),
                round(n_max),
                ratio_of(n_max, b_max),
                bf.imbalance if bf else None,
                nf.imbalance if nf else None,
                nf.share * 100 if nf else None,
                s,
                moved,
                pp,
            )
        )
    return rows


def _group_rows(base: RunFigures, new: RunFigures, by: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    key_of: Callable[[RankRef], Any]
    if by == "rank":
        key_of, key_col = (lambda r: r.global_rank), "global_rank"
    elif by == "host":
        key_of, key_col = (lambda r: r.hostname), "hostname"
    else:
        key_of, key_col = (lambda r: r.local_rank), "local_rank"

    def groups(f: RunFigures) -> dict[Any, tuple[int, float, float]]:
        out: dict[Any, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
        for g, info in f.ranks.items():
            acc = out[key_of(info)]
            acc[0] += 1
            acc[1] += f.busy.get(g, 0.0)
            acc[2] += f.comm.get(g, 0.0)
        return {k: (int(v[0]), v[1], v[2]) for k, v in out.items()}

    bg, ng = groups(base), groups(new)
    bt, nt = sum(v[1] for v in bg.values()), sum(v[1] for v in ng.values())
    headers = [key_col] + (["hostname", "local_rank"] if by == "rank" else ["ranks"]) + [
        "base_busy_per_rank_ns",
        "new_busy_per_rank_ns",
        "delta_per_rank_ns",
        "ratio",
        "base_share_pct",
        "new_share_pct",
        "share_change_pp",
        "base_comm_per_rank_ns",
        "new_comm_per_rank_ns",
    ]
    rows = []
    for key in sorted(set(bg) | set(ng), key=lambda k: (k is None, str(k) if not isinstance(k, int) else f"{k:012d}")):
        b = bg.get(key, (0, 0.0, 0.0))
        n = ng.get(key, (0, 0.0, 0.0))
        # per rank of the group, so groups of different sizes compare
        b_busy = b[1] / b[0] if b[0] else None
        n_busy = n[1] / n[0] if n[0] else None
        b_share = b[1] * 100 / bt if bt and b[0] else None
        n_share = n[1] * 100 / nt if nt and n[0] else None
        where: list[Any]
        if by == "rank":
            info = new.ranks.get(key) or base.ranks[key]
            where = [info.hostname, info.local_rank]
        else:
            where = [max(b[0], n[0])]
        rows.append(
            (
                key,
                *where,
                None if b_busy is None else round(b_busy),
                None if n_busy is None else round(n_busy),
                None if b_busy is None or n_busy is None else round(n_busy - b_busy),
                ratio_of(n_busy, b_busy) if b_busy is not None and n_busy is not None else None,
                b_share,
                n_share,
                None if b_share is None or n_share is None else n_share - b_share,
                None if not b[0] else round(b[2] / b[0]),
                None if not n[0] else round(n[2] / n[0]),
            )
        )
    # the largest share change first; of equal changes (two groups), the one that grew
    rows.sort(key=lambda r: (-round(abs(r[-3] or 0.0), 9), -(r[-3] or 0.0)))
    return headers, rows


def compare(
    conn: Connection,
    new: str | None = None,
    baseline: str | None = None,
    by: str = "kernel",
    threshold: float = 0.05,
    kind: str | None = None,
    name_like: str | None = None,
    top: int = 30,
    min_share: float = 0.01,
    gate: float | None = None,
) -> Comparison:
    """Compare run ``new`` (default: the newest) with ``baseline`` (see ``resolve_baseline``).

    ``by="kernel"``: one row per name (matched by name), largest change in time per rank first.
    ``by="rank" | "host" | "local-rank"``: busy time per rank of each group and its share of the run,
    the largest share change first (ranks matched by global_rank). Regressions (over ``threshold``)
    are computed in every view, over ``gate`` when given, else over ``threshold``."""
    if by not in BY:
        raise QueryError(f"unknown --by {by!r}; choose from {', '.join(BY)}")
    if threshold < 0 or (gate is not None and gate < 0):
        raise QueryError("the threshold must not be negative")
    runs = all_runs(conn)
    new_run = find_run(conn, runs, new)
    base = resolve_baseline(conn, runs, baseline, new_run)
    kinds, notes = kinds_for(conn, new_run, kind)
    pattern = like_pattern(name_like)
    nf = run_figures(conn, [new_run], f"run {new_run.name!r}", kinds, pattern)
    bf = run_figures(conn, base.runs, base.label, kinds, pattern)
    if not nf.names and not bf.names:
        notes.append("no names match" + (f" {name_like!r}" if name_like else "") + f" in {'/'.join(kinds)} rows")
    if any(len(sc.ranks) != len(nf.ranks) for sc in bf.scopes):
        notes.append("the runs have different numbers of ranks: times are compared per rank (total / ranks)")
    notes += comparability_notes(conn, bf.scopes, nf.scopes[0], kinds)
    regs = _with_ranks(conn, nf, regressions(bf, nf, threshold if gate is None else gate, min_share))
    if by == "kernel":
        headers = list(KERNEL_HEADERS)
        rows = _kernel_rows(conn, bf, nf, threshold, top)
        notes.append(
            "mean_per_rank = the name's total over ranks / ranks; max = the slowest rank's time; ratio = new / base "
            "of mean_per_rank; new_suspect_rank: the slowest rank (communication: the one that waits least); "
            "moved_rank: the rank whose share of the name's time changed most (percentage points)"
        )
    else:
        headers, rows = _group_rows(bf, nf, by)
        notes.append(
            "busy_per_rank = non-communication time per rank of the group; share = of the run's busy time; "
            "comm_per_rank = communication time per rank of the group (mostly waiting)"
        )
    counts: dict[str, int] = defaultdict(int)
    for key in set(bf.names) | set(nf.names):
        counts[_status(bf.names.get(key), nf.names.get(key), threshold)] += 1
    ratio = ratio_of(nf.busy_mean, bf.busy_mean)
    headline = (
        f"{new_run.name!r} vs {base.label}: {'/'.join(kinds)} busy time per rank {fmt_ns(bf.busy_mean)} -> "
        f"{fmt_ns(nf.busy_mean)}" + (f" ({(ratio - 1) * 100:+.1f}%)" if ratio else "")
    )
    if bf.imbalance and nf.imbalance:
        headline += f", imbalance {bf.imbalance:.3f} -> {nf.imbalance:.3f}"
    headline += "; names: " + ", ".join(
        f"{counts[s]} {s}" for s in ("slower", "faster", "new", "vanished") if counts[s]
    ) if any(counts[s] for s in ("slower", "faster", "new", "vanished")) else "; no name changed"
    headline += f" (threshold {threshold * 100:g}%)"
    return Comparison(Result(headers, rows, headline, notes), regs, base.label, new_run.name)
