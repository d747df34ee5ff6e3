"""The run analysis kept per run (migration 0007: run_analysis, rank_analysis, step_analysis): written by
every ingest, transfer and reclassify of a run, read by the questions while the run still has the
fingerprint it was computed under, else computed as before. The kept answer must be the computed one,
question by question, on real traces (the 8-rank DLRM job, HTA's 2 ranks, the torchrun CPU job, the
rocprofv3 example) and on generated multi-host runs (shifted clocks, a host whose clock cannot be
placed, a truncated profile)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from conftest import Invoke, sql
from gen_collective_run import generate
from pg_fixtures import query_url

from profdb.store import findings, timeline, verdict
from profdb.store.db import alembic_config, make_engine, open_db, resolve_url
from profdb.store.scope import resolve_run

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).parents[1]
QUESTIONS = ("--imbalance", "--stragglers", "--steps", "--ranks", "--collectives")




def both_ways(url: str, run: str) -> tuple[verdict.Findings | None, verdict.Findings]:
    """The run's findings as kept in the store (None when there is no current row) and as computed now
    from its timelines (what every question did before 0007)."""
    engine = open_db(url)
    try:
        with engine.connect() as conn:
            scope = resolve_run(conn, run)
            kept = findings.stored_findings(conn, scope)
            computed = verdict.findings_of(timeline.analyze_run(conn, scope), findings.identities(scope))
    finally:
        engine.dispose()
    return kept, computed


def answers(run_cli: Invoke, db: Any, run: str) -> dict[str, tuple[str, str]]:
    """Every question's stdout (csv) and stderr (headline, notes) for ``run``."""
    out = {}
    for q in QUESTIONS:
        r = run_cli("query", q, "--top", "0", "--db", db, "--run", run, "--format", "csv")
        out[q] = (r.stdout, r.stderr)
    return out


def write(url: str, statement: str) -> None:
    engine = make_engine(resolve_url(url))
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(statement)
    finally:
        engine.dispose()


def kept_row(url: str, run: str) -> tuple[Any, ...] | None:
    rows = query_url(resolve_url(url), "select a.fingerprint, a.computed_at, a.verdict_line, a.instances "
                     f"from run_analysis a join run r on r.id = a.run_id where r.name = '{run}'")
    return rows[0] if rows else None


def _real_runs(tmp: Path, dlrm: list[Path]) -> Iterator[tuple[str, list[Path]]]:
    yield "dlrm", dlrm
    yield "hta", sorted((DATA / "kineto/hta_trace_filter_2ranks").glob("*.json.gz"))
    yield "torchrun_cpu", sorted((DATA / "kineto/torchrun4_cpu").glob("*.json.gz"))
    yield "rocprof8", sorted((ROOT / "examples/rocprof-8ranks").glob("rank*"))
    shifted = generate(tmp / "shifted", nodes=3, late_rank=3, clock_ns={0: 0, 1: 3_250_000_000, 2: -1_700_000_000})
    yield "shifted", sorted(shifted.root.glob("rank*"))


def test_kept_analysis_is_the_computed_one_on_real_runs(
    dlrm_files: list[Path], tmp_path: Path, run_cli: Invoke
) -> None:
    """Per run: a current row after ingest, equal to the analysis computed from the same timelines, and
    every question answers the same with the row and without it (deleted: the questions compute)."""
    db = tmp_path / "s.db"
    runs = list(_real_runs(tmp_path, dlrm_files))
    for run, paths in runs:
        run_cli("ingest", "--db", db, "--run", run, *paths)
    seen_verdicts = set()
    for run, _paths in runs:
        kept, computed = both_ways(str(db), run)
        assert kept is not None, run
        assert kept == computed, run
        seen_verdicts.add(kept.decided.line.split(":")[0] if kept.decided else None)
        with_row = answers(run_cli, db, run)
        rank_rows = sql(db, "select count(*) from rank_analysis_v where run = ?", run)[0][0]
        assert rank_rows == len(computed.ranks) > 0, run
        con = sqlite3.connect(db)
        with con:
            con.execute("delete from run_analysis where run_id = (select id from run where name = ?)", (run,))
        con.close()
        assert both_ways(str(db), run)[0] is None
        assert answers(run_cli, db, run) == with_row, run
    # the runs cover a named straggler and "no clear straggler"
    assert {"likely straggler", "no clear straggler"} <= seen_verdicts
    # the per-rank figures for sqlite3 users: DLRM's rank 7 entered last at 5 of its 8 collectives
    run_cli("ingest", "--db", tmp_path / "d.db", "--run", "dlrm", *dlrm_files)
    assert sql(tmp_path / "d.db", "select global_rank, entered_last from rank_analysis_v order by wait_caused_ns desc "
               "limit 1") == [(7, 5)]


