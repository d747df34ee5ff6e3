"""Several ``profdb ingest`` processes (one per node, each with its own ranks of one run) loading
the same run of a fresh store at the same moment, on each backend: every process succeeds, every
row arrives exactly once, the run's rank set is the union, and summaries equal the inputs' sums."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any


from pg_fixtures import write_rocprof_run
from pg_fixtures import query_url as _q

DISPATCHES = 4000  # per rank: long enough that the four transactions overlap

# imports profdb first, then waits for the go file, so the processes really start together
_NODE = """
import os, sys, time
from profdb.cli.main import cli
go = sys.argv[1]
while not os.path.exists(go):
    time.sleep(0.002)
cli.main(args=sys.argv[2:], prog_name="profdb")
"""


def _run_nodes(commands: list[list[str]], tmp_path: Path) -> list[tuple[int, str]]:
    go = tmp_path / "go"
    procs = [
        subprocess.Popen([sys.executable, "-c", _NODE, str(go), *cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
        for cmd in commands
    ]
    time.sleep(1.5)
    go.touch()
    out = []
    for p in procs:
        stdout, _ = p.communicate(timeout=300)
        out.append((p.returncode, stdout))
    return out


def _check_store(url: str, expected: dict[int, dict[str, Any]], run: str = "job") -> None:
    assert _q(url, "select name from run") == [(run,)]
    assert _q(url, "select global_rank from rank_v order by 1") == [(g,) for g in sorted(expected)]
    kernels = dict(_q(url, "select global_rank, count(*) from activity_v where kind = 'kernel' group by 1"))
    assert kernels == {g: e["kernels"] for g, e in expected.items()}
    counters = dict(_q(url, "select global_rank, count(*) from counter_v group by 1"))
    assert counters == {g: e["counters"] for g, e in expected.items()}
    assert _q(url, "select count(*) from source_file") == [(2 * len(expected),)]
    summary = {(g, n): (c, t) for g, n, c, t in _q(url, "select global_rank, name, calls, total_ns from summary_v")}
    want = {(g, n): (e["calls"][n], e["total_ns"][n]) for g, e in expected.items() for n in e["calls"]}
    assert summary == want
    # the fact table agrees with the summaries (no row lost or doubled behind them)
    facts = {(g, n): (c, int(t)) for g, n, c, t in _q(
        url, "select global_rank, name, count(*), sum(duration_ns) from activity_v group by global_rank, name")}
    assert facts == want
    names = _q(url, "select count(*), count(distinct value) from name")
    assert names[0][0] == names[0][1] == len({n for e in expected.values() for n in e["calls"]}) + 1  # + SQ_WAVES


def test_four_nodes_ingest_their_ranks_of_one_run_at_once(store_url: str, tmp_path: Path) -> None:
    expected = write_rocprof_run(tmp_path / "job", ranks=4, dispatches=DISPATCHES)
    cmds = [["ingest", "--db", store_url, "--run", "job", str(tmp_path / "job" / f"rank{r:04d}")] for r in range(4)]
    results = _run_nodes(cmds, tmp_path)
    assert all(rc == 0 for rc, _ in results), results
    assert all("files: 2 ingested" in out for _, out in results), results
    _check_store(store_url, expected)


def test_nodes_given_the_same_ranks_take_turns_without_duplicates(store_url: str, tmp_path: Path) -> None:
    """Every node ingests the whole shared folder (a common mistake): one loads each rank, the
    others find its files present; nothing is doubled and no node fails."""
    expected = write_rocprof_run(tmp_path / "job", ranks=3, dispatches=2000, seed=11)
    cmds = [["ingest", "--db", store_url, "--run", "job", str(tmp_path / "job")] for _ in range(3)]
    results = _run_nodes(cmds, tmp_path)
    assert all(rc == 0 for rc, _ in results), results
    loaded = sum(int(out.split("files: ")[1].split(" ")[0]) for _, out in results)
    assert loaded == 6, results  # each file ingested by exactly one node
    _check_store(store_url, expected)


def test_pg_a_slow_node_does_not_hold_up_the_others(pg_url: str, tmp_path: Path) -> None:
    """Node A stops in the middle of its transaction (after its first file, holding its run, rank
    and name rows); node B, loading another rank of the same run with the same kernel names, must
    finish meanwhile: on PostgreSQL the nodes do not take turns."""
    import threading

    from profdb.store.ingest import ingest_paths

    expected = write_rocprof_run(tmp_path / "job", ranks=2, dispatches=500)
    paused, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def slow(event: str, path: str, done: int, total: int) -> None:
        if event == "file":
            paused.set()
            release.wait(60)

    def node_a() -> None:
        try:
            ingest_paths([tmp_path / "job" / "rank0000"], pg_url, run="job", progress=slow)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    a = threading.Thread(target=node_a)
    a.start()
    try:
        assert paused.wait(60), "node A never reached its first file"
        done = threading.Event()

        def node_b() -> None:
            try:
                ingest_paths([tmp_path / "job" / "rank0001"], pg_url, run="job")
            except BaseException as e:  # pragma: no cover
                errors.append(e)
            done.set()

        b = threading.Thread(target=node_b, daemon=True)
        b.start()
        finished_while_a_waits = done.wait(30)
    finally:
        release.set()
        a.join(60)
    b.join(60)
    assert not errors, errors
    assert finished_while_a_waits, "node B waited for node A's transaction"
    _check_store(pg_url, expected)
