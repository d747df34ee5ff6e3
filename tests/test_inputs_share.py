"""Phase 1's look at each input file (readable, format, hash, inspection, rank) is shared with helper
processes when there are many files (``inputs._Share``). What the ingest finds, and which error it
raises, must be what one process finds alone: a helper that meets a problem says nothing of that file,
and the parent looks at it again; a helper that dies costs only time. The tests lower the thresholds
so that a few real files (the examples' rocprofv3 CSV run and torchrun traces, a merged Metrix file)
are shared among three processes."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from profdb.store import ingest, inputs
from profdb.store.errors import ProfdbError
from profdb.store.identity import IdentityFlags

from fixtures_metrix import sample_stats, write_csv
from test_ingest_parallel import _content
from test_signals import _alive

EXAMPLES = Path(__file__).parent.parent / "examples"
#: ``_Share.close`` itself (``_looked`` wraps it, once per call)
_SHARE_CLOSE = inputs._Share.close


@pytest.fixture
def shared(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Turns sharing on (True: three processes for as few as six files) or off (False)."""

    def switch(on: bool) -> None:
        monkeypatch.setattr(inputs, "SHARE_MIN_FILES", 6 if on else 10**9)
        monkeypatch.setattr(inputs, "SHARE_FILES_EACH", 2)
        monkeypatch.setattr(inputs, "cores", lambda: 3)
        # (threads other tests of the session left running, e.g. a server's: the helpers run no code
        # of theirs; test_no_helper_is_forked_beside_a_running_thread checks the rule itself)
        monkeypatch.setattr(inputs, "_threads", lambda: False)

    return switch


def _job(tmp_path: Path, dlrm_files: list[Path]) -> list[Path]:
    """A job's outputs as a user passes them: the rocprofv3 example run's rank folders, the real DLRM
    job's 8 Kineto traces (a folder), a folder holding a merged Metrix file of two ranks and a file no
    reader knows, and one trace named itself (again)."""
    shutil.copytree(EXAMPLES / "rocprof-8ranks", tmp_path / "rocprof")
    (tmp_path / "dlrm").mkdir()
    for f in dlrm_files:
        shutil.copy(f, tmp_path / "dlrm" / f.name)
    metrix = tmp_path / "metrix"
    metrix.mkdir()
    write_csv(metrix / "results.csv", sample_stats(2) + sample_stats(3), {2: (2, 8, "node00"), 3: (3, 8, "node00")})
    (metrix / "notes.txt").write_text("not a profile\n")
    one = sorted((tmp_path / "dlrm").glob("worker3*"))[0]
    return [*sorted((tmp_path / "rocprof").glob("rank*")), metrix, tmp_path / "dlrm", one]


def _looked(paths: list[Path], monkeypatch: pytest.MonkeyPatch) -> tuple[Any, ...]:
    """``prepare``'s answer in comparable form, whether helpers answered for some files, and for how many
    (counted as phase 1 ends, when the helpers' answers are let go)."""
    flags = IdentityFlags()
    counted: list[tuple[int, int]] = []

    def counting(share: Any) -> None:
        counted.append((len(share.firsts), len(share.insides)))
        _SHARE_CLOSE(share)

    monkeypatch.setattr(inputs._Share, "close", counting)
    with inputs.Scan(paths, None, flags) as scan:
        helped = scan.share is not None and bool(scan.share.runs)
        found, unknown, plan = inputs.prepare(scan, flags)
    return ([(i.path, i.reader.NAME, i.info, i.size, i.digest, i.claim, i.section) for i in found], unknown,
            plan), helped, (counted[0] if counted else (0, 0))


