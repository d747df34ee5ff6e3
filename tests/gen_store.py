"""Test helper: fill a store by hand through the models (run, rank, name, summary, step).

Used for small stores with exact, known numbers (edge cases: absent ranks, ties, no steps), where
going through files and ingest would only hide what is being tested. Real files go through
``profdb ingest`` in the tests instead."""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Iterable

from sqlalchemy import Engine, insert, select

from profdb.store.classify import category
from profdb.store.models import Name, Rank, Run, Step, Summary

_STEP = re.compile(r"^ProfilerStep#(\d+)$")


@dataclass
class HandRank:
    global_rank: int
    hostname: str | None = None
    local_rank: int | None = None
    #: (kind, name, duration_ns) per call
    calls: list[tuple[str, str, int]] = field(default_factory=list)
    #: step -> duration_ns
    steps: dict[int, int] = field(default_factory=dict)

    def add(self, kind: str, name: str, *durations: int) -> "HandRank":
        self.calls.extend((kind, name, d) for d in durations)
        return self


_counter = 0


def fill_run(engine: Engine, name: str, ranks: Iterable[HandRank], world_size: int | None = None) -> int:
    """Insert one run with its ranks' summaries and steps; returns the run id. Runs filled later are
    more recent (created_at increases)."""
    global _counter
    _counter += 1
    ranks = list(ranks)
    with engine.begin() as conn:
        run_id = conn.execute(
            insert(Run.__table__).values(
                name=name,
                created_at=datetime(2026, 1, 1) + timedelta(minutes=_counter),
                world_size=world_size if world_size is not None else len(ranks),
            )
        ).inserted_primary_key[0]
        names: dict[str, int] = {
            v: i for v, i in conn.execute(select(Name.__table__.c.value, Name.__table__.c.id)).all()
        }
        for hr in ranks:
            rank_id = conn.execute(
                insert(Rank.__table__).values(
                    run_id=run_id, global_rank=hr.global_rank, hostname=hr.hostname, local_rank=hr.local_rank
                )
            ).inserted_primary_key[0]
            agg: dict[tuple[str, str], list[int]] = defaultdict(list)
            for kind, nm, d in hr.calls:
                agg[(kind, nm)].append(d)
            rows = []
            for (kind, nm), ds in agg.items():
                if nm not in names:
                    names[nm] = conn.execute(insert(Name.__table__).values(value=nm)).inserted_primary_key[0]
                rows.append(
                    dict(
                        rank_id=rank_id,
                        name_id=names[nm],
                        kind=kind,
                        category=category(kind, nm),
                        calls=len(ds),
                        total_ns=sum(ds),
                        min_ns=min(ds),
                        max_ns=max(ds),
                        sum_sq_ns=float(sum(d * d for d in ds)),
                    )
                )
            if rows:
                conn.execute(insert(Summary.__table__), rows)
            if hr.steps:
                src = _source(conn, run_id, rank_id)
                conn.execute(
                    insert(Step.__table__),
                    [
                        dict(rank_id=rank_id, step=s, source_id=src, start_ns=1000 * s, duration_ns=d)
                        for s, d in hr.steps.items()
                    ],
                )
    return int(run_id)


def _source(conn: object, run_id: int, rank_id: int) -> int:
    from profdb.store.models import SourceFile

    res = conn.execute(  # type: ignore[attr-defined]
        insert(SourceFile.__table__).values(
            run_id=run_id,
            rank_id=rank_id,
            path=f"hand/{run_id}/{rank_id}",
            content_hash=f"{run_id:032x}{rank_id:032x}",
            size_bytes=0,
            format="hand",
            content_kind="",
            rows=0,
            time_base_ns=0,
            ingested_at=datetime(2026, 1, 1),
        )
    )
    return int(res.inserted_primary_key[0])


def step_of(name: str) -> int | None:
    m = _STEP.match(name)
    return int(m.group(1)) if m else None
