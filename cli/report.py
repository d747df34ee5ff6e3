"""``profdb report`` (one self-contained HTML file) and ``profdb plot`` (the imbalance heatmap alone).
Parse, call the library (profdb.store.report) once, say what was written."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import click

from profdb.store import report

from .options import F, connect, db_option, kind_option, run_option, top_option
from .output import note

heatmap_top = top_option(report.DEFAULT_TOP, "Names in the heatmap.", min=1)


def output_file(default: str, help: str) -> Callable[[F], F]:
    return click.option(
        "-o", "--output", "out", default=default, show_default=True, type=click.Path(dir_okay=False, path_type=Path),
        help=help,
    )


@click.command("report")
@run_option()
@output_file("report.html", "The HTML file to write.")
@kind_option()
@heatmap_top
@db_option
def report_command(run: str | None, out: Path, kind: str | None, top: int, db: str | None) -> None:
    """Write one run's report as one HTML file that opens offline: straggler verdict, rank x name
    heatmap, per-rank time, host and local-rank roll-ups, steps, hotspots, provenance.

    Needs matplotlib: pip install 'profdb[report]'."""
    conn = connect(db)
    data = report.write_report(conn, out, run, kind, top, store=conn.engine.url.render_as_string(hide_password=True))
    note(data.verdict)
    click.echo(f"wrote {out} (run {data.run}, {len(data.ranks)} ranks, {out.stat().st_size:,} bytes)")


@click.command("plot")
@click.option("--imbalance", "imbalance", is_flag=True, required=True, help="The rank x name imbalance heatmap.")
@run_option()
@output_file("heatmap.png", "Image to write: .png, .svg or .pdf.")
@kind_option()
@heatmap_top
@db_option
def plot_command(imbalance: bool, run: str | None, out: Path, kind: str | None, top: int, db: str | None) -> None:
    """Draw a chart alone: --imbalance, each name's time per rank / its mean over ranks (a straggler
    is a hot column). Needs matplotlib: pip install 'profdb[report]'."""
    hm = report.plot_heatmap(connect(db), out, run, kind, top)
    straggler = f"; straggler: rank {hm.straggler}" if hm.straggler is not None else ""
    click.echo(f"wrote {out} (run {hm.run}, {len(hm.names)} names x {len(hm.ranks)} ranks{straggler})")
