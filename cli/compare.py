"""``profdb compare`` (and its regression gate), ``profdb trend``, ``profdb tag``: across runs.

Parse, call the library (profdb.store.compare) once, render: the headline and notes go to stderr,
rows to stdout; the gate's verdict is one line on stderr and the exit status."""

from __future__ import annotations

import json
from typing import Any

import click

from profdb.store import compare as cmp
from profdb.store import runs, trend

from .options import connect, db_option, kind_option, name_option, output_options, top_option
from .output import emit, note

# the store must exist (reading must not create an empty one); headline and notes to stderr, rows to stdout


def parse_percent(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    """``10%`` or ``10`` -> 0.10."""
    if value is None:
        return None
    text = value.strip().rstrip("%").strip()
    try:
        pct = float(text)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a percentage (e.g. 10%)") from None
    if pct < 0:
        raise click.BadParameter(f"{value!r} is negative; give a percentage such as 10%")
    return pct / 100


@click.command("compare")
@click.argument("runs", nargs=-1, metavar="[BASE] [NEW]")
@click.option(
    "--baseline",
    "-b",
    default=None,
    metavar="SPEC",
    help="Instead of BASE: a run name, last:N (median of the N runs before NEW), tag:KEY=VALUE (latest such "
    "run before NEW), or terms joined by commas (last:5,tag:branch=main). Default: the run before NEW.",
)
@click.option("--by", type=click.Choice(cmp.BY), default="kernel", show_default=True, help="One row per ...")
@click.option(
    "--threshold",
    default="5%",
    show_default=True,
    callback=parse_percent,
    help="Changes smaller than this are 'same' in the status column.",
)
@click.option(
    "--fail-on-regression",
    "fail_on",
    default=None,
    metavar="PCT",
    callback=parse_percent,
    help="Exit 1, with the reason on stderr, when a name's time per rank or slowest-rank time, or the "
    "run's imbalance, grew more than PCT (see the README, 'Regression (the gate)').",
)
@click.option(
    "--min-share",
    default="1%",
    show_default=True,
    callback=parse_percent,
    help="Noise floor of the gate: names below this share of the run's time are not gated.",
)
@kind_option()
@name_option
@top_option(30, "Rows with --by kernel (0 = all).")
@db_option
@output_options
@click.pass_context
def compare_command(
    ctx: click.Context,
    runs: tuple[str, ...],
    baseline: str | None,
    by: str,
    threshold: float,
    fail_on: float | None,
    min_share: float,
    kind: str | None,
    name_like: str | None,
    top: int,
    db: str | None,
    fmt: str,
) -> None:
    """Compare a run with a baseline: per-name (or per-rank/host) time, ratio and imbalance.

    \b
      profdb compare                                # newest run vs the run before it
      profdb compare nightly-41 nightly-42 --by rank
      profdb compare --baseline last:5 nightly-42 --fail-on-regression 10%    # CI gate
      profdb compare --baseline last:5,tag:branch=main --name gemm
    """
    if len(runs) > 2:
        raise click.UsageError("give at most two runs: BASE NEW (or NEW with --baseline)")
    if len(runs) == 2 and baseline is not None:
        raise click.UsageError("give BASE either as the first argument or as --baseline, not both")
    base_spec = runs[0] if len(runs) == 2 else baseline
    new = runs[-1] if runs else None
    result = cmp.compare(
        connect(db),
        new,
        base_spec,
        by=by,
        threshold=threshold or 0.0,
        kind=kind,
        name_like=name_like,
        top=top,
        min_share=min_share or 0.0,
        gate=fail_on,
    )
    emit(result.result, fmt)
    if fail_on is None:
        return
    if result.regressions:
        note(cmp.gate_line(result.regressions, fail_on, result.baseline))
        ctx.exit(1)
    note(f"no regression over {fail_on * 100:g}% in {result.new!r} vs {result.baseline}")


@click.command("trend")
@name_option
@click.option("--last", default=20, show_default=True, type=click.IntRange(min=1), help="Number of runs.")
@click.option("--until", default=None, metavar="RUN", help="Last run of the series (default: the newest).")
@click.option("--where", multiple=True, metavar="KEY=VALUE", help="Only runs tagged so (repeatable; see profdb tag).")
@kind_option()
@db_option
@output_options
def trend_command(
    name_like: str | None,
    last: int,
    until: str | None,
    where: tuple[str, ...],
    kind: str | None,
    db: str | None,
    fmt: str,
) -> None:
    """Per run: a name's (or the whole run's) time per rank, imbalance and straggler rank.

    \b
      profdb trend --name 'gemm%' --last 20
      profdb trend --where branch=main
    """
    result = trend.trend(connect(db), name_like, last, kind, where=runs.parse_filters(where), until=until)
    emit(result, fmt)


@click.command("tag")
@click.argument("run")
@click.argument("values", nargs=-1, metavar="KEY=VALUE...")
@click.option("--remove", multiple=True, metavar="KEY", help="Remove this key (repeatable).")
@db_option
def tag_command(run: str, values: tuple[str, ...], remove: tuple[str, ...], db: str | None) -> None:
    """Set run metadata (run.metadata_json), e.g. branch=main commit=abc123; used by
    `compare --baseline tag:KEY=VALUE` and `trend --where KEY=VALUE`. Prints the run's metadata."""
    if not values and not remove:
        raise click.UsageError("give KEY=VALUE pairs to set, or --remove KEY")
    conn = connect(db, write=True)
    meta: dict[str, Any] = runs.tag_run(conn, run, runs.parse_filters(values), remove)
    conn.commit()
    click.echo(json.dumps(meta, sort_keys=True))
