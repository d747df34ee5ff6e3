"""Several ``profdb ingest`` processes (one per node, each with its own ranks of one run) loading
the same run of a fresh store at the same moment, on each backend: every process succeeds, every
row arrives exactly once, the run's rank set is the union, and summaries equal the inputs' sums."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
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


@contextmanager
def paused_load(paths: list[Path], url: str, run: str = "job") -> Iterator[list[BaseException]]:
    """An ingest of ``paths`` in a thread, stopped after its first file (its run, rank and name rows made,
    its transaction open) until the block ends, then let go and joined; yields the list of what it raised."""
    import threading

    from profdb.store.ingest import ingest_paths

    paused, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def slow(event: str, path: str, done: int, total: int) -> None:
        if event == "file":
            paused.set()
            release.wait(60)

    def load() -> None:
        try:
            ingest_paths(paths, url, run=run, progress=slow)
        except BaseException as e:  # pragma: no cover - reported by the caller
            errors.append(e)

    a = threading.Thread(target=load)
    a.start()
    try:
        assert paused.wait(60), "the paused load never reached its first file"
        yield errors
    finally:
        release.set()
        a.join(60)
    assert not a.is_alive()


def test_pg_a_slow_node_does_not_hold_up_the_others(pg_url: str, tmp_path: Path) -> None:
    """Node A stops in the middle of its transaction (after its first file, holding its run, rank
    and name rows); node B, loading another rank of the same run with the same kernel names, must
    finish meanwhile: on PostgreSQL the nodes do not take turns."""
    import threading

    from profdb.store.ingest import ingest_paths

    expected = write_rocprof_run(tmp_path / "job", ranks=2, dispatches=500)
    with paused_load([tmp_path / "job" / "rank0000"], pg_url) as errors:
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
    b.join(60)
    assert not errors, errors
    assert finished_while_a_waits, "node B waited for node A's transaction"
    _check_store(pg_url, expected)


# ----------------------------------------------------------------------------- no orphan fact row, ever
# On PostgreSQL the fact tables (activity, counter) have no foreign keys (0006_pg_fact_keys): each load
# checks its ids once, and triggers delete the rows of a deleted rank or file. SQLite keeps the name
# keys; since 0010 a trigger deletes a deleted file's rows through its id ranges (fact_span).
# These run on both engines: the guarantee is the same.

ORPHANS = """select
  (select count(*) from activity a
    where not exists (select 1 from rank r where r.id = a.rank_id)
       or not exists (select 1 from source_file s where s.id = a.source_id)
       or not exists (select 1 from name n where n.id = a.name_id))
