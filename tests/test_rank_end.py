"""How each rank ended (issue 13): the exit status, signal and times `profdb record` writes into each
rank's manifest are kept in the store, and ranks that failed, were killed or never ended are flagged
in `runs`, `ranks`, the questions' notes, compare and the report.

The main case is a real job: torchrun starts two ranks of tests/apps/torch_app.py (CPU torch, gloo)
under `profdb record`; rank 1 is killed by SIGKILL once its trace is written and rank 0 has ended."""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path

import pytest

from conftest import Invoke, sql
from profdb.store.manifest import RankManifest, rank_end
from test_record_launchers import APPS, PROFDB, manifests, needs_torchrun, run, torchrun

# rank 1 waits until rank 0 has recorded its exit status (so torchrun's teardown after the kill cannot
# reach rank 0), then is killed by SIGKILL (the shell becomes python, which kills itself: torchrun
# reads $$ in its arguments as an escaped $)
KILL_RANK1 = (
    '"$0" "$1" || exit $?; '
    'if [ "$RANK" = 1 ]; then '
    '  m="$PROFDB_RANK_DIR/../rank0000/profdb-rank.json"; '
    '  while ! grep -q \'"exit_code": 0\' "$m" 2>/dev/null; do sleep 0.2; done; '
    "  exec \"$0\" -c 'import os, signal; os.kill(os.getpid(), signal.SIGKILL)'; "
    "fi"
)


@needs_torchrun
@pytest.mark.slow
def test_a_rank_killed_in_a_real_torchrun_job_is_flagged(tmp_path: Path, run_cli: Invoke) -> None:
    out = tmp_path / "out"
    p = run(
        torchrun(2)
        + [PROFDB, "record", "-o", str(out), "--run", "killed", "--", "sh", "-c", KILL_RANK1, sys.executable,
           str(APPS / "torch_app.py")]
    )
    assert p.returncode != 0  # torchrun reports the failed worker
    ms = manifests(out)
    assert (ms[0]["exit_code"], ms[1]["exit_code"]) == (0, 137), p.stderr[-3000:]
    # rank 1 wrote its trace before it was killed: both ranks have data
    assert (out / "rank0001" / "trace.json").is_file()

    db = tmp_path / "s.db"
    r = run_cli("ingest", "--db", db, out / "rank0000", out / "rank0001")
    assert "ranks that did not end well (profiles may be cut short): 1 (rank 1 killed by signal 9 (SIGKILL))" in r.output
    # the store keeps what the manifests say
    rows = sql(db, "select global_rank, exit_code, signal, end_status, started_at, ended_at from rank_v order by 1")
    for (g, code, sig, status, started, ended), m, want in zip(rows, (ms[0], ms[1]), ((0, None, "ok"), (137, 9, "killed"))):
        assert (code, sig, status) == want
        assert datetime.fromisoformat(started) == datetime.fromisoformat(m["started_at"]).replace(tzinfo=None)
        assert datetime.fromisoformat(ended) == datetime.fromisoformat(m["ended_at"]).replace(tzinfo=None)
    assert sql(db, "select global_rank, end_status, exit_code, signal from rank_end_v order by 1") == [
        (0, "ok", 0, None),
        (1, "killed", 137, 9),
    ]
    # runs, ranks
    (row,) = json.loads(run_cli("runs", "--db", db, "--format", "json").stdout)
    assert row["ended_abnormally"] == "killed: 1"
    r = run_cli("ranks", "--db", db, "--format", "json")
    assert [x["end"] for x in json.loads(r.stdout)] == ["ok", "killed by signal 9 (SIGKILL)"]
    assert "1 rank(s) did not end well, their profiles may be cut short: rank 1 killed by signal 9" in r.stderr
    # a question's notes and the report
    r = run_cli("query", "--db", db, "--run", "killed", "--imbalance")
    assert "rank 1 killed by signal 9 (SIGKILL)" in r.stderr and "cut short" in r.stderr
    html = tmp_path / "r.html"
    run_cli("report", "--db", db, "--run", "killed", "-o", html)
    assert 'id="rank-ends"' in html.read_text() and "rank 1 killed by signal 9 (SIGKILL)" in html.read_text()
    # merged into another store, the ranks keep how they ended
    run_cli("merge", "--db", tmp_path / "m.db", db)
    assert sql(tmp_path / "m.db", "select global_rank, end_status from rank_end_v order by 1") == [
        (0, "ok"),
        (1, "killed"),
    ]


@pytest.mark.parametrize(
    "exit_code, ended, status, signal",
    [
        (0, True, "ok", None),
        (3, True, "failed", None),
        (127, True, "failed", None),
        (137, True, "killed", 9),
        (143, True, "killed", 15),
        (None, False, "unfinished", None),
    ],
)
def test_rank_end_from_a_manifest(exit_code: int | None, ended: bool, status: str, signal: int | None) -> None:
    m = RankManifest(
        0,
        started_at="2026-11-22T14:00:00+01:00",
        ended_at="2026-11-22T14:05:00+01:00" if ended else None,
        exit_code=exit_code,
    )
    end = rank_end(m)
    assert (end.end_status, end.signal, end.exit_code) == (status, signal, exit_code)
    assert end.started_at == datetime(2026, 11, 22, 13, 0)  # stored as UTC
    assert end.abnormal == (status != "ok")


def test_files_without_a_manifest_leave_the_end_unknown(data: Path, db_path: Path, run_cli: Invoke) -> None:
    run_cli("ingest", "--db", db_path, data / "kineto" / "torchrun4_cpu")
    assert sql(db_path, "select count(*) from rank where end_status is null and exit_code is null") == [(4,)]
    assert sql(db_path, "select count(*) from rank_end_v") == [(0,)]
    (row,) = json.loads(run_cli("runs", "--db", db_path, "--format", "json").stdout)
    assert row["ended_abnormally"] == ""


def test_every_field_of_a_ranks_end_reaches_its_stored_facts(monkeypatch: pytest.MonkeyPatch) -> None:
    """``ingest_load._facts`` copies ``RankEnd``'s fields by name (``asdict`` deep-copied them): a field
    added to ``RankEnd`` and not passed on would be silently lost, so each one is checked here."""
    from dataclasses import fields

    from profdb.store import ingest_load
    from profdb.store.identity import Identity
    from profdb.store.manifest import RankEnd

    values = {"exit_code": 137, "signal": 9, "started_at": datetime(2026, 1, 2, 3, 4, 5),
              "ended_at": datetime(2026, 1, 2, 3, 5, 6), "end_status": "killed"}
    assert {f.name for f in fields(RankEnd)} == set(values)  # (a new field: give it a value here)
    end = RankEnd(**values)
    monkeypatch.setattr(ingest_load, "rank_end", lambda m: end)
    ident = Identity(3, 1, "node7", 8, 0, 4242, 1, "manifest", manifest=object())  # type: ignore[arg-type]
    facts = ingest_load._facts(ident)
    assert {name: getattr(facts, name) for name in values} == values
    assert (facts.hostname, facts.local_rank, facts.node_rank, facts.pid, facts.device) == ("node7", 1, 0, 4242, 1)
