"""The ``profdb`` command. Commands parse arguments, call the library once and render; they hold no
SQL. Library errors (profdb.store.errors.ProfdbError) become one-line messages with exit status 1."""

from __future__ import annotations

import importlib
from typing import Any

import click

from profdb.store import errors

#: command name -> "module:attribute", imported only when that command runs (or for --help), so a
#: query does not pay for importing the readers, matplotlib or the launcher code
COMMANDS = {
    "ingest": "ingest:ingest_command",
    "runs": "ingest:runs_command",
    "ranks": "ingest:ranks_command",
    "formats": "ingest:formats_command",
    "reclassify": "ingest:reclassify_command",
    "query": "query:query_cmd",
    "sql": "query:sql_cmd",
    "compare": "compare:compare_command",
    "trend": "compare:trend_command",
    "tag": "compare:tag_command",
    "report": "report:report_command",
    "plot": "report:plot_command",
    "export": "transfer:export_command",
    "merge": "transfer:merge_command",
    "env": "record:env_command",
    "record": "record:record_command",
}


class ProfdbGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module, attr = target.split(":")
        command = getattr(importlib.import_module(f"profdb.cli.{module}"), attr)
        assert isinstance(command, click.Command)
        return command

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except errors.ProfdbError as e:
            raise click.ClickException(str(e)) from e


@click.group(cls=ProfdbGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="profdb")
def cli() -> None:
    """profdb: one SQL store for the per-rank profiles of distributed GPU jobs.

    \b
    profdb record -o out -- PROFILER -- APP   under a launcher: one rank folder + manifest per rank
    profdb ingest out/rank*/          load rocprofv3 / PyTorch profiler / rocpd / nsys / ... outputs
    profdb runs                       runs in the store
    profdb ranks --run NAME           ranks of a run, with missing ones flagged
    profdb query --imbalance          imbalanced kernels and the likely straggler rank / node / slot
    profdb compare BASE NEW           what got slower; profdb report -o report.html
    """


def main() -> None:
    cli(prog_name="profdb")


if __name__ == "__main__":  # pragma: no cover
    main()
