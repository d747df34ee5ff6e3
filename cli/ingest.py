"""``profdb ingest``, ``runs``, ``ranks``, ``formats``."""

from __future__ import annotations

import re
import sys
import time
from typing import Any

import click

from profdb.store import classify, identity, inputs, readers
from profdb.store.scope import resolve_run

from .options import comm_pattern_option, comm_rules, connect, db_option, output_options, run_option
from .output import note, render


class _Bar:
    """A progress bar on stderr when it is a terminal; silent when piped."""

    #: seconds between two redraws as files are done (the writer calls this once a file: 8,192 small files
    #: would redraw 8,192 times in the process every row goes through)
    EVERY_S = 0.1

    def __init__(self) -> None:
        self.bar: Any = None
        self.done = 0
        self.drawn = 0.0
        self.hashing = False  # (the bar is phase 1's hashing one)

    def __call__(self, event: str, path: str, done: int, total: int) -> None:
        if not sys.stderr.isatty():
            return
        if event == "start" or (event == "hash" and not self.hashing):
            # (phase 1's hashing, when the ingest waits for it, has a bar of its own; then the parse's)
            if self.hashing and self.bar is not None:  # (every hash is in by the parse's start)
                self.bar.update(self.bar.length - self.done)
            self.close()
            self.hashing = event == "hash"
            label = "hashing inputs" if self.hashing else "ingesting"
            self.bar = click.progressbar(length=max(total, 1), label=label, file=sys.stderr, show_pos=False)
            self.bar.__enter__()
            self.done = 0
            if event == "start":
                return
        if self.bar is not None:
            # (the run's analysis after the last file: seconds on a large run, not a hang)
            if event == "analysis":
                self.bar.label = f"analysing run {path}"[:40]
                self.bar.render_progress()  # (update() draws only when the position moves)
                return
            now = time.monotonic()
            if done < total and now - self.drawn < self.EVERY_S:
                return
            name = click.format_filename(path, shorten=True)
            self.bar.label = (f"hashing {name}" if self.hashing else name)[:40]
            self.bar.update(done - self.done)
            self.done, self.drawn = done, now

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
            self.bar = None


@click.command("ingest")
@click.argument("paths", nargs=-1, required=True)
@click.option(
    "--run", "run", default=None, help="Run name (default: from the rank manifests, else the inputs' folder)."
)
@click.option(
    "--format", "fmt", default=None, metavar="NAME", help="Read the inputs as this format (see `profdb formats`)."
)
@click.option(
    "--rank", type=click.IntRange(min=0), default=None, help="Global rank of all these inputs (one rank's files)."
)
@click.option("--local-rank", type=click.IntRange(min=0), default=None, help="Local rank of all these inputs.")
@click.option("--hostname", default=None, help="Hostname of all these inputs.")
@click.option(
    "--rank-from-path",
    default=None,
    metavar="REGEX",
    help="Regular expression searched in each path; group 1 (or (?P<rank>..)) is the rank; "
    "optional groups (?P<local_rank>..), (?P<hostname>..).",
)
@click.option(
    "--allow-duplicate-ranks",
    is_flag=True,
    help="Accept several files of the same kind for one rank (e.g. several profiling windows).",
)
@click.option(
    "--rank-by",
    type=click.Choice(["gpu"]),
    default=None,
    help="Split a file holding several processes into one rank per GPU (a merged rocm-trace-lite trace: "
    "gpuId i-th in order -> rank i); needs --hostname. The mapping used is printed.",
)
@comm_pattern_option
@db_option
def ingest_command(
    paths: tuple[str, ...],
    run: str | None,
    fmt: str | None,
    rank: int | None,
    local_rank: int | None,
    hostname: str | None,
    rank_from_path: str | None,
    allow_duplicate_ranks: bool,
    rank_by: str | None,
    comm_patterns: tuple[str, ...],
    db: str | None,
) -> None:
    """Load profiler outputs (files, folders, globs) into the store, in one transaction.

    Formats are detected from content; ranks come from --rank flags, rank manifests written by
    `profdb record`, metadata inside the files, or the path (rank0003/, rank3_iter..., .rank0003.).
    Re-ingesting the same file is a no-op."""
    if rank_from_path:
        try:
            re.compile(rank_from_path)
        except re.error as e:
            raise click.BadParameter(f"not a valid regular expression: {e}", param_hint="--rank-from-path") from e
    if rank_by and not hostname:
        raise click.UsageError("--rank-by gpu needs --hostname H (the node whose GPUs the file holds)")
    flags = identity.IdentityFlags(rank, local_rank, hostname, rank_from_path, allow_duplicate_ranks, rank_by)
    rules = comm_rules(comm_patterns)
    bar = _Bar()
    try:
        # the inputs are looked through and their hashing begun before the store's modules are
        # imported (SQLAlchemy, numpy, pyarrow: ~0.3 s in one thread), so the hashes are computed
        # meanwhile on the other core (this module imports none of them: see inputs.Scan)
        with inputs.Scan(list(paths), fmt, flags) as scan:
            from profdb.store import ingest

            with classify.using(rules):
                report = ingest.ingest_paths(scan, db, run=run, flags=flags, progress=bar)
    finally:
        bar.close()
    how = " (derived from the inputs; name it with --run)" if report.run_derived else ""
    click.echo(f"run: {report.run}{how}")
    click.echo(f"store: {report.db}")
    n = len(report.ingested)
    click.echo(
        f"files: {n} ingested" + (f", {len(report.duplicates)} already present (skipped)" if report.duplicates else "")
    )
    if report.unknown_files:
        note(f"note: {len(report.unknown_files)} files in the folders are not profiler outputs profdb reads, skipped "
             f"(e.g. {report.unknown_files[0]})")
        for line in report.unknown_advice:
            note(f"note: skipped: {line}")
    note(rules.summary())
    for line in report.notes:
        click.echo(line)
    if report.empty:
        click.echo(f"files with no rows: {len(report.empty)}")
        for line in report.empty:
            click.echo(f"  {line}")
    if report.rows_by_kind:
        click.echo("rows: " + ", ".join(f"{k} {v:,}" for k, v in sorted(report.rows_by_kind.items())))
    hosts = sorted({h for _, h, _ in report.ranks if h})
    world = f" of world size {report.world_size}" if report.world_size else ""
    on = f" on {len(hosts)} host{'s' if len(hosts) > 1 else ''} ({', '.join(hosts[:8])})" if hosts else ""
    click.echo(f"ranks: {len(report.ranks)}{world}{on}")
    if report.missing_ranks:
        click.echo(f"missing ranks: {len(report.missing_ranks)} ({identity.rank_ranges(report.missing_ranks)})")
    if report.ended_badly:
        click.echo(
            f"ranks that did not end well (profiles may be cut short): {len(report.ended_badly)} ("
            + "; ".join(report.ended_badly)
            + ")"
        )


