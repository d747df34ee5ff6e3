"""cli/output.py: tables that fit the terminal, full names everywhere else. The quick start's first
command is run on a pseudo-terminal of 120 and 80 columns, as a user would see it."""

from __future__ import annotations

import csv
import io
import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from profdb.cli.output import render, table_lines
from profdb.store.names import shorten_all
from profdb.store.units import fmt_ns
from test_names import real_names

PROFDB = Path(sys.executable).parent / "profdb"


def hotspot_like(names: list[str]) -> tuple[list[str], list[tuple[object, ...]]]:
    headers = ["name", "kind", "total_ns", "calls", "mean_per_call_ns", "slowest_rank", "slowest_host",
               "slowest_local_rank"]
    rows = [(n, "kernel", 1_234_567 * (i + 1), i + 1, 1_234_567, i % 8, "node01", i % 8) for i, n in enumerate(names)]
    return headers, rows


@pytest.mark.parametrize("width", [80, 120])
def test_table_of_real_names_fits_and_names_stay_distinct(data: Path, width: int) -> None:
    names = real_names(data)["deepseek"]
    headers, rows = hotspot_like(names)
    lines = table_lines(headers, rows, width)
    assert max(len(line) for line in lines) <= width
    shown = [line.split("  ")[0].strip() for line in lines[2:]]
    assert len(set(shown)) == len(names)
    name_width = len(lines[1].split("  ")[0])
    assert shown == [s.strip() for s in shorten_all(names, name_width)]
    assert all("ms" in line for line in lines[2:])  # the numbers are on screen


def test_no_width_or_machine_formats_carry_full_names(data: Path) -> None:
    names = real_names(data)["hta"]
    headers, rows = hotspot_like(names)
    assert [line.split("  ")[0] for line in table_lines(headers, rows, None)[2:]] == names
    buf = io.StringIO()
    render(headers, rows, "csv", out=buf)
    assert [r["name"] for r in csv.DictReader(io.StringIO(buf.getvalue()))] == names
    for fmt in ("json", "jsonl"):
        buf = io.StringIO()
        render(headers, rows, fmt, out=buf, width=40)
        text = buf.getvalue()
        got = json.loads(text) if fmt == "json" else [json.loads(x) for x in text.splitlines()]
        assert [r["name"] for r in got] == names
    # a pipe (StringIO is not a terminal): the table is as wide as it needs
    buf = io.StringIO()
    render(headers, rows, "table", out=buf)
    assert max(map(len, buf.getvalue().splitlines())) > max(map(len, names))


def test_one_duration_rule() -> None:
    """3 significant digits in the largest unit that keeps the number >= 1, for sentences, tables and the
    report alike; rounding up to 1000 moves to the next unit."""
    cases = {0: "0 ns", 999: "999 ns", 1000: "1.00 us", 1234: "1.23 us", 999_499: "999 us", 999_500: "1.00 ms",
             1_234_567: "1.23 ms", 12_345_678: "12.3 ms", 123_456_789: "123 ms", 999_600_000: "1.00 s",
             3_200_000_000_000: "3200 s", -1500: "-1.50 us", None: "", "n/a": "n/a"}
    assert {v: fmt_ns(v) for v in cases} == cases
    lines = table_lines(["name", "total_ns"], [("a", 1_234_567)], None)
    assert lines[2].split()[-2:] == ["1.23", "ms"] and "1.23 ms" == fmt_ns(1_234_567)


def test_group_table_fits_80(data: Path) -> None:
    """The --by host table (no name column but top_name) fits 80 columns too."""
    headers = ["hostname", "ranks", "compute_ns", "compute_vs_mean", "communication_ns", "communication_vs_mean",
               "slowest_rank", "top_name", "top_name_excess_ns"]
    names = real_names(data)["deepseek"][:4]
    rows = [(f"node{i:02d}", 8, 19_900_000, 1.328, 15_200_000, 0.756, 5, n, 3_990_000) for i, n in enumerate(names)]
    lines = table_lines(headers, rows, 80)
    assert max(map(len, lines)) <= 80 and lines[0].split()[:3] == ["hostname", "compute", "compute_vs_mean"]
    assert "top_name" in lines[0]


def on_terminal(args: list[str], columns: int, cwd: Path) -> tuple[str, str, int]:
    """Run profdb with stdout on a pseudo-terminal of ``columns`` columns; (stdout, stderr, exit code)."""
    main, sub = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k != "PROFDB_DB"} | {"COLUMNS": str(columns)}
    p = subprocess.Popen([str(PROFDB), *args], stdout=sub, stderr=subprocess.PIPE, cwd=cwd, env=env)
    os.close(sub)
    chunks = []
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # the other end closed (Linux: EIO)
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(main)
    assert p.stderr is not None
    err = p.stderr.read().decode()
    return b"".join(chunks).decode().replace("\r\n", "\n"), err, p.wait()


@pytest.fixture(scope="module")
def example_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = Path(__file__).resolve().parents[1]
    db = tmp_path_factory.mktemp("example") / "example.db"
    subprocess.run([str(PROFDB), "ingest", "--db", str(db), str(root / "examples" / "torchrun4_cpu")],
                   check=True, capture_output=True)
    return db


@pytest.mark.parametrize("columns", [120, 80])
def test_quick_start_query_fits_the_terminal(example_db: Path, columns: int, tmp_path: Path) -> None:
    out, err, code = on_terminal(["query", "--imbalance", "--db", str(example_db)], columns, tmp_path)
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == 2 + 21 and max(map(len, lines)) <= columns
    assert lines[0].split()[0] == "name" and "imbalance" in lines[0] and "recoverable" in lines[0]
    assert "AddmmBackward0" in out and "gloo:all_reduce" in out
    assert "columns left out to fit" in err
    wide, _err, code = on_terminal(["query", "--imbalance", "--db", str(example_db), "--wide"], columns, tmp_path)
    assert code == 0 and max(map(len, wide.splitlines())) > columns
    assert "autograd::engine::evaluate_function: AddmmBackward0" in wide and "missing_ranks" in wide