+ (select count(*) from counter c
    where not exists (select 1 from rank r where r.id = c.rank_id)
       or not exists (select 1 from source_file s where s.id = c.source_id)
       or not exists (select 1 from name n where n.id = c.kernel_name_id)
       or not exists (select 1 from name n where n.id = c.counter_name_id))"""


def _orphans(url: str) -> int:
    return int(_q(url, ORPHANS)[0][0])


def _facts(url: str) -> dict[tuple[str, int], tuple[int, int]]:
    """(run, global rank) -> (activity rows, counter rows), from the fact tables themselves."""
    out: dict[tuple[str, int], tuple[int, int]] = {}
    for table, i in (("activity", 0), ("counter", 1)):
        for run, g, n in _q(url, f"select r.name, k.global_rank, count(*) from {table} t join rank k on "
                                 "k.id = t.rank_id join run r on r.id = k.run_id group by 1, 2"):
            got = list(out.get((run, g), (0, 0)))
            got[i] = int(n)
            out[(run, g)] = (got[0], got[1])
    return out


def _write(url: str, statement: str) -> Any:
    from click.testing import CliRunner

    from profdb.cli.main import cli

    return CliRunner().invoke(cli, ["sql", "--write", "--db", url, statement])


def test_deleting_a_file_rank_or_run_takes_its_fact_rows_along(store_url: str, tmp_path: Path) -> None:
    from profdb.store.ingest import ingest_paths

    a = write_rocprof_run(tmp_path / "a", ranks=3, dispatches=300, seed=1)
    b = write_rocprof_run(tmp_path / "b", ranks=2, dispatches=200, seed=2)
    ingest_paths([tmp_path / "a"], store_url, run="a")
    ingest_paths([tmp_path / "b"], store_url, run="b")
    want = {("a", g): (e["kernels"], e["counters"]) for g, e in a.items()}
    want |= {("b", g): (e["kernels"], e["counters"]) for g, e in b.items()}
    assert _facts(store_url) == want and _orphans(store_url) == 0

    # one file: rank 0's counter file of run a
    r = _write(store_url, "delete from source_file where path like '%counter_collection.csv' and rank_id = "
                          "(select k.id from rank k join run r on r.id = k.run_id where r.name = 'a' "
                          "and k.global_rank = 0)")
    assert r.exit_code == 0, r.output
    want[("a", 0)] = (want[("a", 0)][0], 0)
    assert _facts(store_url) == want and _orphans(store_url) == 0

    # one rank (its files go by cascade, and with them, or with it, its rows)
    r = _write(store_url, "delete from rank where global_rank = 1 and run_id = (select id from run where name = 'a')")
    assert r.exit_code == 0, r.output
    del want[("a", 1)]
    assert _facts(store_url) == want and _orphans(store_url) == 0

    # a name that rows use cannot go (SQLite: its foreign key; PostgreSQL: the trigger that replaced it)
    before = _facts(store_url)
    r = _write(store_url, "delete from name where id = (select min(name_id) from activity)")
    assert r.exit_code != 0
    assert _facts(store_url) == before and _orphans(store_url) == 0

    # a whole run (rank and source_file rows by cascade, the fact rows with them); run b is untouched
    r = _write(store_url, "delete from run where name = 'a'")
    assert r.exit_code == 0, r.output
    assert _facts(store_url) == {k: v for k, v in want.items() if k[0] == "b"}
    assert _orphans(store_url) == 0


def test_pg_truncating_ranks_empties_the_fact_tables(pg_url: str, tmp_path: Path) -> None:
    from profdb.store.ingest import ingest_paths

    write_rocprof_run(tmp_path / "a", ranks=2, dispatches=100)
    ingest_paths([tmp_path / "a"], pg_url, run="a")
    assert _q(pg_url, "select count(*) > 0 from activity") == [(True,)]
    r = _write(pg_url, "truncate run cascade")  # reaches rank and source_file through their keys
    assert r.exit_code == 0, r.output
    assert _q(pg_url, "select (select count(*) from activity), (select count(*) from counter)") == [(0, 0)]


def test_pg_an_id_cannot_change_under_fact_rows(pg_url: str, tmp_path: Path) -> None:
    from profdb.store.ingest import ingest_paths

    write_rocprof_run(tmp_path / "a", ranks=1, dispatches=50)
    ingest_paths([tmp_path / "a"], pg_url, run="a")
    for table in ("rank", "source_file", "name"):
        r = _write(pg_url, f"update {table} set id = id + 1000")
        assert r.exit_code != 0 and "cannot change" in r.output, r.output
    assert _orphans(pg_url) == 0


def test_a_failed_ingest_leaves_no_fact_row(store_url: str, tmp_path: Path, monkeypatch: Any) -> None:
    """A file after others is damaged: the rows of the files before it (already written, COPYed on
    PostgreSQL) go with the rollback; the run stored before is untouched."""
    import pytest

    from profdb.store.errors import ProfdbError
    from profdb.store.ingest import ingest_paths

    before = write_rocprof_run(tmp_path / "before", ranks=1, dispatches=100, seed=5)
    ingest_paths([tmp_path / "before"], store_url, run="before")
    write_rocprof_run(tmp_path / "job", ranks=3, dispatches=400)
    bad = tmp_path / "job" / "rank0002" / "4002_kernel_trace.csv"
    lines = bad.read_text().splitlines()
    bad.write_text("\n".join(lines[:200] + ['"KERNEL_DISPATCH","Agent 6",1,"not a number"'] + lines[200:]) + "\n")
    monkeypatch.setenv("PROFDB_INGEST_WORKERS", "0")  # one process, files in turn: the good ones are written first
    done: list[str] = []

    def progress(event: str, path: str, at: int, total: int) -> None:
        if event == "file":
            done.append(path)

    with pytest.raises(ProfdbError, match="4002_kernel_trace.csv"):
        ingest_paths([tmp_path / "job"], store_url, run="job", progress=progress)
    assert done, "no file was written before the damaged one: the test would prove nothing"
    assert _facts(store_url) == {("before", 0): (before[0]["kernels"], before[0]["counters"])}
    assert _q(store_url, "select name from run") == [("before",)]
    assert _orphans(store_url) == 0


def test_four_nodes_while_another_run_is_deleted_leave_no_orphan(store_url: str, tmp_path: Path) -> None:
    """Four nodes ingest ranks of one run while a fifth process deletes another run, rank by rank then
    whole: every row of the new run arrives, and none of the deleted run's rows is left."""
    from profdb.store.ingest import ingest_paths

    old = write_rocprof_run(tmp_path / "old", ranks=4, dispatches=500, seed=3)
    ingest_paths([tmp_path / "old"], store_url, run="old")
    assert len(_facts(store_url)) == len(old)
    expected = write_rocprof_run(tmp_path / "job", ranks=4, dispatches=DISPATCHES)
    cmds = [["ingest", "--db", store_url, "--run", "job", str(tmp_path / "job" / f"rank{r:04d}")] for r in range(4)]
    cmds.append(["sql", "--write", "--db", store_url,
                 "delete from rank where run_id = (select id from run where name = 'old') and global_rank < 2"])
    cmds.append(["sql", "--write", "--db", store_url, "delete from run where name = 'old'"])
    results = _run_nodes(cmds, tmp_path)
    assert all(rc == 0 for rc, _ in results), results
    _check_store(store_url, expected)
    assert _orphans(store_url) == 0


