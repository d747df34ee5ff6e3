"""profdb.store.record and `profdb record` / `profdb env`, one process at a time (no launcher needed).

Rank contexts come from synthetic launcher variables; commands are real child processes
(tests/apps/rank_probe.py), signals are real signals."""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from profdb.cli.main import cli
from profdb.store.launch import ORDER, detect_context
from profdb.store.manifest import MANIFEST_NAME, read_manifest
from profdb.store.identity import parse_ranks
from profdb.store.record import (
    RecordError,
    plan_rank,
    record,
    split_command,
    substitute,
)

APPS = Path(__file__).parent / "apps"
PROBE = str(APPS / "rank_probe.py")
PROFDB = str(Path(sys.executable).parent / "profdb")
LAUNCHER_VARS = {v for lv in ORDER for names in (lv.rank, lv.local_rank, lv.world_size, lv.node_rank, lv.marker) for v in names}


def clean_env(**extra: str) -> dict[str, str]:
    """This test process's environment without any launcher or PROFDB_ variable, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS and not k.startswith("PROFDB_")}
    env.update(extra)
    return env


def mpi_rank(rank: int, size: int = 4) -> dict[str, str]:
    return clean_env(
        OMPI_COMM_WORLD_RANK=str(rank), OMPI_COMM_WORLD_LOCAL_RANK=str(rank % 2), OMPI_COMM_WORLD_SIZE=str(size)
    )


def manifest_json(rank_dir: Path) -> dict[str, object]:
    data = json.loads((rank_dir / MANIFEST_NAME).read_text())
    assert isinstance(data, dict)
    return data


# --- pure parts ---------------------------------------------------------------------------------


def test_parse_ranks() -> None:
    assert parse_ranks("0,3") == {0, 3}
    assert parse_ranks(" 8-11, 2 ") == {2, 8, 9, 10, 11}
    for bad in ("", "1,", "a", "3-1", "-2", "1-x"):
        with pytest.raises(ValueError):
            parse_ranks(bad)


def test_split_command_at_the_first_inner_separator() -> None:
    assert split_command(["rocprofv3", "-d", "x", "--", "python", "t.py", "--", "a"]) == (
        ["rocprofv3", "-d", "x"],
        ["python", "t.py", "--", "a"],
    )
    assert split_command(["python", "t.py"]) == (["python", "t.py"], None)
    assert split_command(["--", "python", "t.py"]) == ([], ["python", "t.py"])


def test_substitute_known_placeholders_only() -> None:
    values = {"rank_dir": "/o/rank0003", "rank": "3", "local_rank": "1", "world_size": "4", "node_rank": None, "hostname": "h"}
    assert substitute(["-o", "{rank_dir}/r_{rank}_{local_rank}of{world_size}@{hostname}", '{"json": 1}', "{other}"], values) == [
        "-o",
        "/o/rank0003/r_3_1of4@h",
        '{"json": 1}',
        "{other}",
    ]
    with pytest.raises(RecordError, match=r"\{node_rank\} .* has no value: the launcher \(openmpi\) does not say it"):
        substitute(["n{node_rank}"], values, "openmpi")


def test_plan_for_a_profiled_rank(tmp_path: Path) -> None:
    context = detect_context(mpi_rank(3), hostname="h")
    plan = plan_rank(tmp_path / "out", ["rocprofv3", "-d", "{rank_dir}", "--", "python", "t.py"], context, run="r1")
    rank_dir = tmp_path / "out" / "rank0003"
    assert plan.rank_dir == rank_dir
    assert plan.argv == ["rocprofv3", "-d", str(rank_dir), "--", "python", "t.py"]
    assert plan.env["PROFDB_RANK_DIR"] == str(rank_dir)
    assert plan.env["ROCPROF_OUTPUT_PATH"] == str(rank_dir)
    assert (plan.env["PROFDB_RANK"], plan.env["PROFDB_LOCAL_RANK"], plan.env["PROFDB_WORLD_SIZE"]) == ("3", "1", "4")
    assert plan.env["PROFDB_RUN"] == "r1" and plan.env["PROFDB_LAUNCHER"] == "openmpi"
    assert "PROFDB_NODE_RANK" not in plan.env  # unknown under OpenMPI: not invented
    assert plan.manifest is not None and plan.manifest.command == plan.argv
    assert not rank_dir.exists()  # planning has no side effects


def test_plan_for_an_unselected_rank_runs_the_application_part(tmp_path: Path) -> None:
    context = detect_context(mpi_rank(1), hostname="h")
    plan = plan_rank(tmp_path, ["rocprofv3", "-d", "{rank_dir}", "--", "python", "t.py", "{rank}"], context, frozenset({0, 3}))
    assert plan.argv == ["python", "t.py", "1"]
    assert plan.rank_dir is None and plan.manifest is None
    assert "PROFDB_RANK_DIR" not in plan.env and "PROFDB_RANK_DIR" in plan.unset
    assert "ROCPROF_OUTPUT_PATH" not in plan.env


def test_plan_without_inner_separator_runs_cmd_unchanged_on_unselected_ranks(tmp_path: Path) -> None:
    context = detect_context(mpi_rank(1), hostname="h")
    plan = plan_rank(tmp_path, ["python", "t.py"], context, frozenset({0}))
    assert plan.argv == ["python", "t.py"] and plan.rank_dir is None


def test_plan_with_empty_profiler_part(tmp_path: Path) -> None:
    context = detect_context(mpi_rank(0), hostname="h")
    cmd = ["--", "python", "t.py", "--", "--lr", "1"]
    assert plan_rank(tmp_path, cmd, context, frozenset({0})).argv == ["python", "t.py", "--", "--lr", "1"]
    assert plan_rank(tmp_path, cmd, context).argv == ["python", "t.py", "--", "--lr", "1"]


@pytest.mark.parametrize(
    "cmd, ranks, message",
    [
        ([], None, "no command given"),
        (["--"], None, "no command given"),
        (["python", "t.py"], frozenset({4}), r"--ranks names rank\(s\) 4 but the job has 4 ranks"),
        (["prof", "--", "python", "{rank_dir}/x"], frozenset({0}), r"\{rank_dir\} appears after the inner `--`"),
        (["prof", "--"], frozenset({0}), "application part is empty"),
        (["nsys", "-o", "{rank_dir}/r", "python"], frozenset({0}), r"\{rank_dir\} appears in a command without an inner `--`"),
    ],
)
def test_plan_errors(tmp_path: Path, cmd: list[str], ranks: frozenset[int] | None, message: str) -> None:
    context = detect_context(mpi_rank(0), hostname="h")
    with pytest.raises(RecordError, match=message):
        plan_rank(tmp_path, cmd, context, ranks)


# --- running a real command ---------------------------------------------------------------------


def test_record_writes_manifest_and_scopes_outputs(tmp_path: Path) -> None:
    out = tmp_path / "out"
    code = record(out, [sys.executable, PROBE, "--out", "{rank_dir}/p_{rank}.json"], run="r7", env=mpi_rank(2))
    assert code == 0
    rank_dir = out / "rank0002"
    probe = json.loads((rank_dir / "p_2.json").read_text())
    assert probe["env"]["PROFDB_RANK_DIR"] == str(rank_dir)
    assert probe["env"]["ROCPROF_OUTPUT_PATH"] == str(rank_dir)
    m = manifest_json(rank_dir)
    assert m["profdb_manifest"] == 1
    assert (m["global_rank"], m["local_rank"], m["world_size"], m["launcher"], m["run"]) == (2, 0, 4, "openmpi", "r7")
    assert m["pid"] == probe["pid"]
    assert m["command"] == [sys.executable, PROBE, "--out", f"{rank_dir}/p_2.json"]
    assert m["exit_code"] == 0 and m["started_at"] and m["ended_at"]
    assert str(m["started_at"]) <= str(m["ended_at"])
    assert read_manifest(rank_dir / MANIFEST_NAME).global_rank == 2  # the reader ingest uses accepts it


def test_failing_command_keeps_its_exit_code_and_manifest_says_so(tmp_path: Path) -> None:
    assert record(tmp_path, [sys.executable, PROBE, "--exit", "3"], env=mpi_rank(0)) == 3
    m = manifest_json(tmp_path / "rank0000")
    assert m["exit_code"] == 3 and m["ended_at"]


def test_missing_command_is_127_with_manifest(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    assert record(tmp_path, ["no-such-profiler-xyz", "--", "python"], env=mpi_rank(0)) == 127
    assert "no-such-profiler-xyz: command not found" in capfd.readouterr().err
    m = manifest_json(tmp_path / "rank0000")
    assert (m["exit_code"], m["pid"]) == (127, None)


def test_a_recorded_rank_folder_is_not_clobbered(tmp_path: Path) -> None:
    assert record(tmp_path, [sys.executable, PROBE], env=mpi_rank(1)) == 0
    before = (tmp_path / "rank0001" / MANIFEST_NAME).read_text()
    with pytest.raises(RecordError, match="rank0001/profdb-rank.json already exists"):
        record(tmp_path, [sys.executable, PROBE], env=mpi_rank(1))
    assert (tmp_path / "rank0001" / MANIFEST_NAME).read_text() == before


def test_torchrun_restart_moves_the_earlier_attempt_aside(tmp_path: Path) -> None:
    torch_env = clean_env(RANK="1", LOCAL_RANK="1", WORLD_SIZE="2", GROUP_RANK="0", TORCHELASTIC_RUN_ID="x")
    cmd = [sys.executable, PROBE, "--out", "{rank_dir}/p.json", "--exit", "1"]
    assert record(tmp_path, cmd, env={**torch_env, "TORCHELASTIC_RESTART_COUNT": "0"}) == 1
    assert record(tmp_path, cmd[:-1] + ["0"], env={**torch_env, "TORCHELASTIC_RESTART_COUNT": "1"}) == 0
    assert manifest_json(tmp_path / "rank0001")["exit_code"] == 0
    earlier = tmp_path / ".attempts" / "attempt0" / "rank0001"
    assert manifest_json(earlier)["exit_code"] == 1 and (earlier / "p.json").exists()


def test_unselected_rank_runs_unprofiled_without_folder(tmp_path: Path) -> None:
    marker = tmp_path / "ran.txt"
    out = tmp_path / "out"
    env = mpi_rank(1)
    env["PROFDB_RANK_DIR"] = "/inherited/from/outside"  # must not leak into an unprofiled rank
    cmd = [sys.executable, PROBE, "--out", "{rank_dir}/probe.json", "--", sys.executable, PROBE, "--marker", str(marker)]
    assert record(out, cmd, ranks=frozenset({0, 3}), env=env) == 0
    assert marker.read_text() == "1 unprofiled\n"
    assert not out.exists()


def test_exit_status_of_a_killed_command_is_128_plus_signal(tmp_path: Path) -> None:
    assert record(tmp_path, ["sh", "-c", "kill -KILL $$"], env=mpi_rank(0)) == 128 + signal.SIGKILL
    assert manifest_json(tmp_path / "rank0000")["exit_code"] == 137


# --- signals --------------------------------------------------------------------------------------


def test_a_command_ending_while_another_thread_runs_is_not_waited_for_forever() -> None:
    """run_forwarding blocks SIGCHLD in its own thread and waits for it; in a process with another
    thread (``profdb record`` runs none, but a caller of store.record's functions may; pytest-xdist's
    workers do), a SIGCHLD that comes between its check that the command runs and its wait goes to
    that thread and is gone. Here the command ends in that window (the first check is held until it
    has ended): the wait must still see it end. It once hung there for good, under xdist, in
    test_exit_status_of_a_killed_command_is_128_plus_signal."""
    script = (
        "import os, subprocess, threading, time\n"
        "from profdb.store.record import run_forwarding\n"
        "stop = threading.Event()\n"
        "threading.Thread(target=stop.wait, daemon=True).start()  # (its signal mask: nothing blocked)\n"
        "poll, held = subprocess.Popen.poll, []\n"
        "def late_poll(self):\n"
        "    if not held:  # the command ends after this check said it runs\n"
        "        held.append(os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOWAIT))\n"
        "        return None\n"
        "    return poll(self)\n"
        "subprocess.Popen.poll = late_poll\n"
        "print(run_forwarding(['sh', '-c', 'exit 3'], dict(os.environ)))\n"
    )
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert (p.returncode, p.stdout, p.stderr) == (0, "3\n", "")


def _wait_for(path: Path, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} did not appear within {timeout} s")
        time.sleep(0.02)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_signal_to_profdb_record_is_forwarded_once(tmp_path: Path, sig: signal.Signals) -> None:
    ready = tmp_path / "ready"
    proc = subprocess.Popen(
        [PROFDB, "record", "-o", str(tmp_path / "out"), "--", sys.executable, PROBE, "--wait-signals", str(ready), "--exit", "7"],
        env=clean_env(),
    )
    try:
        _wait_for(ready)
        proc.send_signal(sig)
        assert proc.wait(timeout=20) == 7
    finally:
        proc.kill() if proc.poll() is None else None
    assert (tmp_path / "ready.got").read_text() == f"{sig.name}\n"
    m = manifest_json(tmp_path / "out" / "rank0000")
    assert m["exit_code"] == 7 and m["pid"] == int(ready.read_text())


def _probe_cmd(tmp_path: Path, ready: Path) -> list[str]:
    return [PROFDB, "record", "-o", str(tmp_path / "out"), "--", sys.executable, PROBE, "--wait-signals", str(ready), "--exit", "7"]


def test_launcher_signalling_the_group_reaches_the_command_once(tmp_path: Path) -> None:
    """Like torchrun: start the rank in a new session, os.killpg it. The command gets it directly only."""
    ready = tmp_path / "ready"
    proc = subprocess.Popen(_probe_cmd(tmp_path, ready), env=clean_env(), start_new_session=True)
    try:
        _wait_for(ready)
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=20) == 7
    finally:
        proc.kill() if proc.poll() is None else None
    assert (tmp_path / "ready.got").read_text() == "SIGTERM\n"


def test_signal_from_someone_else_is_forwarded_to_a_group_leader(tmp_path: Path) -> None:
    """profdb record leads its group (started by an intermediate), the test is not its parent: forwarded."""
    ready = tmp_path / "ready"
    starter = f"import subprocess, sys; sys.exit(subprocess.call({_probe_cmd(tmp_path, ready)!r}, start_new_session=True))"
    proc = subprocess.Popen([sys.executable, "-c", starter], env=clean_env())
    try:
        _wait_for(ready)
        child_pid = int(ready.read_text())
        record_pid = int(Path(f"/proc/{child_pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        assert os.getpgid(record_pid) == record_pid  # it does lead its group
        os.kill(record_pid, signal.SIGTERM)
        assert proc.wait(timeout=20) == 7
    finally:
        proc.kill() if proc.poll() is None else None
    assert (tmp_path / "ready.got").read_text() == "SIGTERM\n"


def test_command_gets_sigterm_when_profdb_record_dies(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    proc = subprocess.Popen(_probe_cmd(tmp_path, ready), env=clean_env(), start_new_session=True)
    try:
        _wait_for(ready)
        proc.kill()  # SIGKILL to profdb record alone, as a harness that kills only its child would
        proc.wait(timeout=20)
        _wait_for(tmp_path / "ready.got")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert (tmp_path / "ready.got").read_text() == "SIGTERM\n"


def test_terminated_command_gives_143(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    script = f"import pathlib, time; pathlib.Path({str(ready)!r}).touch(); time.sleep(30)"
    proc = subprocess.Popen([PROFDB, "record", "-o", str(tmp_path), "--", sys.executable, "-c", script], env=clean_env())
    try:
        _wait_for(ready)
        proc.terminate()
        assert proc.wait(timeout=20) == 128 + signal.SIGTERM
    finally:
        proc.kill() if proc.poll() is None else None
    assert manifest_json(tmp_path / "rank0000")["exit_code"] == 143


def test_a_signal_as_the_command_ends_keeps_its_exit_code(tmp_path: Path) -> None:
    """torchrun stops every rank's group once one rank failed; a rank whose command had just ended on its
    own gets that SIGTERM while it writes the exit code. Here it comes at the moment the command's exit
    status is taken: the manifest still says the command's code, and profdb record exits with it."""
    script = (
        "import os, signal, sys\n"
        "import profdb.store.record as r\n"
        "real = r.exit_status\n"
        "def late(returncode):\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    return real(returncode)\n"
        "r.exit_status = late\n"
        "from profdb.cli.main import main\n"
        f"sys.argv = ['profdb', 'record', '-o', {str(tmp_path)!r}, '--', 'sh', '-c', 'exit 3']\n"
        "sys.exit(main())\n"
    )
    p = subprocess.run([sys.executable, "-c", script], env=clean_env(), capture_output=True, text=True, timeout=120)
    assert manifest_json(tmp_path / "rank0000")["exit_code"] == 3, p.stderr
    assert p.returncode == 3, p.stderr