def test_the_questions_read_the_kept_row_and_never_a_stale_one(tmp_path: Path, run_cli: Invoke) -> None:
    """A row whose fingerprint matches is what the questions say (a line written into it by hand shows);
    once the run's data changes under it (a rank's host renamed by hand, a file more) it is not used."""
    gen = generate(tmp_path / "gen", nodes=2, late_rank=1)
    db = tmp_path / "s.db"
    run_cli("ingest", "--db", db, "--run", "gen", *sorted(gen.root.glob("rank*")))
    line = run_cli("query", "--imbalance", "--db", db).stderr.splitlines()[0]
    assert line.startswith("likely straggler: rank 1 (host node00")
    con = sqlite3.connect(db)
    with con:
        con.execute("update run_analysis set verdict_line = 'likely straggler: kept row'")
    assert run_cli("query", "--imbalance", "--db", db).stderr.splitlines()[0] == "likely straggler: kept row"
    with con:  # by hand, bypassing profdb: the fingerprint (ranks and their hosts) no longer matches
        con.execute("update rank set hostname = 'renamed' where hostname = 'node00'")
    con.close()
    line = run_cli("query", "--imbalance", "--db", db).stderr.splitlines()[0]
    assert line.startswith("likely straggler: rank 1 (host renamed"), line
    # profdb sql --write drops every kept analysis: the questions compute until the next ingest
    run_cli("ingest", "--db", db, "--run", "gen", *sorted(gen.root.glob("rank*")))  # nothing new: no-op
    run_cli("sql", "--write", "--db", db, "update rank set hostname = 'again' where hostname = 'renamed'")
    assert sql(db, "select count(*) from run_analysis") == [(0,)]
    assert run_cli("query", "--imbalance", "--db", db).stderr.startswith("likely straggler: rank 1 (host again")


def test_a_second_ingest_and_a_reclassify_rewrite_the_row(
    dlrm_files: list[Path], store_url: str, run_cli: Invoke
) -> None:
    """DLRM's ranks in two ingests: the first keeps an analysis of ranks 0-3, the second one of all 8 (the
    one a single ingest of all gives); a reclassify (its files' rules change) writes the row again."""
    run_cli("ingest", "--db", store_url, "--run", "dlrm", *dlrm_files[:4])
    first = kept_row(store_url, "dlrm")
    kept, computed = both_ways(store_url, "dlrm")
    assert first is not None and kept == computed and sorted(kept.ranks) == [0, 1, 2, 3]
    run_cli("ingest", "--db", store_url, "--run", "dlrm", *dlrm_files[4:])
    second = kept_row(store_url, "dlrm")
    kept, computed = both_ways(store_url, "dlrm")
    assert second is not None and second[0] != first[0] and kept == computed and sorted(kept.ranks) == list(range(8))
    assert kept.decided is not None and kept.decided.line.startswith("likely straggler: rank 7 ")
    assert second[2] == kept.decided.line and second[3] == 8

    r = run_cli("reclassify", "--db", store_url, "--run", "dlrm", "--comm-pattern", "^Memcpy")
    assert "name(s) moved" in r.stderr
    third = kept_row(store_url, "dlrm")
    assert third is not None and third[0] != second[0] and third[1] >= second[1]
    kept, computed = both_ways(store_url, "dlrm")
    assert kept == computed
    # a dry run changes nothing, the kept row included
    run_cli("reclassify", "--db", store_url, "--run", "dlrm", "--dry-run")
    assert kept_row(store_url, "dlrm") == third


