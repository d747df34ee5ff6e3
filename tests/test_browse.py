"""``profdb browse``: the store in Datasette, started on a loopback port and read over HTTP as a browser
would. Skipped (saying why) when the optional extra profdb[browse] is not installed."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from profdb.cli.main import cli
from profdb.store import browse
from profdb.store.ingest import ingest_paths

pytest.importorskip("datasette", reason="profdb browse needs the optional extra: pip install 'profdb[browse]'")

ROOT = Path(__file__).resolve().parents[1]
PROFDB = Path(sys.executable).parent / "profdb"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("browse") / "example.db"
    ingest_paths([str(ROOT / "examples" / "torchrun4_cpu")], str(db), run="torchrun4_cpu")
    return db


@pytest.fixture(scope="module")
def server(store: Path) -> Iterator[str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "PROFDB_DB"}
    proc = subprocess.Popen([str(PROFDB), "browse", "--db", str(store), "--port", str(port)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):  # until it answers (not a timing assertion: it fails only if it never does)
            if proc.poll() is not None:
                raise AssertionError(f"profdb browse exited {proc.returncode}: {proc.communicate()[1]}")
            try:
                urllib.request.urlopen(url + "/-/versions.json", timeout=5).close()
                break
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as r:
        assert r.status == 200
        return str(r.read().decode())


def test_pages_show_the_runs_ranks_and_views(server: str) -> None:
    home = get(server + "/example")
    for view in ("imbalance_v", "hotspot_v", "rank_v", "summary_v"):
        assert view in home
    runs = json.loads(get(server + "/example/run.json?_shape=array"))
    assert [r["name"] for r in runs] == ["torchrun4_cpu"]
    ranks = json.loads(get(server + "/example/rank_v.json?_shape=array"))
    assert sorted(r["global_rank"] for r in ranks) == [0, 1, 2, 3]
    # the README's note on the view, as its description
    assert "One row per run, kind, name" in get(server + "/example/imbalance_v")


def test_views_as_canned_queries_with_a_run_field(server: str, store: Path) -> None:
    rows = json.loads(get(server + "/example/imbalance.json?run=torchrun4_cpu&_shape=array"))
    names = {r["name"] for r in rows}
    assert {"AddmmBackward0", "gloo:all_reduce"} <= names
    assert json.loads(get(server + "/example/imbalance.json?run=nope&_shape=array")) == []
    # the canned query answers as the view does (same store read with sqlite3)
    import sqlite3

    con = sqlite3.connect(store)
    try:
        (n,) = con.execute("select count(*) from imbalance_v").fetchone()
    finally:
        con.close()
    assert len(json.loads(get(server + "/example/imbalance.json?run=&_shape=array&_size=max"))) == n
    page = get(server + "/example/imbalance?run=torchrun4_cpu")
    assert "AddmmBackward0" in page


def test_metadata_from_the_readme(store: Path) -> None:
    notes = browse.schema_notes((ROOT / "README.md").read_text())
    assert {"imbalance_v", "hotspot_v", "summary_v", "step_imbalance_v"} <= set(notes)
    meta = browse.metadata(store, (ROOT / "README.md").read_text())
    queries = meta["databases"]["example"]["queries"]
    assert set(queries) >= {"imbalance", "hotspot", "rank_total", "step_imbalance"}
    assert queries["imbalance"]["sql"] == "select * from imbalance_v where :run = '' or run = :run"


def test_a_postgresql_store_is_a_usage_error() -> None:
    r = CliRunner().invoke(cli, ["browse", "--db", "postgresql+psycopg://localhost/x"])
    assert r.exit_code == 2 and "profdb export --db URL --to team.db" in r.output
