"""``profdb query`` (the cross-rank questions) and ``profdb sql`` (any SQL). Parse, call the library
once, render: the headline (likely straggler and why) and notes go to stderr, rows to stdout, so
``profdb query --imbalance --format csv > x.csv`` holds data only."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click

from profdb.store import queries, straggler
from profdb.store.errors import QueryError

from .options import connect, db_option, kind_option, name_option, output_options, read, run_option, top_option
from .output import emit

#: profdb sql prints at most this many rows unless --max-rows says otherwise (rows are held for the table's widths)
SQL_MAX_ROWS = 100_000


@dataclass(frozen=True)
class Question:
    """One question of ``profdb query``: the flag ``--NAME``, its help, the library function
    (called as ``ask(db, run, **{option: value})``) and the options that apply to it."""

    name: str
    help: str
    ask: Callable[..., queries.Result]
    options: tuple[str, ...] = ()


#: the questions, in --help order; a new question is one entry here
QUESTIONS: tuple[Question, ...] = (
    Question("imbalance", "Names imbalanced across ranks; the likely straggler.", queries.imbalance,
             ("kind", "top", "name_like", "by", "inclusive")),
    Question("hotspots", "Where the time goes, across all ranks.", queries.hotspots,
             ("kind", "top", "name_like", "inclusive")),
    Question("stragglers", "Per rank: collectives entered last, wait caused and suffered, busy, idle, exposed.",
             straggler.stragglers, ("top",)),
    Question("collectives", "Per collective instance: arrival skew, last rank, wait, bytes (largest skew first).",
             straggler.collectives, ("top",)),
    Question("steps", "Per step (ProfilerStep#N): the rank waited on and how long, beside the longest step.",
             queries.steps),
    Question("ranks", "Per rank: compute / communication / memory time.", queries.rank_split, ("kind",)),
)


@dataclass(frozen=True)
class Option:
    """An option of ``profdb query`` that only some questions take. Given (not its default) with a
    question that does not take it, it is a usage error: a shared option "does not apply to --Q"; an
    option of a few questions "goes with --A or --B". --top (a row limit) is accepted by all."""

    param: str
    flag: str
    default: Any
    shared: bool


#: checked in this order
OPTIONS = (
    Option("by", "--by", "rank", shared=False),
    Option("inclusive", "--inclusive", False, shared=False),
    Option("name_like", "--name", None, shared=True),
    Option("kind", "--kind", None, shared=True),
)


def _one_of(names: list[str]) -> str:
    flags = [f"--{n}" for n in names]
    return flags[0] if len(flags) == 1 else ", ".join(flags[:-1]) + " or " + flags[-1]


def _question(params: dict[str, Any]) -> Question:
    """The question asked, checked against the options given (usage errors, exit 2)."""
    chosen = [q for q in QUESTIONS if params.pop(f"q_{q.name}")]
    if len(chosen) != 1:
        raise click.UsageError(f"choose one question: {_one_of([q.name for q in QUESTIONS])}")
    question = chosen[0]
    for opt in OPTIONS:
        if opt.param in question.options or params[opt.param] == opt.default:
            continue
        if opt.shared:
            raise click.UsageError(f"{opt.flag} does not apply to --{question.name}")
        raise click.UsageError(f"{opt.flag} goes with {_one_of([q.name for q in QUESTIONS if opt.param in q.options])}")
    return question


def _question_flags(f: Callable[..., Any]) -> Callable[..., Any]:
    for q in reversed(QUESTIONS):
        f = click.option(f"--{q.name}", f"q_{q.name}", is_flag=True, help=q.help)(f)
    return f


@click.command("query")
@_question_flags
@run_option()
@kind_option(
    "Activity kind(s), comma-separated: kernel, memcpy, memset, cpu_op, annotation, gpu_annotation, api, "
    "python, or gpu (= kernel,memcpy,memset). Default: kernel (gpu for --ranks); cpu_op for CPU-only runs."
)
@top_option(20, "Rows per section (0 = all).")
@name_option
@click.option(
    "--by",
    type=click.Choice(queries.GROUP_BY),
    default="rank",
    show_default=True,
    help="With --imbalance: per rank, or rolled up by host (slow node) or local-rank (slow GPU slot).",
)
@click.option(
    "--inclusive",
    is_flag=True,
    help="With --imbalance/--hotspots: inclusive times of nested CPU ops and annotations (default: self time).",
)
@db_option
@output_options
def query_cmd(run: str | None, db: str | None, fmt: str, **params: Any) -> None:
    """Ask the cross-rank questions of one run.

    \b
      profdb query --imbalance                 # imbalanced kernels, likely straggler rank
      profdb query --imbalance --by host       # slow node?   (--by local-rank: slow GPU slot?)
      profdb query --hotspots --top 10
      profdb query --stragglers                # per rank: entered collectives last, wait caused/suffered
      profdb query --collectives --top 20      # per collective: arrival skew, the rank waited for
      profdb query --steps                     # per step: the rank waited on, and how long
      profdb query --ranks                     # per-rank compute / communication / memory
    """
    question = _question(params)
    try:
        queries.parse_kinds(params["kind"])
    except QueryError as e:
        raise click.BadParameter(str(e), param_hint="--kind") from e
    result = question.ask(read(db), run, **{o: params[o] for o in question.options})
    emit(result, fmt)


@click.command("sql")
@click.argument("statement")
@click.option(
    "--write", is_flag=True, help="Open the store for writing and commit the statement's changes (default: read-only)."
)
@click.option(
    "--max-rows",
    default=SQL_MAX_ROWS,
    show_default=True,
    type=click.IntRange(min=1),
    help="Print at most this many rows (a note says when there were more).",
)
@db_option
@output_options
def sql_cmd(statement: str, write: bool, max_rows: int, db: str | None, fmt: str) -> None:
    """Run any SQL against the store; the views (imbalance_v, hotspot_v, rank_total_v, step_v...)
    need no joins.

    \b
      profdb sql "select * from imbalance_v order by recoverable_ns desc limit 5"
    """
    if not write:  # read-only by construction (db.open_raw_sqlite / open_readonly), not rolled back
        emit(queries.run_sql(read(db), statement, max_rows=max_rows), fmt)
        return
    conn = connect(db, write=True)
    result = queries.run_sql(conn, statement, max_rows=max_rows)
    from profdb.store import timeline

    timeline.forget_findings(conn)  # what the statement changed may be under a run's kept analysis
    conn.commit()
    emit(result, fmt)

