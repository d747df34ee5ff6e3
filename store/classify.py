"""Categories (compute / communication / memory / other) derived from kind and name, once, at
ingest. Communication is what the imbalance report inverts: NCCL/RCCL kernels and API calls,
gloo/nccl annotations, PyTorch's record_param_comms and c10d ops."""

from __future__ import annotations

import re

_COMM = re.compile(
    r"^(nccl|rccl|ncclDevKernel|ncclKernel|gloo:|nccl:|record_param_comms|c10d::|mpi:|ucc:)"
    r"|nccl|rccl|allreduce|all_reduce|allgather|all_gather|reducescatter|reduce_scatter|alltoall|all_to_all|broadcast_",
    re.IGNORECASE,
)

_MEMORY_KINDS = {"memcpy", "memset"}


def category(kind: str, name: str) -> str:
    if kind in _MEMORY_KINDS:
        return "memory"
    if _COMM.search(name):
        return "communication"
    if kind in ("kernel", "cpu_op", "gpu_annotation", "annotation"):
        return "compute"
    return "other"


def is_communication(name: str) -> bool:
    return _COMM.search(name) is not None
