"""Which rank am I? The distributed context of this process, read from its launcher's environment.

Pure functions over an environment mapping (tests pass plain dicts). Each launcher is a table of the
variables it sets; the first launcher whose rank variable is present wins, and every field is then
read from *that* launcher's variables only, so a job never mixes, say, torchrun's rank with Slurm's
node id. Order and reasons (FORMATS.md "Launcher environment variables"):

1. ``torchrun``: ``RANK`` with ``TORCHELASTIC_RUN_ID`` (torchrun's agent sets both; it also runs
   inside Slurm or MPI allocations, whose variables the workers inherit, so it must come first).
2. ``env``: ``RANK`` without torchelastic (DeepSpeed's launcher, Kubeflow, a job script exporting
   ``RANK=$OMPI_COMM_WORLD_RANK``...): the torch.distributed convention, whoever set it.
3. ``openmpi``: ``OMPI_COMM_WORLD_RANK``. OpenMPI has no node-index variable:
   ``OMPI_COMM_WORLD_NODE_RANK`` is the rank among the processes on this node (checked with
   ``mpirun -np 2``: it is 0 and 1 on one host), so node_rank stays unknown rather than wrong.
4. ``mpich``: ``PMI_RANK`` (MPICH/Intel MPI Hydra: ``MPI_LOCALRANKID``; Cray PALS: ``PMI_LOCAL_RANK``,
   ``PALS_NODEID``). When ``SLURM_PROCID``/``SLURM_NTASKS`` agree with ``PMI_RANK``/``PMI_SIZE`` the
   process was started by srun's PMI plugin: reported as ``slurm`` (which knows local and node ids).
   When they disagree, an mpiexec runs inside an allocation whose batch shell set ``SLURM_PROCID=0``
   for everyone: PMI is right.
5. ``horovod``: ``HOROVOD_RANK`` (horovodrun's gloo mode; ``HOROVOD_CROSS_RANK`` is the node index).
   Before Slurm for the same reason as 4: inside sbatch every worker inherits ``SLURM_PROCID=0``.
6. ``pmix``: ``PMIX_RANK`` alone (PRRTE; srun --mpi=pmix is caught by the agreement rule of 4).
7. ``slurm``: ``SLURM_PROCID`` (srun), ``SLURM_LOCALID``, ``SLURM_NTASKS``/``SLURM_NPROCS``, ``SLURM_NODEID``.
8. ``single``: none of these: rank 0 of 1.

The hostname is ``socket.gethostname()``, never ``$HOSTNAME`` (it can be the submit host).
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import RankIdentityError

LAUNCHERS = ("torchrun", "env", "openmpi", "mpich", "horovod", "pmix", "slurm", "single")


@dataclass(frozen=True)
class LauncherVars:
    """The environment variables one launcher sets, each list tried in order."""

    name: str
    rank: tuple[str, ...]
    local_rank: tuple[str, ...] = ()
    world_size: tuple[str, ...] = ()
    node_rank: tuple[str, ...] = ()
    marker: tuple[str, ...] = ()  # all must be present too (told apart from look-alikes)


TORCHRUN = LauncherVars(
    "torchrun", ("RANK",), ("LOCAL_RANK",), ("WORLD_SIZE",), ("GROUP_RANK",), marker=("TORCHELASTIC_RUN_ID",)
)
TORCH_ENV = LauncherVars("env", ("RANK",), ("LOCAL_RANK",), ("WORLD_SIZE",), ("GROUP_RANK", "NODE_RANK"))
OPENMPI = LauncherVars(
    "openmpi", ("OMPI_COMM_WORLD_RANK",), ("OMPI_COMM_WORLD_LOCAL_RANK",), ("OMPI_COMM_WORLD_SIZE",)
)
MPICH = LauncherVars(
    "mpich", ("PMI_RANK",), ("MPI_LOCALRANKID", "PMI_LOCAL_RANK"), ("PMI_SIZE",), ("PALS_NODEID",)
)
HOROVOD = LauncherVars(
    "horovod", ("HOROVOD_RANK",), ("HOROVOD_LOCAL_RANK",), ("HOROVOD_SIZE",), ("HOROVOD_CROSS_RANK",)
)
PMIX = LauncherVars("pmix", ("PMIX_RANK",), (), ("PMIX_SIZE",))
SLURM = LauncherVars(
    "slurm", ("SLURM_PROCID",), ("SLURM_LOCALID",), ("SLURM_NTASKS", "SLURM_NPROCS"), ("SLURM_NODEID",)
)

#: Detection order (see the module docstring for why).
ORDER: tuple[LauncherVars, ...] = (TORCHRUN, TORCH_ENV, OPENMPI, MPICH, HOROVOD, PMIX, SLURM)


@dataclass(frozen=True)
class LaunchContext:
    """Who this process is in its job. ``sources`` maps each field to the variable it came from."""

    launcher: str
    global_rank: int
    local_rank: int | None
    world_size: int | None
    node_rank: int | None
    hostname: str
    sources: Mapping[str, str] = field(default_factory=dict)
    restart_count: int = 0  # torchrun's TORCHELASTIC_RESTART_COUNT: 1 on the first restart of the workers

    def as_dict(self) -> dict[str, Any]:
        return {
            "launcher": self.launcher,
            "global_rank": self.global_rank,
            "local_rank": self.local_rank,
            "world_size": self.world_size,
            "node_rank": self.node_rank,
            "hostname": self.hostname,
            "restart_count": self.restart_count,
            "sources": dict(self.sources),
        }


def _int_var(env: Mapping[str, str], name: str) -> int:
    raw = env[name]
    try:
        value = int(raw.strip())
    except ValueError:
        raise RankIdentityError(
            f"environment variable {name}={raw!r} is not an integer; unset it or fix the launcher that set it"
        ) from None
    if value < 0:
        raise RankIdentityError(f"environment variable {name}={raw!r} is negative; unset it or fix the launcher")
    return value


def _first(env: Mapping[str, str], names: tuple[str, ...]) -> tuple[int | None, str | None]:
    for name in names:
        if env.get(name, "").strip() != "":
            return _int_var(env, name), name
    return None, None


def _present(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "").strip() != ""


def _pmi_is_srun(env: Mapping[str, str], rank_var: str, size_var: str) -> bool:
    """srun's PMI plugins set PMI_RANK/PMIX_RANK equal to SLURM_PROCID (and sizes agree)."""
    if not _present(env, "SLURM_PROCID") or _int_var(env, "SLURM_PROCID") != _int_var(env, rank_var):
        return False
    slurm_size, _ = _first(env, SLURM.world_size)
    pmi_size, _ = _first(env, (size_var,))
    return slurm_size is None or pmi_size is None or slurm_size == pmi_size


