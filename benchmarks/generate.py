"""Deterministic generators of large, realistic profiler outputs for the benchmarks.

Two formats generated, both streamed to disk (nothing is built whole in memory), and the SQLite
formats made of real samples (``generate_sqlite``: Nsight Systems exports and RPD traces, the samples'
tables repeated; ``generate_rocprof_json``: rocprofv3 JSON files, the sample's dispatches repeated):

``csv``     a multi-rank, multi-host rocprofv3 CSV run (2025 column layout, copied from a real
            rocprofv3 output) laid out as rocprofv3 writes it under a per-rank output folder:
            ``OUT/rank0000/<hostname>/<pid>_kernel_trace.csv`` and
            ``OUT/rank0000/<hostname>/<pid>_counter_collection.csv`` (a few counters per dispatch).
``kineto``  PyTorch profiler (Kineto) Chrome traces, one per rank, in the layout of a real trace
            (``distributedInfo`` before ``traceEvents``, ``baseTimeNanoseconds`` after): cpu_op,
            cuda_runtime, kernel events with args (collectives carry their args), gpu_memcpy,
            gpu_memset, ac2g flow events, ProfilerStep#N annotations, metadata events.

Every run is a function of its parameters and the seed: the same command writes the same bytes.
One rank is planted slow in one compute kernel (its time there is ``SLOW_FACTOR`` times the
others'); the other ranks wait for it in their collectives, as on a real job. In the CSV run the
collectives block across ranks (all participants leave together, on the job's common clock, when
the last has arrived) and the planted rank also reaches each of them ``LATE_NS`` late, so profdb's
collective timeline can name it; the Kineto traces only lengthen the others' collective kernels
(their clocks are not aligned across ranks).

    python benchmarks/generate.py csv OUT [--scale 1] [--ranks 32] [--hosts 4] [--counters 3]
    python benchmarks/generate.py kineto OUT [--ranks 8] [--size-mb 300] [--gzip]

Each call writes ``OUT/generated.meta``: parameters, files, row counts and the planted straggler, as
JSON (not named ``.json``: HTA loads every .json in a trace folder).
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import math
import os
import random
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

SEED = 20250806
SLOW_FACTOR = 1.6
#: the CSV run's planted rank also reaches every collective this much later than its own work allows
#: (host side: data loading, host code; about 30% of its typical 0.9 ms between collectives)
LATE_NS = 250_000
DISPATCHES_1X = 1_000_000
META = "generated.meta"
#: bumped whenever the output for the same parameters changes (cached inputs are then rebuilt): the CSV
#: run's (3: blocking collectives, a late rank) and the Kineto traces'
VERSION = 3
KINETO_VERSION = 2

# Real rocprofv3 2025 headers (shared/samples/rocprofv3_csv/rocm-systems_2025-08), byte for byte.
KERNEL_TRACE_HEADER = (
    '"Kind","Agent_Id","Queue_Id","Stream_Id","Thread_Id","Dispatch_Id","Kernel_Id","Kernel_Name",'
    '"Correlation_Id","Start_Timestamp","End_Timestamp","LDS_Block_Size","Scratch_Size","VGPR_Count",'
    '"Accum_VGPR_Count","SGPR_Count","Workgroup_Size_X","Workgroup_Size_Y","Workgroup_Size_Z",'
    '"Grid_Size_X","Grid_Size_Y","Grid_Size_Z"\n'
)
COUNTER_COLLECTION_HEADER = (
    '"Correlation_Id","Dispatch_Id","Agent_Id","Queue_Id","Process_Id","Thread_Id","Grid_Size",'
    '"Kernel_Id","Kernel_Name","Workgroup_Size","LDS_Block_Size","Scratch_Size","VGPR_Count",'
    '"Accum_VGPR_Count","SGPR_Count","Counter_Name","Counter_Value","Start_Timestamp","End_Timestamp"\n'
)
#: counters rocprofv3 users collect most (first ``--counters`` are written per dispatch)
COUNTERS = ("SQ_WAVES", "GRBM_GUI_ACTIVE", "SQ_INSTS_VALU", "SQ_INSTS_SALU", "SQ_INSTS_LDS", "TCC_HIT_sum")


# --------------------------------------------------------------------------- kernel names


@dataclass(frozen=True)
class Kernel:
    """A kernel of the synthetic model: its name and the static attributes of its dispatches."""

    name: str
    kernel_id: int
    comm: bool
    base_ns: int
    lds: int
    scratch: int
    vgpr: int
    accum_vgpr: int
    sgpr: int
    wg: tuple[int, int, int]
    grid: tuple[int, int, int]


_TYPES = ("float", "c10::BFloat16", "c10::Half", "double", "int", "long")
_FUNCTORS = (
    "CUDAFunctor_add", "MulFunctor", "DivFunctor", "CompareEqFunctor", "AbsFunctor", "launch_clamp_scalar",
    "BUnaryFunctor", "FillFunctor", "sigmoid_kernel_cuda", "GeluCUDAKernelImpl", "silu_kernel", "where_kernel_impl",
)


def _elementwise(functor: str, t: str) -> str:
    inner = f"at::native::{functor}<{t}>"
    lam = f"at::native::gpu_kernel_impl_nocast<{inner} >(at::TensorIteratorBase&, {inner} const&)::{{lambda(int)#1}}"
    return f"void at::native::elementwise_kernel<128, 4, {lam}>(int, {lam})"


def _vectorized(functor: str, t: str) -> str:
    return (
        f"void at::native::vectorized_elementwise_kernel<4, at::native::{functor}<{t}>, "
        f"std::array<char*, 3ul> >(int, at::native::{functor}<{t}>, std::array<char*, 3ul>)"
    )


def _reduce(t: str, op: str) -> str:
    inner = (
        f"at::native::ReduceOp<{t}, at::native::func_wrapper_t<{t}, at::native::{op}_functor<{t}, float, {t}>"
        f"::operator()(at::TensorIterator&)::{{lambda(float, float)#1}}>, unsigned int, {t}, 4>"
    )
    return f"void at::native::reduce_kernel<512, 1, {inner} >({inner})"


def _tensile(prec: str, mt: tuple[int, int, int], mi: str) -> str:
    return (
        f"Cijk_Alik_Bljk_{prec}_BH_MT{mt[0]}x{mt[1]}x{mt[2]}_MI{mi}_SN_1LDSB1_AFC1_AFEM1_AFEM1_ASEM1_CLR1_"
        f"CADS0_DTVA0_DTVB0_EPS0_FDSI0_GRPM1_GRVWA8_GRVWB8_GSUAMB_IU1_K1_LBSPPA128_LBSPPB128_LBSPPM0_"
        f"LPA16_LPB16_LPM0_LRVW8_LWPMn1_MIAV1_MIWT4_4_MO40_NTn1_NTA0_NTB0_NTC0_NTD0_NEPBS16_NLCA1_NLCB1_"
        f"ONLL1_PGR2_PLR1_PKA1_SIA3_SS1_SPO0_SRVW0_SSO0_SVW2_TLDS1_USFGROn1_VWA2_VWB2_WSGRA0_WSGRB0_WS64_WG32_8_1"
    )


def _ck_gemm(t: str, m: int, n: int, pipe: int) -> str:
    layouts = "ck::tensor_layout::gemm::RowMajor, ck::tensor_layout::gemm::ColumnMajor, ck::tensor_layout::gemm::RowMajor"
    gg = (
        f"ck::GridwiseGemm_xdl_cshuffle_v3<{layouts}, {t}, {t}, {t}, float, {t}, "
        f"ck::tensor_operation::element_wise::PassThrough, ck::tensor_operation::element_wise::PassThrough, "
        f"ck::tensor_operation::element_wise::PassThrough, (ck::tensor_operation::device::GemmSpecialization)0, "
        f"256, {m}, {n}, 64, 8, 8, 32, 32, 4, 4, ck::Sequence<8, 32, 1>, ck::Sequence<1, 0, 2>, 2, 8, 8, true, "
        f"(ck::BlockGemmPipelineScheduler)0, (ck::BlockGemmPipelineVersion){pipe}>"
    )
    return f"void ck::kernel_gemm_xdl_cshuffle_v3<{gg}, true, (ck::InMemoryDataOperationEnum)0, 1, (ck::TailNumber)2>({gg}::Argument)"


def _fmha(t: str, hdim: int, causal: bool) -> str:
    mask = "ck_tile::SimplifiedGenericAttentionMask<true>" if causal else "ck_tile::SimplifiedGenericAttentionMask<false>"
    return (
        f"void ck_tile::kentry<256, 1, ck_tile::FmhaFwdKernel<ck_tile::BlockFmhaPipelineQRKSVSAsync<"
        f"ck_tile::BlockFmhaPipelineProblem<{t}, {t}, {t}, float, float, {t}, unsigned short, float, {t}, {t}, "
        f"ck_tile::TileFmhaShape<ck_tile::sequence<128, 128, 32, {hdim}, 32, {hdim}>>, false, {mask}, "
        f"ck_tile::TileFmhaTraits<true, true, false, false, false, true, false, false, -1>>>, "
        f"ck_tile::Default2DEpilogue<ck_tile::Default2DEpilogueProblem<float, {t}, true, true>>>>"
        f"(ck_tile::FmhaFwdKernel<...>::Kargs)"
    )


def _misc(t: str) -> list[str]:
    return [
        f"void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, {t}, float, {t}, "
        f"at::native::(anonymous namespace)::SoftMaxForwardEpilogue>({t}*, {t} const*, int)",
        f"void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<{t}, float>"
        f"(int, float, {t} const*, {t} const*, {t} const*, float*, float*, {t}*)",
        f"void at::native::(anonymous namespace)::layer_norm_grad_input_kernel_vectorized<{t}, float>"
        f"({t} const*, {t} const*, float const*, float const*, {t} const*, {t}*, int)",
        f"void at::native::index_elementwise_kernel<128, 4, at::native::gpu_index_kernel<at::native::index_kernel_impl"
        f"<at::native::OpaqueType<{8 if t in ('double', 'long') else 4}> >(at::TensorIteratorBase&, c10::ArrayRef<long>, "
        f"c10::ArrayRef<long>)::{{lambda(char*, char const*, long)#1}}>(at::TensorIteratorBase&, c10::ArrayRef<long>, "
        f"c10::ArrayRef<long>, at::native::index_kernel_impl<at::native::OpaqueType<4> > const&, bool)::{{lambda(int)#1}}>"
        f"(long, at::native::gpu_index_kernel<...>::{{lambda(int)#1}})",
        f"void at::native::(anonymous namespace)::fused_dropout_kernel_vec<{t}, float, unsigned int, 1, 4, bool>"
        f"(at::cuda::detail::TensorInfo<{t} const, unsigned int>, at::cuda::detail::TensorInfo<{t}, unsigned int>, "
        f"at::cuda::detail::TensorInfo<bool, unsigned int>, unsigned int, float, at::PhiloxCudaState)",
    ]


_COLLECTIVES = ("AllReduce", "AllGather", "ReduceScatter", "Broadcast", "SendRecv")
_NCCL_TYPES = ("f32", "bf16", "f16")
_ALGOS = ("RING_LL", "RING_LL128", "TREE_LL", "RING_SIMPLE")


def _collective(coll: str, dt: str, algo: str) -> str:
    op = "" if coll in ("AllGather", "Broadcast", "SendRecv") else "Sum_"
    return f"ncclDevKernel_{coll}_{op}{dt}_{algo}(ncclDevKernelArgsStorage<4096ul>)"


def kernel_names(count: int = 320) -> list[tuple[str, bool]]:
    """``count`` distinct realistic kernel names (long templated C++), with a flag for collectives."""
    compute: list[str] = []
    compute += [_tensile(p, mt, mi) for p, mt, mi in itertools.product(
        ("HHS", "BBS", "SS", "HSS"),
        ((256, 256, 64), (128, 128, 64), (256, 128, 64), (128, 256, 32), (64, 64, 128), (256, 224, 64)),
        ("32x32x8x1", "16x16x16x1", "32x32x16x1"),
    )]
    compute += [_ck_gemm(t, m, n, p) for t, m, n, p in itertools.product(
        ("ck::half_t", "ck::bhalf_t"), (256, 128, 224), (256, 128, 160), (1, 3))]
    compute += [_fmha(t, h, c) for t, h, c in itertools.product(("ck_tile::fp16_t", "ck_tile::bf16_t"), (64, 128, 256), (True, False))]
    compute += [_elementwise(f, t) for f, t in itertools.product(_FUNCTORS, _TYPES)]
    compute += [_vectorized(f, t) for f, t in itertools.product(_FUNCTORS, _TYPES)]
    compute += [_reduce(t, op) for t, op in itertools.product(_TYPES[:4], ("sum", "max", "min", "mean"))]
    for t in _TYPES[:4]:
        compute += _misc(t)
    compute = list(dict.fromkeys(compute))  # a few templates coincide (OpaqueType<4>)
    comm = [_collective(c, d, a) for c, d, a in itertools.product(_COLLECTIVES, _NCCL_TYPES, _ALGOS)]
    n_comm = max(1, count // 12)
    names = [(n, False) for n in compute[: count - n_comm]] + [(n, True) for n in comm[:n_comm]]
    assert len({n for n, _ in names}) == len(names) == count, "not enough distinct kernel names"
    return names


def short_name(name: str, i: int) -> str:
    """A short kernel name (30-60 characters, as hipcc users' own kernels and Tensile's solution
    prefixes are) standing for the long one: the real-layout row shape of ~180 bytes per CSV row."""
    if name.startswith("Cijk_"):
        return name[: name.index("_SN_")]  # precision, macro tile and MFMA shape: still distinct
    if name.startswith("ncclDevKernel_"):
        return name.split("(")[0]
    base = name.removeprefix("void ").split("<")[0].split("(")[0].rsplit("::", 1)[-1]
    return f"{base}<{i % 7}, {i}>(int, float*)"


def make_kernels(count: int, rng: random.Random, short: bool = False) -> list[Kernel]:
    """``count`` kernels; ``short``: short names (``short_name``) instead of long templated C++."""
    kernels = []
    for i, (long_name, comm) in enumerate(kernel_names(count)):
        name = short_name(long_name, i) if short else long_name
        gemm = name.startswith(("Cijk", "void ck::", "void ck_tile"))
        base = math.exp(rng.uniform(math.log(3_000), math.log(400_000 if gemm else 60_000)))
        if comm:
            base = math.exp(rng.uniform(math.log(20_000), math.log(900_000)))
        wg = (256, 1, 1) if gemm or comm else (rng.choice((64, 128, 256, 512)), 1, 1)
        blocks = rng.choice((8, 64, 304, 1024, 4096, 16384))
        kernels.append(Kernel(
            name=name, kernel_id=10 + i, comm=comm, base_ns=int(base),
            lds=rng.choice((0, 0, 8192, 16384, 65536)) if gemm else rng.choice((0, 0, 0, 1024)),
            scratch=rng.choice((0, 0, 0, 256)), vgpr=rng.choice((8, 16, 32, 64, 128, 256)),
            accum_vgpr=rng.choice((0, 0, 4, 64, 128)) if gemm else 0, sgpr=rng.choice((16, 32, 48, 64, 96, 112)),
            wg=wg, grid=(blocks * wg[0], rng.choice((1, 1, 1, 8, 32)), 1),
        ))
    return kernels


def step_sequence(kernels: list[Kernel], length: int, rng: random.Random) -> list[int]:
    """The kernels one training step dispatches, in order: every kernel at least once, hot ones
    (a Zipf-like few) many times, a collective every so often."""
    compute = [i for i, k in enumerate(kernels) if not k.comm]
    comm = [i for i, k in enumerate(kernels) if k.comm]
    seq = list(range(len(kernels)))
    weights = [1.0 / (r + 1) ** 1.1 for r in range(len(compute))]
    while len(seq) < length:
        seq.append(rng.choices(compute, weights)[0] if rng.random() > 0.04 else rng.choice(comm))
    rng.shuffle(seq)
    return seq


def slow_kernel(kernels: list[Kernel], seq: list[int]) -> int:
    """The planted slow kernel: the most dispatched GEMM."""
    counts: dict[int, int] = {}
    for i in seq:
        if kernels[i].name.startswith("Cijk"):
            counts[i] = counts.get(i, 0) + 1
    return max(counts, key=lambda i: (counts[i], -i))


# --------------------------------------------------------------------------- rocprofv3 CSV


@dataclass
class Generated:
    kind: str
    params: dict[str, Any]
    slow_rank: int
    slow_kernel: str
    files: list[str] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)
    bytes: int = 0


def _q(s: str) -> str:
    return '"' + s.replace('"', '""') + '"'


def _hosts_layout(ranks: int, hosts: int, rng: random.Random) -> list[tuple[str, int, int]]:
    """(hostname, local_rank, pid) of each global rank: ranks filled host by host."""
    per_host = math.ceil(ranks / hosts)
    return [(f"mi300x-n{r // per_host:03d}", r % per_host, rng.randrange(100_000, 4_000_000)) for r in range(ranks)]


class _CsvRank:
    """One rank's files and clock while ``generate_csv`` writes all ranks in lock-step."""

    def __init__(self, out: Path, r: int, host: str, local: int, pid: int, host_clock: int, kernels: list[Kernel],
                 counters: int, seed: int) -> None:
        self.rng = random.Random(seed * 1000 + r)
        folder = out / f"rank{r:04d}" / host
        folder.mkdir(parents=True, exist_ok=True)
        agent = 2 + local  # rocprofv3 numbers CPU agents first
        tid = pid + self.rng.randrange(1, 64)
        self.cc_head = [f',"Agent {agent}",1,{pid},{tid},{k.grid[0] * k.grid[1] * k.grid[2]},{k.kernel_id},'
                        f"{_q(k.name)},{k.wg[0] * k.wg[1] * k.wg[2]},{k.lds},{k.scratch},{k.vgpr},{k.accum_vgpr},"
                        f"{k.sgpr}," for k in kernels]
        self.kt_path = folder / f"{pid}_kernel_trace.csv"
        self.cc_path = folder / f"{pid}_counter_collection.csv"
        self.kt_prefix = f'"KERNEL_DISPATCH","Agent {agent}",1,1,{tid},'
        self.kt = open(self.kt_path, "w", encoding="utf-8", newline="")
        self.cc = open(self.cc_path, "w", encoding="utf-8", newline="") if counters else None
        self.kt.write(KERNEL_TRACE_HEADER)
        if self.cc is not None:
            self.cc.write(COUNTER_COLLECTION_HEADER)
        #: this host's clock minus the job's common clock (rocprofv3 writes each node's own clock)
        self.clock = host_clock
        #: now, on the common clock: ranks start their profiles up to 5 ms apart
        self.t = self.rng.randrange(0, 5_000_000)
        self.kbuf: list[str] = []
        self.cbuf: list[str] = []

    def flush(self) -> None:
        self.kt.write("".join(self.kbuf))
        self.kbuf.clear()
        if self.cc is not None and self.cbuf:
            self.cc.write("".join(self.cbuf))
            self.cbuf.clear()

    def close(self) -> None:
        self.flush()
        self.kt.close()
        if self.cc is not None:
            self.cc.close()


