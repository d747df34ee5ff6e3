"""The README's commands and every ``--help`` example run as printed.

README: the ``profdb ...`` lines of its code blocks (``$ `` transcripts included) run in document order in a
folder holding ``examples/`` and the quick start's store (``profdb ingest examples/torchrun4_cpu/``, the default
``./profdb.db``). A line is left out, and counted, only when it cannot run there: a placeholder (``RUN``,
``[--top 20]``), a path that is not in the repository (``out/rank*/``), a run the example store does not have
(``llama-tp8``; the generated run ``gen8`` is made as the README says), another store or a launcher (record, env, export, merge, browse).
The ``>>>`` lines of its Python blocks run too, against the same store.

Help: the example lines (``profdb ...``) of every command's ``--help`` run against a store holding the example
under the run names the examples use (``nightly-41``, ``nightly-42``, tagged ``branch=main``)."""

from __future__ import annotations

import glob
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gen_kineto_run import generate

from profdb.cli.main import COMMANDS, cli

ROOT = Path(__file__).resolve().parents[1]
#: commands that need a launcher, another store or keep running: not run from the README
NOT_HERE = {"record", "env", "export", "merge", "browse"}
PLACEHOLDER = re.compile(r"^[A-Z][A-Z_]*(\.\.\.)?$|\[|\]|\|")


def code_blocks(text: str) -> list[tuple[str, list[str]]]:
    """(language, lines) of each fenced block."""
    blocks: list[tuple[str, list[str]]] = []
    lang: str | None = None
    lines: list[str] = []
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            if lang is None:
                lang, lines = line.strip()[3:], []
            else:
                blocks.append((lang, lines))
                lang = None
            continue
        if lang is not None:
            lines.append(line.strip())
    return blocks


def command_of(line: str) -> list[str] | None:
    """The arguments of a ``profdb ...`` line (after ``$ ``, without its comment), or None."""
    line = line.removeprefix("$ ")
    if not line.startswith("profdb "):
        return None
    try:
        return shlex.split(line, comments=True)[1:]
    except ValueError:  # prose that starts with "profdb", e.g. an unbalanced quote
        return None


def why_not(args: list[str], runs: set[str], cwd: Path, tags: frozenset[str] = frozenset()) -> str | None:
    """Why this command cannot run against the example store (whose runs carry ``tags``, e.g.
    ``branch=main``), or None when it can."""
    if not args or args[0] not in COMMANDS:
        return "not a profdb command"
    if args[0] in NOT_HERE:
        return f"profdb {args[0]} needs a launcher, another store or keeps running"
    if any(PLACEHOLDER.search(a) for a in args) or any("$" in a for a in args):
        return "placeholder"
    for opt, value in zip(args, args[1:]):
        if opt == "--run" and args[0] != "ingest" and value not in runs:
            return f"run {value} is not in the example store"
        if opt in ("--db", "--to"):
            return "another store"
        wanted = [value] if opt == "--where" else re.findall(r"tag:([^,]+)", value) if opt == "--baseline" else []
        if any(w not in tags for w in wanted):
            return f"no run of the example store is tagged {', '.join(wanted)}"
    positional = positionals(args)
    named = positional if args[0] == "compare" else positional[:1] if args[0] == "tag" else []
    for run in named:
        if run not in runs:
            return f"run {run} is not in the example store"
    for a in args[1:]:
        if "/" in a and not a.startswith(("-", "http", "postgresql")) and " " not in a:
            if not glob.glob(str(cwd / a)):
                return f"{a} is not in the repository"
    return None


def positionals(args: list[str]) -> list[str]:
    """The arguments of ``args[1:]`` that are neither options nor option values."""
    import click

    command = cli.get_command(click.Context(cli), args[0])
    assert command is not None
    takes_value = {o for p in command.params if isinstance(p, click.Option) and not p.is_flag for o in p.opts}
    out: list[str] = []
    skip = False
    for a in args[1:]:
        if skip:
            skip = False
        elif a.startswith("-"):
            skip = a in takes_value
        else:
            out.append(a)
    return out


def expand(args: list[str], cwd: Path) -> list[str]:
    out: list[str] = []
    for a in args:
        out += sorted(str(Path(p).relative_to(cwd)) for p in glob.glob(str(cwd / a))) if "*" in a and "/" in a else [a]
    return out


def invoke(args: list[str]) -> Any:
    r = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert r.exit_code == 0, f"profdb {shlex.join(args)}: exit {r.exit_code}\n{r.output}{r.stderr}"
    return r


def new_runs(args: list[str]) -> set[str]:
    if args[0] != "ingest":
        return set()
    if "--run" in args:
        return {args[args.index("--run") + 1]}
    return {Path(a.rstrip("/*")).name for a in args[1:] if not a.startswith("-")}


@pytest.fixture
def example_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "120")
    return tmp_path