def select_launcher(env: Mapping[str, str]) -> LauncherVars | None:
    """The launcher whose variables describe this process, or None outside any launcher."""
    for launcher in ORDER:
        if not _present(env, launcher.rank[0]) or not all(_present(env, m) for m in launcher.marker):
            continue
        if launcher is MPICH and _pmi_is_srun(env, "PMI_RANK", "PMI_SIZE"):
            return SLURM
        if launcher is PMIX and _pmi_is_srun(env, "PMIX_RANK", "PMIX_SIZE"):
            return SLURM
        return launcher
    return None


def detect_context(env: Mapping[str, str], hostname: str | None = None) -> LaunchContext:
    """Read this process's rank, local rank, world size and node rank from ``env``.

    Raises RankIdentityError when a variable is not a non-negative integer or the values
    contradict each other (rank not below world size).
    """
    host = hostname if hostname is not None else socket.gethostname()
    launcher = select_launcher(env)
    if launcher is None:
        return LaunchContext("single", 0, 0, 1, 0, host, {})
    sources: dict[str, str] = {}
    rank, src = _first(env, launcher.rank)
    assert rank is not None and src is not None  # select_launcher checked it
    sources["global_rank"] = src
    values: dict[str, int | None] = {}
    for fld in ("local_rank", "world_size", "node_rank"):
        value, src = _first(env, getattr(launcher, fld))
        values[fld] = value
        if src is not None:
            sources[fld] = src
    world = values["world_size"]
    if world is not None:
        if world == 0:
            raise RankIdentityError(f"environment variable {sources['world_size']}=0: a job has at least one rank")
        for fld in ("global_rank", "local_rank"):
            v = rank if fld == "global_rank" else values["local_rank"]
            if v is not None and v >= world:
                raise RankIdentityError(
                    f"environment variable {sources[fld]}={v} is not below the world size "
                    f"{sources['world_size']}={world}; the launcher's variables contradict each other"
                )
    restarts = 0
    if launcher is TORCHRUN and _present(env, "TORCHELASTIC_RESTART_COUNT"):
        restarts = _int_var(env, "TORCHELASTIC_RESTART_COUNT")
    return LaunchContext(launcher.name, rank, values["local_rank"], world, values["node_rank"], host, sources, restarts)