def test_helpers_find_what_one_process_finds(
    tmp_path: Path, shared: Any, dlrm_files: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = _job(tmp_path, dlrm_files)
    shared(False)
    alone, helped, _ = _looked(paths, monkeypatch)
    assert not helped
    shared(True)
    together, helped, (firsts, insides) = _looked(paths, monkeypatch)
    assert helped and firsts >= 10 and insides >= 10  # (the helpers answered for most files)
    assert together == alone
    found = alone[0]
    assert len(found) == 24 + 8 + 2  # (the trace named itself again is read once; the Metrix file twice)
    assert [f[6] for f in found if f[1] == "metrix"] == [0, 1]
    assert alone[1] == [tmp_path / "metrix" / "notes.txt"]


@pytest.mark.parametrize("on", [False, True], ids=["alone", "shared"])
def test_phase_one_lets_go_of_each_files_hash_and_the_helpers_answers(
    tmp_path: Path, shared: Any, dlrm_files: list[Path], on: bool
) -> None:
    """The CLI's scan lives as long as the ingest. It held a future per file for its hash (a Future and
    its Condition: ~1.3 kB) and the helpers' answers beside the inputs made of them: 8,192 small files
    kept ~15 MB of the writer's memory for nothing. Once ``prepare`` has made the inputs, both are let go."""
    paths = _job(tmp_path, dlrm_files)
    shared(on)
    flags = IdentityFlags()
    with inputs.Scan(paths, None, flags) as scan:
        assert len(scan.hashes) >= 30 and (scan.share is not None) == on
        found, _unknown, _plan = inputs.prepare(scan, flags)
        assert len(found) == 34 and all(i.digest.startswith("blake3:") for i in found)
        assert scan.hashes == []
        if scan.share is not None:
            assert not (scan.share.firsts or scan.share.insides or scan.share.helper_of)


def test_a_shared_ingest_stores_what_one_process_stores(tmp_path: Path, shared: Any, dlrm_files: list[Path]) -> None:
    paths = _job(tmp_path, dlrm_files)
    stores = {}
    for on in (False, True):
        shared(on)
        db = tmp_path / f"s{on}.db"
        report = ingest.ingest_paths(paths, str(db), run="job")
        assert len(report.ingested) == 34
        stores[on] = _content(db)
    assert stores[True] == stores[False] and len(stores[True]["activity"]) > 1000


def _damage(tmp_path: Path, case: str, dlrm_files: list[Path]) -> list[Path]:
    """The job with one problem late in its order (in a helper's files), or two (one early)."""
    paths = _job(tmp_path, dlrm_files)
    dlrm = tmp_path / "dlrm"
    late = sorted(dlrm.glob("worker*"))[-1]
    if case == "rank-conflict":  # a trace saying rank 0 in a folder saying rank 5
        (dlrm / "rank0005").mkdir()
        shutil.copy(sorted(dlrm.glob("worker0*"))[0], dlrm / "rank0005" / "trace.json")
    elif case == "damaged":  # a trace whose head is not JSON any more
        late.write_bytes(b'{"traceEvents": [ {"ph": "X", ' + b"\x00" * 64)
    elif case == "empty-folder":
        (tmp_path / "nothing").mkdir()
        (tmp_path / "nothing" / "a.txt").write_text("x\n")
        paths.insert(-1, tmp_path / "nothing")
    elif case == "missing-path":
        paths.append(tmp_path / "no-such-folder")
    elif case == "unknown-named":
        paths.append(tmp_path / "metrix" / "notes.txt")
    elif case == "two":  # an early file the rocprofv3 reader refuses, and a late conflict
        early = sorted((tmp_path / "rocprof" / "rank0000").rglob("*_kernel_trace.csv"))[0]
        early.write_text("Kind,Agent_Id\n" + "\x00" * 10 + "\n")
        (dlrm / "rank0005").mkdir()
        shutil.copy(sorted(dlrm.glob("worker0*"))[0], dlrm / "rank0005" / "trace.json")
    return paths


@pytest.mark.parametrize("case", ["rank-conflict", "damaged", "empty-folder", "missing-path", "unknown-named", "two"])
def test_an_error_among_a_helpers_files_is_the_one_raised_alone(
    tmp_path: Path, shared: Any, case: str, dlrm_files: list[Path]
) -> None:
    paths = _damage(tmp_path, case, dlrm_files)
    errors = {}
    for on in (False, True):
        shared(on)
        with pytest.raises(ProfdbError) as e:
            inputs.prepare(paths, IdentityFlags())
        errors[on] = (type(e.value), str(e.value))
    assert errors[True] == errors[False]


def test_a_helper_that_dies_costs_only_time(
    tmp_path: Path, shared: Any, monkeypatch: pytest.MonkeyPatch, dlrm_files: list[Path]
) -> None:
    paths = _job(tmp_path, dlrm_files)
    shared(False)
    alone, _, _ = _looked(paths, monkeypatch)
    shared(True)
    monkeypatch.setattr(inputs, "_look", lambda *a: os._exit(3))
    together, helped, answered = _looked(paths, monkeypatch)
    assert helped and answered == (0, 0)
    assert together == alone


def test_no_helper_is_forked_beside_a_running_thread(
    tmp_path: Path, dlrm_files: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fork copies only the calling thread: a lock another thread holds would stay held in the
    helper, so a process with other threads running looks at every file itself."""
    paths = _job(tmp_path, dlrm_files)
    monkeypatch.setattr(inputs, "SHARE_MIN_FILES", 6)
    monkeypatch.setattr(inputs, "SHARE_FILES_EACH", 2)
    monkeypatch.setattr(inputs, "cores", lambda: 3)
    running = threading.active_count() > 1  # (threads other tests left running count too)
    if not running:
        with inputs.Scan(paths) as scan:
            assert scan.share is not None
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        with inputs.Scan(paths) as scan:
            assert scan.share is None
    finally:
        stop.set()
        t.join()


def test_a_problem_met_while_a_helper_detects_a_format_is_raised_as_alone(
    tmp_path: Path, shared: Any, monkeypatch: pytest.MonkeyPatch, dlrm_files: list[Path]
) -> None:
    """A reader that fails on one late file while formats are detected (here made to, in every
    process): the error the parent meets when it looks at that file again, as it would alone."""
    paths = _job(tmp_path, dlrm_files)
    late = sorted((tmp_path / "dlrm").glob("worker*"))[-2]
    detected = inputs._detected

    def failing(path: Path, forced: Any, explicit: bool) -> Any:
        if path == late:
            raise ProfdbError(f"{path}: cannot be detected")
        return detected(path, forced, explicit)

    monkeypatch.setattr(inputs, "_detected", failing)
    errors = {}
    for on in (False, True):
        shared(on)
        with pytest.raises(ProfdbError) as e:
            inputs.prepare(paths, IdentityFlags())
        errors[on] = str(e.value)
    assert errors[True] == errors[False] == f"{late}: cannot be detected"


#: a CLI ingest whose helpers stop at their first file (they print their pid), the parent going on
_STUCK_HELPERS = r"""
import os, sys, time
from profdb.store import inputs
from profdb.cli import main as cli_main
inputs.SHARE_MIN_FILES, inputs.SHARE_FILES_EACH = 6, 2
inputs.cores = lambda: 3
parent, check = os.getpid(), inputs.check_readable
def stuck(path, *args):
    if os.getpid() != parent:
        os.write(1, f"helper {os.getpid()}\n".encode())
        time.sleep(600)
    return check(path, *args)
inputs.check_readable = stuck
sys.argv = ["profdb", *sys.argv[1:]]
cli_main.main()
"""


def _stuck(tmp_path: Path, dlrm_files: list[Path]) -> tuple[subprocess.Popen[str], list[int], Path]:
    db = tmp_path / "s.db"
    proc = subprocess.Popen(
        [sys.executable, "-c", _STUCK_HELPERS, "ingest", "--db", str(db), *map(str, _job(tmp_path, dlrm_files))],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        env={k: v for k, v in os.environ.items() if k != "PROFDB_DB"},
    )
    assert proc.stdout is not None
    helpers = [int(proc.stdout.readline().split()[1]) for _ in range(2)]
    return proc, helpers, db


def test_ctrl_c_while_helpers_look_stops_them_and_writes_nothing(tmp_path: Path, dlrm_files: list[Path]) -> None:
    """A terminal's Ctrl-C reaches the whole process group: the helpers leave it to the parent, which
    stops them and says the ingest was stopped in one line (exit 130); no store is made."""
    proc, helpers, db = _stuck(tmp_path, dlrm_files)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in err and err.count("\n") == 1, err
    assert not any(_alive(p) for p in helpers)
    assert not db.exists()


def test_helpers_die_with_a_killed_parent(tmp_path: Path, dlrm_files: list[Path]) -> None:
    proc, helpers, _db = _stuck(tmp_path, dlrm_files)
    proc.kill()
    proc.communicate(timeout=60)
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in helpers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(p) for p in helpers)


@pytest.mark.parametrize("on", [False, True])
def test_source_rows_hold_each_files_path_as_phase_one_resolved_it(
    tmp_path: Path, shared: Any, on: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``source_file.path`` is the file's path with every link resolved, as phase 1 found it (and made
    the inputs unique by), by this process or by its helpers: inputs named through a linked folder,
    one file of which is itself a link to a file elsewhere."""
    import sqlite3

    shared(on)
    job = tmp_path / "job"
    shutil.copytree(EXAMPLES / "rocprof-8ranks", job)
    trace = next((job / "rank0003").rglob("*_kernel_trace.csv"))
    elsewhere = tmp_path / "elsewhere" / trace.name
    elsewhere.parent.mkdir()
    trace.rename(elsewhere)
    trace.symlink_to(elsewhere)
    (tmp_path / "via").symlink_to(job)
    named = sorted((tmp_path / "via").glob("rank*"))
    files = sorted(p for d in named for p in d.rglob("*.csv"))
    assert len(files) == 24
    _answer, helped, _counted = _looked(named, monkeypatch)
    assert helped == on
    db = tmp_path / "s.db"
    ingest.ingest_paths(named, str(db), run="linked")
    with sqlite3.connect(db) as c:
        stored = sorted(r[0] for r in c.execute("select path from source_file"))
    assert stored == sorted(os.path.realpath(p) for p in files)
    assert str(elsewhere) in stored and not any(str(tmp_path / "via") in p for p in stored)
