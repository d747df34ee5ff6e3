"""Generate AMD Metrix results (JSON and CSV) for tests.

No public Metrix output with rank identity exists; these follow /work/shared/FORMATS.md ("Metrix
(AMD IntelliKit) outputs") and Metrix's writers (AMDResearch/intellikit,
metrix/src/metrix/cli/profile_cmd.py: ``_write_json_output`` / ``_write_csv_output``;
metrix/src/metrix/utils/distributed.py: rank variables and the ``.rank0003.`` file suffix):

- JSON: ``{"_rank": {...}, "<key>": {"duration_us": {min, max, avg}, "metrics": {m: {min, max, avg, count, unit}}}}``
- keys: ``kernel`` (aggregated), ``dispatch_<id>:kernel``, ``rank_<r>:`` prefixed in merged files
- CSV: ``global_rank, local_rank, world_size, hostname, dispatch_key, duration_min_us,
  duration_max_us, duration_avg_us, <metric>_min, <metric>_max, <metric>_avg``
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

METRICS = ("memory.l2_hit_rate", "compute.valu_utilization")


@dataclass
class Stat:
    """One Metrix entry: a kernel (aggregated) or one dispatch, on one rank."""

    kernel: str
    rank: int | None = None  # None: no rank_<r>: prefix
    dispatch: int | None = None
    duration_us: tuple[float, float, float] = (1.0, 3.0, 2.0)  # min, max, avg
    metrics: dict[str, tuple[float, float, float, int]] = field(default_factory=dict)  # min, max, avg, count

    @property
    def key(self) -> str:
        key = self.kernel
        if self.dispatch is not None:
            key = f"dispatch_{self.dispatch}:{key}"
        if self.rank is not None:
            key = f"rank_{self.rank}:{key}"
        return key


def rank_block(global_rank: int, world_size: int, hostname: str, local_rank: int = 0, launcher: str = "torchrun") -> dict[str, Any]:
    return {"global_rank": global_rank, "local_rank": local_rank, "world_size": world_size,
            "hostname": hostname, "launcher": launcher}  # fmt: skip


def write_json(path: Path, stats: list[Stat], block: dict[str, Any] | None = None) -> Path:
    data: dict[str, Any] = {}
    if block is not None:
        data["_rank"] = block
    for s in stats:
        lo, hi, avg = s.duration_us
        data[s.key] = {
            "duration_us": {"min": lo, "max": hi, "avg": avg},
            "metrics": {
                m: {"min": v[0], "max": v[1], "avg": v[2], "count": v[3], "unit": "%"} for m, v in s.metrics.items()
            },
        }
    path.write_text(json.dumps(data, indent=2))
    return path


def write_csv(path: Path, stats: list[Stat], identity: dict[int, tuple[int, int, str]] | None = None) -> Path:
    """``identity``: rank -> (local_rank, world_size, hostname) for the rank columns (omitted when None)."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        header = (["global_rank", "local_rank", "world_size", "hostname"] if identity is not None else []) + [
            "dispatch_key", "duration_min_us", "duration_max_us", "duration_avg_us",
        ]  # fmt: skip
        for m in METRICS:
            header += [f"{m}_min", f"{m}_max", f"{m}_avg"]
        w.writerow(header)
        for s in stats:
            row: list[Any] = []
            if identity is not None:
                local, world, host = identity[s.rank if s.rank is not None else 0]
                row += [s.rank, local, world, host]
            key = f"dispatch_{s.dispatch}:{s.kernel}" if s.dispatch is not None else s.kernel
            row += [key, *s.duration_us]
            for m in METRICS:
                v = s.metrics.get(m)
                row += [v[0], v[1], v[2]] if v else [0, 0, 0]
            w.writerow(row)
    return path


def sample_stats(rank: int | None, *, dispatches: bool = False, slow: float = 1.0) -> list[Stat]:
    """Three kernels; in dispatch mode four dispatches of each. ``slow`` scales durations (a straggler)."""
    kernels = ["gemm_kernel<float, 128>(float const*, float*)", "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)", "vector_add"]
    out: list[Stat] = []
    for k, name in enumerate(kernels):
        for d in range(4 if dispatches else 1):
            avg = (10.0 + 5 * k + d) * slow
            out.append(
                Stat(
                    name,
                    rank,
                    (1 + k * 4 + d) if dispatches else None,
                    (avg - 0.5, avg + 1.25, avg),
                    {"memory.l2_hit_rate": (50.0 + k, 60.0 + k, 55.0 + k + d, 3), "compute.valu_utilization": (10.0, 20.0, 15.5, 3)},
                )
            )
    return out
