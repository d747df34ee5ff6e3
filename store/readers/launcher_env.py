"""Rank identity from a process environment captured by a profiler (rocpd_info_process.environment,
nsys META_DATA_CAPTURE). The variable lists follow FORMATS.md: the first variable found wins.

``HOSTNAME`` is never used: under srun/mpirun it is often the submit host (nsys samples show
``HOSTNAME="login11"`` for a job on ``nid008553``); hostnames come from the profiler's own
node record."""

from __future__ import annotations

from collections.abc import Mapping

from ..records import RankHint

RANK_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID", "HOROVOD_RANK")
LOCAL_VARS = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "HOROVOD_LOCAL_RANK")
WORLD_VARS = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_NTASKS", "HOROVOD_SIZE")
NODE_VARS = ("GROUP_RANK", "NODE_RANK", "OMPI_COMM_WORLD_NODE_RANK", "SLURM_NODEID")
ALL_VARS = RANK_VARS + LOCAL_VARS + WORLD_VARS + NODE_VARS


def _first(env: Mapping[str, str], names: tuple[str, ...]) -> tuple[int | None, str | None]:
    for name in names:
        value = env.get(name)
        if value is None:
            continue
        try:
            return int(str(value).strip().strip('"')), name
        except ValueError:
            continue
    return None, None


def hint_from_env(env: Mapping[str, str], origin: str) -> RankHint:
    """A RankHint with the launcher variables found in ``env``; ``origin`` names the source and
    is completed with the variables used, e.g. ``rocpd_info_process.environment (RANK, LOCAL_RANK)``."""
    hint = RankHint()
    used: list[str] = []
    for attr, names in (
        ("global_rank", RANK_VARS),
        ("local_rank", LOCAL_VARS),
        ("world_size", WORLD_VARS),
        ("node_rank", NODE_VARS),
    ):
        value, name = _first(env, names)
        if name is not None:
            setattr(hint, attr, value)
            used.append(name)
    hint.origin = f"{origin} ({', '.join(used)})" if used else ""
    return hint
