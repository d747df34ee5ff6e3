"""What is in the store: runs and ranks (each function returns headers + rows)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Engine, func, select

from .errors import QueryError
from .identity import missing_ranks
from .models import Rank, Run, SourceFile

Table = tuple[list[str], list[tuple[Any, ...]]]


def _fmt_missing(missing: list[int]) -> str:
    if not missing:
        return ""
    if len(missing) > 12:
        return f"{len(missing)} ranks ({', '.join(map(str, missing[:6]))}, ...)"
    return ", ".join(map(str, missing))


def list_runs(engine: Engine) -> Table:
    headers = ["run", "created_at", "launcher", "world_size", "ranks", "missing_ranks", "sources", "rows"]
    with engine.connect() as conn:
        ranks: dict[int, int] = {
            run_id: n for run_id, n in conn.execute(select(Rank.run_id, func.count()).group_by(Rank.run_id))
        }
        rank_lists: dict[int, list[int]] = {}
        for run_id, g in conn.execute(select(Rank.run_id, Rank.global_rank)):
            rank_lists.setdefault(run_id, []).append(g)
        src = {
            r[0]: (r[1], r[2])
            for r in conn.execute(
                select(SourceFile.run_id, func.count(), func.coalesce(func.sum(SourceFile.rows), 0)).group_by(SourceFile.run_id)
            )
        }
        rows = []
        for run in conn.execute(
            select(Run.id, Run.name, Run.created_at, Run.launcher, Run.world_size).order_by(Run.created_at, Run.id)
        ):
            missing = missing_ranks(rank_lists.get(run.id, []), run.world_size)
            n_src, n_rows = src.get(run.id, (0, 0))
            rows.append(
                (
                    run.name,
                    run.created_at.isoformat(sep=" ", timespec="seconds"),
                    run.launcher,
                    run.world_size,
                    ranks.get(run.id, 0),
                    _fmt_missing(missing),
                    n_src,
                    int(n_rows),
                )
            )
    return headers, rows


def latest_run(engine: Engine) -> str:
    with engine.connect() as conn:
        name = conn.execute(select(Run.name).order_by(Run.created_at.desc(), Run.id.desc()).limit(1)).scalar()
    if name is None:
        raise QueryError("the store has no runs yet; ingest some with `profdb ingest PATH...`")
    return str(name)


def run_id(engine: Engine, name: str) -> int:
    with engine.connect() as conn:
        rid = conn.execute(select(Run.id).where(Run.name == name)).scalar()
        if rid is None:
            known = conn.execute(select(Run.name).order_by(Run.created_at.desc()).limit(10)).scalars().all()
    if rid is None:
        raise QueryError(f"no run named {name!r}; runs in this store: {', '.join(known) or 'none'} (see `profdb runs`)")
    return int(rid)


def list_ranks(engine: Engine, run: str | None = None) -> tuple[list[str], list[tuple[Any, ...]], list[str]]:
    """(headers, rows, notes): one row per rank; ranks 0..world_size-1 that are missing get a row
    saying so, and a note."""
    name = run or latest_run(engine)
    rid = run_id(engine, name)
    headers = ["global_rank", "hostname", "local_rank", "pid", "device", "rows", "sources", "files"]
    notes: list[str] = []
    with engine.connect() as conn:
        world = conn.execute(select(Run.world_size).where(Run.id == rid)).scalar()
        files: dict[int, list[str]] = {}
        rows_by: dict[int, int] = {}
        for rank_id, path, nrows in conn.execute(
            select(SourceFile.rank_id, SourceFile.path, SourceFile.rows).where(SourceFile.run_id == rid).order_by(SourceFile.path)
        ):
            files.setdefault(rank_id, []).append(path)
            rows_by[rank_id] = rows_by.get(rank_id, 0) + int(nrows)
        out: list[tuple[Any, ...]] = []
        present = []
        for r in conn.execute(
            select(Rank.id, Rank.global_rank, Rank.hostname, Rank.local_rank, Rank.pid, Rank.device)
            .where(Rank.run_id == rid)
            .order_by(Rank.global_rank)
        ):
            present.append(r.global_rank)
            fl = files.get(r.id, [])
            out.append(
                (r.global_rank, r.hostname, r.local_rank, r.pid, r.device, rows_by.get(r.id, 0), len(fl), "; ".join(fl))
            )
    missing = missing_ranks(present, world)
    for m in missing:
        out.append((m, None, None, None, None, 0, 0, "MISSING: no profile ingested for this rank"))
    out.sort(key=lambda t: t[0])
    notes.append(f"run {name}: {len(present)} ranks" + (f" of world size {world}" if world else ""))
    if missing:
        notes.append(f"missing ranks: {_fmt_missing(missing)}")
    return headers, out, notes


def sources_by_kind(conn: Connection, run_id: int) -> dict[tuple[int, str, str], str]:
    """(global_rank, format, content kind) -> path of a file already stored in the run: what ingest and
    transfer check a new file against (one file of a kind per rank unless several windows are allowed)."""
    rows = conn.execute(
        select(Rank.global_rank, SourceFile.format, SourceFile.content_kind, SourceFile.path)
        .join(SourceFile, SourceFile.rank_id == Rank.id)
        .where(Rank.run_id == run_id)
    )
    return {(g, fmt, kind): path for g, fmt, kind, path in rows}
