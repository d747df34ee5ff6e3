"""Generate a multi-host rocprofv3 CSV run (kernel_trace, 2025 column layout) whose RCCL kernels behave
like blocking collectives: each rank computes, then enters the collective; nobody leaves before the
last rank arrived, and all leave within a few microseconds of each other.

Every host has its own BOOTTIME clock (``clock_ns[host]`` is added to its ranks' timestamps), so the
test can check that the clock offsets are recovered. Returns the truth the analysis must find: the
per-instance arrival order on the common clock, and the clock offsets."""

from __future__ import annotations

import csv
import random
from dataclasses import dataclass, field
from pathlib import Path

from gen_rocprof_run import KERNEL_HEADER

#: the common clock when the ranks start: days after boot, so that each host's clock (``clock_ns``: seconds
#: apart) is past zero too, as BOOTTIME always is (a start before zero is damage to the ingest)
BOOT_NS = 3 * 86_400 * 10**9

GEMM = "void gemm_kernel<float, 128, 128>(float const*, float const*, float*, int, int, int)"
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


@dataclass
class CollectiveRun:
    root: Path
    hosts: list[str]
    #: global rank -> host
    host_of: dict[int, str]
    #: host -> its clock's offset from the common clock (ns)
    clock_ns: dict[str, int]
    #: per instance: ranks in arrival order on the common clock
    arrival_order: list[list[int]] = field(default_factory=list)
    #: rank -> kernel_trace.csv
    files: dict[int, Path] = field(default_factory=dict)


def generate(
    root: Path,
    nodes: int = 2,
    gpus_per_node: int = 2,
    steps: int = 30,
    late_rank: int | None = None,
    slow_rank: int | None = None,
    clock_ns: dict[int, int] | None = None,
    seed: int = 11,
) -> CollectiveRun:
    """``late_rank`` starts each step 2 ms late (same work); ``slow_rank`` does 3x the GEMM work.
    ``clock_ns``: node index -> clock offset (default: node n is n * 7 ms + n * 1.5 s ahead)."""
    rnd = random.Random(seed)
    world = nodes * gpus_per_node
    hosts = [f"node{n:02d}" for n in range(nodes)]
    offsets = {hosts[n]: (clock_ns or {}).get(n, n * 1_507_000_000) for n in range(nodes)}
    run = CollectiveRun(root, hosts, {g: hosts[g // gpus_per_node] for g in range(world)}, offsets)
    rows: dict[int, list[list[object]]] = {g: [] for g in range(world)}
    t = [BOOT_NS] * world  # common-clock time each rank is ready for its next step
    dispatch = [0] * world
    for _ in range(steps):
        arrival = {}
        for g in range(world):
            start = t[g] + (2_000_000 if g == late_rank else 0) + rnd.randint(0, 40_000)
            work = 1_000_000 * (3 if g == slow_rank else 1) + rnd.randint(0, 30_000)
            rows[g].append(_kernel(g, gpus_per_node, dispatch, GEMM, start, start + work, offsets[run.host_of[g]]))
            arrival[g] = start + work + rnd.randint(1_000, 5_000)  # launch gap before the collective kernel
        leave = max(arrival.values()) + 200_000
        run.arrival_order.append(sorted(arrival, key=lambda g: arrival[g]))
        for g in range(world):
            end = leave + rnd.randint(0, 3_000)  # everyone leaves within a few us
            rows[g].append(_kernel(g, gpus_per_node, dispatch, ALLREDUCE, arrival[g], end, offsets[run.host_of[g]]))
            t[g] = end + 50_000
    for g in range(world):
        host = run.host_of[g]
        d = root / f"rank{g:04d}" / host
        d.mkdir(parents=True, exist_ok=True)
        path = d / f"{1000 + g}_kernel_trace.csv"
        with open(path, "w", newline="") as f:
            w = csv.writer(f, quoting=csv.QUOTE_NONNUMERIC)
            w.writerow(KERNEL_HEADER)
            w.writerows(rows[g])
        run.files[g] = path
    return run


def _kernel(g: int, per_node: int, dispatch: list[int], name: str, start: int, end: int, clock: int) -> list[object]:
    dispatch[g] += 1
    local = g % per_node
    return ["KERNEL_DISPATCH", f"Agent {local + 2}", 1, 1, 1000 + g, dispatch[g], 1 if name == GEMM else 2, name,
            dispatch[g], start + clock, end + clock, 0, 0, 8, 0, 16, 256, 1, 1, 4096, 1, 1]
