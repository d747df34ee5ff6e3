"""The collective timeline (store/collectives.py) and the one verdict (store/verdict.py) on real traces.

Every figure is checked against sums computed here from the raw JSON with json.load and a few lines,
independently of the readers and of the code under test."""

from __future__ import annotations

import csv
import gzip
import json
import tarfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gen_collective_run import generate
from profdb.store.collectives import (
    Analysis,
    Instance,
    Instances,
    RankIdentity,
    RankTimeline,
    analyze,
    summarize_rank,
)
from profdb.store.readers import kineto_json, rocprof_csv
from profdb.store.records import Activity
from profdb.store.verdict import RankTotal, straggler_verdict

DATA = Path(__file__).parent / "data"


def _load(paths: list[Path]) -> tuple[list[RankTimeline], dict[int, RankIdentity]]:
    timelines, ids = [], {}
    for p in paths:
        info = kineto_json.inspect(p)
        rank = info.hint.global_rank
        assert rank is not None
        acts = [a for a in kineto_json.read(p, info) if isinstance(a, Activity)]
        timelines.append(summarize_rank(rank, acts, info.time_base_ns))
        ids[rank] = RankIdentity(info.hint.hostname or "", rank)
    return timelines, ids


def _raw(path: Path) -> dict[str, Any]:
    opener: Any = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f)  # type: ignore[no-any-return]


def _raw_calls(doc: dict[str, Any], cat: str, prefixes: tuple[str, ...]) -> list[tuple[int, int]]:
    """(start_ns, end_ns) of the X events of ``cat`` whose name starts with one of ``prefixes``, in time order."""
    base = doc.get("baseTimeNanoseconds", 0)
    out = [
        (base + round(e["ts"] * 1000), base + round(e["ts"] * 1000) + round(e["dur"] * 1000))
        for e in doc["traceEvents"]
        if e.get("ph") == "X" and e.get("cat") == cat and e["name"].startswith(prefixes)
    ]
    return sorted(out)


def _raw_lasts(calls: dict[int, list[tuple[int, int]]]) -> tuple[list[int], dict[int, int]]:
    """Per k-th call: the rank with the latest start; and per rank the wait it caused."""
    lasts, caused = [], {r: 0 for r in calls}
    for k in range(min(len(v) for v in calls.values())):
        starts = {r: v[k][0] for r, v in calls.items()}
        last = max(starts, key=lambda r: starts[r])
        lasts.append(last)
        caused[last] += sum(starts[last] - s for s in starts.values())
    return lasts, caused


# --- the real 8-rank DLRM job (NCCL, V100, one step) the issue quotes --------------------------------


