"""The cross-rank questions, through the CLI as a user runs them: real torchrun traces, generated
multi-host runs with planted stragglers, and small hand-made stores with exact numbers."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any

import pytest
from conftest import Invoke, sql
from gen_kineto_run import ALLREDUCE, ATTN, COMPUTE, GEMM, KinetoRun, generate
from gen_rocprof_run import KERNELS
from gen_rocprof_run import generate as generate_rocprof
from gen_store import HandRank, fill_run

from profdb.store import queries
from profdb.store.db import open_db
from profdb.store.errors import QueryError
from profdb.store.intervals import self_times
from profdb.store.metrics import spread

COMPUTE_NAMES = [n for n, _c, _b in COMPUTE]


def self_ns_from_activity(db: Path, kind: str) -> dict[tuple[int, str], int]:
    """Self time per (global rank, name) of ``kind``, from the stored activity rows (each thread of each
    rank a lane: intervals.self_times), to check the summary's self_ns against."""
    rows = sql(db, "select k.global_rank, o.pid, o.tid, o.device, a.start_ns, a.duration_ns, n.value from activity a "
                   "join origin o on o.id = a.origin_id "
                   "join rank k on k.id = a.rank_id join name n on n.id = a.name_id where a.kind = ?", kind)
    own = self_times([((g, pid, tid, dev), start, dur) for g, pid, tid, dev, start, dur, _n in rows])
    out: dict[tuple[int, str], int] = {}
    for (g, *_rest, name), t in zip(rows, own):
        out[(g, name)] = out.get((g, name), 0) + t
    return out


def rows_of(out: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(out)))


def ingest(run_cli: Invoke, db: Path, *paths: Any, run: str | None = None) -> None:
    args: list[Any] = ["ingest", *paths, "--db", db]
    if run:
        args += ["--run", run]
    run_cli(*args)


# ---------------------------------------------------------------------------------------------
# real traces: torchrun, 4 ranks on CPU, rank 2 trains on a 3x larger batch


@pytest.fixture
def torchrun4(data: Path, db_path: Path, run_cli: Invoke) -> Path:
    ingest(run_cli, db_path, data / "kineto" / "torchrun4_cpu", run="torchrun4")
    return db_path


def test_torchrun4_imbalance_names_rank2(torchrun4: Path, run_cli: Invoke) -> None:
    r = run_cli("query", "--imbalance", "--db", torchrun4, "--format", "csv")
    first = r.stderr.splitlines()[0]
    assert first.startswith("likely straggler: rank 2 "), r.stderr
    assert "entered last at" in first and "cause: CPU compute" in first  # the timeline verdict (issue 12)
    assert "no GPU activity" in r.stderr and "cpu_op" in r.stderr  # CPU-only run: fell back, said so
    rows = rows_of(r.stdout)
    assert list(rows[0]) == queries.IMBALANCE_HEADERS  # csv holds data only
    assert "straggler" not in r.stdout
    compute = [x for x in rows if x["category"] != "communication"]
    assert all(x["kind"] == "cpu_op" for x in compute)
    # the top rows are ops that rank 2 runs longer than every other rank: check against the facts (self
    # time of cpu_op since issue 12: nested ops count in the child only)
    own = self_ns_from_activity(torchrun4, "cpu_op")
    assert "self time" in r.stderr
    for row in compute[:2]:
        assert row["slowest_rank"] == "2" and row["suspect_rank"] == "2", row
        per_rank = {g: t for (g, n), t in own.items() if n == row["name"]}
        assert max(per_rank, key=lambda g: per_rank[g]) == 2
        assert int(row["max_ns"]) == per_rank[2]
        assert int(row["mean_per_rank_ns"]) == sum(per_rank.values()) // 4
    # communication: reported apart, after the compute rows, inverted (the suspect waits least)
    comm = [x for x in rows if x["category"] == "communication"]
    assert [x["name"] for x in comm] == ["gloo:all_reduce"]
    assert rows.index(comm[0]) == len(compute)
    assert comm[0]["suspect_rank"] == comm[0]["fastest_rank"] == "2"