def test_truncated_and_unplaced_runs_keep_what_they_compute(tmp_path: Path, run_cli: Invoke) -> None:
    """A host whose clock cannot be placed (its ranks never leave a collective together: a note, its ranks
    left out) and a truncated profile (a rank without its last calls, written through profdb sql --write,
    then a reclassify to keep the analysis again): kept == computed, notes included."""
    db = tmp_path / "s.db"
    gen = generate(tmp_path / "gen", nodes=2, late_rank=1, clock_ns={0: 0, 1: 2_000_000_000})
    path = gen.files[3]
    lines = path.read_text().splitlines()
    head = lines[0].replace('"', "").split(",")
    end, name = head.index("End_Timestamp"), head.index("Kernel_Name")
    import csv
    import io

    rows = list(csv.reader(lines))
    for row in rows[1:]:
        if "ncclDevKernel" in row[name]:
            row[end] = str(int(row[end]) + 1_000_000)
    buf = io.StringIO()
    csv.writer(buf, quoting=csv.QUOTE_MINIMAL).writerows(rows)
    path.write_text(buf.getvalue())
    run_cli("ingest", "--db", db, "--run", "nohost", *sorted(gen.root.glob("rank*")))
    kept, computed = both_ways(str(db), "nohost")
    assert kept is not None and kept == computed
    assert any("host node01: no blocking collective in common" in n for n in kept.clocks.notes + kept.notes)

    trunc = generate(tmp_path / "trunc", nodes=2, late_rank=1)
    run_cli("ingest", "--db", db, "--run", "trunc", *sorted(trunc.root.glob("rank*")))
    run_cli("sql", "--write", "--db", db, "delete from collective_call where rank_id = (select r.id from rank r "
            "join run on run.id = r.run_id where run.name = 'trunc' and r.global_rank = 2) and seq >= 28")
    assert both_ways(str(db), "trunc")[0] is None  # dropped by sql --write
    computed_answers = answers(run_cli, db, "trunc")
    run_cli("reclassify", "--db", db, "--run", "trunc")
    kept, computed = both_ways(str(db), "trunc")
    assert kept is not None and kept == computed
    assert any("allreduce: ranks made 28-30 calls" in n for n in kept.notes), kept.notes
    assert answers(run_cli, db, "trunc") == computed_answers


def _migrate(url: str, how: str, revision: str) -> None:
    from alembic import command

    engine = make_engine(resolve_url(url))
    try:
        with engine.begin() as conn:
            getattr(command, how)(alembic_config(conn), revision)
    finally:
        engine.dispose()


def test_store_from_0006_computes_until_kept_and_profdb_upgrade_keeps_it(
    dlrm_files: list[Path], store_url: str, run_cli: Invoke
) -> None:
    """A store at 0006 (the tables dropped by 0007's downgrade) migrated to 0007 by alembic alone has no
    row: the questions compute the same answers, and the next write into the run keeps them. profdb's own
    upgrade (opening the store) analyses every run of a store it takes past 0007."""
    run_cli("ingest", "--db", store_url, "--run", "dlrm", *dlrm_files)
    run_cli("ingest", "--db", store_url, "--run", "hta",
            *sorted((DATA / "kineto/hta_trace_filter_2ranks").glob("*.json.gz")))
    before = answers(run_cli, store_url, "dlrm")
    _migrate(store_url, "downgrade", "0006")
    tables = {"run_analysis", "rank_analysis", "step_analysis"}
    if store_url.startswith("postgresql"):
        have = {t for (t,) in query_url(store_url, "select tablename from pg_tables where schemaname = 'public'")}
    else:
        have = {t for (t,) in query_url(resolve_url(store_url), "select name from sqlite_master")}
    assert not tables & have
    assert query_url(resolve_url(store_url), "select version_num from alembic_version") == [("0006",)]
    _migrate(store_url, "upgrade", "head")
    assert kept_row(store_url, "dlrm") is None
    assert answers(run_cli, store_url, "dlrm") == before
    run_cli("reclassify", "--db", store_url, "--run", "dlrm")
    assert kept_row(store_url, "dlrm") is not None
    assert answers(run_cli, store_url, "dlrm") == before

    _migrate(store_url, "downgrade", "0006")
    open_db(store_url).dispose()  # profdb's upgrade: every run analysed once, in the upgrade's transaction
    for run in ("dlrm", "hta"):
        kept, computed = both_ways(store_url, run)
        assert kept is not None and kept == computed, run
    assert answers(run_cli, store_url, "dlrm") == before


