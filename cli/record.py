"""`profdb env` and `profdb record`: parse arguments, call profdb.store.launch / profdb.store.record.
Library errors become one-line messages in cli.main's group."""

from __future__ import annotations

import json
import os

import click

from profdb.store.identity import parse_ranks
from profdb.store.launch import detect_context
from profdb.store.record import record

_FIELDS = ("launcher", "global_rank", "local_rank", "world_size", "node_rank", "hostname")


@click.command("env")
@click.option(
    "--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True,
    help="Output format.",
)
def env_command(fmt: str) -> None:
    """Show the distributed context this process sees: launcher, ranks, world size, hostname.

    Run it under the launcher the way `profdb record` will run, e.g.
    `mpirun -np 2 profdb env` or `torchrun --nproc_per_node=2 $(which profdb) env`.
    """
    data = detect_context(os.environ).as_dict()
    if fmt == "json":
        click.echo(json.dumps(data))
        return
    rows = [(f, "" if data[f] is None else str(data[f]), data["sources"].get(f, "")) for f in _FIELDS]
    widths = [max(len(r[i]) for r in [("field", "value", "from")] + rows) for i in range(3)]
    for row in [("field", "value", "from")] + rows:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())


def _ranks(ctx: click.Context, param: click.Parameter, value: str | None) -> frozenset[int] | None:
    if value is None:
        return None
    try:
        return parse_ranks(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from e


@click.command(
    "record",
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@click.option(
    "-o", "--output", "output", required=True, type=click.Path(file_okay=False),
    help="Folder for the rank folders OUTPUT/rank0000/, OUTPUT/rank0001/, ...",
)
@click.option(
    "--ranks", callback=_ranks, metavar="LIST",
    help="Profile only these global ranks (e.g. 0,3 or 0-3,7); the others run only the "
    "application part of CMD (what follows its inner `--`), unprofiled.",
)
@click.option(
    "--run", "--run-name", "run_name", metavar="NAME",
    help="Run name stored in each rank manifest (`profdb ingest` uses it). Under torchrun write "
    "--run-name, or put `--` before profdb: torchrun's parser takes --run for its --run-path.",
)
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_context
def record_command(
    ctx: click.Context, output: str, ranks: frozenset[int] | None, run_name: str | None, cmd: tuple[str, ...]
) -> None:
    """Run CMD for this rank with its outputs in OUTPUT/rank%04d/ and a rank manifest.

    Put the launcher outside and the profiler inside. Under torchrun, pass --no-python (this is a
    program, not a Python script) and `--` (torchrun's parser would take --run for its own):

    \b
      torchrun --nproc_per_node=8 --no-python -- profdb record -o out -- \
          rocprofv3 --kernel-trace -d {rank_dir} -- python train.py
      mpirun -np 16 profdb record -o out -- rocprofv3 --kernel-trace -d {rank_dir} -- ./app

    Placeholders in CMD: {rank_dir} {rank} {local_rank} {world_size} {node_rank} {hostname}.
    The command sees PROFDB_RANK_DIR (and PROFDB_RANK, ...) and ROCPROF_OUTPUT_PATH set to the
    rank folder. Exits with CMD's exit code (128+N if signal N killed it).
    """
    ctx.exit(record(output, list(cmd), ranks=ranks, run=run_name))
