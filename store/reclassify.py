"""Which rules classified a run, and re-classifying a stored run after the rules changed.

Ingest records the rules in force (``classify.active()``) once per distinct rule set in
``classification_rules`` (by digest) and points each ``source_file.rules_id`` at it: a run ingested
in parts may mix rule sets, which the questions then say (``scope.digest_notes``). ``reclassify`` applies
the current rules to a stored run: the category of every distinct (kind, name) is computed again and
activity and summary rows are updated only for the pairs that change, in the caller's transaction,
and every source of the run then points at the new rules."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import Connection, case, func, select, tuple_, update

from . import bulk, classify, fact_spans, timeline
from .models import Activity, ClassificationRules, Name, SourceFile, Summary
from .runs import now
from .scope import RunScope

_rules = ClassificationRules.__table__


def rules_id(conn: Connection, rules: classify.Rules) -> int:
    """The id of ``rules`` in the store, recorded on first use (two loads at once: one inserts)."""
    return _record(conn, rules.digest, rules.shipped_version, rules.serialise(), now())


def _record(conn: Connection, digest: str, shipped_version: int, rules_json: str, created_at: datetime) -> int:
    """The id of the rules row ``digest``, inserted if new. PostgreSQL inserts it on a second,
    autocommit connection, as names are interned (bulk.names_connection): a rules row another node's
    open transaction inserted would otherwise hold this load until that transaction ends."""
    query = select(_rules.c.id).where(_rules.c.digest == digest)
    found = conn.execute(query).scalar()
    if found is not None:
        return int(found)
    values = {"digest": digest, "shipped_version": shipped_version, "rules_json": rules_json, "created_at": created_at}
    side = bulk.names_connection(conn)
    try:
        target = side or conn
        target.execute(bulk.insert_ignore(target, _rules).values(**values))
    finally:
        if side is not None:
            side.close()
    return int(conn.execute(query).scalar_one())


def run_digests(conn: Connection, run_id: int) -> dict[str | None, int]:
    """digest -> number of the run's source files classified with it (None: stored before rules were
    recorded)."""
    rows = conn.execute(
        select(_rules.c.digest, func.count())
        .select_from(SourceFile.__table__.outerjoin(_rules, _rules.c.id == SourceFile.rules_id))
        .where(SourceFile.run_id == run_id)
        .group_by(_rules.c.digest)
    )
    return {d: int(n) for d, n in rows}


@dataclass
class Moved:
    kind: str
    name: str
    before: str
    after: str
    total_ns: int
    ranks: int


@dataclass
class Reclassified:
    run: str
    digest: str
    digests_before: dict[str | None, int]
    #: names whose category changed, largest time first
    moved: list[Moved] = field(default_factory=list)
    #: the kind the shares are of (kernel, or cpu_op for a CPU-only run), and its communication share
    share_kind: str = ""
    share_before: float | None = None
    share_after: float | None = None
    activity_rows: int = 0
    summary_rows: int = 0


def _comm_share(conn: Connection, rank_ids: Sequence[int], kind: str) -> float | None:
    total, comm = conn.execute(
        select(
            func.coalesce(func.sum(Summary.total_ns), 0),
            func.coalesce(
                func.sum(case((Summary.category == classify.COMMUNICATION, Summary.total_ns), else_=0)), 0
            ),
        ).where(Summary.rank_id.in_(rank_ids), Summary.kind == kind)
    ).one()
    return float(comm) / float(total) if total else None


def reclassify(conn: Connection, scope: RunScope, rules: classify.Rules) -> Reclassified:
    """Re-classify run ``scope`` with ``rules`` in the caller's transaction (see module doc)."""
    rank_ids = [r.id for r in scope.ranks]
    out = Reclassified(scope.name, rules.digest, run_digests(conn, scope.id))
    kinds = set(conn.execute(select(Summary.kind).where(Summary.rank_id.in_(rank_ids)).distinct()).scalars())
    out.share_kind = "kernel" if "kernel" in kinds or not kinds else ("cpu_op" if "cpu_op" in kinds else min(kinds))
    out.share_before = _comm_share(conn, rank_ids, out.share_kind)
    pairs = conn.execute(
        select(
            Summary.kind,
            Summary.name_id,
            Name.value,
            Summary.category,
            func.sum(Summary.total_ns),
            func.count(),
        )
        .join(Name, Name.id == Summary.name_id)
        .where(Summary.rank_id.in_(rank_ids))
        .group_by(Summary.kind, Summary.name_id, Name.value, Summary.category)
    ).all()
    moves: dict[tuple[str, int], str] = {}
    for kind, name_id, name, before, total, ranks in pairs:
        after = rules.category(kind, name)
        if after == before:
            continue
        out.moved.append(Moved(kind, name, before, after, int(total or 0), int(ranks)))
        moves[(kind, int(name_id))] = after
    out.summary_rows += _set_categories(conn, Summary, rank_ids, moves)
    out.activity_rows += _set_categories(conn, Activity, rank_ids, moves)
    # activity rows of (kind, name) pairs a summary does not hold (none today: summaries cover every
    # activity), classified the same way, so the two tables never disagree
    frm, cond = fact_spans.scoped(conn, Activity.__table__, ranks=rank_ids)
    stray = conn.execute(
        select(Activity.kind, Activity.name_id, Name.value, Activity.category)
        .select_from(frm.join(Name.__table__, Name.id == Activity.name_id))
        .where(*cond)
        .where(
            ~select(Summary.rank_id)
            .where(
                Summary.rank_id == Activity.rank_id,
                Summary.kind == Activity.kind,
                Summary.name_id == Activity.name_id,
            )
            .exists()
        )
        .distinct()
    ).all()
    strays = {(kind, int(name_id)): after for kind, name_id, name, before in stray
              if (after := rules.category(kind, name)) != before}
    out.activity_rows += _set_categories(conn, Activity, rank_ids, strays)
    conn.execute(update(SourceFile).where(SourceFile.run_id == scope.id).values(rules_id=rules_id(conn, rules)))
    out.share_after = _comm_share(conn, rank_ids, out.share_kind)
    out.moved.sort(key=lambda m: (-m.total_ns, m.kind, m.name))
    timeline.analyse_in_write(conn, scope.name)  # its files' rules changed: the run's analysis is kept again
    return out


