"""A two-phase training-like loop with an optional planted straggler, for the straggler calibration
tests (tests/test_straggler_calibration.py). Run under torchrun with gloo, profiled by torch.profiler.

Every step does ``LAYERS`` blocks of (matmuls, then a blocking all_reduce), so the trace holds
``steps * LAYERS`` collective instances per rank. ``--plant`` chooses a straggler:

- ``none``: every rank does the same work;
- ``compute:R``: rank R does 3x the matmuls of each block (its ops are longer: a compute straggler);
- ``late:R``: rank R sleeps before each block, as long as its previous block's compute took, or the
  other ranks' if theirs took longer (at least LATE_S): a slow data loader; its ops are the same
  length, it is only late to every collective, by about half its time between collectives however
  fast the machine is at the moment (with its own block time alone, in 3 of 6 late:1 runs with two
  busy loops on rank 0's core, rank 0's blocks outlasted rank 1's sleep and there was no straggler);
- ``mixed:R``: both, rank R computes twice as long as the other ranks' last block took and sleeps as
  long as its own previous block took: its ops are 2x longer, but two thirds of its lateness is the
  sleep (a host-side straggler whose work is also longer: seen on CI as ``late:R`` on a machine where
  the sleeping rank's core then ran 1.6x slower). Twice as long by the clock, not twice the matmuls:
  on CI another process slowed rank 0's blocks ~2.5x, so rank 1's 2x matmuls were 0.80x rank 0's
  work, and the run did not plant what it meant to.

The other ranks' block time comes with each all_reduce: each rank puts its block's compute time in the
first element of the tensor it reduces, and the sum less its own, over their number, is their mean.

Each rank pins itself to one core (``local_rank % cores``) and uses one intra-op thread, so on a
two-core machine the two ranks do not take each other's time. Other processes can still take a
rank's core, and one core of a virtual machine can be slower than the other. So each rank also
measures, outside the trace, what the verdict claims: per block, when it entered the all_reduce
(``time.monotonic_ns``: one clock for every process of the host) and how long its compute took, and
the share of its compute blocks' wall time it got the CPU for (thread CPU time / wall time). It
writes them to ``clocks.json`` beside its trace, so the test can check a verdict against clocks the
verdict never saw. The trace goes to ``$PROFDB_RANK_DIR/trace.json`` (``profdb record``) or
``--trace PATH``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, record_function, schedule

LAYERS = 3
#: matmuls per block for an ordinary rank; a compute straggler does 3x this many. One block takes ~10 ms
#: on one core (1.3 ms with 4 matmuls was too close to a loaded machine's wake-up latency after each
#: all_reduce, a few ms: the planted rank's 2.6 ms extra then made it only 5% late, and not named)
MATMULS = 32
#: matrix size
SIZE = 256
#: the least a late rank sleeps before each block (else: as long as its previous block's compute)
LATE_S = 0.004


def parse_plant(text: str) -> tuple[str, int | None]:
    if text == "none":
        return "none", None
    kind, _, rank = text.partition(":")
    if kind not in ("compute", "late", "mixed") or not rank.isdigit():
        raise SystemExit(f"--plant {text!r}: expected none, compute:R, late:R or mixed:R")
    return kind, int(rank)


def train(steps: int, rank: int, plant: tuple[str, int | None], prof: profile) -> dict[str, object]:
    """The loop; returns its clocks: per block (in order), when this rank entered the all_reduce (ns,
    CLOCK_MONOTONIC) and its compute's wall time (ns), and the share of its compute blocks' wall time
    it had the CPU."""
    torch.manual_seed(rank)
    w = torch.randn(SIZE, SIZE) / SIZE**0.5
    x = torch.randn(SIZE, SIZE)
    kind, who = plant
    planted = who == rank
    matmuls = MATMULS * {"compute": 3, "mixed": 2}.get(kind, 1) if planted else MATMULS
    block_s = LATE_S
    world = dist.get_world_size()
    #: the other ranks' mean compute time in their last block (s), from the last all_reduce; None before it
    peers_s: float | None = None
    wall = cpu = 0.0
    enter: list[int] = []
    compute: list[int] = []
    for _ in range(steps):
        for layer in range(LAYERS):
            if kind in ("late", "mixed") and planted:
                time.sleep(max(LATE_S, block_s, peers_s or 0.0))
            t0, c0 = time.perf_counter(), time.thread_time()
            with record_function(f"block{layer}"):
                y = x
                if kind == "mixed" and planted and peers_s is not None:
                    until = t0 + 2 * peers_s
                    while time.perf_counter() < until:
                        y = torch.tanh(y @ w)
                else:
                    for _ in range(matmuls):
                        y = torch.tanh(y @ w)
            block_s = time.perf_counter() - t0
            wall += block_s
            cpu += time.thread_time() - c0
            compute.append(round(block_s * 1e9))
            grad = y.sum(dim=0)
            grad[0] = block_s
            enter.append(time.monotonic_ns())
            dist.all_reduce(grad)
            peers_s = (float(grad[0]) - block_s) / (world - 1) if world > 1 else None
        prof.step()
    # every rank passes a barrier before this loop's tensors are released, after the profiled window:
    # without it a rank aborted at exit about one run in 30 (why: tests/apps/torch_app.py's train)
    dist.barrier()
    return {"enter_ns": enter, "compute_ns": compute, "cpu_share": cpu / wall if wall > 0 else 1.0}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trace", default=None)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--plant", default="none")
    args = ap.parse_args()
    plant = parse_plant(args.plant)
    torch.set_num_threads(1)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    cores = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cores[local_rank % len(cores)]})
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    trace = args.trace or str(Path(os.environ["PROFDB_RANK_DIR"]) / "trace.json")
    try:
        with profile(
            activities=[ProfilerActivity.CPU],
            schedule=schedule(wait=0, warmup=1, active=args.steps - 1, repeat=1),
            on_trace_ready=lambda p: p.export_chrome_trace(trace),
        ) as prof:
            clocks = train(args.steps, rank, plant, prof)
        Path(trace).with_name("clocks.json").write_text(json.dumps(clocks) + "\n")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # a clean end skips the interpreter's finalization: a gloo worker thread that drops the last
    # reference to a collective's tensors while Py_FinalizeEx runs takes the GIL and dies, and the rank
    # aborts (exit 134). The barrier at the end of the loop made it rarer, not impossible (seen again
    # in a full test run under load: tests/test_rank_end.py's rank 1 exited 134).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
