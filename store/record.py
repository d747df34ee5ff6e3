"""``profdb record``: run one rank's command with its outputs scoped to ``OUT/rank%04d/``.

The launcher runs outside, the profiler per rank::

    torchrun --nproc_per_node=8 profdb record -o out -- rocprofv3 --kernel-trace -d {rank_dir} -- python train.py

For each rank this module

1. reads the rank from the launcher's environment (launch.detect_context),
2. creates ``OUT/rank%04d/`` (refusing one that already holds a manifest: no clobbering; on a torchrun
   restart the earlier attempt moves to ``OUT/.attempts/attempt<N>/``) and writes the rank manifest
   (manifest.py) before the command starts,
3. substitutes the placeholders ``{rank_dir} {rank} {local_rank} {world_size} {node_rank} {hostname}``
   in every argument (plain text replacement; other braces are left alone),
4. exports ``PROFDB_RANK_DIR``, ``PROFDB_RANK``, ``PROFDB_LOCAL_RANK``, ``PROFDB_WORLD_SIZE``,
   ``PROFDB_NODE_RANK``, ``PROFDB_HOSTNAME``, ``PROFDB_LAUNCHER`` (and ``PROFDB_RUN``), and the
   profilers' own output variables (``ROCPROF_OUTPUT_PATH`` is rocprofv3's default for ``-d``;
   ``ROCPROFSYS_OUTPUT_PATH`` for rocprof-sys) set to the rank folder,
5. runs the command as a child in the same process group, forwards SIGINT/SIGTERM/SIGHUP to it unless
   it got them already (run_forwarding), waits,
6. writes ``pid``, ``ended_at`` and ``exit_code`` into the manifest and returns the command's exit code
   (128+N when a signal N killed it; 127 when the command does not exist, 126 when it cannot be run).

Profiler part and application part (``--ranks``): the first ``--`` inside CMD separates the profiler
from the application (``rocprofv3 ... -- python train.py``). Ranks not selected by ``--ranks`` run only
the application part, without rank folder, manifest or ``PROFDB_RANK_DIR`` (an application that
profiles itself should do so only when ``PROFDB_RANK_DIR`` is set). A CMD without an inner ``--``
runs unchanged on unselected ranks, again without rank folder or manifest. An application whose own
arguments contain ``--`` is written with an empty profiler part: ``profdb record -o out -- -- python
train.py -- --lr 1``.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

from .errors import ProfdbError
from .launch import LaunchContext, detect_context
from .manifest import MANIFEST_NAME, RankManifest, write_manifest

PLACEHOLDERS = ("rank_dir", "rank", "local_rank", "world_size", "node_rank", "hostname")

#: Environment variables through which profilers choose their output folder; set to the rank folder.
#: rocprofv3 reads ROCPROF_OUTPUT_PATH as the default of -d/--output-directory (an explicit -d wins);
#: rocprof-sys reads ROCPROFSYS_OUTPUT_PATH. A value inherited from the job would be shared by every
#: rank, so it is replaced. nsys has no such variable: use ``-o {rank_dir}/report``.
PROFILER_OUTPUT_VARS = ("ROCPROF_OUTPUT_PATH", "ROCPROFSYS_OUTPUT_PATH")

#: Forwarded to the command.
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

_SI_KERNEL = 0x80  # si_code of signals the kernel sends itself (terminal Ctrl-C, hangup)
_SI_USER = 0  # si_code of kill() and killpg()
#: how often ``run_forwarding`` looks whether the command ended without a SIGCHLD saying so (a SIGCHLD
#: taken by another thread of this process: ``profdb record`` runs none, but a caller of ``record()``
#: may; pytest-xdist's workers do)
_RECHECK_S = 0.2


class RecordError(ProfdbError):
    """The command cannot be started as asked (bad placeholder, rank selection, occupied folder)."""


def rank_dir_name(rank: int) -> str:
    return f"rank{rank:04d}"


def split_command(cmd: Sequence[str]) -> tuple[list[str], list[str] | None]:
    """(profiler part, application part) at the first ``--``; application part None without one."""
    if "--" not in cmd:
        return list(cmd), None
    i = list(cmd).index("--")
    return list(cmd[:i]), list(cmd[i + 1 :])


def placeholder_values(context: LaunchContext, rank_dir: Path | None) -> dict[str, str | None]:
    def s(v: int | None) -> str | None:
        return None if v is None else str(v)

    return {
        "rank_dir": str(rank_dir) if rank_dir is not None else None,
        "rank": str(context.global_rank),
        "local_rank": s(context.local_rank),
        "world_size": s(context.world_size),
        "node_rank": s(context.node_rank),
        "hostname": context.hostname,
    }


def substitute(args: Iterable[str], values: Mapping[str, str | None], launcher: str = "") -> list[str]:
    """Replace ``{name}`` for the known placeholders; a placeholder with no value is an error."""
    out = []
    for arg in args:
        for name in PLACEHOLDERS:
            token = "{" + name + "}"
            if token not in arg:
                continue
            value = values.get(name)
            if value is None:
                why = (
                    "this rank is not profiled (--ranks), so it has no rank folder"
                    if name == "rank_dir"
                    else f"the launcher ({launcher or 'unknown'}) does not say it"
                )
                raise RecordError(
                    f"placeholder {token} in {arg!r} has no value: {why}; run `profdb env` to see what is known"
                )
            arg = arg.replace(token, value)
        out.append(arg)
    return out


@dataclass
class RankPlan:
    """What one rank runs: argv, the variables added to its environment, its folder and manifest."""

    context: LaunchContext
    argv: list[str]
    env: dict[str, str]
    unset: list[str] = field(default_factory=list)
    rank_dir: Path | None = None
    manifest: RankManifest | None = None


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def plan_rank(
    out_dir: Path,
    cmd: Sequence[str],
    context: LaunchContext,
    ranks: frozenset[int] | None = None,
    run: str | None = None,
) -> RankPlan:
    """Decide (without side effects) what this rank runs and where its outputs go."""
    if not cmd:
        raise RecordError(
            "no command given: write the command after `--`, e.g. profdb record -o out -- python train.py"
        )
    profiler, app = split_command(cmd)
    if ranks is not None:
        if not ranks:
            raise RecordError("--ranks selects no rank")
        if context.world_size is not None:
            outside = sorted(r for r in ranks if r >= context.world_size)
            if outside:
                raise RecordError(
                    f"--ranks names rank(s) {', '.join(map(str, outside))} but the job has "
                    f"{context.world_size} ranks (0..{context.world_size - 1})"
                )
        if app is None and any("{rank_dir}" in a for a in cmd):
            raise RecordError(
                "{rank_dir} appears in a command without an inner `--`: ranks that --ranks leaves unprofiled "
                "run the command unchanged and have no rank folder; separate the profiler from the application "
                "(PROFILER ... -- APP ...) so those ranks run only the application"
            )
        if app is not None and any("{rank_dir}" in a for a in app):
            raise RecordError(
                "{rank_dir} appears after the inner `--` (the application part), which also runs on ranks "
                "that --ranks leaves unprofiled and that have no rank folder; move it into the profiler part "
                "or read $PROFDB_RANK_DIR in the application (set only on profiled ranks)"
            )
        if app is not None and not app:
            raise RecordError("nothing follows the inner `--`: the application part is empty")
    profiled = ranks is None or context.global_rank in ranks
    env = {
        "PROFDB_RANK": str(context.global_rank),
        "PROFDB_HOSTNAME": context.hostname,
        "PROFDB_LAUNCHER": context.launcher,
    }
    for name, value in (
        ("PROFDB_LOCAL_RANK", context.local_rank),
        ("PROFDB_WORLD_SIZE", context.world_size),
        ("PROFDB_NODE_RANK", context.node_rank),
    ):
        if value is not None:
            env[name] = str(value)
    if run is not None:
        env["PROFDB_RUN"] = run
    if not profiled:
        argv = app if app is not None else list(cmd)
        return RankPlan(
            context, substitute(argv, placeholder_values(context, None), context.launcher), env, ["PROFDB_RANK_DIR"]
        )
    if "{rank_dir}" in str(out_dir):
        raise RecordError(
            f"-o/--output {str(out_dir)!r} contains {{rank_dir}}, which is the folder -o makes; remove it"
        )
    # placeholders in -o (e.g. 'out-{hostname}') name one folder for the manifest and the profiler alike
    out_dir = Path(substitute([str(out_dir)], placeholder_values(context, None), context.launcher)[0])
    rank_dir = Path(os.path.abspath(out_dir)) / rank_dir_name(context.global_rank)
    argv = list(cmd) if profiler else (app or [])
    if not argv:
        raise RecordError("no command given after `--`")
    argv = substitute(argv, placeholder_values(context, rank_dir), context.launcher)
    env["PROFDB_RANK_DIR"] = str(rank_dir)
    for var in PROFILER_OUTPUT_VARS:
        env[var] = str(rank_dir)
    manifest = RankManifest(
        global_rank=context.global_rank,
        local_rank=context.local_rank,
        world_size=context.world_size,
        node_rank=context.node_rank,
        hostname=context.hostname,
        launcher=context.launcher,
        run=run,
        command=argv,
    )
    return RankPlan(context, argv, env, [], rank_dir, manifest)


def child_env(base: Mapping[str, str], plan: RankPlan) -> dict[str, str]:
    env = {k: v for k, v in base.items() if k not in plan.unset}
    env.update(plan.env)
    return env


def exit_status(returncode: int) -> int:
    """Popen's returncode as a shell would report it: -N (killed by signal N) -> 128+N."""
    return 128 - returncode if returncode < 0 else returncode


