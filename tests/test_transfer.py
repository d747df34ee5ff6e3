"""``profdb merge`` / ``profdb export``: runs move between stores whole, names re-interned, rank sets
united, nothing doubled on repeat, and the destination answers every view exactly as a store that
ingested the same files directly would. Destinations on both backends."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import create_engine, text

from pg_fixtures import write_rocprof_run
from pg_fixtures import query_url as q
from profdb.cli.main import cli
from profdb.store.errors import QueryError, RankIdentityError, StoreError
from profdb.store.identity import IdentityFlags
from profdb.store.ingest import ingest_paths
from profdb.store.transfer import merge_stores, transfer_runs
from test_concurrency import _run_nodes

DATA = Path(__file__).parent / "data"
TORCHRUN4 = DATA / "kineto" / "torchrun4_cpu"
ROCPROF_2025 = DATA / "rocprofv3_csv" / "rocm-systems_2025-08"

# every column of every view but ids and ingest times
VIEWS = {
    "rank_v": "run, hostname, global_rank, local_rank, node_rank, pid, device, sources, rows",
    "activity_v": "run, hostname, global_rank, local_rank, kind, category, name, start_ns, end_ns, duration_ns, "
    "device, stream, correlation, pid, tid, grid_x, grid_y, grid_z, block_x, block_y, block_z, args",
    "summary_v": "run, hostname, global_rank, local_rank, kind, category, name, calls, total_ns, mean_ns, min_ns, max_ns, "
    "self_ns",
    "counter_v": "run, hostname, global_rank, local_rank, kernel, counter, value, dispatch_id, samples, min_value, max_value",
    "step_v": "run, hostname, global_rank, local_rank, step, start_ns, duration_ns",
    "source_v": "run, hostname, global_rank, local_rank, path, format, content_kind, rows, size_bytes, content_hash, identity_origin",
    # the collective timeline (issue 12)
    "collective_call_v": "run, hostname, global_rank, local_rank, family, group_name, collective, seq, start_ns, end_ns, "
    "bytes, arrival_ns, clock_error_ns, busy_before_ns, window_ns",
    "rank_timeline_v": "run, hostname, global_rank, local_rank, work_domain, first_ns, last_ns, busy_ns, comm_ns, "
    "exposed_comm_ns, clock_offset_ns, clock_error_ns",
    "step_timeline_v": "run, hostname, global_rank, local_rank, step, start_ns, duration_ns, busy_ns, exposed_comm_ns",
    "host_clock_v": "run, hostname, offset_ns, error_ns, samples",
}


def snapshot(url: str, runs: tuple[str, ...] | None = None) -> dict[str, list[tuple[Any, ...]]]:
    where = f" where run in ({', '.join(repr(r) for r in runs)})" if runs else ""
    out = {}
    for view, cols in VIEWS.items():
        out[view] = sorted((tuple(round(v, 6) if isinstance(v, float) else v for v in r)
                            for r in q(url, f"select {cols} from {view}{where}")), key=repr)
    out["sum_sq"] = sorted((g, n, k, round(s / 1e12, 3)) for g, n, k, s in q(
        url, "select k.global_rank, n.value, m.kind, m.sum_sq_ns from summary m join rank k on k.id = m.rank_id "
        "join name n on n.id = m.name_id"))
    out["run"] = sorted(q(url, "select name, world_size, launcher, command from run" + (
        f" where name in ({', '.join(repr(r) for r in runs)})" if runs else "")))
    return out


def sqlite(tmp_path: Path, name: str) -> str:
    return f"sqlite:///{tmp_path / name}"


@pytest.fixture
def job(tmp_path: Path) -> Path:
    write_rocprof_run(tmp_path / "job", ranks=4, dispatches=700)
    return tmp_path / "job"


def _node_stores(tmp_path: Path, job: Path) -> tuple[str, str]:
    n0, n1 = sqlite(tmp_path, "node0.db"), sqlite(tmp_path, "node1.db")
    ingest_paths([job / "rank0000", job / "rank0001"], n0, run="job")
    ingest_paths([job / "rank0002", job / "rank0003"], n1, run="job")
    ingest_paths([TORCHRUN4], n1, run="ddp4")
    return n0, n1


def test_merge_node_stores_equals_one_ingest(store_url: str, tmp_path: Path, job: Path) -> None:
    n0, n1 = _node_stores(tmp_path, job)
    reports = merge_stores([n0, n1], store_url)
    assert [(r.run, r.status, r.files, r.ranks) for rep in reports for r in rep.runs] == [
        ("job", "created", 4, [0, 1]), ("job", "added", 4, [2, 3]), ("ddp4", "created", 4, [0, 1, 2, 3])]
    direct = sqlite(tmp_path, "direct.db")
    ingest_paths([job], direct, run="job")
    ingest_paths([TORCHRUN4], direct, run="ddp4")
    assert snapshot(store_url) == snapshot(direct)
    # names are interned once in the destination, whatever ids the sources gave them
    assert q(store_url, "select count(*) - count(distinct value) from name") == [(0,)]

    before = snapshot(store_url)
    again = merge_stores([n0, n1], store_url)
    assert [(r.status, r.files, r.skipped_files) for rep in again for r in rep.runs] == [("present", 0, 4)] * 3
    assert snapshot(store_url) == before


def test_export_sqlite_to_team_store_and_back(pg_url: str, tmp_path: Path) -> None:
    local = sqlite(tmp_path, "local.db")
    ingest_paths([TORCHRUN4], local, run="ddp4")
    ingest_paths([ROCPROF_2025], local, run="rocprof", flags=IdentityFlags(rank=0, allow_duplicate_ranks=True))
    r = CliRunner().invoke(cli, ["export", "--db", local, "--to", pg_url, "--format", "csv"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    lines = r.stdout.strip().splitlines()
    assert lines[0] == "source,run,status,files,skipped_files,ranks,activity_rows,counter_rows"
    # 11 rocprofv3 CSV traces in the sample folder (memory_allocation and scratch_memory are read since issue 13)
    assert [ln.split(",")[1:5] for ln in lines[1:]] == [["ddp4", "created", "4", "0"], ["rocprof", "created", "11", "0"]]
    assert snapshot(pg_url) == snapshot(local)
    back = sqlite(tmp_path, "back.db")
    transfer_runs(pg_url, back)
    assert snapshot(back) == snapshot(local)
    # rows read from PostgreSQL by their columns (its fact_span is empty) get their spans in SQLite
    assert q(pg_url, "select count(*) from fact_span") == [(0,)]
    from test_fact_spans import check_spans

    assert check_spans(Path(back.removeprefix("sqlite:///")))["activity"] >= 4


def test_export_one_run_by_name(store_url: str, tmp_path: Path, job: Path) -> None:
    n0, n1 = _node_stores(tmp_path, job)
    rep = transfer_runs(n1, store_url, ["ddp4"])
    assert [r.run for r in rep.runs] == ["ddp4"]
    assert q(store_url, "select name from run") == [("ddp4",)]
    with pytest.raises(QueryError, match="no run named 'nope'.*runs there: job, ddp4"):
        transfer_runs(n1, store_url, ["nope"])


def test_part_of_a_rank_already_there(store_url: str, tmp_path: Path) -> None:
    """The destination has one file of rank 0; the source has it and ten more: only those are
    copied, and the rank's summary is the one of all eleven files."""
    src = sqlite(tmp_path, "src.db")
    flags = IdentityFlags(rank=0, allow_duplicate_ranks=True)
    ingest_paths([ROCPROF_2025], src, run="r", flags=flags)
    ingest_paths([ROCPROF_2025 / "kernel_trace.csv"], store_url, run="r", flags=flags)
    rep = transfer_runs(src, store_url, allow_duplicate_ranks=True)
    assert [(r.status, r.files, r.skipped_files) for r in rep.runs] == [("added", 10, 1)]
    assert snapshot(store_url) == snapshot(src)


