"""Generate a multi-rank, multi-host PyTorch profiler (Kineto) run for the query tests.

Each rank gets ``<root>/rank000N/rankN_trace.json`` (the newer Kineto layout: distributedInfo and
host_name before ``traceEvents``, relative float-us timestamps, ``baseTimeNanoseconds`` after) and the
rank manifest ``profdb record`` writes (``profdb-rank.json``: hostname, local_rank).

The timing model is a synchronous data-parallel step, so communication behaves as in real jobs:
every rank runs its compute kernels, then an NCCL all-reduce that cannot finish before the last rank
arrives. A rank that arrives late (slow kernels, or a CPU stall that no kernel shows) therefore spends
the *least* time in the all-reduce, and every other rank waits for it. ``ProfilerStep#N`` annotations
span the step on each rank, so step times are nearly equal across ranks, as they are in real runs.

Plants: ``slow_rank`` runs ``slow_kernel`` 3x longer; every compute kernel on ``slow_host`` (node
index) runs 1.5x longer; ``stall_rank`` stalls ``stall_ns`` on the CPU before each step's compute.
Returns the exact per-(rank, kernel) totals written, so tests compare against them, not constants."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

GEMM = "Cijk_Alik_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1_SN_1LDSB0_GRVW8_WG32_8_1"
ATTN = "void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, cutlass::half_t> >(Flash_fwd_params)"
NORM = "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::Half, float>(int, float, c10::Half const*, c10::Half const*, c10::Half const*, float*, float*, c10::Half*)"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::Half>, at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::Half>, at::detail::Array<char*, 3>)"
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
MEMCPY = "Memcpy HtoD (Pageable -> Device)"

#: compute kernels: name, calls per step, base duration (ns)
COMPUTE = [(GEMM, 4, 400_000), (ATTN, 2, 300_000), (NORM, 4, 50_000), (ADD, 6, 20_000)]
COMM_BASE_NS = 200_000
BASE_TIME_NS = 1_790_000_000_000_000_000


@dataclass
class KinetoRun:
    root: Path
    world_size: int
    hosts: list[str]
    steps: int
    #: (global_rank, name) -> (calls, total_ns), for kernels and the memcpy
    totals: dict[tuple[int, str], tuple[int, int]] = field(default_factory=dict)
    #: (global_rank, step) -> duration_ns of ProfilerStep#step
    step_ns: dict[tuple[int, int], int] = field(default_factory=dict)

    def host_of(self, g: int) -> str:
        return self.hosts[g // (self.world_size // len(self.hosts))]

    def rank_total(self, g: int, names: list[str]) -> int:
        return sum(self.totals.get((g, n), (0, 0))[1] for n in names)


def _us(ns: int) -> float:
    return round(ns / 1000, 3)


def generate(
    root: Path,
    nodes: int = 2,
    gpus_per_node: int = 4,
    steps: int = 4,
    slow_rank: int | None = 5,
    slow_kernel: str = GEMM,
    slow_host: int | None = 1,
    stall_rank: int | None = None,
    stall_ns: int = 3_000_000,
    seed: int = 3,
    run_name: str | None = None,
) -> KinetoRun:
    rnd = random.Random(seed)
    world = nodes * gpus_per_node
    hosts = [f"gpu-node-{n:02d}" for n in range(nodes)]
    run = KinetoRun(root, world, hosts, steps)
    events: dict[int, list[dict[str, object]]] = {g: [] for g in range(world)}
    corr = {g: 0 for g in range(world)}

    def add_total(g: int, name: str, dur: int) -> None:
        c, t = run.totals.get((g, name), (0, 0))
        run.totals[(g, name)] = (c + 1, t + dur)

    def kernel(g: int, name: str, start: int, dur: int, extra: dict[str, object] | None = None) -> None:
        corr[g] += 1
        local = g % gpus_per_node
        args: dict[str, object] = {
            "External id": corr[g],
            "device": local,
            "stream": 7,
            "correlation": corr[g],
            "grid": [1024, 1, 1],
            "block": [256, 1, 1],
        }
        args.update(extra or {})
        events[g].append(
            {"ph": "X", "cat": "kernel", "name": name, "pid": local, "tid": 7, "ts": _us(start), "dur": _us(dur), "args": args}
        )
        add_total(g, name, dur)

    step_start = 5_000_000
    for g in range(world):  # one host-to-device copy per rank before the steps
        kernel_dur = 40_000 + rnd.randint(0, 2_000)
        events[g].append(
            {"ph": "X", "cat": "gpu_memcpy", "name": MEMCPY, "pid": g % gpus_per_node, "tid": 7, "ts": _us(1_000_000),
             "dur": _us(kernel_dur), "args": {"device": g % gpus_per_node, "stream": 7, "bytes": 1 << 20}}
        )
        add_total(g, MEMCPY, kernel_dur)
    for s in range(steps):
        arrival: dict[int, int] = {}
        for g in range(world):
            node = g // gpus_per_node
            t = step_start + 30_000 + (stall_ns if g == stall_rank else 0)
            for name, calls, base in COMPUTE:
                for _ in range(calls):
                    dur = base + rnd.randint(-base // 100, base // 100)
                    if g == slow_rank and name == slow_kernel:
                        dur *= 3
                    if node == slow_host:
                        dur = dur * 3 // 2
                    kernel(g, name, t, dur)
                    t += dur + 2_000
            arrival[g] = t
        last = max(arrival.values())
        step_end = last + COMM_BASE_NS + 10_000
        for g in range(world):
            wait = last - arrival[g]
            dur = wait + COMM_BASE_NS + rnd.randint(0, 2_000)
            kernel(g, ALLREDUCE, arrival[g], dur, {"Collective name": "allreduce", "Group size": world, "dtype": "Half"})
            # host side: the step annotation, one aten op per step and the nccl:all_reduce launch range
            sdur = step_end - step_start + rnd.randint(0, 20_000)
            events[g].append(
                {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "pid": 4000 + g, "tid": 4000 + g,
                 "ts": _us(step_start), "dur": _us(sdur), "args": {"External id": 0}}
            )
            run.step_ns[(g, s)] = sdur
            events[g].append(
                {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 4000 + g, "tid": 4000 + g,
                 "ts": _us(step_start + 10_000), "dur": _us(15_000), "args": {}}
            )
            events[g].append(
                {"ph": "X", "cat": "user_annotation", "name": "nccl:all_reduce", "pid": 4000 + g, "tid": 4000 + g,
                 "ts": _us(step_start + 20_000), "dur": _us(8_000), "args": {}}
            )
        step_start = step_end + 50_000

    for g in range(world):
        node, local = divmod(g, gpus_per_node)
        d = root / f"rank{g:04d}"
        d.mkdir(parents=True, exist_ok=True)
        head = {
            "schemaVersion": 1,
            "distributedInfo": {"backend": "nccl", "rank": g, "world_size": world},
            "host_name": hosts[node],
        }
        text = json.dumps(head)[:-1] + ', "traceEvents": ' + json.dumps(events[g]) + ', "displayTimeUnit": "ms", '
        text += f'"baseTimeNanoseconds": {BASE_TIME_NS}' + "}"
        (d / f"rank{g}_trace.json").write_text(text)
        manifest = {
            "profdb_manifest": 1,
            "run": run_name,
            "global_rank": g,
            "local_rank": local,
            "world_size": world,
            "node_rank": node,
            "hostname": hosts[node],
            "launcher": "torchrun",
            "command": ["python", "train.py"],
            "pid": 4000 + g,
            "started_at": None,
            "ended_at": None,
            "exit_code": 0,
        }
        (d / "profdb-rank.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return run
