"""Names are data, never markup or terminal commands (issue 14): escape sequences in kernel and run
names reach the terminal escaped (tables, notes, errors), SVG charts holding them are valid XML,
and a run name with two ``$`` (``exp_$SLURM_JOB_ID_$USER``) is drawn literally, not as mathtext."""

from __future__ import annotations

import sqlite3
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import Invoke

pytest.importorskip("matplotlib", reason="charts need matplotlib: pip install 'profdb[report]'")

KINETO = Path(__file__).parent / "data" / "kineto" / "torchrun4_cpu"
RUN = "exp_$SLURM_JOB_ID_$USER\x1b]0;owned\x07"
SHOWN_RUN = "exp_$SLURM_JOB_ID_$USER\\x1b]0;owned\\x07"
RAW = ("\x1b", "\x07", "\x9b")


@pytest.fixture
def hostile(tmp_path: Path, run_cli: Invoke) -> Path:
    """A real 4-rank run whose run name and every op name carry control characters."""
    db = tmp_path / "s.db"
    run_cli("ingest", "--db", db, "--run", RUN, KINETO)
    con = sqlite3.connect(db)
    with con:  # as a hostile trace would name them (readers keep names as they are)
        con.execute("update name set value = char(27) || '[2J' || value || char(155) || '31m'")
    con.close()
    return db


def test_tables_notes_and_errors_escape_control_characters(hostile: Path, run_cli: Invoke) -> None:
    for args in (["query", "--hotspots"], ["query", "--imbalance"], ["runs"], ["ranks"], ["sql", "select * from name"]):
        r = run_cli(*args, "--db", hostile)
        assert not any(c in r.stdout + r.stderr for c in RAW), (args, r.stdout, r.stderr)
    r = run_cli("query", "--hotspots", "--db", hostile)
    assert "\\x1b[2J" in r.stdout
    assert SHOWN_RUN in run_cli("runs", "--db", hostile).stdout
    # machine formats keep the values: json escapes them itself, csv to a file is raw
    r = run_cli("sql", "select value from name limit 1", "--db", hostile, "--format", "csv")
    assert r.stdout.splitlines()[1].startswith("\x1b[2J")
    r = run_cli("query", "--hotspots", "--run", "no\x1b[31mrun", "--db", hostile, ok=False)
    assert r.exit_code == 1 and "\x1b" not in r.stderr and "no\\x1b[31mrun" in r.stderr, r.stderr


def test_svg_with_hostile_names_is_valid_xml_and_dollars_are_literal(
    hostile: Path, run_cli: Invoke, tmp_path: Path
) -> None:
    svg = tmp_path / "h.svg"
    run_cli("plot", "--imbalance", "--top", "5", "-o", svg, "--db", hostile)
    root = ET.parse(svg).getroot()  # raises on a control character
    texts = " ".join(t for t in root.itertext())
    assert SHOWN_RUN in texts and "\\x1b[2J" in texts
    run_cli("plot", "--imbalance", "-o", tmp_path / "h.png", "--db", hostile)  # mathtext would raise here
    assert (tmp_path / "h.png").stat().st_size > 0
    html = tmp_path / "r.html"
    run_cli("report", "-o", html, "--db", hostile)
    page = html.read_text()
    assert "exp_$SLURM_JOB_ID_$USER" in page
    for chart in page.split("<svg")[1:]:
        ET.fromstring("<svg" + chart[: chart.index("</svg>") + len("</svg>")])