def test_conflicting_runs_are_refused(store_url: str, tmp_path: Path, job: Path) -> None:
    a = sqlite(tmp_path, "a.db")
    ingest_paths([job / "rank0000"], a, run="job", flags=IdentityFlags(hostname="nodeA"))
    ingest_paths([job / "rank0000"], store_url, run="job", flags=IdentityFlags(hostname="nodeB"))
    # the same file under another hostname is the same content for the same rank: nothing to copy
    assert [r.status for r in transfer_runs(a, store_url).runs] == ["present"]
    other = tmp_path / "other"
    write_rocprof_run(other, ranks=1, dispatches=50, seed=99)
    b = sqlite(tmp_path, "b.db")
    ingest_paths([other], b, run="job", flags=IdentityFlags(hostname="nodeC"))
    before = snapshot(store_url)
    with pytest.raises(RankIdentityError, match="already has a rocprof-csv"):
        transfer_runs(b, store_url)
    with pytest.raises(RankIdentityError, match="hostname 'nodeB' in the destination but 'nodeC'"):
        transfer_runs(b, store_url, allow_duplicate_ranks=True)
    c = sqlite(tmp_path, "c.db")
    ingest_paths([other], c, run="job", flags=IdentityFlags(hostname="nodeB"))
    with pytest.raises(RankIdentityError, match="already has a rocprof-csv"):
        transfer_runs(c, store_url)
    assert snapshot(store_url) == before  # refused transfers leave the destination as it was
    rep = transfer_runs(c, store_url, allow_duplicate_ranks=True)
    assert rep.runs[0].files == 2