def run_forwarding(
    argv: Sequence[str],
    env: Mapping[str, str],
    on_start: Callable[[int], None] = lambda pid: None,
    on_exit: Callable[[int], None] = lambda status: None,
) -> int:
    """Run ``argv`` as a child, forward SIGINT/SIGTERM/SIGHUP to it, return its exit status.
    ``on_start`` gets the child's pid, ``on_exit`` its exit status, both with those signals still
    blocked: one that comes as the command ends (torchrun stopping every rank's group once one rank
    failed, when this rank's command had just ended too) cannot interrupt what is written then.

    The child stays in our process group, so whatever signals the group, up to a launcher's final
    SIGKILL, reaches it and everything it started, even if we are gone. A signal is forwarded
    unless the command already received it:

    - the kernel sent it to the terminal's foreground group (Ctrl-C, hangup), command included;
    - our parent sent it and made us a process-group leader: a launcher that starts each rank in a
      group of its own signals that group (torchrun's ``os.killpg``; OpenMPI's mpirun, seen here
      reaching a grandchild; a shell's ``kill %1``). Tested with real torchrun and mpirun.

    Everything else (``kill PID`` from a person, a watchdog, a harness) is forwarded. The child gets
    SIGTERM if we die first (PR_SET_PDEATHSIG), so a parent that kills only our pid does not leave
    the command running unseen. Signals are blocked and taken with sigtimedwait, so none is lost
    between the start of the child and the wait; where another thread of this process took the
    command's SIGCHLD, the wait sees the command ended within ``_RECHECK_S``.
    Raises OSError (FileNotFoundError, PermissionError) when the command cannot be started.
    """
    waited = {*FORWARDED_SIGNALS, signal.SIGCHLD}
    parent = os.getppid()
    launcher_managed = os.getpgrp() == os.getpid()
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, waited)
    try:
        child = subprocess.Popen(list(argv), env=dict(env), preexec_fn=_child_setup(old_mask, os.getpid()))
        on_start(child.pid)
        while child.poll() is None:
            # (bounded: in a process with other threads, a SIGCHLD that comes between the check above
            # and this wait goes to one of them, which does not block it, and is gone)
            info = signal.sigtimedwait(waited, _RECHECK_S)
            if info is None or info.si_signo == signal.SIGCHLD:
                continue
            if info.si_code == _SI_KERNEL and _same_group(child.pid):
                continue
            if info.si_code == _SI_USER and launcher_managed and info.si_pid == parent and _same_group(child.pid):
                continue
            try:
                os.kill(child.pid, info.si_signo)
            except ProcessLookupError:
                pass
        status = exit_status(child.returncode)
        on_exit(status)
        # A signal that arrived while the child was exiting has nobody to go to: drop it rather than
        # let it kill us before the exit code is passed on.
        while signal.sigtimedwait(waited, 0) is not None:
            pass
        return status
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)


