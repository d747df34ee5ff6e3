"""Signals and dying processes during an ingest, with real processes (issue 14): Ctrl-C (SIGINT) and
SIGTERM roll the ingest back and say so in one line (exit 130 / 143); a store the ingest created is
removed; after SIGKILL no worker is left and the next command works; a worker that dies is named by
the file it was parsing. Readers answer while an ingest holds the write lock (SQLite and PostgreSQL).

The ingest runs in a child process (``profdb`` itself, through ``main()`` with its signal handlers)
that pauses after its first file, inside its transaction: the script below wraps the parsing
function, nothing else of profdb is changed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import Invoke
from sqlalchemy import text

from profdb.store.db import open_db

KINETO = Path(__file__).parent / "data" / "kineto" / "torchrun4_cpu"

#: argv: mode ("pause-writer" | "pause-worker" | "kill-worker" | "kill-group"), then profdb's arguments
SCRIPT = r"""
import os, signal, sys, time
from profdb.store import ingest_workers
from profdb.cli import main as cli_main
mode = sys.argv[1]
if mode == "pause-writer":  # parsed in this process (PROFDB_INGEST_WORKERS=0): pause after the first file
    parse_here = ingest_workers.parse_here
    def paused(*args, **kwargs):
        out = parse_here(*args, **kwargs)
        print("paused", flush=True)
        sys.stdin.readline()
        return out
    ingest_workers.parse_here = paused
else:  # parsed in workers (forked: they run this wrapper)
    parse = ingest_workers._parse
    def in_worker(task, *args, **kwargs):
        if mode == "kill-worker" and task.path.name.startswith("rank2"):
            os.kill(os.getpid(), signal.SIGKILL)
        if mode == "pause-worker":
            os.write(1, f"worker {os.getpid()}\n".encode())  # one write: lines of two workers do not mix
            time.sleep(600)
        return parse(task, *args, **kwargs)
    ingest_workers._parse = in_worker
    read_group = ingest_workers._read_group
    def group_in_worker(group):
        if mode == "kill-group" and any("rank2" in str(t.path) for t in group):
            os.kill(os.getpid(), signal.SIGKILL)
        return read_group(group)
    ingest_workers._read_group = group_in_worker
