"""PostgreSQL: a write into a run (ingest, transfer, reclassify) keeps the run's analysis after its commit
(``timeline.keep_analysis``), so nodes writing one run at once no longer take turns analysing the whole
run. A writer that finds another one analysing does not wait for it: that one analyses again once it lets
go of the run's lock, and its analysis then covers the writer's commit. Checked on the real 4-rank
torchrun job (tests/data/kineto/torchrun4_cpu), against the same job ingested at once into SQLite."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from test_run_analysis_cache import both_ways

from profdb.store import timeline
from profdb.store.db import make_engine, resolve_url
from profdb.store.ingest import ingest_paths

DATA = Path(__file__).parent / "data"
TRACES = sorted((DATA / "kineto/torchrun4_cpu").glob("*.json.gz"))


def _key(url: str, run: str) -> int:
    engine = make_engine(resolve_url(url))
    try:
        with engine.connect() as conn:
            rid = conn.exec_driver_sql("SELECT id FROM run WHERE name = %s", (run,)).scalar_one()
    finally:
        engine.dispose()
    return timeline.CLOCK_LOCK_SPACE | int(rid)


def _lock_is_free(url: str, key: int) -> bool:
    engine = make_engine(resolve_url(url))
    try:
        with engine.connect() as conn:
            free = bool(conn.exec_driver_sql("SELECT pg_try_advisory_lock(%s::int8)", (key,)).scalar())
            if free:
                conn.exec_driver_sql("SELECT pg_advisory_unlock(%s::int8)", (key,))
    finally:
        engine.dispose()
    return free


def _kept_after_a_write(url: str) -> str | None:
    """``keep_analysis`` of run 'job' as after a write (its kept analysis made stale), on an engine that lives
    on, as in a long Python session; the run's lock must be free after it, whatever it returns."""
    engine = make_engine(resolve_url(url))
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql("UPDATE run_analysis SET fingerprint = 'stale'")
        note = timeline.keep_analysis(engine, "job")
        assert _lock_is_free(url, _key(url, "job"))
        return note
    finally:
        engine.dispose()