_PR_SET_PDEATHSIG = 1


def _child_setup(mask: Iterable[int], parent: int) -> Callable[[], None]:
    """What the child runs between fork and exec: our signal mask undone, SIGTERM when we die."""
    prctl = None
    if sys.platform.startswith("linux"):
        try:
            prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before fork
        except (OSError, AttributeError):
            prctl = None

    def setup() -> None:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
            if os.getppid() != parent:  # we died before prctl took effect
                os.kill(os.getpid(), signal.SIGTERM)

    return setup


def _same_group(pid: int) -> bool:
    try:
        return os.getpgid(pid) == os.getpgrp()
    except ProcessLookupError:
        return True


ATTEMPTS_DIR = ".attempts"


def claim_rank_dir(rank_dir: Path, restart_count: int = 0) -> Path | None:
    """Create the rank folder; refuse one that already holds a recording.

    Except on a torchrun restart (``restart_count`` > 0): then the folder holds the failed earlier
    attempt, which is moved to ``OUT/.attempts/attempt<N-1>/rank%04d/`` (hidden: ``profdb ingest
    OUT/`` and ``OUT/rank*/`` skip it) so the new attempt starts clean. Returns where it went.
    """
    existing = rank_dir / MANIFEST_NAME
    moved = None
    if existing.exists():
        if restart_count <= 0:
            raise RecordError(
                f"{existing} already exists: this rank was recorded into {rank_dir} before; "
                "use a new -o/--output folder (or delete the old one) so outputs are not mixed"
            )
        moved = rank_dir.parent / ATTEMPTS_DIR / f"attempt{restart_count - 1}" / rank_dir.name
        try:
            moved.parent.mkdir(parents=True, exist_ok=True)
            os.rename(rank_dir, moved)
        except OSError as e:
            raise RecordError(
                f"torchrun restart {restart_count}: cannot move the earlier attempt {rank_dir} to {moved}: "
                f"{e.strerror}; move or delete it by hand"
            ) from e
    try:
        rank_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise RecordError(f"cannot create rank folder {rank_dir}: {e.strerror}; choose another -o/--output") from e
    return moved