sys.argv = ["profdb", *sys.argv[2:]]
cli_main.main()
"""


def _start(mode: str, *args: Any, workers: int = 0) -> subprocess.Popen[str]:
    env = dict(os.environ, PROFDB_INGEST_WORKERS=str(workers))
    env.pop("PROFDB_DB", None)
    return subprocess.Popen(
        [sys.executable, "-c", SCRIPT, mode, *[str(a) for a in args]],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _wait_for(proc: subprocess.Popen[str], word: str) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith(word):
        proc.kill()
        _, err = proc.communicate()
        raise AssertionError(f"expected {word!r}, got {line!r}; stderr: {err}")
    return line


def _counts(url: str) -> dict[str, int]:
    engine = open_db(url, readonly=True)
    try:
        with engine.connect() as c:
            return {
                t: int(c.execute(text(f"select count(*) from {t}")).scalar_one())
                for t in ("run", "rank", "source_file", "activity", "counter", "summary", "step", "name")
            }
    finally:
        engine.dispose()


def _alive(pid: int) -> bool:
    try:
        return "\nState:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_rolls_back_an_ingest_into_an_existing_store(
    store_url: str, run_cli: Invoke, sig: int, code: int
) -> None:
    run_cli("ingest", "--db", store_url, "--run", "first", KINETO / "rank0_iter5_7.json.gz")
    before = _counts(store_url)
    path = Path(store_url.removeprefix("sqlite:///")) if store_url.startswith("sqlite") else None
    main_bytes = path.read_bytes() if path else b""
    proc = _start("pause-writer", "ingest", "--db", store_url, "--run", "second", KINETO)
    _wait_for(proc, "paused")
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    assert err.strip().splitlines() == [
        f"profdb ingest: interrupted by {signal.Signals(sig).name}; the ingest was rolled back: "
        "nothing was written to the store"
    ], err
    assert _counts(store_url) == before
    if path:
        assert path.read_bytes() == main_bytes
    r = run_cli("runs", "--db", store_url, "--format", "csv")
    assert "second" not in r.stdout and "first" in r.stdout


def test_ctrl_c_removes_the_store_the_ingest_created(tmp_path: Path) -> None:
    db = tmp_path / "new.db"
    proc = _start("pause-writer", "ingest", "--db", db, KINETO)
    _wait_for(proc, "paused")
    assert db.exists()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "Traceback" not in err and "nothing was written" in err, err
    assert sorted(tmp_path.iterdir()) == []


def test_ctrl_c_to_the_process_group_stops_writer_and_workers(tmp_path: Path) -> None:
    """A terminal's Ctrl-C reaches every process of the group: the workers leave it to the writer
    (no traceback of theirs), the writer rolls back and stops them."""
    db = tmp_path / "s.db"
    env = dict(os.environ, PROFDB_INGEST_WORKERS="2")
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, "pause-worker", "ingest", "--db", str(db), str(KINETO)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True,
    )
    workers = [int(_wait_for(proc, "worker").split()[1]) for _ in range(2)]
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and err.count("\n") == 1 and "rolled back" in err, err
    assert not any(_alive(p) for p in workers)
    assert not db.exists()


def test_after_sigkill_no_worker_is_left_and_the_next_ingest_works(tmp_path: Path, run_cli: Invoke) -> None:
    db = tmp_path / "s.db"
    run_cli("ingest", "--db", db, "--run", "first", KINETO / "rank0_iter5_7.json.gz")
    proc = _start("pause-worker", "ingest", "--db", db, "--run", "second", KINETO, workers=2)
    workers = [int(_wait_for(proc, "worker").split()[1]) for _ in range(2)]
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    for _ in range(200):  # the kernel kills them at once; this only waits for that to be visible
        if not any(_alive(p) for p in workers):
            break
        time.sleep(0.05)
    assert not any(_alive(p) for p in workers), "a worker outlived its writer"
    assert "second" not in run_cli("runs", "--db", db, "--format", "csv").stdout
    run_cli("ingest", "--db", db, "--run", "second", KINETO)
    assert "second" in run_cli("runs", "--db", db, "--format", "csv").stdout


def test_a_worker_that_dies_is_named_by_its_file(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    proc = _start("kill-worker", "ingest", "--db", db, KINETO, workers=2)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    assert "an ingest worker died (killed by signal 9, e.g. out of memory) while parsing " in err, err
    assert f"{KINETO / 'rank2_iter5_7.json.gz'}; nothing was written" in err and "Traceback" not in err, err
    assert not db.exists()


def test_a_worker_that_dies_reading_small_files_together_names_them_all(tmp_path: Path) -> None:
    """A worker killed while it reads a group of small rocprofv3 traces in one parse (``_read_group``)
    is named by the group, not by one file of it (before, by the file it parsed last, or by none)."""
    sample = Path(__file__).parent / "data" / "rocprofv3_csv" / "rocm-systems_2025-08" / "kernel_trace.csv"
    for r in range(6):
        (tmp_path / "job" / f"rank{r}").mkdir(parents=True)
        (tmp_path / "job" / f"rank{r}" / "kernel_trace.csv").write_bytes(sample.read_bytes())
    db = tmp_path / "s.db"
    proc = _start("kill-group", "ingest", "--db", db, *sorted((tmp_path / "job").glob("rank*")), workers=2)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    assert "an ingest worker died (killed by signal 9, e.g. out of memory) while reading " in err, err
    assert "small files together (" in err and "/rank" in err and "ingest those files with" in err, err
    assert "Traceback" not in err and not db.exists(), err


def test_readers_answer_while_an_ingest_holds_the_write_lock(store_url: str, run_cli: Invoke, tmp_path: Path) -> None:
    """Every read-only command, against a store whose ingest is paused inside its transaction (a
    reader that waited for the lock would fail after 30 s with advice meant for writers)."""
    run_cli("ingest", "--db", store_url, "--run", "zero", KINETO / "rank0_iter5_7.json.gz")
    run_cli("ingest", "--db", store_url, "--run", "first", KINETO)
    proc = _start("pause-writer", "ingest", "--db", store_url, "--run", "second", KINETO)
    try:
        _wait_for(proc, "paused")
        for args in (
            ["runs"],
            ["ranks", "--run", "first"],
            ["query", "--hotspots", "--run", "first"],
            ["query", "--imbalance", "--run", "first"],
            ["sql", "select count(*) from activity"],
            ["report", "--run", "first", "-o", tmp_path / "r.html"],
            ["plot", "--imbalance", "--run", "first", "-o", tmp_path / "h.svg"],
            ["compare", "zero", "first"],
            ["trend"],  # the newest run with data (PostgreSQL commits the in-flight run early, empty: hidden)
            ["export", "--run", "first", "--to", tmp_path / "copy.db"],
        ):
            run_cli(*args, "--db", store_url)
        assert proc.stdin is not None
        proc.stdin.write("\n")
        proc.stdin.flush()
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert "second" in run_cli("runs", "--db", store_url, "--format", "csv").stdout


def _run_rows(url: str, name: str) -> int:
    engine = open_db(url, readonly=True)
    try:
        with engine.connect() as c:
            return int(c.execute(text("select count(*) from run where name = :n"), {"n": name}).scalar_one())
    finally:
        engine.dispose()


def test_a_run_appears_when_its_data_commits_and_a_killed_ingest_leaves_none(
    store_url: str, run_cli: Invoke
) -> None:
    """PostgreSQL commits a load's run row first (so nodes loading one run do not wait for each other,
    bulk.run_scope): readers must not see that empty run, and after the load is SIGKILLed (nothing of
    it runs to remove the row) the next load removes it."""
    run_cli("ingest", "--db", store_url, "--run", "first", KINETO / "rank0_iter5_7.json.gz")
    proc = _start("pause-writer", "ingest", "--db", store_url, "--run", "second", KINETO)
    try:
        _wait_for(proc, "paused")
        listed = run_cli("runs", "--db", store_url, "--format", "csv").stdout
        assert "first" in listed and "second" not in listed, listed
        asked = run_cli("query", "--hotspots", "--run", "second", "--db", store_url, ok=False)
        assert asked.exit_code != 0 and "Traceback" not in asked.output + asked.stderr
        if store_url.startswith("postgresql"):  # its name is taken: say why it has nothing yet
            assert "has no data yet: an ingest is loading it" in asked.stderr, asked.stderr
        else:
            assert "no run named 'second'" in asked.stderr, asked.stderr
        # commands without --run take the newest run with data: "first" (one rank), not the loading one
        ranks = run_cli("ranks", "--db", store_url, "--format", "csv").stdout.strip().splitlines()
        assert ranks[1].startswith("0,") and ranks[2].startswith("1-3,") and "MISSING" in ranks[2], ranks
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert "second" not in run_cli("runs", "--db", store_url, "--format", "csv").stdout
    run_cli("ingest", "--db", store_url, "--run", "third", KINETO / "rank1_iter5_7.json.gz")
    assert _run_rows(store_url, "second") == 0  # removed by the next load (PostgreSQL); never there (SQLite)
    run_cli("ingest", "--db", store_url, "--run", "second", KINETO)
    listed = run_cli("runs", "--db", store_url, "--format", "csv").stdout
    assert "second" in listed and "third" in listed, listed