@click.command("runs")
@db_option
@output_options
def runs_command(db: str | None, fmt: str) -> None:
    """Runs in the store: world size, ranks found and missing, sources, rows."""
    from profdb.store import runs

    headers, rows = runs.list_runs(connect(db))
    render(headers, rows, fmt)


@click.command("ranks")
@run_option("Run name (default: the most recent run).")
@db_option
@output_options
def ranks_command(run: str | None, db: str | None, fmt: str) -> None:
    """Ranks of a run: hostname, local rank, pid, device, rows, source files; missing ranks flagged."""
    from profdb.store import runs

    headers, rows, notes = runs.list_ranks(connect(db), run)
    for n in notes:
        note(n)
    render(headers, rows, fmt)


@click.command("reclassify")
@run_option("Run name (default: the most recent run).")
@comm_pattern_option
@click.option("--dry-run", is_flag=True, help="Show what would move, change nothing.")
@db_option
@output_options
def reclassify_command(
    run: str | None, comm_patterns: tuple[str, ...], dry_run: bool, db: str | None, fmt: str
) -> None:
    """Classify a stored run again with the current communication rules (--comm-pattern, PROFDB_COMM_RULES,
    ./profdb.toml, the shipped sets), in one transaction: activity and summary rows of the names whose
    category changes, and the rules recorded for the run's files. Prints the names that moved and the
    communication share before and after."""
    from profdb.store import reclassify

    rules = comm_rules(comm_patterns)
    conn = connect(db, write=True)
    scope = resolve_run(conn, run)
    done = reclassify.reclassify(conn, scope, rules)
    if dry_run:
        conn.rollback()
    else:
        conn.commit()
        not_kept = reclassify.after_commit(conn, done)
        if not_kept:
            note(not_kept)
    before = ", ".join(f"{d or 'not recorded'} ({n} files)" for d, n in done.digests_before.items()) or "none"
    note(f"run {done.run!r}: rules {before} -> {rules.summary()}")
    share = " -> ".join("n/a" if v is None else f"{v * 100:.1f}%" for v in (done.share_before, done.share_after))
    note(
        f"{len(done.moved)} name(s) moved ({done.activity_rows:,} activity rows, {done.summary_rows:,} summary rows)"
        f"; communication share of {done.share_kind} time: {share}" + (" (dry run: nothing changed)" if dry_run else "")
    )
    render(
        ["kind", "name", "before", "after", "total_ns", "ranks"],
        [(m.kind, m.name, m.before, m.after, m.total_ns, m.ranks) for m in done.moved],
        fmt,
    )


@click.command("formats")
@output_options
def formats_command(fmt: str) -> None:
    """Input formats profdb reads (detected from content; force one with `ingest --format NAME`)."""
    render(["format", "reads"], readers.formats(), fmt)