def test_torchrun4_table_has_readable_units(torchrun4: Path, run_cli: Invoke) -> None:
    r = run_cli("query", "--imbalance", "--db", torchrun4, "--top", "3")
    assert " ms" in r.stdout and "recoverable" in r.stdout and "recoverable_ns" not in r.stdout
    assert r.stderr.startswith("likely straggler: rank 2 ")


def test_torchrun4_steps_ranks_hotspots(torchrun4: Path, run_cli: Invoke) -> None:
    r = run_cli("query", "--steps", "--db", torchrun4, "--format", "json")
    steps = json.loads(r.stdout)
    facts = sql(torchrun4, "select s.step, k.global_rank, s.duration_ns from step s join rank k on k.id = s.rank_id")
    assert sorted({s for s, _g, _d in facts}) == [x["step"] for x in steps] == [4, 5, 6]
    for x in steps:
        durs = {g: d for s, g, d in facts if s == x["step"]}
        assert x["ranks"] == 4 and x["max_ns"] == max(durs.values())
        assert x["slowest_rank"] == max(durs, key=lambda g: durs[g])
    assert "of 3 steps" in r.stderr

    r = run_cli("query", "--ranks", "--db", torchrun4, "--format", "jsonl")
    ranks = [json.loads(line) for line in r.stdout.splitlines()]
    assert [x["global_rank"] for x in ranks] == [0, 1, 2, 3]
    assert max(ranks, key=lambda x: x["compute_ns"])["global_rank"] == 2
    assert min(ranks, key=lambda x: x["communication_ns"])["global_rank"] == 2
    assert r.stderr.startswith("likely straggler: rank 2 ")

    r = run_cli("query", "--hotspots", "--db", torchrun4, "--top", "0", "--format", "csv")
    hot = rows_of(r.stdout)
    assert sum(float(x["share_pct"]) for x in hot) == pytest.approx(100.0)
    totals = [int(x["total_ns"]) for x in hot]
    assert totals == sorted(totals, reverse=True)
    # self time: the shares add up to 100% and the total is the self time of every op, not the inclusive sum
    assert sum(totals) == sum(self_ns_from_activity(torchrun4, "cpu_op").values())
    (inclusive,) = sql(torchrun4, "select sum(duration_ns) from activity where kind = 'cpu_op'")[0]
    assert sum(totals) < inclusive
    r = run_cli("query", "--hotspots", "--inclusive", "--db", torchrun4, "--top", "0", "--format", "csv")
    assert sum(int(x["total_ns"]) for x in rows_of(r.stdout)) == inclusive


# ---------------------------------------------------------------------------------------------
# generated: 8 ranks on 2 hosts, one rank slow in one kernel, one host slow overall


def _gen(tmp_path: Path, run_cli: Invoke, db: Path, name: str, **kw: Any) -> KinetoRun:
    gen = generate(tmp_path / name, **kw)
    ingest(run_cli, db, *gen_dirs(gen), run=name)
    return gen


def gen_dirs(gen: KinetoRun) -> list[Path]:
    return sorted(gen.root.glob("rank*"))