def test_readme_commands_run_as_printed(example_dir: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    quick = next(line for lang, lines in code_blocks(readme) for line in lines if "examples/torchrun4_cpu/" in line)
    assert "profdb ingest examples/torchrun4_cpu/ && .venv/bin/profdb query --imbalance" in quick
    invoke(["ingest", "examples/torchrun4_cpu/"])  # the quick start: the default store ./profdb.db
    invoke(["query", "--imbalance"])
    # the generated GPU run the README describes (tests/gen_kineto_run.py with its defaults), as gen8
    gen = generate(example_dir / "gen" / "gen8")
    invoke(["ingest", *sorted(str(p) for p in gen.root.glob("rank*")), "--run", "gen8"])
    runs = {"torchrun4_cpu", "gen8"}
    tags: set[str] = set()
    ran: list[str] = []
    skipped: dict[str, str] = {}
    for lang, lines in code_blocks(readme):
        if lang not in ("", "sh"):
            continue
        for line in lines:
            args = command_of(line)
            if args is None:
                continue
            reason = why_not(args, runs, example_dir, frozenset(tags))
            if reason:
                skipped[line] = reason
                continue
            invoke(expand(args, example_dir))
            runs |= new_runs(args)
            if args[0] == "tag":
                tags.update(a for a in positionals(args)[1:] if "=" in a)
            ran.append(line)
    # the ones that matter ran (so the test cannot pass by skipping everything)
    for must in ("profdb query --imbalance --run torchrun4_cpu --top 4", "profdb query --ranks --run rocprof-8ranks",
                 "profdb runs", "profdb formats", "profdb report --run torchrun4_cpu -o report.html",
                 "profdb plot --imbalance -o heat.png"):
        assert any(must in line for line in ran), (must, skipped)
    assert len(ran) >= 20, skipped
    print(f"ran {len(ran)}, skipped {len(skipped)}:", *(f"  {line}: {why}" for line, why in skipped.items()), sep="\n")
    assert not [line for line in skipped if line.startswith("$ ")], "every transcript runs"


def test_readme_python_runs(example_dir: Path) -> None:
    pytest.importorskip("pandas", reason="the README's Python example uses pandas: pip install 'profdb[pandas]'")
    invoke(["ingest", "examples/torchrun4_cpu/"])
    readme = (ROOT / "README.md").read_text()
    blocks = [lines for lang, lines in code_blocks(readme) if lang == "python"]
    assert len(blocks) >= 2
    namespace: dict[str, Any] = {}
    for lines in blocks:
        statements: list[str] = []
        for line in lines:
            if line.startswith(">>> "):
                statements.append(line[4:])
            elif line.startswith("... ") and statements:
                statements[-1] += "\n" + line[4:]
        for statement in statements:
            exec(compile(statement, "README.md", "single"), namespace)  # noqa: S102
    assert namespace["r"].headline.startswith("likely straggler: rank 2")


def test_help_examples_run_as_printed(example_dir: Path) -> None:
    for run in ("nightly-41", "nightly-42", "torchrun4_cpu"):
        invoke(["ingest", "examples/torchrun4_cpu/", "--run", run])
    invoke(["tag", "nightly-41", "branch=main"])
    invoke(["tag", "nightly-42", "branch=main"])
    runs = {"nightly-41", "nightly-42", "torchrun4_cpu"}
    ran: list[str] = []
    for name in COMMANDS:
        text = invoke([name, "--help"]).output
        assert "%%" not in text, name
        for line in text.splitlines():
            line = re.split(r"\s{2,}", line.strip())[0]  # the group's help: "profdb runs    runs in the store"
            args = command_of(line)
            if args is None or why_not(args, runs, example_dir, frozenset({"branch=main"})):
                continue
            invoke(args)
            ran.append(line)
    assert {"profdb query --hotspots --top 10", 'profdb sql "select * from imbalance_v order by recoverable_ns desc limit 5"', "profdb compare nightly-41 nightly-42 --by rank",
            "profdb trend --name 'gemm%' --last 20", "profdb trend --where branch=main"} <= set(ran), ran
    record = invoke(["record", "--help"]).output
    assert "torchrun --nproc_per_node=8 --no-python -- profdb record" in record


def test_plot_without_a_chart_says_which_flag(example_dir: Path) -> None:
    r = CliRunner().invoke(cli, ["plot"])
    assert r.exit_code == 2 and "choose the chart to draw: --imbalance" in r.output
    assert "Missing option" not in r.output


def test_one_host_is_singular(example_dir: Path) -> None:
    r = invoke(["ingest", "examples/torchrun4_cpu/"])
    assert "ranks: 4 of world size 4 on 1 host (vm)" in r.output


def test_formats_not_cut_when_piped(example_dir: Path) -> None:
    r = invoke(["formats"])
    assert "…" not in r.output
    from profdb.store import readers

    for fmt, reads in readers.formats():
        assert f"{fmt}" in r.output and str(reads) in r.output
