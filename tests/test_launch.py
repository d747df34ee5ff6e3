"""profdb.store.launch over synthetic environments, one per launcher and per known trap.

The variable sets are the ones each launcher really sets (torchrun's and OpenMPI's were read off
real runs here; Slurm, Hydra and Horovod from their sources and documentation)."""

from __future__ import annotations

import pytest

from profdb.store.errors import RankIdentityError
from profdb.store.launch import LAUNCHERS, detect_context, select_launcher

TORCHRUN = {
    "RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4", "GROUP_RANK": "1",
    "GROUP_WORLD_SIZE": "2", "ROLE_RANK": "5", "MASTER_ADDR": "node0", "MASTER_PORT": "29500",
    "TORCHELASTIC_RUN_ID": "f25dcd13", "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_MAX_RESTARTS": "0",
}
OPENMPI = {
    "OMPI_COMM_WORLD_RANK": "6", "OMPI_COMM_WORLD_LOCAL_RANK": "2", "OMPI_COMM_WORLD_SIZE": "8",
    "OMPI_COMM_WORLD_LOCAL_SIZE": "4", "OMPI_COMM_WORLD_NODE_RANK": "2", "OMPI_UNIVERSE_SIZE": "8",
    "PMIX_RANK": "6", "PMIX_NAMESPACE": "2059730945",
}
HYDRA = {"PMI_RANK": "3", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2", "PMI_FD": "6"}
PALS = {"PMI_RANK": "13", "PMI_SIZE": "24", "PMI_LOCAL_RANK": "1", "PMI_LOCAL_SIZE": "12", "PALS_NODEID": "1"}
SLURM_STEP = {
    "SLURM_PROCID": "9", "SLURM_LOCALID": "1", "SLURM_NTASKS": "16", "SLURM_NODEID": "2",
    "SLURM_STEP_ID": "0", "SLURM_JOB_ID": "4242", "SLURMD_NODENAME": "nid0003",
}
# the batch shell of an sbatch job: every process started from it inherits these
SBATCH_SHELL = {"SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NTASKS": "16", "SLURM_NODEID": "0", "SLURM_JOB_ID": "4242"}
HOROVOD_GLOO = {
    "HOROVOD_RANK": "3", "HOROVOD_SIZE": "4", "HOROVOD_LOCAL_RANK": "1", "HOROVOD_LOCAL_SIZE": "2",
    "HOROVOD_CROSS_RANK": "1", "HOROVOD_CROSS_SIZE": "2", "HOROVOD_HOSTNAME": "gpu7",
    "HOROVOD_GLOO_RENDEZVOUS_ADDR": "10.0.0.1",
}


def ctx(env: dict[str, str]) -> tuple[object, ...]:
    c = detect_context(env, hostname="h1")
    return (c.launcher, c.global_rank, c.local_rank, c.world_size, c.node_rank)


def test_single_process_is_rank_0_of_1() -> None:
    c = detect_context({"PATH": "/usr/bin", "HOSTNAME": "submit-host"}, hostname="h1")
    assert (c.launcher, c.global_rank, c.local_rank, c.world_size, c.node_rank) == ("single", 0, 0, 1, 0)
    assert c.hostname == "h1"  # never $HOSTNAME


def test_torchrun() -> None:
    assert ctx(TORCHRUN) == ("torchrun", 5, 1, 8, 1)
    c = detect_context(TORCHRUN, hostname="h1")
    assert c.sources == {"global_rank": "RANK", "local_rank": "LOCAL_RANK", "world_size": "WORLD_SIZE", "node_rank": "GROUP_RANK"}
    assert c.restart_count == 0
    assert detect_context({**TORCHRUN, "TORCHELASTIC_RESTART_COUNT": "2"}, hostname="h").restart_count == 2
    # only torchrun restarts workers under the same ranks: the variable means nothing elsewhere
    assert detect_context({**OPENMPI, "TORCHELASTIC_RESTART_COUNT": "2"}, hostname="h").restart_count == 0


def test_rank_without_torchelastic_is_generic_env() -> None:
    env = {"RANK": "2", "LOCAL_RANK": "0", "WORLD_SIZE": "4", "NODE_RANK": "1", "MASTER_ADDR": "x"}
    assert ctx(env) == ("env", 2, 0, 4, 1)


def test_openmpi_node_rank_is_not_the_node_index() -> None:
    # OMPI_COMM_WORLD_NODE_RANK counts processes on the node (2 here), it is not the node's index
    assert ctx(OPENMPI) == ("openmpi", 6, 2, 8, None)


def test_mpich_hydra() -> None:
    assert ctx(HYDRA) == ("mpich", 3, 1, 4, None)


def test_cray_pals_through_pmi() -> None:
    assert ctx(PALS) == ("mpich", 13, 1, 24, 1)


def test_slurm_srun() -> None:
    assert ctx(SLURM_STEP) == ("slurm", 9, 1, 16, 2)


def test_slurm_srun_old_nprocs_name() -> None:
    env = {"SLURM_PROCID": "2", "SLURM_LOCALID": "0", "SLURM_NPROCS": "4", "SLURM_NODEID": "1"}
    assert ctx(env) == ("slurm", 2, 0, 4, 1)


def test_srun_with_pmi_plugin_is_slurm() -> None:
    # srun --mpi=pmi2 sets PMI_RANK/PMI_SIZE equal to Slurm's own: Slurm's richer variables win
    env = {**SLURM_STEP, "PMI_RANK": "9", "PMI_SIZE": "16"}
    assert ctx(env) == ("slurm", 9, 1, 16, 2)


def test_srun_with_pmix_plugin_is_slurm() -> None:
    env = {**SLURM_STEP, "PMIX_RANK": "9"}
    assert ctx(env) == ("slurm", 9, 1, 16, 2)


def test_mpiexec_inside_sbatch_trusts_pmi_not_inherited_slurm_procid() -> None:
    env = {**SBATCH_SHELL, **HYDRA}
    assert ctx(env) == ("mpich", 3, 1, 4, None)


def test_mpirun_inside_sbatch() -> None:
    assert ctx({**SBATCH_SHELL, **OPENMPI}) == ("openmpi", 6, 2, 8, None)


def test_torchrun_inside_srun_is_torchrun() -> None:
    assert ctx({**SLURM_STEP, **TORCHRUN}) == ("torchrun", 5, 1, 8, 1)


def test_horovod_gloo() -> None:
    assert ctx(HOROVOD_GLOO) == ("horovod", 3, 1, 4, 1)


def test_horovod_gloo_inside_sbatch() -> None:
    assert ctx({**SBATCH_SHELL, **HOROVOD_GLOO}) == ("horovod", 3, 1, 4, 1)


def test_pmix_alone() -> None:
    assert ctx({"PMIX_RANK": "1", "PMIX_NAMESPACE": "prterun-x"}) == ("pmix", 1, None, None, None)


def test_every_launcher_is_reachable() -> None:
    seen = {
        detect_context(e, hostname="h").launcher
        for e in (TORCHRUN, {"RANK": "0"}, OPENMPI, HYDRA, HOROVOD_GLOO, {"PMIX_RANK": "0"}, SLURM_STEP, {})
    }
    assert seen == set(LAUNCHERS)


def test_blank_variables_count_as_unset() -> None:
    assert select_launcher({"RANK": " ", "OMPI_COMM_WORLD_RANK": ""}) is None


def test_values_are_read_from_the_selected_launcher_only() -> None:
    # OpenMPI gives no node index; Slurm's inherited SLURM_NODEID must not be borrowed
    c = detect_context({**SBATCH_SHELL, "SLURM_NODEID": "7", **OPENMPI}, hostname="h")
    assert c.node_rank is None


@pytest.mark.parametrize(
    "env, message",
    [
        ({"OMPI_COMM_WORLD_RANK": "two"}, "OMPI_COMM_WORLD_RANK='two' is not an integer"),
        ({"SLURM_PROCID": "-1"}, "SLURM_PROCID='-1' is negative"),
        ({"RANK": "4", "WORLD_SIZE": "4"}, "RANK=4 is not below the world size WORLD_SIZE=4"),
        ({"PMI_RANK": "0", "PMI_SIZE": "2", "MPI_LOCALRANKID": "2"}, "MPI_LOCALRANKID=2 is not below"),
        ({"HOROVOD_RANK": "0", "HOROVOD_SIZE": "0"}, "HOROVOD_SIZE=0"),
    ],
)
def test_bad_values_are_errors_naming_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(RankIdentityError, match=message.replace("(", r"\(")):
        detect_context(env, hostname="h")