@pytest.fixture(scope="module")
def dlrm(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    out = tmp_path_factory.mktemp("dlrm")
    with tarfile.open(DATA / "kineto/dlrm_8rank/dlrm_kineto.tar.gz") as tar:
        tar.extractall(out, filter="data")
    return sorted((out / "dlrm_kineto").glob("worker*.json"))


def test_dlrm_rank7_enters_most_collectives_last_and_the_longest_step_is_a_victim(dlrm: list[Path]) -> None:
    # Cross-checked by hand (not a test dependency): HolisticTraceAnalysis 0.5.0's
    # TraceAnalysis(trace_dir=...).get_potential_stragglers(num_candidates=1) on these files names rank 7 too.
    raw = {_raw(p)["distributedInfo"]["rank"]: _raw(p) for p in dlrm}
    kernels = {r: _raw_calls(d, "kernel", ("ncclKernel",)) for r, d in raw.items()}
    raw_lasts, raw_caused = _raw_lasts(kernels)
    assert [len(v) for v in kernels.values()] == [8] * 8
    assert raw_lasts.count(7) == 5  # the issue: rank 7 enters most collectives last

    timelines, ids = _load(dlrm)
    a = analyze(timelines, ids)
    assert a.family == "kernel" and len(a.instances) == 8 and not a.notes
    assert [i.last_rank for i in a.instances] == raw_lasts
    assert {r: x.wait_caused_ns for r, x in a.ranks.items()} == raw_caused
    assert a.ranks[7].last == 5
    # the step: rank 1's ProfilerStep is the longest (the victim that --steps used to name), rank 7 the shortest;
    # the rank the others waited on is 7
    steps = {r: next(e["dur"] for e in d["traceEvents"] if e["name"].startswith("ProfilerStep")) for r, d in raw.items()}
    assert max(steps, key=lambda r: steps[r]) == 1 and min(steps, key=lambda r: steps[r]) == 7
    (step,) = a.steps
    assert (step.step, step.waited_on, step.longest_rank) == (10, 7, 1)
    assert step.wait_caused_ns == raw_caused[7]
    assert step.ranks[7].last == 5 and step.ranks[7].duration_ns == min(x.duration_ns for x in step.ranks.values())
    assert sum(x.wait_suffered_ns for x in step.ranks.values()) == sum(i.wait_total_ns for i in a.instances)
    assert all(0 < x.busy_ns <= x.duration_ns and x.idle_ns == x.duration_ns - x.busy_ns for x in step.ranks.values())
    v = straggler_verdict(a, ids)
    assert v.rank == 7 and v.cause == "host" and v.basis == "timeline", v.line
    assert v.line.startswith("likely straggler: rank 7 (host ?, local_rank 7): entered last at 5 of 8 collectives")
    assert "cause: host side" in v.line


def test_busy_time_is_a_union_not_a_sum_over_streams(data: Path) -> None:
    path = data / "kineto/rank0.json.gz"  # a real A100 rank whose compute kernels overlap on streams 7, 25, 27
    gpu = sorted(
        (e["ts"] * 1000, (e["ts"] + e["dur"]) * 1000)
        for e in _raw(path)["traceEvents"]
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "nccl" not in e["name"].lower()
    )
    union, cur_s, cur_e = 0, gpu[0][0], gpu[0][1]
    for s, e in gpu[1:]:  # a plain sweep, written here on purpose
        if s > cur_e:
            union += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    union += cur_e - cur_s
    info = kineto_json.inspect(path)
    t = summarize_rank(0, [a for a in kineto_json.read(path, info) if isinstance(a, Activity)], info.time_base_ns)
    assert t.work_domain == "device"
    assert t.busy_ns == union == 253_853_000
    assert sum(e - s for s, e in gpu) == 259_418_000  # the sum over streams counts the overlap twice
    assert t.idle_ns == t.span_ns - t.busy_ns


# --- real CPU torchrun job, rank 2 planted with a 3x batch -------------------------------------------


def test_torchrun4_cpu_names_rank2_with_a_compute_cause(data: Path) -> None:
    paths = sorted((data / "kineto/torchrun4_cpu").glob("*.json.gz"))
    raw = {_raw(p)["distributedInfo"]["rank"]: _raw(p) for p in paths}
    calls = {r: _raw_calls(d, "user_annotation", ("gloo:",)) for r, d in raw.items()}
    raw_lasts, raw_caused = _raw_lasts(calls)
    timelines, ids = _load(paths)
    a = analyze(timelines, ids)
    assert a.family == "annotation" and len(a.instances) == 3
    assert [i.last_rank for i in a.instances] == raw_lasts == [2, 3, 2]
    assert {r: x.wait_caused_ns for r, x in a.ranks.items()} == raw_caused
    # one DDP all_reduce per step: the rank waited on per step is that step's last arrival
    assert [(s.step, s.waited_on) for s in a.steps] == [(4, 2), (5, 3), (6, 2)]
    v = straggler_verdict(a, ids)
    assert v.rank == 2 and v.cause == "compute", v.line
    assert v.line.startswith("likely straggler: rank 2 (host vm, local_rank 2): entered last at 2 of 3 collectives")
    assert v.work_ratio is not None and v.work_ratio >= 1.5


def _torchrun_shifted(data: Path, shifted: set[int]) -> tuple[list[RankTimeline], dict[int, RankIdentity]]:
    """The real torchrun job's timelines, the ranks ``shifted`` 5 s later (all on host "vm")."""
    timelines, ids = [], {}
    for p in sorted((data / "kineto/torchrun4_cpu").glob("*.json.gz")):
        info = kineto_json.inspect(p)
        rank = info.hint.global_rank
        assert rank is not None
        acts = [a for a in kineto_json.read(p, info) if isinstance(a, Activity)]
        timelines.append(summarize_rank(rank, acts, info.time_base_ns + (5_000_000_000 if rank in shifted else 0)))
        ids[rank] = RankIdentity(info.hint.hostname or "", rank)
    return timelines, ids


def test_a_same_host_rank_on_a_broken_clock_names_no_rank(data: Path) -> None:
    # the real torchrun job, rank 0's timestamps shifted by 5 s as a clock of its own would: it shares
    # host "vm" with the others, so no offset is estimated for it, and it now enters every collective last
    paths = sorted((data / "kineto/torchrun4_cpu").glob("*.json.gz"))
    timelines, ids = _torchrun_shifted(data, {0})
    a = analyze(timelines, ids)
    assert [i.last_rank for i in a.instances] == [0, 0, 0]  # the broken timeline, taken at face value
    assert a.end_spread_ns is not None and a.end_spread_ns >= 4_900_000_000
    assert a.apart is not None and a.apart in a.notes
    assert a.apart.startswith("collective ends do not line up (median end spread 5.00 s over 3 instances: clocks not "
                              "comparable or collectives not blocking)")
    # the one rank apart, on the clock its host's other ranks share: which, and the likely causes
    assert a.apart.endswith("; rank 0 ends 5.00 s from the others in 3 of 3 instances, on the one clock of host vm "
                            "that rank(s) 1-3 share: its file is likely from another run or profiling window, or "
                            "its time base is wrong"), a.apart
    v = straggler_verdict(a, ids)
    assert v.rank is None and v.line.startswith("no clear straggler: collective ends do not line up"), v.line
    # with totals too: nothing is named from a timeline that cannot be trusted
    totals = [RankTotal(r, 1_000 * (r + 1)) for r in ids]
    assert straggler_verdict(a, ids, totals).rank is None
    # the same run on its own clocks: the ends line up, and the verdict is the one above
    good = analyze(_load(paths)[0], ids)
    assert good.apart is None and good.end_spread_ns is not None and good.end_spread_ns < 5_000_000


def test_the_odd_one_is_found_in_a_sample_of_many_instances(data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run of many instances is looked at evenly spaced (``ODD_ONE_INSTANCES``), and says so."""
    from profdb.store import collectives

    monkeypatch.setattr(collectives, "ODD_ONE_INSTANCES", 1)  # (3 instances: every third one, 1 looked at)
    a = analyze(*_torchrun_shifted(data, {0}))
    assert a.apart is not None and "; rank 0 ends 5.00 s from the others in 1 of 1 instances looked at, " in a.apart


def test_two_ranks_apart_are_not_named_as_the_odd_one(data: Path) -> None:
    """Ranks 0 and 1 both 5 s late: no single rank is apart (the others do not line up without either),
    so none is named as from another run; the ends still do not line up, and no straggler is named."""
    timelines, ids = _torchrun_shifted(data, {0, 1})
    a = analyze(timelines, ids)
    assert a.apart is not None and "from the others" not in a.apart, a.apart
    assert straggler_verdict(a, ids).rank is None


# --- HTA's 2-rank set (2 of 128 ranks of one NCCL job) -----------------------------------------------


def test_hta_two_ranks_rank1_enters_last_at_most_collectives(data: Path) -> None:
    paths = sorted((data / "kineto/hta_trace_filter_2ranks").glob("*.json.gz"))
    raw = {_raw(p)["distributedInfo"]["rank"]: _raw(p) for p in paths}
    kernels = {r: _raw_calls(d, "kernel", ("ncclKernel",)) for r, d in raw.items()}
    raw_lasts, raw_caused = _raw_lasts(kernels)
    timelines, ids = _load(paths)
    a = analyze(timelines, ids)
    assert [i.last_rank for i in a.instances] == raw_lasts
    assert {r: x.wait_caused_ns for r, x in a.ranks.items()} == raw_caused
    assert a.ranks[1].last == raw_lasts.count(1) == 8 and a.ranks[0].last == 2
    v = straggler_verdict(a, ids)
    # 8 of 10 with two ranks is p=0.11 (two-sided by Bonferroni), and rank 1 does not do 1.5x the work
    # before its collectives: the evidence does not single it out, and the verdict must not pretend
    assert v.rank is None and v.line.startswith("no clear straggler: last arrivals spread over 2 rank(s), 2-8 of 10")


# --- clocks: a generated multi-host rocprofv3 run, one host's clock shifted by seconds ----------------


def _rocprof_timelines(run: Any) -> tuple[list[RankTimeline], dict[int, RankIdentity]]:
    timelines, ids = [], {}
    for g, path in sorted(run.files.items()):
        info = rocprof_csv.inspect(path)
        acts = [a for a in rocprof_csv.read(path, info) if isinstance(a, Activity)]
        timelines.append(summarize_rank(g, acts, info.time_base_ns))
        ids[g] = RankIdentity(run.host_of[g], g % 2)
    return timelines, ids


def test_clock_offsets_recovered_within_their_bound_and_arrival_order_kept(tmp_path: Path) -> None:
    plain = generate(tmp_path / "plain", nodes=3, late_rank=3, clock_ns={0: 0, 1: 0, 2: 0})
    shifted = generate(tmp_path / "shifted", nodes=3, late_rank=3, clock_ns={0: 0, 1: 3_250_000_000, 2: -1_700_000_000})
    results = []
    for run in (plain, shifted):
        timelines, ids = _rocprof_timelines(run)
        a = analyze(timelines, ids)
        assert a.family == "kernel" and len(a.instances) == 30 and not a.notes
        for host, true in run.clock_ns.items():
            off = a.clocks.offsets[host]
            assert abs(off.offset_ns - true) <= off.error_ns, (host, off, true)
            assert off.error_ns < 20_000  # collectives end within a few us: the bound is tight
        assert [[r for r, _ in i.arrivals] for i in a.instances] == run.arrival_order
        v = straggler_verdict(a, ids)
        assert v.rank == 3 and v.cause == "host", v.line
        assert "rank 3 (host node01, local_rank 1)" in v.line
        results.append(a)
    assert [i.last_rank for i in results[0].instances] == [i.last_rank for i in results[1].instances]
    bound = 2 * max(o.error_ns for o in results[1].clocks.offsets.values())
    assert all(abs(x.skew_ns - y.skew_ns) <= bound for x, y in zip(results[0].instances, results[1].instances))


def test_compute_straggler_on_a_generated_multi_host_run(tmp_path: Path) -> None:
    run = generate(tmp_path, nodes=2, slow_rank=2)
    timelines, ids = _rocprof_timelines(run)
    v = straggler_verdict(analyze(timelines, ids), ids)
    assert v.rank == 2 and v.cause == "compute", v.line
    assert v.work_ratio is not None and 2.5 < v.work_ratio < 3.5  # the planted 3x GEMM work


def test_unplanted_generated_run_has_no_clear_straggler(tmp_path: Path) -> None:
    run = generate(tmp_path, nodes=2)
    timelines, ids = _rocprof_timelines(run)
    v = straggler_verdict(analyze(timelines, ids), ids)
    assert v.rank is None and v.line.startswith("no clear straggler:"), v.line


def test_a_host_whose_offset_cannot_be_estimated_is_left_out_and_said(tmp_path: Path) -> None:
    run = generate(tmp_path, nodes=2, late_rank=1, clock_ns={0: 0, 1: 2_000_000_000})
    timelines, ids = _rocprof_timelines(run)
    # node01's two ranks never leave a collective together (rank 3's ends 1 ms later): no instance
    # shows when node01 completed a blocking collective, so its clock cannot be placed
    t3 = timelines[3]
    timelines[3] = replace(t3, calls={f: tuple(c._replace(end_ns=c.end_ns + 1_000_000) for c in calls)
                                      for f, calls in t3.calls.items()})
    a = analyze(timelines, ids)
    assert set(a.clocks.offsets) == {"node00"}
    assert any(n.startswith("host node01: no blocking collective in common") for n in a.notes), a.notes
    # still answered for the ranks on a known clock
    assert len(a.instances) == 30 and all({r for r, _ in i.arrivals} == {0, 1} for i in a.instances)
    v = straggler_verdict(a, ids)
    assert v.rank == 1, v.line


# --- bad input: notes, never a traceback ---------------------------------------------------------


def test_single_rank_says_what_is_missing(data: Path) -> None:
    timelines, ids = _load([data / "kineto/nccl_data.json.gz"])
    a = analyze(timelines, ids)
    assert not a.has_timeline
    assert a.notes == ("a single rank: no cross-rank comparison is possible",)
    v = straggler_verdict(a, ids, [RankTotal(0, 10)])
    assert v.rank is None and v.basis == "totals"
    assert v.line == "no clear straggler: 1 rank, nothing to compare (from per-rank totals: a single rank: no cross-rank comparison is possible)"


def test_unmatched_call_counts_are_matched_as_far_as_they_go(data: Path) -> None:
    paths = sorted((data / "kineto/torchrun4_cpu").glob("*.json.gz"))
    timelines, ids = _load(paths)
    t1 = timelines[1]
    cut = {f: calls[:-1] for f, calls in t1.calls.items()}  # rank 1's profile lost its last collective
    timelines[1] = RankTimeline(t1.rank, cut, t1.steps, t1.first_ns, t1.last_ns, t1.work_domain, t1.busy_ns, t1.comm_ns,
                                t1.exposed_comm_ns)
    a = analyze(timelines, ids)
    assert any("ranks made 2-3 calls (rank 0: 3, rank 1: 2, rank 2: 3, rank 3: 3)" in n for n in a.notes), a.notes
    assert len(a.instances) == 3
    assert [len(i.arrivals) for i in a.instances] == [4, 4, 3]
    assert [i.last_rank for i in a.instances] == [2, 3, 2]
    # without rank 1 in the third all_reduce, rank 2 caused 29.1 ms of wait and rank 3 23.5 ms: within
    # the tie ratio, so the verdict says so instead of naming either
    v = straggler_verdict(a, ids)
    assert v.rank is None and v.line.startswith("no clear straggler: ranks 2, 3 tie"), v.line


def test_instances_are_the_kth_calls_in_rank_order_whatever_order_the_ranks_come_in(dlrm: list[Path]) -> None:
    """match_instances (columns sorted and split in numpy: collectives.match_calls) on the real DLRM
    job's 8 ranks given in reverse, with one rank's profile cut short: each instance holds the k-th
    call of its collective of every rank that made one, in rank order, as computed here from the
    timelines' call lists by hand; the ranks' order does not matter."""
    from profdb.store.collectives import match_instances

    timelines, _ids = _load(dlrm)
    t5 = timelines[5]
    timelines[5] = replace(t5, calls={f: calls[: len(calls) - 2] for f, calls in t5.calls.items()})
    m = match_instances(timelines[::-1])
    in_order = match_instances(timelines)
    assert (m.instances, m.notes, sorted(m.ranks)) == (in_order.instances, in_order.notes, list(in_order.ranks))
    assert m.family == "kernel"
    by_hand: dict[tuple[str, str, int], list[tuple[int, int, int]]] = {}
    for t in timelines:
        made: dict[tuple[str, str], int] = {}
        for c in t.calls[m.family]:
            k = made.get((c.group, c.name), 0)
            made[(c.group, c.name)] = k + 1
            by_hand.setdefault((c.group, c.name, k), []).append((t.rank, c.start_ns, c.end_ns))
    expected = {key: calls for key, calls in by_hand.items() if len(calls) >= 2}
    assert len(m.instances) == len(expected) and any(len(v) == 7 for v in expected.values())
    for i in m.instances:
        calls = sorted(expected[(i.group, i.name, i.seq)])
        assert i.ranks == tuple(c[0] for c in calls) and list(i.ranks) == sorted(i.ranks)
        assert i.starts == tuple(c[1] for c in calls) and i.ends == tuple(c[2] for c in calls)
    assert [min(i.starts) for i in m.instances] == sorted(min(i.starts) for i in m.instances)


def test_no_collectives_falls_back_to_totals_and_says_so() -> None:
    timelines = [summarize_rank(r, [Activity("kernel", "gemm", 0, 100 + r)]) for r in range(3)]
    ids = {r: RankIdentity("h", r) for r in range(3)}
    a = analyze(timelines, ids)
    assert not a.has_timeline
    v = straggler_verdict(a, ids, [RankTotal(0, 100), RankTotal(1, 300), RankTotal(2, 100)])
    assert v.basis == "totals" and v.rank == 1
    assert v.line.endswith("(from per-rank totals: no collective calls on any rank (no NCCL/RCCL/gloo kernels, "
                           "annotations, API calls or c10d ops))")
    tie = straggler_verdict(a, ids, [RankTotal(0, 300), RankTotal(1, 300), RankTotal(2, 100)])
    assert tie.rank is None and tie.line.startswith("no clear straggler: ranks 0, 1 tie for the most busy time")


def _two_ranks_taking_turns(lasts: list[int], lateness_ns: int) -> Analysis:
    """Two CPU ranks, one all_reduce per 10 ms block; ``lasts[i]`` arrives ``lateness_ns`` late at block i."""
    acts: dict[int, list[Activity]] = {0: [], 1: []}
    for i, late in enumerate(lasts):
        t = i * 10_000_000
        for r in (0, 1):
            start = t + 5_000_000 + (lateness_ns if r == late else 0)
            acts[r].append(Activity("cpu_op", "aten::mm", start - 5_000_000, 5_000_000, pid=1, tid=1))
            leave = t + 5_000_000 + lateness_ns + 100_000
            acts[r].append(Activity("annotation", "gloo:all_reduce", start, leave - start, pid=1, tid=2))
    ids = {r: RankIdentity("h", r) for r in (0, 1)}
    return analyze([summarize_rank(r, acts[r]) for r in (0, 1)], ids)


def test_ties_are_ties_never_the_lowest_rank() -> None:
    a = _two_ranks_taking_turns([0, 1] * 10, 3_000_000)
    v = straggler_verdict(a, {})
    assert v.rank is None and v.line.startswith("no clear straggler: ranks 0, 1 tie"), v.line


def test_a_rank_always_last_by_a_few_microseconds_is_not_worth_naming() -> None:
    a = _two_ranks_taking_turns([1] * 20, 20_000)
    v = straggler_verdict(a, {})
    assert a.ranks[1].last == 20 and v.rank is None, v.line
    assert "a straggler worth chasing: at least 10% late" in v.line


def test_a_rank_always_last_by_milliseconds_is_named_host_side() -> None:
    v = straggler_verdict(_two_ranks_taking_turns([1] * 20, 3_000_000), {1: RankIdentity("n1", 1)})
    assert v.rank == 1 and v.cause == "host", v.line
    assert v.line.startswith("likely straggler: rank 1 (host n1, local_rank 1): entered last at 20 of 20 collectives")


def _slow_rank_1(work_ns: int, idle_ns: int, blocks: int = 20) -> Analysis:
    """Two CPU ranks, one all_reduce after each block of one op; rank 0's op takes 5 ms, rank 1's
    ``work_ns``, and rank 1 idles ``idle_ns`` before it (a data loader's wait)."""
    acts: dict[int, list[Activity]] = {0: [], 1: []}
    t = 0
    for _ in range(blocks):
        arrive = {0: t + 5_000_000, 1: t + idle_ns + work_ns}
        leave = max(arrive.values()) + 100_000
        for r, work in ((0, 5_000_000), (1, work_ns)):
            acts[r].append(Activity("cpu_op", "aten::mm", arrive[r] - work, work, pid=1, tid=1))
            acts[r].append(Activity("annotation", "gloo:all_reduce", arrive[r], leave - arrive[r], pid=1, tid=2))
        t = leave
    return analyze([summarize_rank(r, acts[r]) for r in (0, 1)], {r: RankIdentity("h", r) for r in (0, 1)})


def _idle_peer(work_ns: int, idle_ns: int, peer_op_ns: int) -> Analysis:
    """Two CPU ranks, one all_reduce per block: rank 0 arrives 1 ms into each block after an op of
    ``peer_op_ns`` (0: no op at all), rank 1 after idling ``idle_ns`` and working ``work_ns``."""
    acts: dict[int, list[Activity]] = {0: [], 1: []}
    t = 0
    for _ in range(20):
        arrive = {0: t + 1_000_000, 1: t + idle_ns + work_ns}
        leave = max(arrive.values()) + 100_000
        if work_ns:
            acts[1].append(Activity("cpu_op", "aten::mm", arrive[1] - work_ns, work_ns, pid=1, tid=1))
        if peer_op_ns:
            acts[0].append(Activity("cpu_op", "aten::fill_", t, peer_op_ns, pid=1, tid=1))
        for r in (0, 1):
            acts[r].append(Activity("annotation", "gloo:all_reduce", arrive[r], leave - arrive[r], pid=1, tid=2))
        t = leave
    return analyze([summarize_rank(r, acts[r]) for r in (0, 1)], {r: RankIdentity("h", r) for r in (0, 1)})


def test_the_cause_never_states_a_ratio_to_others_who_did_no_work() -> None:
    """When the others did no work before their collectives the work ratio is unknown: the line says
    so, and states the extra work in time (it said "it did 0.00x the others' CPU work ... (5 ms more
    per collective ...)"). When they barely worked the ratio is huge, written out, not as 5e+06."""
    ids = {r: RankIdentity("h", r) for r in (0, 1)}
    v = straggler_verdict(_idle_peer(5_000_000, 0, 0), ids)
    assert v.rank == 1 and v.cause == "compute" and v.work_ratio is None, v.line
    assert v.line.endswith("cause: CPU compute: it did CPU work before its collectives where the others did none "
                           "(5.00 ms more per collective, against 4.00 ms late: the extra work explains the lateness)")
    v = straggler_verdict(_idle_peer(1_000_000, 6_000_000, 0), ids)
    assert v.rank == 1 and v.cause == "host", v.line
    assert "idle 5.00 ms longer than the others, against 1.00 ms more CPU work (the others did none)" in v.line
    v = straggler_verdict(_idle_peer(0, 6_000_000, 0), ids)
    assert "with no more CPU work (the others did none)" in v.line, v.line
    v = straggler_verdict(_idle_peer(5_000_000, 0, 1), ids)
    assert v.work_ratio is not None and round(v.work_ratio) == 5_000_000
    assert "cause: CPU compute: it did 5,000,000x the others' CPU work before its collectives" in v.line, v.line
    # (1 ns less than a millisecond more work: 1.00 ms, one formatter for every figure, not "1e+03 us")
    v = straggler_verdict(_idle_peer(1_000_000, 6_000_000, 1), ids)
    assert "against 1.00 ms more CPU work (1,000,000x theirs)" in v.line, v.line


@pytest.mark.parametrize(("work_ms", "idle_ms", "cause"), [
    (8, 10, "host"),     # 1.6x the work, but idle 10 ms more: 3 of its 13 ms late are work (CI's late:0, 23%)
    (16, 0, "compute"),  # 3.2x the work, no idle
    (8, 2, "compute"),   # 1.6x the work, 3 of its 5 ms late
    (6, 0, "compute"),   # 1.2x the work, all of its lateness: below the ratio, the extra work explains it
    (5, 4, "host"),      # the same work, late by its idle time
])
def test_the_cause_is_what_most_of_the_longer_time_before_the_collectives_is(work_ms: int, idle_ms: int,
                                                                              cause: str) -> None:
    v = straggler_verdict(_slow_rank_1(work_ms * 1_000_000, idle_ms * 1_000_000), {})
    assert v.rank == 1 and v.cause == cause, v.line
    assert v.work_ratio == pytest.approx(work_ms / 5)
    more = f"against {work_ms - 5:#.3g} ms more" if work_ms > 5 else "with no more"
    if cause == "host":
        assert (f"cause: host side: before each collective it is idle {idle_ms:#.3g} ms longer than the others, {more} "
                f"CPU work ({work_ms / 5:.2f}x theirs); it reaches them late") in v.line, v.line


# --- what marks a collective, per format -------------------------------------------------------------


def test_kineto_collective_args_give_group_name_and_bytes(data: Path) -> None:
    path = data / "kineto/nccl_data.json.gz"
    raw = [e for e in _raw(path)["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel"
           and e["name"].startswith("ncclKernel")]
    (t,), _ = _load([path])
    calls = t.calls["kernel"]
    assert len(calls) == len(raw) == 21
    assert {(c.group, c.name) for c in calls} == {("0", "allreduce"), ("0", "broadcast")}
    by_start = sorted(raw, key=lambda e: e["ts"])
    size = {"Float": 4, "Long": 8}
    assert [c.bytes for c in calls] == [e["args"]["In msg nelems"] * size[e["args"]["dtype"]] for e in by_start]
    assert [c.seq for c in calls if c.name == "broadcast"] == list(range(6))


@pytest.mark.parametrize("nelems", [4 * 10**18, 2**64 + 5, -3, True])
def test_a_message_size_no_bigint_can_hold_is_unknown(data: Path, tmp_path: Path, nelems: Any) -> None:
    """A collective whose args give a message size no BIGINT holds (4e18 floats: 1.6e19 bytes; a count
    beyond 64 bits), or none at all (negative, a bool), has no size (None) instead of one the store
    refuses: 4e18 was a traceback at the insert. The other calls keep theirs."""
    doc = _raw(data / "kineto/nccl_data.json.gz")
    kernels = sorted((e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel"
                      and e["name"].startswith("ncclKernel")), key=lambda e: e["ts"])
    kernels[0]["args"]["In msg nelems"] = nelems
    path = tmp_path / "nccl_data.json"
    path.write_text(json.dumps(doc))
    (t,), _ = _load([path])
    size = {"Float": 4, "Long": 8}
    assert [c.bytes for c in t.calls["kernel"]] == [None] + [
        e["args"]["In msg nelems"] * size[e["args"]["dtype"]] for e in kernels[1:]]
    # the annotations and c10d ops are families of their own, one call each per collective
    assert len(t.calls["annotation"]) == len(t.calls["cpu_op"]) == 21


def test_rocprofv3_rccl_api_calls_are_collectives_and_setup_calls_are_not(data: Path) -> None:
    path = data / "rocprofv3_csv/rocm-systems_2025-08/rccl_trace.csv"
    with open(path) as f:
        raw = [row for row in csv.DictReader(f) if row["Function"] == "ncclAllReduce"]
    info = rocprof_csv.inspect(path)
    t = summarize_rank(0, [a for a in rocprof_csv.read(path, info) if isinstance(a, Activity)], info.time_base_ns)
    assert set(t.calls) == {"api"}
    assert [(c.name, c.start_ns, c.end_ns) for c in t.calls["api"]] == sorted(
        ("allreduce", int(r["Start_Timestamp"]), int(r["End_Timestamp"])) for r in raw)


def test_nccl_nvtx_ranges_are_annotation_calls() -> None:
    acts = [Activity("annotation", "ncclAllReduce", 100, 50), Activity("annotation", "ncclGroupStart", 90, 1),
            Activity("annotation", "my_range", 0, 500)]
    t = summarize_rank(0, acts)
    assert [(c.family, c.name, c.start_ns) for c in t.calls["annotation"]] == [("annotation", "allreduce", 100)]


def _offsets_directly(instances: list[Instance], hosts: dict[int, str]) -> Any:
    """estimate_offsets as it was written first (each estimate's median recomputed over the aligned
    hosts of its instance): the reference the incremental version must agree with."""
    import statistics

    from profdb.store.collectives import BLOCKING_TOLERANCE_NS, ClockOffset, offset_of

    all_hosts = sorted({hosts[r] for i in instances for r in i.ranks if r in hosts})
    reference = sorted(hosts.items())[0][1]
    known = {reference: ClockOffset(reference, 0, 0, 0)}
    ends = []
    for inst in instances:
        per_host: dict[str, list[int]] = {}
        for r, end in zip(inst.ranks, inst.ends):
            if r in hosts:
                per_host.setdefault(hosts[r], []).append(end)
        row = {h: int(statistics.median(v)) for h, v in per_host.items() if max(v) - min(v) <= BLOCKING_TOLERANCE_NS}
        if len(row) >= 2:
            ends.append(row)
    while True:  # (passes over the hosts not aligned yet, until one aligns none)
        before = len(known)
        for h in (h for h in all_hosts if h not in known):
            est = [row[h] - int(statistics.median([row[k] - known[k].offset_ns for k in row if k in known]))
                   for row in ends if h in row and any(k in known for k in row)]
            if est:
                known[h] = offset_of(h, est)  # (the robust step is shared: only the estimates changed)
        if len(known) == before:
            return known


def test_clock_offsets_are_the_direct_computations_on_random_runs() -> None:
    """estimate_offsets keeps each instance's aligned ends sorted as hosts are aligned (linear in
    hosts x instances, not quadratic in hosts): on 400 random runs (1-9 hosts of 1-4 ranks, varying
    participants, ranks that did not block, hosts sharing nothing with the reference, even and odd
    counts, odd half-nanosecond medians) it gives the offsets, errors and counts of the direct
    computation."""
    import random

    from profdb.store.collectives import BLOCKING_TOLERANCE_NS, estimate_offsets

    rng = random.Random(7)
    aligned_some = 0
    for _ in range(400):
        per_host = [rng.randint(1, 4) for _ in range(rng.randint(1, 9))]
        hosts = {}
        for h, n in enumerate(per_host):
            for _k in range(n):
                hosts[len(hosts)] = f"host{h}"
        ranks = sorted(hosts)
        offset = {f"host{h}": rng.randint(-10**12, 10**12) for h in range(len(per_host))}
        island = {f"host{h}" for h in range(len(per_host)) if h and rng.random() < 0.15}
        instances = Instances()
        for k in range(rng.randint(1, 60)):
            side = [r for r in ranks if (hosts[r] in island) == (rng.random() < 0.2)]
            chosen = tuple(r for r in side if rng.random() < 0.8) or tuple(ranks[:1])
            end = 10**15 + k * 10**7
            ends = tuple(
                end + offset[hosts[r]] + rng.randint(0, 3) * 7 + (
                    BLOCKING_TOLERANCE_NS * 3 if rng.random() < 0.05 else rng.randint(0, 901))
                for r in chosen
            )
            if rng.random() < 0.1:  # (a rank with no identity)
                chosen, ends = chosen + (10**6,), ends + ends[:1]
            instances.add("g", "allreduce", k, chosen, ends, ends, ends, ends, None)
        got = estimate_offsets(instances, hosts).offsets
        want = _offsets_directly(list(instances), hosts)
        assert got == want
        aligned_some += len(want) > 1
    assert aligned_some > 200


def _allreduce_run(ranks: int, calls: int, per_host: int) -> tuple[list[RankTimeline], dict[int, RankIdentity]]:
    """``ranks`` ranks, ``per_host`` a host (each host's clock 1 s apart), each making ``calls``
    all-reduces at epoch-nanosecond times (ints Python does not share)."""
    import random

    from profdb.store.collectives import CollectiveCall

    rng = random.Random(5)
    base = 1_700_000_000_000_000_000
    timelines = []
    for r in range(ranks):
        clock = base + (r // per_host) * 1_000_000_000
        made = tuple(
            CollectiveCall(r, "kernel", "", "allreduce", k, clock + k * 10_000_000 + rng.randint(0, 50_000),
                           clock + k * 10_000_000 + 60_000 + rng.randint(0, 900), 1 << 20,
                           rng.randint(1_000_000, 9_000_000), 10_000_000 + rng.randint(0, 9_999))
            for k in range(calls))
        timelines.append(RankTimeline(r, {"kernel": made}, (), clock, clock + calls * 10_000_000, "device", 1, 1, 1))
    return timelines, {r: RankIdentity(f"host{r // per_host}", r % per_host) for r in range(ranks)}


def test_the_analysis_holds_a_run_s_calls_as_int64_columns() -> None:
    """A run's analysis runs at the end of every ingest, over the whole run: the matched calls are
    int64 columns (~32 bytes a call), not tuples of Python ints (~190 bytes a call, plus ~55 more
    for the arrivals, measured on the code before), so a 1,024-rank job's millions of calls fit in
    an ingesting node. Measured with tracemalloc on 32 ranks x 1,000 all-reduces on 4 hosts."""
    import tracemalloc

    from profdb.store.collectives import analyze_matched, match_instances

    small, small_ids = _allreduce_run(4, 3, 2)  # (what the first run imports and compiles is not measured)
    analyze_matched(small, match_instances(small), small_ids)
    timelines, ids = _allreduce_run(32, 1_000, 8)
    calls = 32 * 1_000
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        m = match_instances(timelines)
        held = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.reset_peak()
        a = analyze_matched(timelines, m, ids)
        added, peak = (x - before - held for x in tracemalloc.get_traced_memory())
    finally:
        tracemalloc.stop()
    assert len(a.instances) == 1_000 and len(a.clocks.offsets) == 4
    assert held / calls < 48, held / calls
    assert added / calls < 24 and peak / calls < 40, (added / calls, peak / calls)


def test_arrivals_past_int64_are_still_exact() -> None:
    """Stored starts and clock offsets are each within int64, but a start minus its host's offset need
    not be (hostile timestamps): the columns then hold Python ints, and every figure is still the
    exact one."""
    from profdb.store.collectives import INT64_MAX, ClockOffset, Clocks, analyze_matched, match_instances

    timelines, ids = _allreduce_run(4, 5, 2)
    far = -INT64_MAX  # host1's clock offset: its arrivals land past INT64_MAX
    clocks = Clocks("host0", {"host0": ClockOffset("host0", 0, 0, 0), "host1": ClockOffset("host1", far, 0, 9)})
    a = analyze_matched(timelines, match_instances(timelines), ids, clocks)
    assert len(a.instances) == 5
    for k, inst in enumerate(a.instances):
        want = {t.rank: t.calls["kernel"][k].start_ns - (far if t.rank >= 2 else 0) for t in timelines}
        assert dict(zip(inst.ranks, inst.times)) == want
        assert inst.latest_ns == max(want.values()) > INT64_MAX
        assert inst.last_rank == max(want, key=lambda r: want[r])
        assert inst.wait_total_ns == sum(inst.latest_ns - t for t in want.values())
    assert a.instances.first_ns() == min(i.first_ns for i in a.instances)
    assert sum(r.wait_caused_ns for r in a.ranks.values()) == sum(i.wait_total_ns for i in a.instances)
    # and a container given calls past int64 keeps them whole
    many = Instances()
    many.add("g", "allreduce", 0, (0, 1), (1, INT64_MAX + 1), (2, INT64_MAX + 2), (0, 0), (1, 1), None)
    many.add("g", "allreduce", 1, (0, 1), (3, 4), (5, 6), (0, 0), (1, 1), 8)
    assert many[0].starts == (1, INT64_MAX + 1) and many[1].ends == (5, 6) and many[1].bytes == 8
    assert many[-1] == many[1] and a.instances[-1] == a.instances[4] and a.instances[-5:] == list(a.instances)
    assert list(many.time_sorted()) == list(many)


def test_a_timeline_crosses_processes_whole(data: Path) -> None:
    """A worker sends its files' timelines to the writer pickled, their calls and steps as plain
    tuples (``RankTimeline.__reduce__``): what arrives equals what was sent, field by field, calls
    and steps still of their types (the analysis reads them by name)."""
    import pickle

    from profdb.store.collectives import CollectiveCall, Step

    timelines, _ids = _load(sorted((data / "kineto/torchrun4_cpu").glob("*.json.gz")))
    assert sum(len(c) for t in timelines for c in t.calls.values()) > 10 and any(t.steps for t in timelines)
    for t in timelines:
        back = pickle.loads(pickle.dumps(t, protocol=pickle.HIGHEST_PROTOCOL))
        assert back == t and back.calls.keys() == t.calls.keys()
        assert all(type(c) is CollectiveCall for some in back.calls.values() for c in some)
        assert all(type(s) is Step for s in back.steps)
        assert [c.busy_before_ns for some in back.calls.values() for c in some] == [
            c.busy_before_ns for some in t.calls.values() for c in some]
