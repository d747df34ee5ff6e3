"""The ``profdb`` command. Commands parse arguments, call the library once and render; they hold no
SQL. Library errors (profdb.store.errors.ProfdbError) become one-line messages with exit status 1.

Signals: Ctrl-C (SIGINT) and SIGTERM unwind the command like an error (an ingest's transaction is
rolled back, a store it created is removed), then one line says so and profdb exits 130 (SIGINT) or
143 (SIGTERM), as a shell reports a process killed by that signal. A second signal while unwinding
is ignored, so the rollback is not cut short."""

from __future__ import annotations

import gc
import importlib
import signal
import sys
from types import FrameType
from typing import Any

import click

from profdb.store import errors
from profdb.store.units import visible

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
    "timeline": "timeline:timeline_command",
    "export": "transfer:export_command",
    "merge": "transfer:merge_command",
    "env": "record:env_command",
    "record": "record:record_command",
    "browse": "browse:browse_command",
}


#: commands that write a store: what an interrupted one left behind
WRITERS = {
    "ingest": "the ingest",
    "merge": "the merge",
    "export": "the export",
    "tag": "the tag",
    "sql": "the statement",
    "reclassify": "the reclassification",
}


class Interrupted(BaseException):
    """Raised in the main thread by the SIGINT/SIGTERM handler; a BaseException, so no library
    ``except Exception`` swallows it while the command unwinds."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _on_signal(signum: int, frame: FrameType | None) -> None:
    # later signals, while the first one unwinds the command, are ignored
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Interrupted(signum)


def _interrupted(ctx: click.Context, signum: int, committed: str | None = None) -> click.exceptions.Exit:
    sub = ctx.invoked_subcommand or ""
    what = WRITERS.get(sub)
    done = f"{what} was rolled back: nothing was written to the store" if what else "nothing was written"
    if committed:  # (after a commit: e.g. on PostgreSQL, while the run's analysis is kept)
        done = committed
    click.echo(f"profdb {sub}: interrupted by {signal.Signals(signum).name}; {done}".replace("  ", " "), err=True)
    return click.exceptions.Exit(128 + signum)


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
            raise click.ClickException(visible(str(e))) from e
        except Interrupted as e:
            raise _interrupted(ctx, e.signum, errors.committed(e)) from None
        except KeyboardInterrupt as e:  # SIGINT outside main() (profdb.cli.main:cli called directly)
            raise _interrupted(ctx, signal.SIGINT, errors.committed(e)) from None


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
    if sys.platform != "win32":
        signal.signal(signal.SIGINT, _on_signal)
        signal.signal(signal.SIGTERM, _on_signal)
    try:
        cli(prog_name="profdb")
    finally:
        # What the command made is never collected again: the interpreter's collections at exit walk
        # every object still alive (SQLAlchemy's, the store's modules'), ~0.07 s after an ingest, 5%
        # of a short one, for memory the process gives back as it ends. Exit handlers still run, and
        # every file and store connection is closed by the command itself (with-blocks), not at exit.
        gc.freeze()


if __name__ == "__main__":  # pragma: no cover
    main()