def after_commit(conn: Connection, done: Reclassified) -> str | None:
    """Once the caller committed ``reclassify``'s transaction: on PostgreSQL, keep the run's analysis
    (``timeline.analyse_after_write``; its note, if it was not kept). Elsewhere reclassify kept it in the
    transaction."""
    return timeline.analyse_after_write(conn.engine, done.run, f"run {done.run!r} was reclassified")


#: (kind, name_id) pairs set per statement: bound parameters stay far below every driver's limit
_MOVES_PER_STATEMENT = 200


def _set_categories(
    conn: Connection, table: type[Activity] | type[Summary], rank_ids: Sequence[int], moves: dict[tuple[str, int], str]
) -> int:
    """Set the category of ``table``'s rows of ``rank_ids`` for each moved (kind, name_id); returns the
    rows changed. One statement for many pairs, not one per pair: on PostgreSQL the fact tables' rank
    index is BRIN (migration 0008), so each statement reads the run's rows once, however many names moved;
    on SQLite activity's rows are those in the ranks' id ranges (``fact_spans.scoped``), read once per
    statement too."""
    changed = 0
    items = sorted(moves.items())
    for at in range(0, len(items), _MOVES_PER_STATEMENT):
        part = items[at : at + _MOVES_PER_STATEMENT]
        category = case(
            *[((table.kind == kind) & (table.name_id == name_id), after) for (kind, name_id), after in part],
            else_=table.category,
        )
        moved = [
            table.name_id.in_(sorted({n for (_k, n), _a in part})),
            tuple_(table.kind, table.name_id).in_([key for key, _a in part]),
        ]
        if table is Activity and conn.dialect.name == "sqlite":  # (no index of its own: through the spans)
            frm, cond = fact_spans.scoped(conn, Activity.__table__, ranks=rank_ids)
            which = [Activity.id.in_(select(Activity.id).select_from(frm).where(*cond, *moved))]
        else:
            which = [table.rank_id.in_(rank_ids), *moved]
        changed += conn.execute(update(table).where(*which).values(category=category)).rowcount
    return changed

def copy_rules(src: Connection, dst: Connection, src_id: int | None, done: dict[int, int]) -> int | None:
    """The destination id of source store rules ``src_id`` (merge/export), recorded there by digest."""
    if src_id is None:
        return None
    if src_id not in done:
        row = src.execute(select(_rules).where(_rules.c.id == src_id)).one()
        done[src_id] = _record(dst, row.digest, row.shipped_version, row.rules_json, row.created_at)
    return done[src_id]
