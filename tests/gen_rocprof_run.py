"""Generate a multi-rank, multi-host rocprofv3 CSV run (2025 column layout) for tests.

Layout is what `profdb record` + rocprofv3's default %hostname%/%pid% produce:
``<out>/rank0003/<hostname>/<pid>_kernel_trace.csv`` (+ counter_collection, memory_copy_trace).
Returns the exact totals written, so tests compare the store against them, not against constants."""

from __future__ import annotations

import csv
import random
from dataclasses import dataclass, field
from pathlib import Path

KERNEL_HEADER = (
    "Kind,Agent_Id,Queue_Id,Stream_Id,Thread_Id,Dispatch_Id,Kernel_Id,Kernel_Name,Correlation_Id,Start_Timestamp,"
    "End_Timestamp,LDS_Block_Size,Scratch_Size,VGPR_Count,Accum_VGPR_Count,SGPR_Count,Workgroup_Size_X,"
    "Workgroup_Size_Y,Workgroup_Size_Z,Grid_Size_X,Grid_Size_Y,Grid_Size_Z"
).split(",")
COUNTER_HEADER = (
    "Correlation_Id,Dispatch_Id,Agent_Id,Queue_Id,Process_Id,Thread_Id,Grid_Size,Kernel_Id,Kernel_Name,Workgroup_Size,"
    "LDS_Block_Size,Scratch_Size,VGPR_Count,Accum_VGPR_Count,SGPR_Count,Counter_Name,Counter_Value,Start_Timestamp,End_Timestamp"
).split(",")
COPY_HEADER = "Kind,Direction,Stream_Id,Source_Agent_Id,Destination_Agent_Id,Correlation_Id,Start_Timestamp,End_Timestamp".split(",")

KERNELS = [
    "void gemm_kernel<float, 128, 128>(float const*, float const*, float*, int, int, int)",
    "layernorm_fwd_kernel(float*, float const*, int)",
    "void softmax_warp_forward<float, 8>(float*, float const*, int)",
    "elementwise_add_kernel(float*, float const*, float const*, int)",
    "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
]


@dataclass
class GeneratedRun:
    root: Path
    world_size: int
    hosts: list[str]
    #: (global_rank, kernel) -> (calls, total_ns)
    totals: dict[tuple[int, str], tuple[int, int]] = field(default_factory=dict)
    counters: int = 0
    copies: int = 0

    def rank_dirs(self) -> list[Path]:
        return sorted(self.root.glob("rank*"))


def generate(
    root: Path,
    nodes: int = 2,
    gpus_per_node: int = 4,
    calls: int = 20,
    slow_rank: int | None = 5,
    slow_kernel: str = KERNELS[0],
    slow_host: int | None = None,
    seed: int = 7,
    counters: bool = True,
    slow_factor: float = 3.0,
    slow_all_ranks: bool = False,
) -> GeneratedRun:
    """``slow_rank`` runs ``slow_kernel`` ``slow_factor`` (3x) longer; every rank of ``slow_host`` (index)
    runs 1.5x longer. The all-reduce blocks: it ends at one instant on every rank (on each node's own
    clock, shifted 7 ms per node), so it runs *shorter* on the slow rank (it waits less: the others wait
    for it). ``slow_all_ranks``: every rank runs ``slow_kernel`` ``slow_factor`` longer (a regression
    of the kernel itself, not a straggler)."""
    rnd = random.Random(seed)
    world = nodes * gpus_per_node
    hosts = [f"node{n:02d}" for n in range(nodes)]
    run = GeneratedRun(root, world, hosts)
    # the timeline first, on one true clock: every rank runs the kernels in order; the all-reduce blocks,
    # so it ends at the same instant on every rank (the last arrival + its own time); ranks that arrive
    # early wait in it (a longer all-reduce kernel), the slow rank waits least
    clock = [1_000_000_000] * world
    events: list[list[tuple[int, str, int, int]]] = [[] for _ in range(world)]  # (kernel index, name, start, end)
    for _ in range(calls):
        for ki, name in enumerate(KERNELS):
            base = 10_000 * (ki + 1)
            if name.startswith("nccl"):
                end = max(clock) + base + rnd.randint(0, 500)
                for g in range(world):
                    events[g].append((ki, name, clock[g], end))
                    clock[g] = end + 1000
                continue
            for g in range(world):
                node = g // gpus_per_node
                dur = base + rnd.randint(0, 500)
                if (g == slow_rank or slow_all_ranks) and name == slow_kernel:
                    dur = int(dur * slow_factor)
                if slow_host is not None and node == slow_host:
                    dur = dur * 3 // 2
                events[g].append((ki, name, clock[g], clock[g] + dur))
                clock[g] += dur + 1000
    for g in range(world):
        node, local = divmod(g, gpus_per_node)
        host = hosts[node]
        pid = 1000 + g
        d = root / f"rank{g:04d}" / host
        d.mkdir(parents=True, exist_ok=True)
        shift = node * 7_000_000  # per-node BOOTTIME clocks differ
        dispatch = 0
        with open(d / f"{pid}_kernel_trace.csv", "w", newline="") as kf, open(
            d / f"{pid}_counter_collection.csv", "w", newline=""
        ) as cf:
            kw = csv.writer(kf, quoting=csv.QUOTE_NONNUMERIC)
            cw = csv.writer(cf, quoting=csv.QUOTE_NONNUMERIC)
            kw.writerow(KERNEL_HEADER)
            cw.writerow(COUNTER_HEADER)
            for ki, name, start, end in events[g]:
                t, dur = start + shift, end - start
                dispatch += 1
                kw.writerow(
                    ["KERNEL_DISPATCH", f"Agent {local + 2}", 1, 1, pid, dispatch, ki + 1, name, dispatch, t, t + dur,
                     0, 0, 8, 0, 16, 256, 1, 1, 4096, 1, 1]
                )
                if counters:
                    for cname in ("SQ_WAVES", "GRBM_GUI_ACTIVE"):
                        cw.writerow(
                            [dispatch, dispatch, f"Agent {local + 2}", 1, pid, pid, 4096, ki + 1, name, 256, 0, 0, 8, 0,
                             16, cname, float(dispatch * 10), t, t + dur]
                        )
                        run.counters += 1
                c, tot = run.totals.get((g, name), (0, 0))
                run.totals[(g, name)] = (c + 1, tot + dur)
        with open(d / f"{pid}_memory_copy_trace.csv", "w", newline="") as mf:
            mw = csv.writer(mf, quoting=csv.QUOTE_NONNUMERIC)
            mw.writerow(COPY_HEADER)
            t0 = 1_000_000_000 + shift - 5000  # just before the first kernel, on the node's clock
            mw.writerow(["MEMORY_COPY", "MEMORY_COPY_HOST_TO_DEVICE", 0, "Agent 0", f"Agent {local + 2}", 1, t0, t0 + 400])
            run.copies += 1
    return run