def test_nodes_ingesting_one_run_at_once_keep_an_analysis_of_every_rank(store_url: str, tmp_path: Path) -> None:
    """Four nodes ingest their ranks of one run at the same moment: the kept analysis (written under the
    run's lock, by the last writer, which sees every committed rank) is of all ranks and current."""
    from test_concurrency import _run_nodes

    gen = generate(tmp_path / "gen", nodes=2, gpus_per_node=2, late_rank=2, steps=200)
    cmds = [["ingest", "--db", store_url, "--run", "job", str(p)] for p in sorted(gen.root.glob("rank*"))]
    results = _run_nodes(cmds, tmp_path)
    assert all(rc == 0 for rc, _ in results), results
    kept, computed = both_ways(store_url, "job")
    assert kept is not None and kept == computed
    assert sorted(kept.ranks) == [0, 1, 2, 3]
    assert kept.decided is not None and kept.decided.line.startswith("likely straggler: rank 2 "), kept.decided
    assert json.loads(query_url(resolve_url(store_url), "select window_ranks_json from run_analysis")[0][0]) == [
        0, 1, 2, 3]


def test_rows_of_a_rank_outside_the_run_are_not_used(dlrm_files: list[Path], tmp_path: Path, run_cli: Invoke) -> None:
    """Rank rows the run's scope does not know (on PostgreSQL: another writer's, committed while the rows
    were read) make the kept analysis unusable, never a KeyError: the questions compute it."""
    db = tmp_path / "s.db"
    run_cli("ingest", "--db", db, "--run", "dlrm", *dlrm_files)
    run_cli("ingest", "--db", db, "--run", "hta", *sorted((DATA / "kineto/hta_trace_filter_2ranks").glob("*.json.gz")))
    before = answers(run_cli, db, "hta")
    con = sqlite3.connect(db)
    with con:
        con.execute("update rank_analysis set run_id = (select id from run where name = 'hta') where rank_id = "
                    "(select k.id from rank k join run r on r.id = k.run_id where r.name = 'dlrm' and k.global_rank = 0)")
    con.close()
    assert both_ways(str(db), "hta")[0] is None
    assert answers(run_cli, db, "hta") == before


def test_collectives_analyses_a_run_without_a_kept_row_once(
    tmp_path: Path, run_cli: Invoke, monkeypatch: Any
) -> None:
    """--collectives needs every instance (analyze_run) and the verdict; with no current kept row the
    verdict's findings come from that same analysis, not from a second one. Same answer either way."""
    gen = generate(tmp_path / "gen", nodes=2, late_rank=1)
    db = tmp_path / "s.db"
    run_cli("ingest", "--db", db, "--run", "gen", *sorted(gen.root.glob("rank*")))
    kept = run_cli("query", "--collectives", "--db", db, "--format", "csv")
    run_cli("sql", "--write", "--db", db, "delete from run_analysis")
    calls = []
    real = timeline.analyze_run

    def counted(*a: Any, **k: Any) -> Any:
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(timeline, "analyze_run", counted)  # straggler and findings import it when they call it
    computed = run_cli("query", "--collectives", "--db", db, "--format", "csv")
    assert len(calls) == 1
    assert (computed.stdout, computed.stderr) == (kept.stdout, kept.stderr)
    assert computed.stderr.startswith("likely straggler: rank 1 (host node00")
