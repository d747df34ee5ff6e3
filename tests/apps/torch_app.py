"""A tiny training-like loop profiled with torch.profiler, used to test `profdb record` for real.

Run under torchrun (or any launcher that sets RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT) it joins a gloo
process group and all-reduces every step, so the Chrome trace has distributedInfo and gloo collectives.
Started without a torch.distributed environment (e.g. under mpirun) it runs alone.

Where the trace goes: ``--trace PATH`` if given (e.g. ``--trace {rank_dir}/trace.json``), else
``$PROFDB_RANK_DIR/trace.json``; with neither (a rank that `profdb record --ranks` leaves unprofiled)
the loop runs unprofiled. ``--marker FILE`` appends "rank <r> ran" to FILE, so a test can see that
unprofiled ranks ran too.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, record_function, schedule


def train(steps: int, distributed: bool, prof: profile | None) -> None:
    torch.manual_seed(int(os.environ.get("RANK", "0")))
    w = torch.randn(64, 64, requires_grad=True)
    x = torch.randn(32, 64)
    for _ in range(steps):
        with record_function("forward"):
            loss = (x @ w).relu().sum()
        with record_function("backward"):
            loss.backward()
        if distributed:
            assert w.grad is not None
            dist.all_reduce(w.grad)
        with torch.no_grad():
            assert w.grad is not None
            w -= 1e-3 * w.grad
            w.grad.zero_()
        if prof is not None:
            prof.step()
    # every rank passes a barrier before this loop's tensors are released (after the trace is written:
    # the profiler's window ended at the last prof.step()). A gloo worker thread drops its reference to
    # the last all_reduce's tensors a little after the call returns; when that reference was the last
    # one and the interpreter had begun to finalize, the thread died taking the GIL and the rank aborted
    # ("terminate called without an active exception", exit 134, about one run in 30 on 2 cores;
    # seen in a core dump: ProcessGroupGloo::runLoop -> ~AsyncAllreduceWork -> THPVariable_dealloc ->
    # take_gil -> pthread_exit during Py_FinalizeEx).
    if distributed:
        dist.barrier()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trace", default=None)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--marker", default=None)
    args = ap.parse_args()

    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1 and "MASTER_ADDR" in os.environ
    if distributed:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if distributed else 0
    trace = args.trace
    if trace is None and os.environ.get("PROFDB_RANK_DIR"):
        trace = str(Path(os.environ["PROFDB_RANK_DIR"]) / "trace.json")
    try:
        if trace is None:
            train(args.steps, distributed, None)
        else:
            out = trace  # the schedule makes prof.step() mark each step as ProfilerStep#N
            with profile(
                activities=[ProfilerActivity.CPU],
                schedule=schedule(wait=0, warmup=1, active=args.steps - 1, repeat=1),
                on_trace_ready=lambda p: p.export_chrome_trace(out),
            ) as prof:
                train(args.steps, distributed, prof)
        if args.marker:
            with open(args.marker, "a") as f:
                f.write(f"rank {rank} ran {'profiled' if trace else 'unprofiled'}\n")
    finally:
        if distributed:
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
