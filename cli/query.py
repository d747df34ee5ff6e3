"""``profdb query`` (the cross-rank questions) and ``profdb sql`` (any SQL). Parse, call the library
once, render: the headline (likely straggler and why) and notes go to stderr, rows to stdout, so
``profdb query --imbalance --format csv > x.csv`` holds data only."""

from __future__ import annotations

import click

from profdb.store import queries
from profdb.store.errors import QueryError

from .output import db_option, emit, open_store, output_options

QUESTIONS = ("imbalance", "hotspots", "steps", "ranks")


@click.command("query")
@click.option("--imbalance", "q_imbalance", is_flag=True, help="Names imbalanced across ranks; the likely straggler.")
@click.option("--hotspots", "q_hotspots", is_flag=True, help="Where the time goes, across all ranks.")
@click.option("--steps", "q_steps", is_flag=True, help="Per step (ProfilerStep#N): slowest rank, how often.")
@click.option("--ranks", "q_ranks", is_flag=True, help="Per rank: compute / communication / memory time.")
@click.option("--run", default=None, help="Run name (or id); default: the most recent run.")
@click.option(
    "--kind",
    default=None,
    help="Activity kind(s), comma-separated: kernel, memcpy, memset, cpu_op, annotation, gpu_annotation, api, "
    "python, or gpu (= kernel,memcpy,memset). Default: kernel (gpu for --ranks); cpu_op for CPU-only runs.",
)
@click.option("--top", default=20, show_default=True, type=click.IntRange(min=0), help="Rows per section (0 = all).")
@click.option("--name", "name_like", default=None, help="Only names LIKE this (case-insensitive; without % it matches a substring).")
@click.option(
    "--by",
    type=click.Choice(queries.GROUP_BY),
    default="rank",
    show_default=True,
    help="With --imbalance: per rank, or rolled up by host (slow node) or local-rank (slow GPU slot).",
)
@db_option
@output_options
def query_cmd(
    q_imbalance: bool,
    q_hotspots: bool,
    q_steps: bool,
    q_ranks: bool,
    run: str | None,
    kind: str | None,
    top: int,
    name_like: str | None,
    by: str,
    db: str | None,
    fmt: str,
) -> None:
    """Ask the cross-rank questions of one run.

    \b
      profdb query --imbalance                 # imbalanced kernels, likely straggler rank
      profdb query --imbalance --by host       # slow node?   (--by local-rank: slow GPU slot?)
      profdb query --hotspots --top 10
      profdb query --steps                     # per-step time: which rank is slowest, how often
      profdb query --ranks                     # per-rank compute / communication / memory
    """
    chosen = [q for q, on in zip(QUESTIONS, (q_imbalance, q_hotspots, q_steps, q_ranks)) if on]
    if len(chosen) != 1:
        raise click.UsageError("choose one question: --imbalance, --hotspots, --steps or --ranks")
    question = chosen[0]
    if by != "rank" and question != "imbalance":
        raise click.UsageError("--by goes with --imbalance")
    if question in ("steps", "ranks") and name_like is not None:
        raise click.UsageError(f"--name does not apply to --{question}")
    if question == "steps" and kind is not None:
        raise click.UsageError("--kind does not apply to --steps")
    try:
        queries.parse_kinds(kind)
    except QueryError as e:
        raise click.BadParameter(str(e), param_hint="--kind") from e
    engine = open_store(db)
    try:
        with engine.connect() as conn:
            if question == "imbalance":
                result = queries.imbalance(conn, run, kind, top, name_like, by)
            elif question == "hotspots":
                result = queries.hotspots(conn, run, kind, top, name_like)
            elif question == "steps":
                result = queries.steps(conn, run)
            else:
                result = queries.rank_split(conn, run, kind)
    finally:
        engine.dispose()
    emit(result, fmt)


@click.command("sql")
@click.argument("statement")
@click.option("--write", is_flag=True, help="Commit the statement's changes (default: read-only, rolled back).")
@db_option
@output_options
def sql_cmd(statement: str, write: bool, db: str | None, fmt: str) -> None:
    """Run any SQL against the store; the views (imbalance_v, hotspot_v, rank_total_v, step_v...)
    need no joins. Example: profdb sql "select * from imbalance_v order by recoverable_ns desc limit 5"
    """
    engine = open_store(db)
    try:
        with engine.connect() as conn:
            result = queries.run_sql(conn, statement)
            if write:
                conn.commit()
            else:
                conn.rollback()
    finally:
        engine.dispose()
    emit(result, fmt)

