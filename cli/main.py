"""The ``profdb`` command. Commands parse arguments, call the library once and render; they hold no
SQL. Library errors (profdb.store.errors.ProfdbError) become one-line messages with exit status 1."""

from __future__ import annotations

from typing import Any

import click

from profdb.store import errors

from .compare import compare_command, tag_command, trend_command
from .ingest import formats_command, ingest_command, ranks_command, runs_command
from .query import query_cmd, sql_cmd
from .transfer import export_command, merge_command
from .record import env_command, record_command
from .report import plot_command, report_command


class ProfdbGroup(click.Group):
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
    profdb ingest out/rank*/          load rocprofv3 / PyTorch profiler / ... outputs
    profdb runs                       runs in the store
    profdb ranks --run NAME           ranks of a run, with missing ones flagged
    """


cli.add_command(ingest_command)
cli.add_command(runs_command)
cli.add_command(ranks_command)
cli.add_command(formats_command)
cli.add_command(query_cmd)
cli.add_command(sql_cmd)
cli.add_command(export_command)
cli.add_command(merge_command)
cli.add_command(compare_command)
cli.add_command(trend_command)
cli.add_command(tag_command)
cli.add_command(report_command)
cli.add_command(plot_command)
cli.add_command(env_command)
cli.add_command(record_command)


def main() -> None:
    cli(prog_name="profdb")


if __name__ == "__main__":  # pragma: no cover
    main()