@pytest.mark.parametrize("slow_rank", [5, 2], ids=["on-slow-host", "on-fast-host"])
def test_generated_run_names_rank_kernel_and_host(tmp_path: Path, db_path: Path, run_cli: Invoke, slow_rank: int) -> None:
    gen = _gen(tmp_path, run_cli, db_path, "gen8", slow_rank=slow_rank, slow_host=1)
    r = run_cli("query", "--imbalance", "--db", db_path, "--format", "json")
    head = r.stderr.splitlines()[0]
    assert head.startswith(f"likely straggler: rank {slow_rank} (host {gen.host_of(slow_rank)}, local_rank {slow_rank % 4})")
    rows = json.loads(r.stdout)
    top = rows[0]
    assert top["name"] == GEMM and top["slowest_rank"] == slow_rank == top["suspect_rank"]
    # the metrics, recomputed from what the generator wrote (zeros nowhere: every rank runs GEMM)
    t = [gen.totals[(g, GEMM)][1] for g in range(8)]
    mean = sum(t) // 8
    assert (top["mean_per_rank_ns"], top["max_ns"], top["min_ns"]) == (mean, max(t), min(t))
    assert top["imbalance"] == pytest.approx(max(t) / (sum(t) / 8))
    assert top["recoverable_ns"] == max(t) - mean
    m = sum(t) / 8
    assert top["cv"] == pytest.approx(math.sqrt(sum((x - m) ** 2 for x in t) / 8) / m)
    assert top["slowest_host"] == gen.host_of(slow_rank) and top["slowest_local_rank"] == slow_rank % 4
    assert top["calls"] == sum(gen.totals[(g, GEMM)][0] for g in range(8)) and top["missing_ranks"] == ""
    comm = [x for x in rows if x["category"] == "communication"]
    assert [x["name"] for x in comm] == [ALLREDUCE]
    assert comm[0]["fastest_rank"] == comm[0]["suspect_rank"] == slow_rank  # it waits least
    # the nccl:all_reduce host annotations are not counted as waiting: NCCL kernels measure it
    assert "nccl:all_reduce" not in {x["name"] for x in rows}

    r = run_cli("query", "--imbalance", "--by", "host", "--db", db_path, "--format", "json")
    assert r.stderr.startswith("slowest host: gpu-node-01: ")
    hosts = json.loads(r.stdout)
    assert [h["hostname"] for h in hosts] == ["gpu-node-01", "gpu-node-00"]
    for h in hosts:
        members = [g for g in range(8) if gen.host_of(g) == h["hostname"]]
        assert h["ranks"] == 4
        assert h["compute_ns"] == sum(gen.rank_total(g, COMPUTE_NAMES) for g in members) // 4
        assert h["communication_ns"] == sum(gen.rank_total(g, [ALLREDUCE]) for g in members) // 4
    assert hosts[0]["compute_vs_mean"] > 1.05 > hosts[1]["compute_vs_mean"]

    r = run_cli("query", "--imbalance", "--by", "local-rank", "--db", db_path, "--format", "json")
    slots = json.loads(r.stdout)
    assert sorted(s["local_rank"] for s in slots) == [0, 1, 2, 3] and all(s["ranks"] == 2 for s in slots)
    assert slots[0]["local_rank"] == slow_rank % 4 and slots[0]["top_name"] == GEMM
    assert r.stderr.startswith(f"slowest GPU slot (local_rank): local_rank {slow_rank % 4}: ")


def test_generated_stall_found_only_by_inverted_communication(tmp_path: Path, db_path: Path, run_cli: Invoke) -> None:
    """Rank 3 stalls on the CPU: its kernels look like everyone's, but it waits least in the all-reduce."""
    _gen(tmp_path, run_cli, db_path, "stall", slow_rank=None, slow_host=None, stall_rank=3)
    r = run_cli("query", "--imbalance", "--db", db_path, "--format", "csv")
    head = r.stderr.splitlines()[0]
    assert head.startswith("likely straggler: rank 3 ") and "cause: host side" in head
    rows = rows_of(r.stdout)
    assert all(float(x["imbalance"]) < 1.05 for x in rows if x["category"] == "compute")
    r = run_cli("query", "--ranks", "--db", db_path, "--format", "json")
    ranks = json.loads(r.stdout)
    assert min(ranks, key=lambda x: x["communication_ns"])["global_rank"] == 3
    assert r.stderr.startswith("likely straggler: rank 3 ")


