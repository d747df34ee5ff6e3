"""``profdb timeline``: the run's activity as one Chrome trace-event file for Perfetto / chrome://tracing,
every rank a process, clocks aligned, collectives linked across ranks. Parse, call the library
(profdb.store.trace_export) once, say what was written; progress on stderr when it is a terminal."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from profdb.store import trace_export
from profdb.store.identity import parse_ranks
from profdb.store.trace_export import RankWindow
from profdb.store.units import visible

from .options import connect, db_option, run_option
from .output import note


def _time(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return trace_export.parse_time(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from e


def _ranks(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[int, ...] | None:
    if value is None:
        return None
    try:
        return tuple(sorted(parse_ranks(value)))
    except ValueError as e:
        raise click.BadParameter(str(e)) from e


@click.command("timeline")
@run_option()
@click.option("--step", type=click.IntRange(min=0), default=None,
              help="Only step N (ProfilerStep#N, as in `profdb query --steps`): each rank's own range of that step.")
@click.option("--from", "from_ns", metavar="TIME", callback=_time, default=None,
              help="Start of a time window on the common clock, from the run's start: 1.5s, 250ms, 120us, 800ns.")
@click.option("--to", "to_ns", metavar="TIME", callback=_time, default=None,
              help="End of the time window (exclusive), from the run's start.")
@click.option("--ranks", "ranks", metavar="RANKS", callback=_ranks, default=None,
              help="Only these global ranks: 0-7, or 0,2,5-7.")
@click.option("-o", "--output", "out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The trace file to write: .json, or .json.gz (gzip).")
@db_option
def timeline_command(run: str | None, step: int | None, from_ns: int | None, to_ns: int | None,
                     ranks: tuple[int, ...] | None, out: Path, db: str | None) -> None:
    """Write one run as one merged trace (Chrome trace-event JSON) that opens in ui.perfetto.dev and
    chrome://tracing: one process per rank (sorted by rank, named with its host and local_rank), its
    threads and streams as in the profiles, times corrected by the per-host clock offsets of the
    straggler analysis, flow arrows linking each collective across ranks, the verdict in the metadata.

    \b
    profdb timeline --run llama-tp8 --step 12 -o job.json.gz
    profdb timeline --from 2s --to 2.5s --ranks 0-7 -o window.json
    profdb timeline --ranks 0-1 -o ranks01.json.gz

    `profdb ingest` reads the file back, one rank per process."""
    if step is not None and (from_ns is not None or to_ns is not None):
        raise click.UsageError("--step and --from/--to both choose the window: give one or the other")
    if from_ns is not None and to_ns is not None and to_ns <= from_ns:
        raise click.BadParameter("the window ends before it starts: --to must be after --from", param_hint="--to")
    conn = connect(db)
    plan = trace_export.plan_export(conn, run, trace_export.Window(ranks, step, from_ns, to_ns))
    note(plan.verdict)
    for n in plan.notes:
        note(n)
    if plan.large:
        note(f"large output: {plan.size_note()}; Perfetto and chrome://tracing load a few hundred MB at most: "
             "narrow it with --step N, --from/--to or --ranks")
    tty = sys.stderr.isatty()

    def progress(done: int, total: int, w: RankWindow, events: int) -> None:
        click.echo(f"\r{visible(w.rank.label())} ({done}/{total} ranks): {events:,} events\x1b[K", err=True, nl=False)

    written = trace_export.write_trace(conn, plan, out, progress if tty else None)
    if tty:
        click.echo("", err=True)
    click.echo(f"wrote {out} (run {plan.scope.name}, {len(written.per_rank)} ranks, {written.events:,} events, "
               f"{written.flows:,} collective links, {written.bytes:,} bytes)")
