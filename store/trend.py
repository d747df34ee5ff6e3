"""A name's (or a run's busy) time across runs: ``profdb trend``. Figures as in compare.py (mean =
per rank, max = slowest rank, imbalance = max / mean), per run, oldest first."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, NamedTuple

from sqlalchemy import Connection, func, literal_column, select

from . import queries
from .compare import imbalance_of, kinds_for, ratio_of, slowest_rank
from .errors import QueryError
from .models import Name, Rank, Summary
from .queries import COMM, SELF_NS, Result, like_pattern
from .runs import all_runs, find_run, matches
from .scope import resolve_run
from .units import fmt_ns

_rank = Rank.__table__
_name = Name.__table__
_sum = Summary.__table__


class TrendRow(NamedTuple):
    """One run's row of ``trend`` (the column order is TREND_HEADERS)."""

    run: str
    created_at: str
    ranks: int
    calls: int
    total_ns: int
    mean_per_rank_ns: int | None
    max_ns: int
    imbalance: float | None
    #: the rank to blame, as in ``profdb query --imbalance``: the name's slowest (for communication the
    #: one that waits least); without a name filter, the run's verdict
    suspect_rank: int | None
    comm_per_rank_ns: int | None
    vs_prev: float | None
    vs_first: float | None


TREND_HEADERS = list(TrendRow._fields)


def trend(
    conn: Connection,
    name_like: str | None = None,
    last: int = 20,
    kind: str | None = None,
    where: dict[str, str] | None = None,
    until: str | None = None,
) -> Result:
    """Per run (oldest first, the ``last`` runs up to ``until``, with metadata ``where``): the time of
    the names matching ``name_like`` (or the run's busy time), per rank, its slowest rank and imbalance."""
    if last < 1:
        raise QueryError("--last must be at least 1")
    runs = [r for r in all_runs(conn) if matches(r, where or {})]
    if until is not None:
        stop = find_run(conn, all_runs(conn), until)
        runs = [r for r in runs if (r.created_at, r.id) <= (stop.created_at, stop.id)]
    if not runs:
        filt = ", ".join(f"{k}={v}" for k, v in (where or {}).items())
        raise QueryError("no runs" + (f" with {filt}" if filt else "") + " in the store (see `profdb runs`)")
    runs = runs[-last:]
    kinds, notes = kinds_for(conn, runs[-1], kind)
    pattern = like_pattern(name_like)
    ids = [r.id for r in runs]
    joined = _sum.join(_rank, _rank.c.id == _sum.c.rank_id)
    cond: list[Any] = [_rank.c.run_id.in_(ids), _sum.c.kind.in_(list(kinds))]
    if pattern is not None:
        joined = joined.join(_name, _name.c.id == _sum.c.name_id)
        cond.append(_name.c.value.ilike(pattern))
    per: dict[int, dict[int, list[float]]] = defaultdict(dict)
    calls: dict[int, int] = defaultdict(int)
    comm_names: dict[int, bool] = {}
    for run_id, g, cat, n_calls, total in conn.execute(
        select(_rank.c.run_id, _rank.c.global_rank, _sum.c.category, func.sum(_sum.c.calls),
               func.sum(literal_column(SELF_NS)))
        .select_from(joined)
        .where(*cond)
        .group_by(_rank.c.run_id, _rank.c.global_rank, _sum.c.category)
    ):
        acc = per[run_id].setdefault(g, [0.0, 0.0])
        is_comm = cat == COMM
        comm_names[run_id] = comm_names.get(run_id, True) and is_comm
        acc[1 if is_comm else 0] += int(total)
        calls[run_id] += int(n_calls)
    nranks: dict[int, int] = {
        int(rid): int(c)
        for rid, c in conn.execute(
            select(_rank.c.run_id, func.count()).where(_rank.c.run_id.in_(ids)).group_by(_rank.c.run_id)
        )
    }
    rows: list[TrendRow] = []
    first: float | None = None
    prev: float | None = None
    for r in runs:
        n = int(nranks.get(r.id, 0))
        vec = per.get(r.id, {})
        # a name filter that matches only communication names: their time is what we follow
        only_comm = pattern is not None and comm_names.get(r.id, False)
        col = 1 if only_comm else 0
        values = {g: v[col] for g, v in vec.items()}
        total = sum(values.values())
        mean = total / n if n else None
        full = [values.get(g, 0.0) for g in sorted(values)] + [0.0] * max(0, n - len(values))
        if not total:
            s = None
        elif pattern is None:  # the run's likely straggler, as `profdb query --imbalance` names it
            verdict = queries.straggler(conn, resolve_run(conn, r.name), kinds)
            s = verdict.rank.global_rank if verdict.rank is not None else None
        else:
            s = slowest_rank(values, only_comm)
        comm = sum(v[1] for v in vec.values())
        rows.append(
            TrendRow(
                r.name,
                r.created_at.isoformat(sep=" ", timespec="seconds"),
                n,
                calls.get(r.id, 0),
                round(total),
                None if mean is None else round(mean),
                round(max(full)) if full else 0,
                imbalance_of(full) if n else None,
                s,
                round(comm / n) if n and (pattern is None or comm) else None,
                ratio_of(mean, prev) if mean is not None and prev else None,
                ratio_of(mean, first) if mean is not None and first else None,
            )
        )
        if mean:
            prev = mean
            if first is None:
                first = mean
    what = f"names like {pattern!r}" if pattern else f"busy ({'/'.join(kinds)}, non-communication) time"
    notes.append(
        f"{what} per run; mean_per_rank = total / ranks, max = the slowest rank's time, "
        "vs_prev / vs_first = mean_per_rank against the previous / first run"
    )
    if pattern and not any(calls.values()):
        notes.append(f"no {'/'.join(kinds)} names match {name_like!r} in these runs")
    headline = None
    valid = [row for row in rows if row.mean_per_rank_ns]
    if len(valid) >= 2:
        a, b = valid[0], valid[-1]
        assert a.mean_per_rank_ns and b.mean_per_rank_ns
        headline = (
            f"{what}: {fmt_ns(a.mean_per_rank_ns)} per rank in {a.run!r} -> {fmt_ns(b.mean_per_rank_ns)} in {b.run!r} "
            f"({(b.mean_per_rank_ns / a.mean_per_rank_ns - 1) * 100:+.1f}% over {len(valid)} runs)"
        )
        worst = max(valid[1:], key=lambda row: row.vs_prev or 0.0)
        if worst.vs_prev and worst.vs_prev > 1:
            headline += f"; largest step up: {worst.run!r} ({(worst.vs_prev - 1) * 100:+.1f}% vs the run before)"
    return Result(list(TREND_HEADERS), list(rows), headline, notes)