def test_pg_a_run_removed_again_and_again_before_a_load_holds_it_is_made_again(
    pg_url: str, tmp_path: Path, monkeypatch: Any
) -> None:
    """Many nodes starting at once: a node's run row, committed early (bulk.run_scope), is removed as
    abandoned (no rank yet) by another node starting its load; the node then finds the row a third node
    made, which is removed too before it is held. The load makes the run again in its own transaction
    (bulk.hold_run); it failed with NoResultFound before (found with 16 nodes of benchmarks/pg_ingest.py)."""
    from sqlalchemy import create_engine

    from profdb.store import bulk
    from profdb.store.ingest import ingest_paths

    expected = write_rocprof_run(tmp_path / "job", ranks=1, dispatches=300)
    other = create_engine(pg_url)
    real = bulk.hold_run
    found: list[int] = []

    def racing(conn: Any, run_id: int | None, ranks: Any, find_or_create: Any) -> int:
        with other.begin() as o:  # (another node's remove_abandoned_runs)
            o.exec_driver_sql("DELETE FROM run WHERE id = %s", (run_id,))

        def lost_again(c: Any) -> tuple[int, bool]:
            if not found:
                with other.begin() as o:  # a third node makes the run, and it is removed once found
                    o.exec_driver_sql("INSERT INTO run (name, created_at) VALUES ('job', now())")
            got = find_or_create(c)
            if not found:
                with other.begin() as o:
                    o.exec_driver_sql("DELETE FROM run WHERE id = %s", (got[0],))
            found.append(got[0])
            return got  # type: ignore[no-any-return]

        return real(conn, run_id, ranks, lost_again)  # type: ignore[no-any-return]

    monkeypatch.setattr(bulk, "hold_run", racing)
    try:
        ingest_paths([tmp_path / "job"], pg_url, run="job")
    finally:
        other.dispose()
    assert len(found) == 2 and found[0] != found[1]  # (the other node's row, then this load's own)
    _check_store(pg_url, expected)