def test_ctrl_c_on_a_terminal_reaches_the_command_once(tmp_path: Path) -> None:
    """The terminal sends SIGINT to the whole foreground group, command included: not forwarded again."""
    ready = tmp_path / "ready"
    argv = [PROFDB, "record", "-o", str(tmp_path / "out"), "--", sys.executable, PROBE, "--wait-signals", str(ready), "--exit", "5"]
    pid, fd = pty.fork()
    if pid == 0:  # child: session leader with the pty as controlling terminal, foreground group
        try:
            os.execve(argv[0], argv, clean_env())
        finally:
            os._exit(99)
    try:
        _wait_for(ready)
        os.write(fd, b"\x03")  # Ctrl-C
        deadline = time.monotonic() + 20
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            assert time.monotonic() < deadline, "profdb record did not exit after Ctrl-C"
            try:
                os.read(fd, 4096)  # keep the terminal drained
            except OSError:
                pass
            time.sleep(0.02)
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 5
    assert (tmp_path / "ready.got").read_text() == "SIGINT\n"


# --- CLI --------------------------------------------------------------------------------------------


def test_env_command_json_and_table(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in LAUNCHER_VARS:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("SLURM_PROCID", "5")
    monkeypatch.setenv("SLURM_LOCALID", "1")
    monkeypatch.setenv("SLURM_NTASKS", "8")
    monkeypatch.setenv("SLURM_NODEID", "2")
    r = CliRunner().invoke(cli, ["env", "--format", "json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert (data["launcher"], data["global_rank"], data["local_rank"], data["world_size"], data["node_rank"]) == ("slurm", 5, 1, 8, 2)
    assert data["sources"]["global_rank"] == "SLURM_PROCID"
    r = CliRunner().invoke(cli, ["env"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["field", "value", "from"]
    assert ["global_rank", "5", "SLURM_PROCID"] in [ln.split() for ln in lines]


def test_env_command_bad_variable_is_a_one_line_error(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in LAUNCHER_VARS:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "x")
    r = CliRunner().invoke(cli, ["env"])
    assert r.exit_code == 1
    assert "OMPI_COMM_WORLD_RANK='x' is not an integer" in r.stderr


def test_record_command_bad_ranks_is_a_usage_error(tmp_path: Path) -> None:
    r = CliRunner().invoke(cli, ["record", "-o", str(tmp_path), "--ranks", "0,x", "--", "true"])
    assert r.exit_code == 2
    assert "'x' in rank list '0,x'" in r.stderr


def test_record_command_exits_with_the_command_status(tmp_path: Path) -> None:
    # a real process: the exit status and the options after `--` belong to CMD, not to profdb
    p = subprocess.run(
        [PROFDB, "record", "-o", str(tmp_path), "--run", "x", "--", sys.executable, PROBE, "--exit", "4", "--out", "{rank_dir}/o.json"],
        env=clean_env(),
    )
    assert p.returncode == 4
    assert json.loads((tmp_path / "rank0000" / "o.json").read_text())["argv"][-1] == str(tmp_path / "rank0000" / "o.json")
    assert manifest_json(tmp_path / "rank0000")["run"] == "x"


def test_record_command_without_outer_separator(tmp_path: Path) -> None:
    p = subprocess.run([PROFDB, "record", "-o", str(tmp_path), sys.executable, PROBE, "--exit", "0"], env=clean_env())
    assert p.returncode == 0
    assert manifest_json(tmp_path / "rank0000")["command"] == [sys.executable, PROBE, "--exit", "0"]


def test_record_command_error_before_start(tmp_path: Path) -> None:
    (tmp_path / "rank0000").mkdir()
    (tmp_path / "rank0000" / MANIFEST_NAME).write_text("{}")
    p = subprocess.run([PROFDB, "record", "-o", str(tmp_path), "--", "true"], env=clean_env(), capture_output=True, text=True)
    assert p.returncode == 1
    assert "already exists" in p.stderr
