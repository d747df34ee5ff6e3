"""The run catalog (store/runs.py): one metadata policy everywhere. Metadata that is not a JSON
object (written by hand with `profdb sql`) stops compare, trend, the report, tag and merge alike,
with a message naming the run and the fix; transfer unites tags, the destination's value winning."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from profdb.cli.main import cli
from profdb.store.ingest import ingest_paths
from profdb.store.transfer import transfer_runs

TORCHRUN4 = Path(__file__).parent / "data" / "kineto" / "torchrun4_cpu"


def _set_metadata(db: Path, run: str, text: str | None) -> None:
    with sqlite3.connect(db) as c:
        c.execute("UPDATE run SET metadata_json = ? WHERE name = ?", (text, run))


@pytest.fixture
def two_runs(tmp_path: Path) -> Path:
    db = tmp_path / "s.db"
    ingest_paths([TORCHRUN4], str(db), run="a")
    ingest_paths([TORCHRUN4], str(db), run="b")
    return db


@pytest.mark.parametrize("bad", ["[1, 2]", "{not json"])
@pytest.mark.parametrize(
    "args",
    [["compare", "b", "--baseline", "a"], ["trend"], ["report", "--run", "a", "--output", "{out}"], ["tag", "a", "k=v"]],
)
def test_bad_metadata_is_one_error_everywhere(two_runs: Path, tmp_path: Path, bad: str, args: list[str]) -> None:
    _set_metadata(two_runs, "a", bad)
    argv = [a.replace("{out}", str(tmp_path / "r.html")) for a in args]
    r = CliRunner().invoke(cli, [*argv, "--db", str(two_runs)], catch_exceptions=False)
    assert r.exit_code == 1, r.output
    assert "run 'a' has metadata that is not" in r.stderr
    assert "UPDATE run SET metadata_json = NULL WHERE name = 'a'" in r.stderr and "profdb tag" in r.stderr
    assert not (tmp_path / "r.html").exists()


def test_the_fix_the_error_names_works(two_runs: Path) -> None:
    _set_metadata(two_runs, "a", "[1]")
    r = CliRunner().invoke(cli, ["tag", "a", "k=v", "--db", str(two_runs)])
    fix = r.stderr.split("fix it with `profdb ")[1].split("`")[0]  # sql --write "UPDATE ..."
    assert fix.startswith('sql --write "') and fix.endswith('"')
    r = CliRunner().invoke(cli, ["sql", "--write", fix[len('sql --write "'):-1], "--db", str(two_runs)])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(cli, ["tag", "a", "k=v", "--db", str(two_runs)], catch_exceptions=False)
    assert r.exit_code == 0 and r.stdout.strip() == '{"k": "v"}'


def test_transfer_refuses_bad_metadata_on_either_side(two_runs: Path, tmp_path: Path) -> None:
    dst = tmp_path / "d.db"
    transfer_runs(str(two_runs), str(dst), ["a"])
    _set_metadata(dst, "a", "[]")
    _set_metadata(two_runs, "a", '{"k": "v"}')
    r = CliRunner().invoke(cli, ["export", "--db", str(two_runs), "--run", "a", "--to", str(dst)], catch_exceptions=False)
    assert r.exit_code == 1 and "run 'a' has metadata that is not a JSON object" in r.stderr
    _set_metadata(dst, "a", None)
    _set_metadata(two_runs, "a", "nope")
    r = CliRunner().invoke(cli, ["export", "--db", str(two_runs), "--run", "a", "--to", str(dst)], catch_exceptions=False)
    assert r.exit_code == 1 and "run 'a' has metadata that is not JSON" in r.stderr


def test_transfer_unites_tags_destination_wins(two_runs: Path, tmp_path: Path) -> None:
    dst = tmp_path / "d.db"
    transfer_runs(str(two_runs), str(dst), ["a"])
    _set_metadata(dst, "a", '{"branch": "dst", "gpu": "mi300"}')
    _set_metadata(two_runs, "a", '{"branch": "src", "commit": "abc"}')
    # a new file for the run, so the transfer reaches the existing run
    with sqlite3.connect(two_runs) as c:
        c.execute("UPDATE source_file SET content_hash = 'x' || content_hash WHERE id = (SELECT MIN(id) FROM source_file)")
    transfer_runs(str(two_runs), str(dst), ["a"], allow_duplicate_ranks=True)
    with sqlite3.connect(dst) as c:
        (meta,) = c.execute("SELECT metadata_json FROM run WHERE name = 'a'").fetchone()
    assert meta == '{"branch": "dst", "commit": "abc", "gpu": "mi300"}'