def test_generated_steps_hotspots_and_memory(tmp_path: Path, db_path: Path, run_cli: Invoke) -> None:
    gen = _gen(tmp_path, run_cli, db_path, "gen8", slow_rank=5, slow_host=1, steps=3)
    r = run_cli("query", "--steps", "--db", db_path, "--format", "json")
    steps = json.loads(r.stdout)
    assert [s["step"] for s in steps] == [0, 1, 2]
    for s in steps:
        d = [gen.step_ns[(g, s["step"])] for g in range(8)]
        sp = spread(d)
        assert (s["ranks"], s["mean_per_rank_ns"], s["max_ns"], s["min_ns"]) == (8, sp.mean, sp.max, sp.min)
        assert s["slowest_rank"] == sp.argmax and s["fastest_rank"] == sp.argmin
    # synchronous steps: everyone waits, so the step durations are balanced; the verdict is the timeline's
    assert "largest step imbalance 1.00" in r.stderr and r.stderr.startswith("likely straggler: rank 5 ")
    assert [s["waited_on_rank"] for s in steps] == [5, 5, 5]

    r = run_cli("query", "--stragglers", "--db", db_path, "--format", "json")
    timeline = {x["global_rank"]: (x["busy_ns"], x["exposed_comm_ns"]) for x in json.loads(r.stdout)}
    r = run_cli("query", "--ranks", "--db", db_path, "--format", "json")
    for x in json.loads(r.stdout):
        g = x["global_rank"]
        assert x["compute_ns"] == gen.rank_total(g, COMPUTE_NAMES)
        assert x["communication_ns"] == gen.rank_total(g, [ALLREDUCE])
        assert x["memory_ns"] == gen.rank_total(g, ["Memcpy HtoD (Pageable -> Device)"]) > 0
        # busy and exposed communication: the rank's timeline (unions), as --stragglers shows them
        assert (x["busy_ns"], x["exposed_comm_ns"]) == timeline[g]
        assert 0 < x["busy_ns"] + x["exposed_comm_ns"] <= x["compute_ns"] + x["communication_ns"] + x["memory_ns"]
        assert (x["hostname"], x["local_rank"]) == (gen.host_of(g), g % 4)

    r = run_cli("query", "--hotspots", "--db", db_path, "--name", "FLASH_fwd", "--format", "json")
    (hot,) = json.loads(r.stdout)
    calls = sum(gen.totals[(g, ATTN)][0] for g in range(8))
    total = sum(gen.totals[(g, ATTN)][1] for g in range(8))
    all_kernels = sum(v[1] for (g, n), v in gen.totals.items() if n != "Memcpy HtoD (Pageable -> Device)")
    assert (hot["name"], hot["calls"], hot["total_ns"], hot["mean_per_call_ns"], hot["ranks"]) == (ATTN, calls, total, total // calls, 8)
    assert hot["share_pct"] == pytest.approx(100 * total / all_kernels)


def test_lead_rocprof_generator_slow_rank_and_host(tmp_path: Path, db_path: Path, run_cli: Invoke) -> None:
    """The same questions on rocprofv3 CSV rank folders (the other format): rank 5, GEMM, node01."""
    gen = generate_rocprof(tmp_path / "roc", nodes=2, gpus_per_node=4, calls=10, slow_rank=5, slow_host=1)
    ingest(run_cli, db_path, *gen.rank_dirs(), run="roc8")
    r = run_cli("query", "--imbalance", "--db", db_path, "--format", "csv")
    assert r.stderr.startswith("likely straggler: rank 5 ")
    assert rows_of(r.stdout)[0]["name"] == KERNELS[0]
    r = run_cli("query", "--imbalance", "--by", "host", "--db", db_path, "--format", "csv")
    assert r.stderr.startswith("slowest host: node01: ")
    r = run_cli("query", "--imbalance", "--by", "local-rank", "--db", db_path, "--format", "csv")
    assert "have no local_rank: nothing to roll up" in r.stderr  # rocprofv3 CSV files do not say


# ---------------------------------------------------------------------------------------------
# exact numbers on hand-made stores


@pytest.fixture
def hand(db_path: Path) -> Path:
    eng = open_db(str(db_path))
    try:
        ranks = [HandRank(g, f"h{g // 2}", g % 2) for g in range(4)]
        ranks[0].add("kernel", "gemm", 100, 100).add("kernel", "only_on_01", 50)
        ranks[1].add("kernel", "gemm", 300).add("kernel", "only_on_01", 70)
        ranks[2].add("kernel", "gemm", 200).add("memcpy", "Memcpy HtoD", 10)
        ranks[3].add("kernel", "gemm", 200)
        for hr, comm in zip(ranks, (400, 100, 300, 300)):
            hr.add("kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", comm)
        for hr, durs in zip(ranks, ((10, 10, 10, 10), (10, 30, 30, 30), (20, 10, 10, 10), (10, 10, 10, 10))):
            hr.steps = dict(enumerate(durs))
        fill_run(eng, "older", [HandRank(0, "x").add("kernel", "k", 5), HandRank(1, "x").add("kernel", "k", 5)])
        fill_run(eng, "hand", ranks, world_size=5)
    finally:
        eng.dispose()
    return db_path


def test_absent_ranks_count_as_zero_and_are_listed(hand: Path, run_cli: Invoke) -> None:
    r = run_cli("query", "--imbalance", "--db", hand, "--top", "0", "--format", "json")
    rows = {x["name"]: x for x in json.loads(r.stdout)}
    x = rows["only_on_01"]
    assert (x["mean_per_rank_ns"], x["max_ns"], x["min_ns"], x["recoverable_ns"]) == (30, 70, 0, 40)
    assert x["imbalance"] == pytest.approx(70 / 30)
    assert x["missing_ranks"] == "2,3"
    assert (x["fastest_rank"], x["fastest_host"], x["fastest_local_rank"]) == (2, "h1", 0)  # ties: lowest rank
    assert (x["slowest_rank"], x["slowest_host"], x["slowest_local_rank"]) == (1, "h0", 1)
    g = rows["gemm"]
    assert (g["calls"], g["mean_per_rank_ns"], g["max_ns"], g["min_ns"], g["slowest_rank"]) == (5, 225, 300, 200, 1)
    assert g["fastest_rank"] == 0  # 200 ns on ranks 0 (in 2 calls), 2 and 3: ties go to the lowest rank
    assert g["cv"] == pytest.approx(math.sqrt(((200 - 225) ** 2 * 3 + 75**2) / 4) / 225)
    comm = rows["ncclDevKernel_AllReduce_Sum_f32_RING_LL"]
    assert comm["suspect_rank"] == comm["fastest_rank"] == 1
    assert list(rows)[-1] == "ncclDevKernel_AllReduce_Sum_f32_RING_LL"  # communication last
    assert "Memcpy HtoD" not in rows  # default kind: kernels
    assert r.stderr.startswith("likely straggler: rank 1 (host h0, local_rank 1): waits least")
    assert "world_size 5 but 1 rank(s) have no data" in r.stderr and ": 4" in r.stderr


def test_default_run_is_most_recent_and_unknown_run_is_an_error(hand: Path, run_cli: Invoke) -> None:
    r = run_cli("query", "--hotspots", "--db", hand, "--format", "csv")
    assert {x["name"] for x in rows_of(r.stdout)} == {"gemm", "only_on_01", "ncclDevKernel_AllReduce_Sum_f32_RING_LL"}
    r = run_cli("query", "--hotspots", "--db", hand, "--run", "older", "--format", "csv")
    assert [x["name"] for x in rows_of(r.stdout)] == ["k"]
    r = run_cli("query", "--hotspots", "--db", hand, "--run", "nope", ok=False)
    assert r.exit_code == 1
    assert "no run named 'nope'" in r.stderr and "hand, older" in r.stderr


def test_name_filter_top_and_kinds(hand: Path, run_cli: Invoke) -> None:
    r = run_cli("query", "--imbalance", "--db", hand, "--name", "GEM", "--format", "csv")
    assert [x["name"] for x in rows_of(r.stdout)] == ["gemm"]
    r = run_cli("query", "--imbalance", "--db", hand, "--name", "only%", "--format", "csv")
    assert [x["name"] for x in rows_of(r.stdout)] == ["only_on_01"]
    r = run_cli("query", "--imbalance", "--db", hand, "--top", "1", "--format", "csv")
    assert [x["name"] for x in rows_of(r.stdout)] == ["gemm", "ncclDevKernel_AllReduce_Sum_f32_RING_LL"]
    r = run_cli("query", "--hotspots", "--db", hand, "--kind", "gpu", "--format", "csv")
    hot = rows_of(r.stdout)
    assert "Memcpy HtoD" in {x["name"] for x in hot}
    assert sum(float(x["share_pct"]) for x in hot) == pytest.approx(100.0)
    r = run_cli("query", "--hotspots", "--db", hand, "--kind", "kernal", ok=False)
    assert r.exit_code == 2 and "unknown kind 'kernal'" in r.stderr


def test_steps_counts_the_slowest_rank(hand: Path, run_cli: Invoke) -> None:
    r = run_cli("query", "--steps", "--db", hand, "--format", "json")
    steps = json.loads(r.stdout)
    assert [s["slowest_rank"] for s in steps] == [2, 1, 1, 1]
    assert steps[1]["imbalance"] == pytest.approx(30 / 15) and steps[1]["recoverable_ns"] == 15
    assert "longest step (slowest_rank) most often: rank 1 in 3 of 4 steps (then rank 2 in 1)" in r.stderr
    assert all(s["waited_on_rank"] is None for s in steps) and "no collective timeline" in r.stderr
    r = run_cli("query", "--steps", "--db", hand, "--run", "older")
    assert "has no steps" in r.stderr and r.exit_code == 0


def test_rank_split_and_verdict_without_communication(hand: Path, run_cli: Invoke) -> None:
    r = run_cli("query", "--ranks", "--db", hand, "--format", "json")
    got = {x["global_rank"]: (x["compute_ns"], x["communication_ns"], x["memory_ns"]) for x in json.loads(r.stdout)}
    assert got == {0: (250, 400, 0), 1: (370, 100, 0), 2: (200, 300, 10), 3: (200, 300, 0)}
    eng = open_db(str(hand))
    try:
        fill_run(eng, "nocomm", [HandRank(0).add("kernel", "k", 10), HandRank(1).add("kernel", "k", 30)])
        fill_run(eng, "even", [HandRank(0).add("kernel", "k", 100), HandRank(1).add("kernel", "k", 101)])
    finally:
        eng.dispose()
    r = run_cli("query", "--imbalance", "--db", hand, "--run", "nocomm")
    assert r.stderr.startswith("likely straggler: rank 1 (host ?, local_rank ?): the most busy time")
    assert "from per-rank totals: no collective timeline" in r.stderr
    r = run_cli("query", "--imbalance", "--db", hand, "--run", "even")
    assert r.stderr.startswith("no clear straggler")


def test_sql_command(hand: Path, run_cli: Invoke) -> None:
    r = run_cli("sql", "select name, suspect_rank from imbalance_v where run = 'hand' order by name", "--db", hand,
                "--format", "csv")
    assert r.stdout.splitlines() == [
        "name,suspect_rank", "Memcpy HtoD,2", "gemm,1", "ncclDevKernel_AllReduce_Sum_f32_RING_LL,1", "only_on_01,1"
    ]
    r = run_cli("sql", "select nope from run", "--db", hand, ok=False)
    assert r.exit_code == 1 and "SQL error" in r.stderr
    r = run_cli("sql", "delete from summary", "--db", hand, ok=False)  # read-only by default
    assert r.exit_code == 1 and "opened read-only by this command" in r.stderr and "--write" in r.stderr, r.stderr
    assert sql(hand, "select count(*) from summary")[0][0] > 0
    run_cli("sql", "delete from step", "--db", hand, "--write")
    assert sql(hand, "select count(*) from step")[0][0] == 0


def test_usage_errors_and_missing_store(tmp_path: Path, run_cli: Invoke) -> None:
    missing = tmp_path / "none.db"
    r = run_cli("query", "--imbalance", "--db", missing, ok=False)
    assert r.exit_code == 1 and "no profdb store" in r.stderr and not missing.exists()
    for args in (["query"], ["query", "--imbalance", "--hotspots"], ["query", "--steps", "--by", "host"],
                 ["query", "--ranks", "--name", "x"]):
        r = run_cli(*args, "--db", missing, ok=False)
        assert r.exit_code == 2, args
    empty = tmp_path / "empty.db"
    open_db(str(empty)).dispose()
    r = run_cli("query", "--imbalance", "--db", empty, ok=False)
    assert r.exit_code == 1 and "no runs yet" in r.stderr


def test_library_api_and_metrics() -> None:
    s = spread([0, 10, 10, 20])
    assert (s.mean, s.max, s.min, s.recoverable, s.argmax, s.argmin) == (10, 20, 0, 10, 3, 0)
    assert s.imbalance == 2.0 and s.cv == pytest.approx(math.sqrt(50) / 10)
    z = spread([0, 0])
    assert z.imbalance is None and z.cv is None and z.recoverable == 0
    assert spread([5, 7, 7]).argmax == 1  # ties: the first (lowest rank)
    assert queries.parse_kinds("gpu,cpu_op") == ("kernel", "memcpy", "memset", "cpu_op")
    with pytest.raises(QueryError):
        queries.parse_kinds("bogus")
    assert queries.like_pattern("gemm") == "%gemm%" and queries.like_pattern("g%") == "g%"
