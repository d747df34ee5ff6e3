"""Calibration of the straggler verdict on real jobs recorded here: two ranks under torchrun with CPU
torch and gloo (`profdb record`), one rank per core (tests/apps/straggler_app.py pins them), and
four kinds of run: one rank doing 3x the compute per block, one rank sleeping before each block as
long as a block's compute takes (a slow data loader: its ops are not longer, it is only late), one
doing both (computing twice as long as the other rank, and sleeping: mostly late, host side), no
plant. The planted rank must be named with the right cause in every planted run. An unplanted run
gives "no clear straggler", unless the machine made a straggler: other processes took one rank's
core, or one core of the virtual machine ran slower (seen on CI: both ranks had 99% of their core
and rank 0's blocks took 3.4 ms longer, so it was late at 18 of 21 collectives). So every rank
named, in any run, is checked against clocks the verdict never saw: each rank records, outside the
trace, when it entered each all_reduce (CLOCK_MONOTONIC, one clock for the host's processes) and how
long each block's compute took. By those clocks the named rank must have entered last at most of the
profiled collectives, and its measured extra compute must agree with the cause: "compute" needs it
to explain at least CLOCK_EXPLAINED_MIN (a quarter) of the measured lateness, "host" at most
CLOCK_EXPLAINED_MAX (three quarters); the verdict's own threshold is half (store/verdict.py), the
margins absorb the difference between the trace's op times and the clocks'. And the work ratio its
line states must be the clocks' ratio of compute times (within WORK_RATIO_AGREES). Never retried:
each run is judged once.

The plants are large against a loaded machine's noise (tests/apps/straggler_app.py: ~10 ms blocks, a
wake-up after each all_reduce costs a few ms). Measured at load average 4.4, each rank getting 53-63%
of its core: compute 52% late (work ratio 2.21), late 41%, unplanted runs 2-4% late (the verdict
needs 10%), p=0.38."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from profdb.store.collectives import RankIdentity, analyze, summarize_rank
from profdb.store.readers import kineto_json
from profdb.store.records import Activity
from profdb.store.verdict import Verdict, straggler_verdict

# alone: the plants' margins are against the machine's own noise, not against another test's processes
# on the ranks' cores (under pytest-xdist a compute plant on rank 1 once read "no clear straggler":
# rank 0 had 61% of its core)
pytestmark = [pytest.mark.slow, pytest.mark.alone]

APP = Path(__file__).parent / "apps" / "straggler_app.py"
BIN = Path(sys.executable).parent
TORCHRUN = BIN / "torchrun"

needs_torchrun = pytest.mark.skipif(
    not TORCHRUN.exists(), reason="torchrun not installed in this venv (pip install torch==2.13.0, see .ci/install.d/launchers.sh)"
)


#: blocks (one all_reduce each) per step, as in tests/apps/straggler_app.py; its first step is the
#: profiler's warm-up, so its blocks are not in the trace
LAYERS = 3
#: by the out-of-trace clocks, a rank named for "compute" must have spent at least this share of its
#: lateness in extra compute, a rank named for "host" at most CLOCK_EXPLAINED_MAX
CLOCK_EXPLAINED_MIN = 0.25
CLOCK_EXPLAINED_MAX = 0.75
#: the verdict's work ratio (trace: busy time before each collective) must be within this factor of
#: the clocks' (compute time of each block), both medians over the profiled blocks. Measured: 0.95-1.06
#: in 34 runs of every plant, 24 of them with one or two busy loops on one rank's core.
WORK_RATIO_AGREES = 1.25
#: mixed:R's rank computes 2x as long as the other's last block (tests/apps/straggler_app.py); by the
#: clocks its blocks must be at least this much longer, else the app did not plant what it means to
COMPUTE_RATIO_PLANTED = 1.6


def record(out: Path, plant: str) -> tuple[Verdict, dict[int, dict[str, list[int] | float]]]:
    """Record one 2-rank job; its verdict, and each rank's out-of-trace clocks (straggler_app.train)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROFDB_")}
    argv = [str(TORCHRUN), "--standalone", "--nproc_per_node=2", "--no-python", "--", str(BIN / "profdb"), "record",
            "-o", str(out), "--", sys.executable, str(APP), "--plant", plant, "--steps", "8"]
    p = subprocess.run(argv, check=False, env=env, capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr
    timelines, ids, clocks = [], {}, {}
    for path in sorted(out.glob("rank*/trace.json")):
        info = kineto_json.inspect(path)
        rank = info.hint.global_rank
        assert rank is not None
        timelines.append(summarize_rank(rank, [a for a in kineto_json.read(path, info) if isinstance(a, Activity)],
                                        info.time_base_ns))
        ids[rank] = RankIdentity(info.hint.hostname or "", rank)
        clocks[rank] = json.loads(path.with_name("clocks.json").read_text())
    assert sorted(ids) == [0, 1]
    a = analyze(timelines, ids)
    assert a.family == "annotation" and len(a.instances) == 7 * 3, a.notes  # 7 profiled steps x 3 blocks
    assert a.apart is None, a.apart  # gloo all_reduce blocks and the ranks share the host's clock
    v = straggler_verdict(a, ids)
    if v.rank is not None:
        check_against_clocks(v, clocks)
    return v, clocks


def _per_block(clocks: dict[int, dict[str, list[int] | float]], rank: int) -> tuple[list[int], list[int]]:
    """``rank``'s lateness and extra compute per profiled block against the other rank's, by the
    clocks (ns)."""
    mine, other = clocks[rank], clocks[1 - rank]
    enter, compute, o_enter, o_compute = mine["enter_ns"], mine["compute_ns"], other["enter_ns"], other["compute_ns"]
    assert isinstance(enter, list) and isinstance(compute, list) and isinstance(o_enter, list)
    assert isinstance(o_compute, list) and len(enter) == len(o_enter) == len(compute) == len(o_compute)
    blocks = range(LAYERS, len(enter))
    return [enter[i] - o_enter[i] for i in blocks], [compute[i] - o_compute[i] for i in blocks]


def explained_share(clocks: dict[int, dict[str, list[int] | float]], rank: int) -> float:
    """By the clocks: ``rank``'s median extra compute over its median lateness."""
    late, extra = _per_block(clocks, rank)
    return statistics.median(extra) / statistics.median(late)


def compute_ratio(clocks: dict[int, dict[str, list[int] | float]], rank: int) -> float:
    """By the clocks: the median over profiled blocks of ``rank``'s compute time over the other
    rank's (what the verdict's work ratio measures from the trace)."""
    mine, other = clocks[rank]["compute_ns"], clocks[1 - rank]["compute_ns"]
    assert isinstance(mine, list) and isinstance(other, list) and len(mine) == len(other)
    return statistics.median(mine[i] / other[i] for i in range(LAYERS, len(mine)))


def check_against_clocks(v: Verdict, clocks: dict[int, dict[str, list[int] | float]]) -> None:
    """The rank named entered last at most profiled collectives by the ranks' own clocks, its
    measured extra compute agrees with the cause named (module doc), and the work ratio the line
    states is the clocks' (within WORK_RATIO_AGREES)."""
    assert v.rank is not None
    late, extra = _per_block(clocks, v.rank)
    ratio = compute_ratio(clocks, v.rank)
    seen = (v.line, {"last": sum(x > 0 for x in late), "of": len(late), "late_ms": statistics.median(late) / 1e6,
                     "extra_ms": statistics.median(extra) / 1e6, "compute_ratio": ratio,
                     "cpu_share": {r: c["cpu_share"] for r, c in clocks.items()}})
    assert v.work_ratio is not None and 1 / WORK_RATIO_AGREES <= v.work_ratio / ratio <= WORK_RATIO_AGREES, seen
    assert 2 * sum(x > 0 for x in late) > len(late), seen
    typical_late = statistics.median(late)
    assert typical_late > 0, seen
    if v.cause == "compute":
        assert statistics.median(extra) >= CLOCK_EXPLAINED_MIN * typical_late, seen
    else:
        assert statistics.median(extra) <= CLOCK_EXPLAINED_MAX * typical_late, seen


@needs_torchrun
@pytest.mark.parametrize(("plant", "rank", "cause"), [
    ("compute:1", 1, "compute"),
    ("compute:0", 0, "compute"),
    ("late:0", 0, "host"),
    ("late:1", 1, "host"),
])
def test_planted_straggler_is_named_with_its_cause(tmp_path: Path, plant: str, rank: int, cause: str) -> None:
    v, clocks = record(tmp_path, plant)
    assert v.rank == rank and v.cause == cause, (v.line, {r: c["cpu_share"] for r, c in clocks.items()})
    assert v.line.startswith(f"likely straggler: rank {rank} (host ")
    assert ("cause: CPU compute" if cause == "compute" else "cause: host side") in v.line
    # the clocks check has teeth: it refutes the victim on the same run, and the other cause unless the
    # machine made the run ambiguous (a late rank whose core then ran its blocks 1.3x slower: between a
    # quarter and three quarters of its lateness is extra compute, and both causes pass the clocks)
    with pytest.raises(AssertionError):
        check_against_clocks(replace(v, rank=1 - rank), clocks)
    if not CLOCK_EXPLAINED_MIN <= explained_share(clocks, rank) <= CLOCK_EXPLAINED_MAX:
        with pytest.raises(AssertionError):
            check_against_clocks(replace(v, cause="host" if cause == "compute" else "compute"), clocks)


@needs_torchrun
def test_a_late_rank_whose_work_is_also_longer_is_named_host_side(tmp_path: Path) -> None:
    # rank 1 sleeps before each block as long as its previous block took, and computes twice as long as
    # rank 0's last block took: its ops are longer (a work ratio over COMPUTE_RATIO, which alone named
    # "compute" before), but two thirds of its lateness is the sleep. On CI a late:0 run was that: rank
    # 0's core ran its blocks 1.63x slower after each sleep, and the verdict said "CPU compute" for a
    # rank mostly asleep. (Twice as long by the clock: with 2x the matmuls, another process on rank 0's
    # core once made rank 1's work 0.80x rank 0's on CI, and the run planted no longer work.)
    v, clocks = record(tmp_path, "mixed:1")
    ratio = compute_ratio(clocks, 1)
    seen = (v.line, {r: c["cpu_share"] for r, c in clocks.items()}, ratio)
    assert ratio > COMPUTE_RATIO_PLANTED, seen  # the plant, by the clocks
    assert v.rank == 1 and v.cause == "host", seen
    assert v.work_ratio is not None and v.work_ratio > 1.25, seen
    assert "cause: host side: before each collective it is idle " in v.line and " more CPU work (" in v.line
    # by the clocks: its extra compute is less than half of its lateness
    assert 0 < explained_share(clocks, 1) < 0.5, explained_share(clocks, 1)


@needs_torchrun
@pytest.mark.parametrize("attempt", [1, 2])
def test_unplanted_runs_have_no_clear_straggler(tmp_path: Path, attempt: int) -> None:
    v, _ = record(tmp_path, "none")
    # a rank named was checked against the clocks in record(): the machine made that straggler
    assert v.rank is not None or v.line.startswith("no clear straggler:"), v.line