def generate_csv(
    out: Path,
    *,
    scale: float = 1.0,
    dispatches: int = DISPATCHES_1X,
    ranks: int = 32,
    hosts: int = 4,
    counters: int = 3,
    names: int = 320,
    step_len: int = 480,
    seed: int = SEED,
    short: bool = False,
) -> Generated:
    """Write a rocprofv3 CSV run of ``dispatches * scale`` kernel dispatches over ``ranks`` ranks;
    ``short``: short kernel names (~180 bytes per kernel_trace row instead of ~540).

    The ranks run as a real data-parallel job does: they dispatch the same kernel sequence, each at
    its own pace (a 0.8-12 us launch gap before every kernel, durations within a few percent), and
    every collective blocks: each rank arrives when its own work before it is done, and all of them
    leave together (within 2 us), when the last one has arrived and the transfer is over. The ranks
    are written in lock-step, collective by collective, so each can be given the common end. The
    planted rank is slower in the planted kernel and reaches every collective ``LATE_NS`` late (host
    side), so it arrives last and the others wait for it. Each host writes its own clock (a different
    base, days apart)."""
    total = int(dispatches * scale)
    per_rank = max(1, total // ranks)
    rng = random.Random(seed)
    kernels = make_kernels(names, rng, short)
    seq = step_sequence(kernels, min(step_len, max(per_rank, len(kernels))), rng)
    slow_k = slow_kernel(kernels, seq)
    slow_r = (ranks * 2) // 3 if ranks > 1 else 0
    layout = _hosts_layout(ranks, hosts, rng)
    gen = Generated("rocprofv3-csv", dict(scale=scale, dispatches=dispatches, ranks=ranks, hosts=hosts,
                    counters=counters, names=names, step_len=step_len, seed=seed, version=VERSION)
                    | ({"short": True} if short else {}), slow_r, kernels[slow_k].name)
    gen.rows = {"kernel_trace": 0, "counter_collection": 0}
    out.mkdir(parents=True, exist_ok=True)
    # static tails of each kernel's rows, formatted once
    kt_name = [f"{k.kernel_id},{_q(k.name)}," for k in kernels]
    kt_tail = [f",{k.lds},{k.scratch},{k.vgpr},{k.accum_vgpr},{k.sgpr},{k.wg[0]},{k.wg[1]},{k.wg[2]},"
               f"{k.grid[0]},{k.grid[1]},{k.grid[2]}\n" for k in kernels]
    host_base = {h: rng.randrange(1_200_000_000_000_000, 3_400_000_000_000_000) for h, _, _ in layout}
    # the transfer time of each collective (from its last arrival to the common end): one job-wide draw
    transfer_rng = random.Random(seed * 1000 - 1)
    states = [_CsvRank(out, r, host, local, pid, host_base[host], kernels, counters, seed)
              for r, (host, local, pid) in enumerate(layout)]
    try:
        for d in range(1, per_rank + 1):
            i = seq[(d - 1) % len(seq)]
            k = kernels[i]
            if k.comm:
                for r, s in enumerate(states):
                    s.t += s.rng.randrange(800, 12_000) + (LATE_NS if r == slow_r else 0)  # the rank arrives
                last = max(s.t for s in states)
                common_end = last + max(1000, int(k.base_ns * (1.0 + 0.04 * transfer_rng.gauss(0.0, 1.0))))
            for r, s in enumerate(states):
                if k.comm:
                    start = s.t
                    end = common_end + s.rng.randrange(0, 2000)  # all leave together, within 2 us
                else:
                    dur = k.base_ns * (1.0 + 0.04 * s.rng.gauss(0.0, 1.0))
                    if i == slow_k and r == slow_r:
                        dur *= SLOW_FACTOR
                    s.t += s.rng.randrange(800, 12_000)
                    start, end = s.t, s.t + max(1000, int(dur))
                s.t = end
                dur_ns = end - start
                start += s.clock
                end += s.clock
                s.kbuf.append(f"{s.kt_prefix}{d},{kt_name[i]}{d},{start},{end}{kt_tail[i]}")
                if counters:
                    waves = max(1, k.grid[0] * k.grid[1] // 64)
                    values = (float(waves), dur_ns * 2.1, waves * dur_ns / 97.0, waves * dur_ns / 611.0,
                              dur_ns / 13.0, dur_ns * 0.37)
                    head = f"{d},{d}{s.cc_head[i]}"
                    for c in range(counters):
                        s.cbuf.append(f'{head}"{COUNTERS[c]}",{values[c]:.6f},{start},{end}\n')
                if len(s.kbuf) >= 512:
                    s.flush()
    finally:
        for s in states:
            s.close()
    for s in states:
        gen.rows["kernel_trace"] += per_rank
        gen.files.append(str(s.kt_path.relative_to(out)))
        gen.bytes += s.kt_path.stat().st_size
        if counters:
            gen.rows["counter_collection"] += per_rank * counters
            gen.files.append(str(s.cc_path.relative_to(out)))
            gen.bytes += s.cc_path.stat().st_size
    (out / META).write_text(json.dumps(asdict(gen), indent=1) + "\n")
    return gen


# --------------------------------------------------------------------------- Kineto JSON

_DEVICE_PROPS = (
    '    {{\n      "id": {i}, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85045379072,\n'
    '      "computeMajor": 9, "computeMinor": 0,\n      "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,\n'
    '      "regsPerBlock": 65536, "warpSize": 32,\n      "sharedMemPerBlock": 49152, "numSms": 132\n'
    '    , "regsPerMultiprocessor": 65536, "sharedMemPerBlockOptin": 232448, "sharedMemPerMultiprocessor": 233472\n    }}'
)

#: (forward op, the aten op under it, how many kernels it launches)
_OPS = (
    ("aten::linear", "aten::addmm", 1), ("aten::layer_norm", "aten::native_layer_norm", 1),
    ("aten::gelu", "aten::gelu", 1), ("aten::add", "aten::add", 1), ("aten::mul", "aten::mul", 1),
    ("aten::softmax", "aten::_softmax", 1), ("aten::dropout", "aten::native_dropout", 1),
    ("aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention", 1),
    ("aten::sum", "aten::sum", 1), ("aten::embedding", "aten::index_select", 1),
    ("AddmmBackward0", "aten::mm", 2), ("NativeLayerNormBackward0", "aten::native_layer_norm_backward", 2),
    ("Optimizer.step#AdamW.step", "aten::_foreach_add_", 2),
)


class _Writer:
    """Buffered text writer over a plain or gzip file, counting bytes."""

    def __init__(self, path: Path, gz: bool) -> None:
        self.f: IO[bytes] = gzip.open(path, "wb", compresslevel=1) if gz else open(path, "wb")  # type: ignore[assignment]
        self.buf: list[str] = []
        self.size = 0
        self.n = 0

    def add(self, s: str) -> None:
        self.buf.append(s)
        self.n += 1
        if self.n >= 2048:
            self.flush()

    def flush(self) -> None:
        data = "".join(self.buf).encode()
        self.size += len(data)
        self.f.write(data)
        self.buf.clear()
        self.n = 0

    def close(self) -> None:
        self.flush()
        self.f.close()


def _x(cat: str, name: str, pid: int, tid: int, ts: float, dur: float, args: str) -> str:
    return (
        f'  {{\n    "ph": "X", "cat": "{cat}", "name": {json.dumps(name)}, "pid": {pid}, "tid": {tid},\n'
        f'    "ts": {ts:.3f}, "dur": {dur:.3f},\n    "args": {{\n      {args}\n    }}\n  }},\n'
    )


def _flow(ph: str, fid: int, pid: int, tid: int, ts: float) -> str:
    tail = ', "bp": "e"' if ph == "f" else ""
    return f'  {{\n    "ph": "{ph}", "id": {fid}, "pid": {pid}, "tid": {tid}, "ts": {ts:.3f},\n    "cat": "ac2g", "name": "ac2g"{tail}\n  }},\n'


def _meta(name: str, pid: int, tid: int, ts: float, key: str, value: str) -> str:
    return (
        f'  {{\n    "name": "{name}", "ph": "M", "ts": {ts:.3f}, "pid": {pid}, "tid": {tid},\n'
        f'    "args": {{\n      "{key}": {value}\n    }}\n  }},\n'
    )


def _kineto_rank(path: Path, rank: int, world: int, target_bytes: int, kernels: list[Kernel], seq: list[int],
                 slow_k: int, slow_r: int, seed: int, gz: bool) -> tuple[int, int, int]:
    """One rank's trace; returns (bytes written uncompressed, complete ("X") events, kernel events)."""
    rng = random.Random(seed * 7919 + rank)
    pid, tid, bwd_tid = rng.randrange(100_000, 4_000_000), 0, 0
    tid = pid
    bwd_tid = pid + rng.randrange(1, 5000)
    device, stream, comm_stream = rank % 8, 7, 40 + rank % 3
    w = _Writer(path, gz)
    ranks_list = json.dumps(list(range(world)))
    w.add('\n{\n  "schemaVersion": 1,\n  "deviceProperties": [\n')
    w.add(",\n".join(_DEVICE_PROPS.format(i=i) for i in range(8)) + "\n  ],\n")
    w.add(
        f'  "distributedInfo": {{"backend": "nccl", "rank": {rank}, "world_size": {world}, "pg_count": 1, '
        f'"pg_config": [{{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", "pg_size": {world}, '
        f'"ranks": {ranks_list}}}], "nccl_version": "2.21.5"}},\n  "traceEvents": [\n'
    )
    ts = 1_000_000.0 + rng.uniform(0, 5000)  # us, relative to baseTimeNanoseconds
    t0 = ts
    # CUPTI/roctracer correlation ids count from process start: a profiling window sees large ones
    corr = rng.randrange(40_000, 60_000)
    ext = rfid = corr // 4
    events = kernel_events = 0
    step = 0
    seq_pos = 0
    while w.size + sum(len(s) for s in w.buf) < target_bytes or step == 0:
        step_start = ts
        step_events: list[str] = []
        ext += 1
        rfid += 1
        step_ext, step_rfid = ext, rfid
        for _ in range(96):  # one op group per launched kernel, 96 per step
            i = seq[seq_pos % len(seq)]
            seq_pos += 1
            k = kernels[i]
            kdur = k.base_ns / 1000.0 * (1.0 + 0.04 * rng.gauss(0.0, 1.0))
            if i == slow_k and rank == slow_r:
                kdur *= SLOW_FACTOR
            elif k.comm and rank != slow_r:
                kdur *= 1.0 + 0.5 * (SLOW_FACTOR - 1.0)
            kdur = max(1.0, kdur)
            ext += 1
            rfid += 1
            corr += 1
            op_ts = ts + rng.uniform(2, 20)
            if k.comm:
                coll = k.name.split("_")[1].lower()
                nelems = rng.choice((53120, 2049000, 6637568, 16777216))
                cargs = (f'"Collective name": "{coll}", "In msg nelems": {nelems}, "Out msg nelems": {nelems}, '
                         f'"Group size": {world}, "dtype": "BFloat16", "In split size": "[]", "Out split size": "[]", '
                         f'"Process Group Name": "0", "Process Group Description": "default_pg", '
                         f'"Process Group Ranks": "{ranks_list}"')
                step_events.append(_x("cpu_op", "record_param_comms", pid, tid, op_ts, 45.0,
                                      f'"External id": {ext},"Record function id": {rfid}, {cargs}, "Ev Idx": {events}'))
                step_events.append(_x("user_annotation", f"nccl:{coll}", pid, tid, op_ts + 1, 40.0,
                                      f'"External id": {ext + 1},"Record function id": {rfid + 1}, "Ev Idx": {events + 1}'))
                ext += 1
                rfid += 1
                events += 2
                rt_ts = op_ts + 20
                stream_k = comm_stream
                kargs_extra = ", " + cargs
            else:
                fwd, aten, _ = _OPS[i % len(_OPS)]
                thread = bwd_tid if "Backward" in fwd else tid
                step_events.append(_x("cpu_op", fwd, pid, thread, op_ts, 30.0 + kdur * 0.05,
                                      f'"External id": {ext},"Record function id": {rfid}, "Sequence number": {ext // 2}, '
                                      f'"Fwd thread id": 1, "Ev Idx": {events}'))
                step_events.append(_x("cpu_op", aten, pid, thread, op_ts + 2, 24.0 + kdur * 0.04,
                                      f'"External id": {ext + 1},"Record function id": {rfid + 1}, "Ev Idx": {events + 1}'))
                ext += 1
                rfid += 1
                events += 2
                rt_ts = op_ts + 8
                stream_k = stream
                kargs_extra = ""
            step_events.append(_x("cuda_runtime", "cudaLaunchKernel", pid, tid, rt_ts, 6.5,
                                  f'"External id": {ext},      "cbid": 211, "correlation": {corr}'))
            step_events.append(_flow("s", corr, pid, tid, rt_ts))
            k_ts = max(ts, rt_ts + 4)
            step_events.append(_x(
                "kernel", k.name, device, stream_k, k_ts, kdur,
                f'"External id": {ext},      "queued": 0, "device": {device}, "context": 1,      "stream": {stream_k}, '
                f'"correlation": {corr},      "registers per thread": {k.vgpr}, "shared memory": {k.lds}, '
                f'"blocks per SM": {k.grid[0] / k.wg[0] / 132:.6f}, "warps per SM": {k.grid[0] / 32 / 132:.6f}, '
                f'"grid": [{k.grid[0] // k.wg[0]}, {k.grid[1]}, {k.grid[2]}], "block": [{k.wg[0]}, {k.wg[1]}, {k.wg[2]}], '
                f'"est. achieved occupancy %": {min(100, k.vgpr // 2)}{kargs_extra}'))
            step_events.append(_flow("f", corr, device, stream_k, k_ts))
            events += 2
            kernel_events += 1
            ts = k_ts + kdur
            if kernel_events % 40 == 0:  # a copy and a memset now and then
                corr += 1
                nbytes = rng.choice((4000, 6291456, 33554432))
                step_events.append(_x("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", device, stream, ts + 1, nbytes / 2.0e4,
                                      f'"External id": {ext},      "device": {device}, "context": 1, "stream": {stream}, '
                                      f'"correlation": {corr}, "bytes": {nbytes}, "memory bandwidth (GB/s)": 20.0'))
                corr += 1
                step_events.append(_x("gpu_memset", "Memset (Device)", device, stream, ts + 2 + nbytes / 2.0e4, 4.9,
                                      f'"External id": {ext},      "device": {device}, "context": 1, "stream": {stream}, '
                                      f'"correlation": {corr}, "bytes": {nbytes}, "memory bandwidth (GB/s)": 1268.4'))
                events += 2
                ts += 8 + nbytes / 2.0e4
        w.add(_x("user_annotation", f"ProfilerStep#{step}", pid, tid, step_start, ts - step_start,
                 f'"External id": {step_ext},"Record function id": {step_rfid}, "Ev Idx": {events}'))
        w.add(_x("gpu_user_annotation", f"ProfilerStep#{step}", device, stream, step_start + 10, ts - step_start - 10,
                 f'"External id": {step_ext}'))
        events += 2
        for s in step_events:
            w.add(s)
        step += 1
        ts += rng.uniform(50, 400)
    w.add(_meta("process_name", pid, 0, t0, "name", '"python3.11"'))
    w.add(_meta("process_labels", pid, 0, t0, "labels", '"CPU"'))
    w.add(_meta("process_name", device, 0, t0, "name", '"python3.11"'))
    w.add(_meta("process_labels", device, 0, t0, "labels", f'"GPU {device}"'))
    for t_, label in ((tid, "thread 1 (python3.11)"), (bwd_tid, "thread 2 (pt_autograd_0)"),
                      (stream, f"stream {stream}"), (comm_stream, f"stream {comm_stream}")):
        p = device if t_ in (stream, comm_stream) else pid
        w.add(_meta("thread_name", p, t_, t0, "name", json.dumps(label)))
    w.add(f'  {{\n    "ph": "X", "cat": "Trace", "ts": {t0:.3f}, "dur": {ts - t0:.3f},\n'
          f'    "pid": "Spans", "tid": "PyTorch Profiler",\n    "name": "PyTorch Profiler (0)",\n'
          f'    "args": {{\n      "Op count": 0\n    }}\n  }},\n')
    events += 1
    w.add(f'  {{\n    "name": "Record Window End", "ph": "i", "s": "g",\n    "pid": "", "tid": "", "ts": {ts:.3f}\n  }}\n  ],\n')
    base_ns = 1_754_000_000_000_000_000 + rng.randrange(0, 10**12)
    w.add(f'  "traceName": "/tmp/traces/rank{rank}.pt.trace.json",\n  "displayTimeUnit": "ms",\n'
          f'  "baseTimeNanoseconds": {base_ns}\n}}')
    w.close()
    return w.size, events, kernel_events


def generate_kineto(out: Path, *, ranks: int = 8, size_mb: float = 300.0, names: int = 320,
                    gz: bool = False, seed: int = SEED) -> Generated:
    """Write ``ranks`` Kineto traces of about ``size_mb`` MB (uncompressed JSON) in total."""
    rng = random.Random(seed + 1)
    kernels = make_kernels(names, rng)
    seq = step_sequence(kernels, 2 * names, rng)
    slow_k = slow_kernel(kernels, seq)
    slow_r = (ranks * 2) // 3 if ranks > 1 else 0
    gen = Generated("kineto", dict(ranks=ranks, size_mb=size_mb, names=names, gzip=gz, seed=seed, version=KINETO_VERSION), slow_r, kernels[slow_k].name)
    gen.rows = {"x_events": 0, "kernels": 0}
    out.mkdir(parents=True, exist_ok=True)
    target = int(size_mb * 1e6 / ranks)
    for r in range(ranks):
        path = out / (f"rank-{r}.json.gz" if gz else f"rank-{r}.json")
        size, events, kevents = _kineto_rank(path, r, ranks, target, kernels, seq, slow_k, slow_r, seed, gz)
        gen.files.append(path.name)
        gen.bytes += size
        gen.rows["x_events"] += events
        gen.rows["kernels"] += kevents
    (out / META).write_text(json.dumps(asdict(gen), indent=1) + "\n")
    return gen


# --------------------------------------------------------------------------- SQLite formats (real samples, repeated)


#: the real Nsight Systems and RPD samples the ``sqlite`` inputs are made of (tests/data; origins in
#: tests/data/SOURCES.txt): their tables, rows repeated with times and ids moved on
REAL_SQLITE = {
    "nsys": Path(__file__).resolve().parents[1] / "tests" / "data" / "nsys_sqlite" / "perlmutter-cloverleaf-cuda.sqlite",
    "rpd": Path(__file__).resolve().parents[1] / "tests" / "data" / "legacy_rpd" / "mytrace.rpd.gz",
}
#: per format: (its event tables, with their id columns moved on by a copy's number x ID_STEP)
_SCALED_TABLES = {
    "nsys": {"CUPTI_ACTIVITY_KIND_KERNEL": ("correlationId",), "CUPTI_ACTIVITY_KIND_RUNTIME": ("correlationId",),
             "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": ("correlationId",), "CUPTI_ACTIVITY_KIND_MEMCPY": ("correlationId",)},
    "rpd": {"rocpd_op": ("id",), "rocpd_api": ("id",), "rocpd_api_ops": ("id", "api_id", "op_id"),
            "rocpd_kernelapi": ("api_ptr_id",), "rocpd_copyapi": ("api_ptr_id",)},
}
ID_STEP = 10**7
SQLITE_VERSION = 1


def generate_sqlite(out: Path, fmt: str, ranks: int = 4, copies: int = 25) -> Generated:
    """A ``ranks``-rank job of ``fmt`` ("nsys": Nsight Systems SQLite exports, "rpd": rpd_tracer traces) made
    of a real sample: per rank ``OUT/rankNNNN/trace.sqlite`` (or ``.rpd``), the sample's event tables
    repeated ``copies`` times one after the other in time (ids moved on, so links between tables hold),
    each rank's copy shifted by its rank in ns (distinct content), an Nsight Systems copy's MPI
    environment saying its rank (PMI_RANK, PMI_SIZE, PMI_LOCAL_RANK, SLURM_LOCALID: one node)."""
    import shutil
    import sqlite3

    out.mkdir(parents=True, exist_ok=True)
    gen = Generated("sqlite", dict(format=fmt, ranks=ranks, copies=copies, version=SQLITE_VERSION), -1, "")
    src = REAL_SQLITE[fmt]
    for r in range(ranks):
        f = out / f"rank{r:04d}" / ("trace.sqlite" if fmt == "nsys" else "trace.rpd")
        f.parent.mkdir(parents=True, exist_ok=True)
        if src.suffix == ".gz":
            with gzip.open(src, "rb") as g, open(f, "wb") as w:
                shutil.copyfileobj(g, w)
        else:
            shutil.copyfile(src, f)
        conn = sqlite3.connect(f)
        tables = _SCALED_TABLES[fmt]
        cols = {t: [row[1] for row in conn.execute(f"PRAGMA table_info({t})")] for t in tables}
        timed = [t for t in tables if {"start", "end"} <= set(cols[t])]
        lo = min(int(conn.execute(f"SELECT min(start) FROM {t}").fetchone()[0]) for t in timed)
        hi = max(int(conn.execute(f"SELECT max(end) FROM {t}").fetchone()[0]) for t in timed)
        span = hi - lo + 1000
        for t, ids in tables.items():
            if t in timed:  # (each rank's file its own content: moved by its rank in ns)
                conn.execute(f"UPDATE {t} SET start = start + {r}, end = end + {r}")
            conn.execute(f"CREATE TEMP TABLE base_{t} AS SELECT * FROM {t}")
            for k in range(1, copies):
                sel = ", ".join(f"{_q(c)} + {k * span}" if c in ("start", "end") else f"{_q(c)} + {k * ID_STEP}"
                                if c in ids else _q(c) for c in cols[t])
                conn.execute(f"INSERT INTO {t} ({', '.join(map(_q, cols[t]))}) SELECT {sel} FROM base_{t}")
            gen.rows[t] = gen.rows.get(t, 0) + int(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0])
        if fmt == "nsys":
            for var, value in (("PMI_RANK", r), ("PMI_SIZE", ranks), ("PMI_LOCAL_RANK", r), ("SLURM_LOCALID", r)):
                conn.execute("UPDATE META_DATA_CAPTURE SET value = ? WHERE name LIKE 'PROCESS_%:ENVIRONMENT_VARIABLE' "
                             "AND value LIKE ?", (f'{var}="{value}"', f"{var}=%"))
        conn.commit()
        conn.close()
        gen.files.append(str(f))
        gen.bytes += f.stat().st_size
    (out / META).write_text(json.dumps(asdict(gen), indent=1) + "\n")
    return gen


#: the real rocprofv3 JSON sample the ``rocprof-json`` job is made of (tests/data/rocprof_json: TraceLens's
#: test data, its origin in SOURCES.txt there)
REAL_ROCPROF_JSON = Path(__file__).resolve().parents[1] / "tests" / "data" / "rocprof_json" / "908_results.json.gz"
ROCPROF_JSON_VERSION = 1


def generate_rocprof_json(out: Path, ranks: int = 4, copies: int = 3) -> Generated:
    """A ``ranks``-rank job of rocprofv3 JSON files made of the real sample: per rank
    ``OUT/rankNNNN/results.json``, the sample's process (metadata, agents, 9,889 kernel symbols...) with
    its kernel dispatches repeated ``copies`` times one after the other in time (correlation and
    dispatch ids moved on by a copy's number x ID_STEP), each rank's copy shifted by its rank in ns;
    written compact, as rocprofv3 writes it."""
    out.mkdir(parents=True, exist_ok=True)
    gen = Generated("rocprof-json", dict(ranks=ranks, copies=copies, version=ROCPROF_JSON_VERSION), -1, "")
    with gzip.open(REAL_ROCPROF_JSON, "rt") as f:
        doc = json.load(f)
    proc = doc["rocprofiler-sdk-tool"][0]
    base = proc["buffer_records"]["kernel_dispatch"]
    lo = min(d["start_timestamp"] for d in base)
    span = max(d["end_timestamp"] for d in base) - lo + 1000
    for r in range(ranks):
        dispatches = []
        for k in range(copies):
            for d in base:
                c = json.loads(json.dumps(d)) if k or r else d
                c["start_timestamp"] = d["start_timestamp"] + k * span + r
                c["end_timestamp"] = d["end_timestamp"] + k * span + r
                c["correlation_id"]["internal"] = d["correlation_id"]["internal"] + k * ID_STEP
                c["dispatch_info"]["dispatch_id"] = d["dispatch_info"]["dispatch_id"] + k * ID_STEP
                dispatches.append(c)
        item = {**proc, "buffer_records": {**proc["buffer_records"], "kernel_dispatch": dispatches}}
        f = out / f"rank{r:04d}" / "results.json"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(json.dumps({"rocprofiler-sdk-tool": [item]}, separators=(",", ":")))
        gen.files.append(str(f))
        gen.rows["kernel_dispatch"] = gen.rows.get("kernel_dispatch", 0) + len(dispatches)
        gen.bytes += f.stat().st_size
    (out / META).write_text(json.dumps(asdict(gen), indent=1) + "\n")
    return gen


# --------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="what", required=True)
    c = sub.add_parser("csv", help="a multi-rank rocprofv3 CSV run")
    c.add_argument("out", type=Path)
    c.add_argument("--scale", type=float, default=1.0, help="multiplies --dispatches (1x, 4x...)")
    c.add_argument("--dispatches", type=int, default=DISPATCHES_1X, help="kernel dispatches at 1x, all ranks")
    c.add_argument("--ranks", type=int, default=32)
    c.add_argument("--hosts", type=int, default=4)
    c.add_argument("--counters", type=int, default=3, choices=range(0, len(COUNTERS) + 1),
                   help="counters per dispatch in counter_collection (0: no counter files)")
    c.add_argument("--short-names", action="store_true", help="short kernel names (~180 B/row, not ~540)")
    c.add_argument("--seed", type=int, default=SEED)
    k = sub.add_parser("kineto", help="Kineto (PyTorch profiler) traces, one per rank")
    k.add_argument("out", type=Path)
    k.add_argument("--ranks", type=int, default=8)
    k.add_argument("--size-mb", type=float, default=300.0, help="total uncompressed size of all ranks' traces")
    k.add_argument("--gzip", action="store_true", help="write .json.gz")
    k.add_argument("--seed", type=int, default=SEED)
    a = p.parse_args(argv)
    if a.what == "csv":
        g = generate_csv(a.out, scale=a.scale, dispatches=a.dispatches, ranks=a.ranks, hosts=a.hosts,
                         counters=a.counters, seed=a.seed, short=a.short_names)
    else:
        g = generate_kineto(a.out, ranks=a.ranks, size_mb=a.size_mb, gz=a.gzip, seed=a.seed)
    print(f"{a.out}: {len(g.files)} files, {g.bytes / 1e6:.1f} MB, rows {g.rows}, "
          f"slow rank {g.slow_rank} in {g.slow_kernel[:60]}...", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