@pytest.fixture(scope="module")
def whole_job(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The job's findings with its four ranks ingested at once into SQLite."""
    db = tmp_path_factory.mktemp("whole") / "s.db"
    ingest_paths(TRACES, str(db), run="job")
    kept, computed = both_ways(f"sqlite:///{db}", "job")
    assert kept == computed
    return kept


@pytest.mark.parametrize("held_at", ["analysing", "letting_go"])
def test_a_writer_does_not_wait_for_another_ones_analysis_which_then_covers_it(
    pg_url: str, whole_job: Any, monkeypatch: Any, held_at: str
) -> None:
    """Node A analyses the run; node B's ranks are committed while A holds the run's lock, either during
    A's analysis (A's snapshot is older than B's commit) or after A's last check found its analysis
    current, before A let go. B returns at once; A analyses again, and the kept analysis is of all ranks."""
    ingest_paths(TRACES[:2], pg_url, run="job")
    first, _ = both_ways(pg_url, "job")
    assert first is not None and sorted(first.ranks) == [0, 1]

    inside, go_on = threading.Event(), threading.Event()
    passes: list[str] = []
    checks: list[bool] = []
    analyse, fingerprints = timeline._analyse_and_keep, timeline._fingerprints

    def hold() -> None:
        inside.set()
        assert go_on.wait(120)

    def analysing(conn: Any, run: str, kept: Any) -> Any:
        passes.append(threading.current_thread().name)
        if threading.current_thread().name == "A" and held_at == "analysing" and len(passes) == 1:
            hold()
        return analyse(conn, run, kept)

    def checking(conn: Any, run: str) -> tuple[str, str | None]:
        now, kept = fingerprints(conn, run)
        if threading.current_thread().name == "A":
            checks.append(now == kept)
            if held_at == "letting_go" and checks == [False, False, True]:  # (outer, inner, inner after its pass)
                hold()
        return now, kept

    monkeypatch.setattr(timeline, "_analyse_and_keep", analysing)
    monkeypatch.setattr(timeline, "_fingerprints", checking)
    # (A's own write, as the kept analysis sees it: not current)
    engine = make_engine(resolve_url(pg_url))
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql("UPDATE run_analysis SET fingerprint = 'stale'")
    finally:
        engine.dispose()
    notes: dict[str, str | None] = {}
    a = threading.Thread(name="A", target=lambda: notes.update(A=timeline.keep_analysis(
        make_engine(resolve_url(pg_url)), "job")))
    a.start()
    assert inside.wait(120)

    # node B: its ranks committed while A holds the lock; B returns without analysing or waiting
    b = threading.Thread(name="B", target=lambda: notes.update(B=str(ingest_paths(TRACES[2:], pg_url, run="job").notes)))
    b.start()
    b.join(120)
    assert not b.is_alive(), "B waited for A's analysis"
    assert passes == ["A"] and notes["B"] == "[]"
    assert both_ways(pg_url, "job")[0] is None  # (nothing current kept: a question computes it meanwhile)

    go_on.set()
    a.join(120)
    assert not a.is_alive() and notes["A"] is None
    assert passes == ["A", "A"]  # A's first analysis did not see B's commit: A analysed again
    kept, computed = both_ways(pg_url, "job")
    assert kept is not None and kept == computed == whole_job
    assert sorted(kept.ranks) == [0, 1, 2, 3]
    assert _lock_is_free(pg_url, _key(pg_url, "job"))


def test_an_analysis_that_fails_after_the_commit_is_a_note_and_lets_go_of_the_lock(
    pg_url: str, whole_job: Any, monkeypatch: Any
) -> None:
    def broken(conn: Any, run: str, kept: Any) -> Any:
        conn.exec_driver_sql("SELECT 1/0")  # (a database error inside the analysis' transaction)

    monkeypatch.setattr(timeline, "_analyse_and_keep", broken)
    report = ingest_paths(TRACES, pg_url, run="job")
    assert len(report.files) == 4  # committed
    assert len(report.notes) == 1 and report.notes[0].startswith("run 'job': its analysis was not kept (")
    assert "division by zero" in report.notes[0]
    assert both_ways(pg_url, "job")[0] is None
    assert _lock_is_free(pg_url, _key(pg_url, "job"))
    note = _kept_after_a_write(pg_url)
    assert note is not None and "division by zero" in note
    monkeypatch.undo()
    assert timeline.keep_analysis(make_engine(resolve_url(pg_url)), "job") is None  # (the next write's)
    kept, computed = both_ways(pg_url, "job")
    assert kept == computed == whole_job


def test_an_analysis_replaced_while_the_run_stays_the_same_is_a_note_not_a_loop(
    pg_url: str, monkeypatch: Any
) -> None:
    """The holder analyses once per change of the run; if what it kept is still not current although the
    run did not change (another process replaced it), it stops with a note instead of analysing forever."""
    ingest_paths(TRACES, pg_url, run="job")
    real = timeline._analyse_and_keep
    passes: list[int] = []

    def overtaken(conn: Any, run: str, kept: Any) -> Any:
        passes.append(1)
        assert len(passes) < 5, "analysing again and again"
        got = real(conn, run, kept)
        conn.exec_driver_sql("UPDATE run_analysis SET fingerprint = 'overtaken'")  # (as another process would)
        return got

    monkeypatch.setattr(timeline, "_analyse_and_keep", overtaken)
    note = _kept_after_a_write(pg_url)
    assert note is not None and "another process replaced or removed it while the run stayed the same" in note
    assert len(passes) == 1


def test_a_lock_that_is_not_this_sessions_at_the_end_is_a_note(pg_url: str, monkeypatch: Any) -> None:
    """Through a pooler that moves transactions between server sessions, the unlock would run in another
    session than the lock: it lets go of nothing, and says so (here the lock is let go of early instead)."""
    ingest_paths(TRACES, pg_url, run="job")
    key = _key(pg_url, "job")
    real = timeline._analyse_and_keep

    def early(conn: Any, run: str, kept: Any) -> Any:
        got = real(conn, run, kept)
        conn.exec_driver_sql("SELECT pg_advisory_unlock(%s::int8)", (key,))
        return got

    monkeypatch.setattr(timeline, "_analyse_and_keep", early)
    note = _kept_after_a_write(pg_url)
    assert note is not None and "was not this connection's to let go of" in note


def test_progress_says_when_the_run_is_analysed(store_url: str) -> None:
    """After the last file the ingest analyses the run (seconds on a large one): the progress callback is
    told, so the bar on a terminal says so instead of sitting at its end (both engines)."""
    events: list[tuple[str, str, int, int]] = []
    ingest_paths(TRACES, store_url, run="job", progress=lambda *e: events.append(e))
    total = events[0][3]
    assert [e[0] for e in events] == ["start", "file", "file", "file", "file", "analysis"]
    assert events[-1] == ("analysis", "job", total, total)


@pytest.mark.parametrize("command", ["ingest", "export", "reclassify"])
def test_an_interrupt_while_the_run_is_analysed_says_the_rows_are_in(
    pg_url: str, tmp_path: Path, run_cli: Any, monkeypatch: Any, command: str
) -> None:
    """Ctrl-C after the commit, while the run's analysis is kept (PostgreSQL): exit 130, and the message
    says the files were committed, not that the command was rolled back and wrote nothing."""
    import signal

    from profdb.cli.main import Interrupted

    def interrupted(*a: Any, **k: Any) -> Any:
        raise Interrupted(signal.SIGINT)

    args: list[Any] = ["ingest", "--db", pg_url, "--run", "job", *TRACES]
    if command == "export":
        node = tmp_path / "node.db"
        ingest_paths(TRACES, str(node), run="job")
        args = ["export", "--db", node, "--to", pg_url]
    elif command == "reclassify":
        ingest_paths(TRACES, pg_url, run="job")
        args = ["reclassify", "--db", pg_url, "--run", "job", "--comm-pattern", "^aten::mm$"]
    monkeypatch.setattr(timeline, "keep_analysis", interrupted)
    r = run_cli(*args, ok=False)
    assert r.exit_code == 130
    said = r.stderr.strip().splitlines()[-1]
    assert said.startswith(f"profdb {command}: interrupted by SIGINT; ") and "rolled back" not in said
    assert {"ingest": "its files were committed to run 'job'", "export": "run 'job' was copied",
            "reclassify": "run 'job' was reclassified"}[command] in said
    assert "the run's analysis was not kept" in said or "its analysis was not kept" in said
    monkeypatch.undo()
    kept, computed = both_ways(pg_url, "job")
    assert kept is None and len(computed.ranks) == 4  # (the rows are in; the questions compute the analysis)


def test_a_node_killed_while_it_analyses_leaves_its_rows_and_no_lock(pg_url: str, whole_job: Any) -> None:
    """SIGKILL of a node while it holds the run's lock and analyses (after its commit): its rows are in, the
    server lets go of the lock with the session, the questions compute the analysis meanwhile, and running
    the ingest again (every file present) keeps it."""
    import os
    import signal
    import subprocess
    import sys

    ingest_paths(TRACES[:2], pg_url, run="job")
    node = f"""
import sys, time
from profdb.store import timeline
real = timeline._analyse_and_keep
def held(*a, **k):
    print("holding", flush=True)
    time.sleep(120)
    return real(*a, **k)
timeline._analyse_and_keep = held
from profdb.store.ingest import ingest_paths
ingest_paths({[str(t) for t in TRACES[2:]]!r}, {pg_url!r}, run="job")
"""
    p = subprocess.Popen([sys.executable, "-c", node], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "holding"
        assert not _lock_is_free(pg_url, _key(pg_url, "job"))
    finally:
        os.kill(p.pid, signal.SIGKILL)
        p.wait(30)
    for _ in range(100):  # (the server ends the session once it sees the connection closed)
        if _lock_is_free(pg_url, _key(pg_url, "job")):
            break
        time.sleep(0.05)
    assert _lock_is_free(pg_url, _key(pg_url, "job"))
    kept, computed = both_ways(pg_url, "job")
    assert kept is None and computed == whole_job  # (all four ranks' rows are in; a question computes)
    report = ingest_paths(TRACES, pg_url, run="job")
    assert [f.skipped for f in report.files] == [True] * 4 and not report.notes
    kept, computed = both_ways(pg_url, "job")
    assert kept == computed == whole_job
