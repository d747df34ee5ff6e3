"""`profdb record` under real launchers: torchrun (CPU PyTorch, gloo) and OpenMPI's mpirun.

Skipped, with the reason, only when the launcher is not installed (.ci/install.d/launchers.sh
installs both for CI)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from profdb.store.launch import ORDER

pytestmark = pytest.mark.slow

APPS = Path(__file__).parent / "apps"
BIN = Path(sys.executable).parent
PROFDB = str(BIN / "profdb")
TORCHRUN = BIN / "torchrun"
MPIRUN = shutil.which("mpirun")
LAUNCHER_VARS = {v for lv in ORDER for names in (lv.rank, lv.local_rank, lv.world_size, lv.node_rank, lv.marker) for v in names}

needs_torchrun = pytest.mark.skipif(
    not TORCHRUN.exists(), reason="torchrun not installed in this venv (pip install torch==2.13.0, see .ci/install.d/launchers.sh)"
)


def _openmpi() -> bool:
    if MPIRUN is None:
        return False
    out = subprocess.run([MPIRUN, "--version"], capture_output=True, text=True).stdout
    return "Open MPI" in out


needs_mpirun = pytest.mark.skipif(
    not _openmpi(), reason="OpenMPI's mpirun not installed (apt-get install openmpi-bin, see .ci/install.d/launchers.sh)"
)


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS and not k.startswith(("PROFDB_", "OMPI_", "PMIX_"))}
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1")
    # Stopping ranks, mpirun (Open MPI 4) sends SIGCONT, waits odls_base_sigkill_timeout (default 1 s),
    # sends SIGTERM, waits it again, then SIGKILL: on a loaded 2-core CI machine the ranks need more than
    # 1 s to record how they ended. mpirun waits the timeout out even when they are gone, twice per test
    # that stops ranks: 20 s made two tests ~38 s each; 5 s held with three busy loops beside the suite.
    env.update(OMPI_MCA_odls_base_sigkill_timeout="5")
    return env


def mpirun(n: int) -> list[str]:
    assert MPIRUN is not None
    return [MPIRUN, "-np", str(n)]


def torchrun(n: int, *options: str) -> list[str]:
    """As documented: --no-python (profdb is a program, not a script for torchrun's python), and
    `--` to end torchrun's options (its parser would take profdb's --run for its --run-path)."""
    return [str(TORCHRUN), "--standalone", f"--nproc_per_node={n}", *options, "--no-python", "--"]


def manifests(out: Path) -> dict[int, dict[str, Any]]:
    found = {}
    for f in sorted(out.glob("rank*/profdb-rank.json")):
        m = json.loads(f.read_text())
        found[m["global_rank"]] = m
        assert f.parent.name == f"rank{m['global_rank']:04d}"
    return found


def run(argv: list[str], timeout: float = 240, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=clean_env(), capture_output=True, text=True, timeout=timeout, **kw)


@needs_torchrun
def test_torchrun_four_ranks_profiled_and_ingested_without_flags(tmp_path: Path) -> None:
    out = tmp_path / "out"
    p = run(torchrun(4) + [PROFDB, "record", "-o", str(out), "--run", "ddp4", "--", sys.executable, str(APPS / "torch_app.py")])
    assert p.returncode == 0, p.stderr[-3000:]
    ms = manifests(out)
    assert sorted(ms) == [0, 1, 2, 3]
    host = socket.gethostname()
    for r, m in ms.items():
        assert (m["local_rank"], m["world_size"], m["node_rank"], m["hostname"], m["launcher"], m["run"]) == (r, 4, 0, host, "torchrun", "ddp4")
        assert m["exit_code"] == 0 and m["pid"] > 0 and m["ended_at"]
        trace = json.loads((out / f"rank{r:04d}" / "trace.json").read_text())
        assert trace["distributedInfo"]["rank"] == r and trace["distributedInfo"]["world_size"] == 4
        names = {e.get("name") for e in trace["traceEvents"]}
        assert "gloo:all_reduce" in names and "ProfilerStep#1" in names
        pids = {e.get("pid") for e in trace["traceEvents"] if e.get("ph") == "X"}
        assert m["pid"] in pids  # the manifest's pid is the process that wrote the trace

    db = tmp_path / "p.db"
    p = run([PROFDB, "ingest", "--db", str(db)] + [str(d) for d in sorted(out.glob("rank*"))])
    assert p.returncode == 0, p.stderr
    p = run([PROFDB, "ranks", "--db", str(db), "--format", "json"])
    assert p.returncode == 0, p.stderr
    ranks = json.loads(p.stdout)
    assert [(r["global_rank"], r["local_rank"], r["hostname"]) for r in ranks] == [(i, i, host) for i in range(4)]
    assert {r["pid"] for r in ranks} == {m["pid"] for m in ms.values()}
    p = run([PROFDB, "runs", "--db", str(db), "--format", "json"])
    (row,) = json.loads(p.stdout)
    assert (row["run"], row["launcher"], row["world_size"], row["ranks"]) == ("ddp4", "torchrun", 4, 4)


@needs_torchrun
def test_torchrun_restart_keeps_the_last_attempt_in_the_rank_folders(tmp_path: Path) -> None:
    out = tmp_path / "out"
    barrier = tmp_path / "wrote"
    barrier.mkdir()
    # Attempt 0 fails on every rank, torchrun restarts the workers, attempt 1 succeeds. When the first
    # rank fails torchrun stops the others at once, so in attempt 0 each rank first waits (at most 60 s)
    # until both have written their file; the rank torchrun stops then may end by its SIGTERM (143).
    script = (
        'echo "$TORCHELASTIC_RESTART_COUNT" > {rank_dir}/attempt.txt; [ "$TORCHELASTIC_RESTART_COUNT" != 0 ] && exit 0; '
        f"touch {barrier}/{{rank}}; i=0; "
        f'while [ "$(ls {barrier} | wc -l)" -lt 2 ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; exit 1'
    )
    p = run(torchrun(2, "--max-restarts=1") + [PROFDB, "record", "-o", str(out), "--", "sh", "-c", script])
    assert p.returncode == 0, p.stderr[-3000:]
    for r in (0, 1):
        assert (out / f"rank{r:04d}" / "attempt.txt").read_text() == "1\n"
        assert manifests(out)[r]["exit_code"] == 0
        earlier = out / ".attempts" / "attempt0" / f"rank{r:04d}"
        assert (earlier / "attempt.txt").read_text() == "0\n"
        assert json.loads((earlier / "profdb-rank.json").read_text())["exit_code"] in (1, 128 + signal.SIGTERM)


@needs_mpirun
def test_mpirun_four_ranks_write_into_their_folders(tmp_path: Path) -> None:
    out = tmp_path / "out"
    p = run(mpirun(4) + [PROFDB, "record", "-o", str(out), "--", sys.executable, str(APPS / "rank_probe.py"), "--out", "{rank_dir}/probe_{rank}_of_{world_size}.json"])
    assert p.returncode == 0, p.stderr[-3000:]
    ms = manifests(out)
    assert sorted(ms) == [0, 1, 2, 3]
    for r, m in ms.items():
        # all four on this one host: local rank = global rank; OpenMPI has no node index
        assert (m["local_rank"], m["world_size"], m["node_rank"], m["hostname"], m["launcher"]) == (r, 4, None, socket.gethostname(), "openmpi")
        assert m["exit_code"] == 0
        probe = json.loads((out / f"rank{r:04d}" / f"probe_{r}_of_4.json").read_text())
        assert probe["env"]["OMPI_COMM_WORLD_RANK"] == str(r)
        assert probe["env"]["PROFDB_RANK_DIR"] == str(out / f"rank{r:04d}")
        assert probe["pid"] == m["pid"]


@needs_mpirun
def test_mpirun_ranks_subset_profiles_only_those(tmp_path: Path) -> None:
    """GNU time stands in for rocprofv3: a real tool with the same `TOOL -o FILE -- APP` shape."""
    gnu_time = shutil.which("time") or "/usr/bin/time"
    if not Path(gnu_time).exists():
        pytest.skip("GNU time not installed (apt-get install time)")
    out = tmp_path / "out"
    marker = tmp_path / "ran.txt"
    p = run(
        mpirun(4)
        + [PROFDB, "record", "-o", str(out), "--ranks", "0,3", "--", gnu_time, "-v", "-o", "{rank_dir}/time.txt", "--"]
        + [sys.executable, str(APPS / "rank_probe.py"), "--marker", str(marker)]
    )
    assert p.returncode == 0, p.stderr[-3000:]
    assert sorted(d.name for d in out.iterdir()) == ["rank0000", "rank0003"]
    for r in (0, 3):
        assert "Maximum resident set size" in (out / f"rank{r:04d}" / "time.txt").read_text()
        m = manifests(out)[r]
        assert m["command"][:4] == [gnu_time, "-v", "-o", str(out / f"rank{r:04d}" / "time.txt")]
    assert sorted(marker.read_text().splitlines()) == ["0 profiled", "1 unprofiled", "2 unprofiled", "3 profiled"]


@needs_mpirun
def test_mpirun_failing_rank_keeps_its_exit_code(tmp_path: Path) -> None:
    out = tmp_path / "out"
    # rank 2 fails at once; the others take a moment, so mpirun may stop them: only rank 2 is checked
    p = run(mpirun(4) + [PROFDB, "record", "-o", str(out), "--", "sh", "-c", "[ {rank} = 2 ] && exit 3; sleep 0.2"])
    assert p.returncode != 0
    m = manifests(out)[2]
    assert m["exit_code"] == 3 and m["ended_at"]


def _signal_test(tmp_path: Path, launcher: list[str], n: int) -> None:
    readies = [tmp_path / f"ready{r}" for r in range(n)]
    argv = launcher + [PROFDB, "record", "-o", str(tmp_path / "out"), "--run-name", "sig", "--"]
    argv += [sys.executable, str(APPS / "rank_probe.py"), "--wait-signals", str(tmp_path / "ready{rank}"), "--exit", "7"]
    proc = subprocess.Popen(argv, env=clean_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not all(r.exists() for r in readies):
            assert time.monotonic() < deadline and proc.poll() is None, "ranks did not start"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    for r in range(n):
        # exactly once: the launcher signals the rank's process group; profdb record does not repeat it
        assert Path(f"{readies[r]}.got").read_text() == "SIGTERM\n", f"rank {r}"
        m = manifests(tmp_path / "out")[r]
        assert (m["exit_code"], m["run"]) == (7, "sig")


@needs_mpirun
def test_sigterm_to_mpirun_reaches_each_rank_once(tmp_path: Path) -> None:
    _signal_test(tmp_path, mpirun(2), 2)


@needs_torchrun
def test_sigterm_to_torchrun_reaches_each_rank_once(tmp_path: Path) -> None:
    _signal_test(tmp_path, torchrun(2), 2)


@needs_mpirun
def test_profdb_env_under_mpirun(tmp_path: Path) -> None:
    p = run(mpirun(2) + [PROFDB, "env", "--format", "json"])
    assert p.returncode == 0, p.stderr
    seen = sorted((d["global_rank"], d["local_rank"], d["world_size"], d["launcher"]) for d in map(json.loads, p.stdout.splitlines()))
    assert seen == [(0, 0, 2, "openmpi"), (1, 1, 2, "openmpi")]
