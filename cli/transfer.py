"""``profdb export`` (this store's runs into another, e.g. the team's PostgreSQL store) and
``profdb merge`` (several stores into this one)."""

from __future__ import annotations

import sys
from typing import Any

import click

from profdb.store import transfer

from .options import db_option, output_options
from .output import note, render

HEADERS = ["source", "run", "status", "files", "skipped_files", "ranks", "activity_rows", "counter_rows"]


def _progress(run: str, done: int, total: int) -> None:
    if sys.stderr.isatty():
        click.echo(f"\r{run}: {done}/{total} files", err=True, nl=done == total)


def _rows(reports: list[transfer.TransferReport]) -> list[tuple[Any, ...]]:
    return [
        (rep.source, r.run, r.status, r.files, r.skipped_files, _ranks(r.ranks), r.rows.get("activity", 0),
         r.rows.get("counter", 0))
        for rep in reports
        for r in rep.runs
    ]


def _ranks(ranks: list[int]) -> str:
    if not ranks:
        return ""
    if ranks == list(range(ranks[0], ranks[-1] + 1)) and len(ranks) > 2:
        return f"{ranks[0]}-{ranks[-1]}"
    return ",".join(map(str, ranks))


def _summary(reports: list[transfer.TransferReport], dest: str) -> None:
    runs = [r for rep in reports for r in rep.runs]
    copied = sum(r.files for r in runs)
    skipped = sum(r.skipped_files for r in runs)
    note(f"{dest}: {copied} files copied in {sum(1 for r in runs if r.files)} runs"
         + (f", {skipped} already there (skipped)" if skipped else ""))
    for r in runs:
        if r.note:
            note(r.note)


@click.command("export")
@click.option("--to", "dest", required=True, metavar="URL|PATH",
              help="Destination store, e.g. postgresql+psycopg://user@host/profdb (created and migrated if new).")
@click.option("--run", "runs", multiple=True, metavar="NAME", help="Run to copy (repeatable; default: every run).")
@click.option("--allow-duplicate-ranks", is_flag=True,
              help="Accept a rank that already has a different file of the same kind in the destination run.")
@db_option
@output_options
def export_command(dest: str, runs: tuple[str, ...], allow_duplicate_ranks: bool, db: str | None, fmt: str) -> None:
    """Copy runs from this store (--db) into another store, such as the team's PostgreSQL store.

    Files the destination run already has (same rank, same content) are skipped, so exporting
    again adds nothing; ranks of one run exported from several nodes are united."""
    report = transfer.transfer_runs(db, dest, list(runs) or None, allow_duplicate_ranks=allow_duplicate_ranks,
                                    progress=_progress)
    render(HEADERS, _rows([report]), fmt)
    _summary([report], report.destination)


@click.command("merge")
@click.argument("sources", nargs=-1, required=True, metavar="STORE...")
@click.option("--run", "runs", multiple=True, metavar="NAME", help="Run to copy (repeatable; default: every run).")
@click.option("--allow-duplicate-ranks", is_flag=True,
              help="Accept a rank that already has a different file of the same kind in the destination run.")
@db_option
@output_options
def merge_command(sources: tuple[str, ...], runs: tuple[str, ...], allow_duplicate_ranks: bool, db: str | None,
                  fmt: str) -> None:
    """Copy the runs of other stores (files or URLs) into this one (--db), e.g. the per-node stores
    of one job: `profdb merge node*/profdb.db --db job.db`. Repeating a merge adds nothing."""
    reports = transfer.merge_stores(list(sources), db, list(runs) or None, allow_duplicate_ranks=allow_duplicate_ranks,
                                    progress=_progress)
    render(HEADERS, _rows(reports), fmt)
    if reports:
        _summary(reports, reports[0].destination)