def test_world_size_mismatch(store_url: str, tmp_path: Path) -> None:
    src = sqlite(tmp_path, "src.db")
    ingest_paths([TORCHRUN4], src, run="ddp4")  # world size 4
    engine = create_engine(store_url)
    from profdb.store.db import open_db

    open_db(store_url).dispose()
    with engine.begin() as conn:
        conn.execute(text("insert into run (name, created_at, world_size) values ('ddp4', '2024-01-01 00:00:00', 8)"))
    engine.dispose()
    with pytest.raises(RankIdentityError, match="world size 8 in the destination but 4"):
        transfer_runs(src, store_url)


def test_bad_stores_named(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no such store"):
        transfer_runs(str(tmp_path / "missing.db"), str(tmp_path / "dst.db"))
    assert not (tmp_path / "dst.db").exists()
    src = sqlite(tmp_path, "s.db")
    ingest_paths([TORCHRUN4], src, run="ddp4")
    with pytest.raises(StoreError, match="both the source and the destination"):
        transfer_runs(src, str(tmp_path / "s.db"))
    with pytest.raises(QueryError, match="no run named 'x'"):
        merge_stores([src], str(tmp_path / "dst.db"), ["x"])
    assert not list(tmp_path.glob("dst.db*"))
    r = CliRunner().invoke(cli, ["merge", str(tmp_path / "nope.db"), "--db", str(tmp_path / "d.db")])
    assert r.exit_code == 1 and "nope.db: no such store" in r.output


def test_nodes_export_into_the_team_store_at_once(pg_url: str, tmp_path: Path) -> None:
    expected = write_rocprof_run(tmp_path / "job", ranks=4, dispatches=1500, seed=5)
    stores = []
    for r in range(4):
        url = sqlite(tmp_path, f"node{r}.db")
        ingest_paths([tmp_path / "job" / f"rank{r:04d}"], url, run="job")
        stores.append(url)
    results = _run_nodes([["export", "--db", s, "--to", pg_url] for s in stores], tmp_path)
    assert all(rc == 0 for rc, _ in results), results
    got = {(g, n): (c, t) for g, n, c, t in q(pg_url, "select global_rank, name, calls, total_ns from summary_v")}
    assert got == {(g, n): (e["calls"][n], e["total_ns"][n]) for g, e in expected.items() for n in e["calls"]}  # type: ignore[index]
    assert q(pg_url, "select count(*) from activity") == [(4 * 1500,)]
    assert q(pg_url, "select count(*) from run") == [(1,)]
    # each export keeps the run's analysis after its commit (timeline.keep_analysis): the one kept is of them all
    from test_run_analysis_cache import both_ways

    kept, computed = both_ways(pg_url, "job")
    assert kept is not None and kept == computed
    assert q(pg_url, "select count(*) from rank_analysis") == [(4,)]


def test_run_tags_travel_and_merge(store_url: str, tmp_path: Path, job: Path) -> None:
    n0, n1 = _node_stores(tmp_path, job)
    for url, meta in ((n0, '{"branch": "main", "node": "a"}'), (n1, '{"node": "b", "commit": "abc"}')):
        engine = create_engine(url)
        with engine.begin() as conn:
            conn.execute(text("update run set metadata_json = :m where name = 'job'"), {"m": meta})
        engine.dispose()
    merge_stores([n0, n1], store_url)
    import json

    (meta,) = q(store_url, "select metadata_json from run where name = 'job'")[0]
    assert json.loads(meta) == {"branch": "main", "node": "a", "commit": "abc"}


def test_a_conflict_in_a_later_run_commits_nothing(
    store_url: str, tmp_path: Path, job: Path, run_cli: Any
) -> None:
    """One source with runs 'a-ok' and 'job', 'job' conflicting with the destination: neither is
    copied (it was 'a-ok' committed, then the error). The same between two sources of one merge
    into a new store."""
    other_job = tmp_path / "other-job"
    write_rocprof_run(other_job, ranks=1, dispatches=50, seed=99)
    src = sqlite(tmp_path, "src.db")
    ingest_paths([TORCHRUN4], src, run="a-ok")
    ingest_paths([other_job], src, run="job", flags=IdentityFlags(hostname="nodeC"))
    ingest_paths([job / "rank0000"], store_url, run="job", flags=IdentityFlags(hostname="nodeB"))
    before = snapshot(store_url)
    for args in (["--allow-duplicate-ranks"], []):  # rank facts, then duplicate profiles
        r = run_cli("merge", src, "--db", store_url, *args, ok=False)
        assert r.exit_code == 1 and "run 'job'" in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert snapshot(store_url) == before
    assert "a-ok" not in run_cli("runs", "--db", store_url, "--format", "csv").stdout
    # two sources: the second's 'job' conflicts with the first's; the new destination is not left behind
    other = sqlite(tmp_path, "other.db")
    ingest_paths([job / "rank0000"], other, run="job", flags=IdentityFlags(hostname="nodeB"))
    new = tmp_path / "new.db"
    r = run_cli("merge", src, other, "--db", new, "--allow-duplicate-ranks", ok=False)
    assert r.exit_code == 1 and "hostname 'nodeC' in the destination but 'nodeB'" in r.stderr, r.stderr
    assert not new.exists()


def test_an_export_while_a_node_loads_the_same_rank_waits_for_it(pg_url: str, tmp_path: Path) -> None:
    """A node's ingest of rank 0 is under way (its rank row made, not committed) when an export of the same
    rank into the team store begins: the export's checks wait for that rank as a load does (its advisory
    lock), then find the file present. Before, the checks' own rank row collided with the node's: a
    UniqueViolation traceback (found with 6 nodes and one export at once)."""
    import threading

    from test_concurrency import paused_load

    write_rocprof_run(tmp_path / "job", ranks=1, dispatches=300)
    node = sqlite(tmp_path, "node.db")
    ingest_paths([tmp_path / "job"], node, run="job")
    exported: list[Any] = []
    with paused_load([tmp_path / "job"], pg_url) as errors:
        b = threading.Thread(target=lambda: exported.append(transfer_runs(node, pg_url)))
        b.start()
        b.join(2)
        assert b.is_alive()  # (waiting for the rank the load holds)
    b.join(60)
    assert not errors and not b.is_alive()
    assert len(exported) == 1 and [(r.run, r.status, r.files) for r in exported[0].runs] == [("job", "present", 0)]
    assert q(pg_url, "select count(*) from rank") == [(1,)]
    assert q(pg_url, "select count(*) from source_file") == [(2,)]


def test_an_interrupt_between_runs_says_which_runs_are_in(
    store_url: str, tmp_path: Path, run_cli: Any, monkeypatch: Any
) -> None:
    """Each run is copied in its own transaction: Ctrl-C while the second is copied rolls that one back,
    and the message names the run already committed instead of saying nothing was written."""
    import signal

    from profdb.cli.main import Interrupted
    from profdb.store import transfer

    src = sqlite(tmp_path, "src.db")
    ingest_paths([TORCHRUN4], src, run="a-first")
    ingest_paths([TORCHRUN4], src, run="b-second")
    real = transfer._copy_run

    def second_interrupted(*a: Any, **k: Any) -> Any:
        if a[2] == "b-second":
            raise Interrupted(signal.SIGINT)
        return real(*a, **k)

    monkeypatch.setattr(transfer, "_copy_run", second_interrupted)
    r = run_cli("merge", src, "--db", store_url, ok=False)
    assert r.exit_code == 130
    said = r.stderr.strip().splitlines()[-1]
    assert said.startswith("profdb merge: interrupted by SIGINT; runs already committed: 'a-first' from "), said
    assert q(store_url, "select name from run") == [("a-first",)]