def record(
    out_dir: str | os.PathLike[str],
    cmd: Sequence[str],
    ranks: frozenset[int] | None = None,
    run: str | None = None,
    env: Mapping[str, str] = os.environ,
    hostname: str | None = None,
) -> int:
    """Run this rank's ``cmd`` (see the module docstring) and return its exit status."""
    context = detect_context(env, hostname)
    plan = plan_rank(Path(out_dir), cmd, context, ranks, run)
    full_env = child_env(env, plan)
    if plan.rank_dir is None or plan.manifest is None:
        return _run_reporting(plan.argv, full_env)
    rank_dir = plan.rank_dir
    claim_rank_dir(rank_dir, context.restart_count)
    manifest = replace(plan.manifest, started_at=now_iso())
    write_manifest(rank_dir, manifest)

    def started(pid: int) -> None:
        nonlocal manifest
        manifest = replace(manifest, pid=pid)
        try:
            write_manifest(rank_dir, manifest)
        except OSError as e:  # the command runs already: keep waiting for it, say what went wrong
            print(f"profdb record: cannot update {rank_dir / MANIFEST_NAME}: {e}", file=sys.stderr)

    ended = False

    def finished(status: int) -> None:
        nonlocal ended
        write_manifest(rank_dir, replace(manifest, ended_at=now_iso(), exit_code=status))
        ended = True

    code: int | None = None
    try:
        code = _run_reporting(plan.argv, full_env, started, finished)
    finally:
        # (the command did not start, 127/126; or something unexpected escaped: ended, exit code unknown,
        # null). Until session 48 the manifest was written here only, after the signals were unblocked: a
        # launcher's SIGTERM in between left the exit code null (torchrun's restart test, ~1 CI run in 4).
        if not ended:
            write_manifest(rank_dir, replace(manifest, ended_at=now_iso(), exit_code=code))
    return code


def _run_reporting(
    argv: Sequence[str], env: Mapping[str, str], on_start: Callable[[int], None] = lambda pid: None,
    on_exit: Callable[[int], None] = lambda status: None,
) -> int:
    try:
        return run_forwarding(argv, env, on_start, on_exit)
    except FileNotFoundError:
        print(f"profdb record: {argv[0]}: command not found", file=sys.stderr)
        return 127
    except PermissionError:
        print(f"profdb record: {argv[0]}: permission denied (not executable?)", file=sys.stderr)
        return 126
