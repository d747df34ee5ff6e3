"""The straggler questions through the store and the CLI (issue 12, phase 2): `profdb query --stragglers`,
`--collectives`, `--steps`, the one verdict on stderr, clock offsets in `profdb ranks`, on real traces
(the 8-rank DLRM job, HTA's 2-rank set) and a generated multi-host rocprofv3 run with shifted clocks.
Figures are checked against the raw files (json.load / csv), not against the code under test."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import Invoke, sql
from pg_fixtures import query_url
from gen_collective_run import generate
from test_collectives import _raw, _raw_calls, _raw_lasts

DATA = Path(__file__).parent / "data"


def rows_of(out: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(out)))




def test_dlrm_stragglers_steps_and_collectives_name_rank7(
    dlrm_files: list[Path], db_path: Path, run_cli: Invoke
) -> None:
    raw = {_raw(p)["distributedInfo"]["rank"]: _raw(p) for p in dlrm_files}
    kernels = {r: _raw_calls(d, "kernel", ("ncclKernel",)) for r, d in raw.items()}
    raw_lasts, raw_caused = _raw_lasts(kernels)
    run_cli("ingest", "--db", db_path, "--run", "dlrm", *dlrm_files)

    r = run_cli("query", "--stragglers", "--db", db_path, "--format", "csv")
    verdict = r.stderr.splitlines()[0]
    assert verdict.startswith("likely straggler: rank 7 (host ") and "entered last at 5 of 8 collectives" in verdict
    assert "window: 8 matched collective instances (kernel calls)" in r.stderr and "ranks 0-7 of 8" in r.stderr
    rows = {int(x["global_rank"]): x for x in rows_of(r.stdout)}
    assert {g: int(x["entered_last"]) for g, x in rows.items()} == {g: raw_lasts.count(g) for g in range(8)}
    # the files name one host per worker (worker0_step...): each gets a clock offset of a few us, within
    # its error bound, so the waits differ from the raw same-clock sums by at most that much per instance
    errors = {g: int(x["clock_offset_ns"] or 0) for g, x in rows.items()}
    assert max(abs(e) for e in errors.values()) < 5_000
    for g, x in rows.items():
        assert int(x["wait_caused_ns"]) == pytest.approx(raw_caused[g], abs=8 * 8 * 5_000)
    assert list(rows)[0] == 7  # most wait caused first

    # --steps: the rank waited on (7) beside the longest step (rank 1: a victim, it waited)
    r = run_cli("query", "--steps", "--db", db_path, "--format", "json")
    (step,) = json.loads(r.stdout)
    assert (step["waited_on_rank"], step["slowest_rank"], step["fastest_rank"]) == (7, 1, 7)
    assert step["wait_caused_ns"] == int(rows[7]["wait_caused_ns"]) and step["entered_last"] == 5
    assert r.stderr.splitlines()[0] == verdict  # one verdict for every question

    # --collectives: per instance, largest skew first; skew and last rank from the raw kernel starts
    r = run_cli("query", "--collectives", "--top", "0", "--db", db_path, "--format", "json")
    got = json.loads(r.stdout)
    raw_inst = []
    for k in range(8):
        starts = {g: v[k][0] for g, v in kernels.items()}
        raw_inst.append((max(starts.values()) - min(starts.values()), max(starts, key=lambda g: starts[g])))
    assert sorted(x["last_rank"] for x in got) == sorted(g for _s, g in raw_inst)
    for x, (skew, _g) in zip(sorted(got, key=lambda x: x["skew_ns"]), sorted(raw_inst)):
        assert x["skew_ns"] == pytest.approx(skew, abs=2 * 5_000)
    assert [x["skew_ns"] for x in got] == sorted((x["skew_ns"] for x in got), reverse=True)
    assert all(x["ranks"] == 8 and x["collective"] for x in got)

    for q in ("--imbalance", "--ranks"):
        assert run_cli("query", q, "--db", db_path).stderr.splitlines()[0] == verdict

    # the views agree with the library for sqlite3 users
    lasts = sql(db_path, "select global_rank, count(*) from collective_arrival_v where run = 'dlrm' and family = 'kernel' "
                         "and is_last = 1 "
                         "group by global_rank")
    assert dict(lasts) == {g: raw_lasts.count(g) for g in set(raw_lasts)}


def test_hta_two_ranks_says_who_and_why_not_enough(db_path: Path, run_cli: Invoke) -> None:
    paths = sorted((DATA / "kineto/hta_trace_filter_2ranks").glob("*.json.gz"))
    run_cli("ingest", "--db", db_path, "--run", "hta", *paths)
    r = run_cli("query", "--stragglers", "--db", db_path)
    line = r.stderr.splitlines()[0]
    assert line.startswith("no clear straggler: last arrivals spread over 2 rank(s), 2-8 of 10 each; "
                           "rank 1 entered last at 8 of 10 and caused the most wait, but p=0.11"), line


def test_shifted_host_clocks_are_recovered_through_the_store(tmp_path: Path, run_cli: Invoke) -> None:
    """One host's clock seconds ahead, another's behind: `profdb ranks` shows each offset within its
    error bound, and the arrival order per instance is the one on the true clock."""
    clocks = {0: 0, 1: 3_250_000_000, 2: -1_700_000_000}
    run = generate(tmp_path / "gen", nodes=3, late_rank=3, clock_ns=clocks)
    db = tmp_path / "s.db"
    run_cli("ingest", "--db", db, "--run", "shifted", *sorted((tmp_path / "gen").glob("rank*")))
    r = run_cli("ranks", "--db", db, "--format", "json")
    ranks = {x["global_rank"]: x for x in json.loads(r.stdout)}
    for g, host in run.host_of.items():
        true = run.clock_ns[host]
        assert ranks[g]["hostname"] == host
        assert abs(ranks[g]["clock_offset_ns"] - true) <= ranks[g]["clock_error_ns"] < 20_000, (g, ranks[g], true)
    r = run_cli("runs", "--db", db, "--format", "json")
    (info,) = json.loads(r.stdout)
    assert "node01 3.25 s" in info["clock_offsets"] and "node02 -1.70 s" in info["clock_offsets"]

    r = run_cli("query", "--stragglers", "--db", db)
    assert r.stderr.startswith("likely straggler: rank 3 (host node01, local_rank ")
    assert "cause: host side" in r.stderr.splitlines()[0]
    order = sql(db, "select collective, seq, global_rank, arrival_ns from collective_call_v where run = 'shifted' "
                    "order by seq, arrival_ns")
    per: dict[int, list[int]] = {}
    for _c, seq, g, _a in order:
        per.setdefault(seq, []).append(g)
    assert [per[k] for k in sorted(per)] == run.arrival_order


def test_many_hosts_clock_offsets_are_summed_up_in_one_short_note(tmp_path: Path, run_cli: Invoke) -> None:
    """Past ``CLOCK_HOSTS_LISTED`` hosts the clock note names how many, the least certain offsets
    (largest error first, as host_clock_v holds them) and the statement that lists them all, which
    works as written; a 256-node run made it one line of 20 kB. `profdb runs`' column says the same."""
    from profdb.store.findings import CLOCK_HOSTS_LISTED

    nodes = CLOCK_HOSTS_LISTED + 2
    generate(tmp_path / "gen", nodes=nodes, gpus_per_node=1, late_rank=3, steps=12)
    db = tmp_path / "s.db"
    run_cli("ingest", "--db", db, "--run", "wide", *sorted((tmp_path / "gen").glob("rank*")))
    r = run_cli("query", "--stragglers", "--db", db)
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("note: clock offsets vs host ")]
    clocks = sql(db, "select hostname, offset_ns, error_ns from host_clock_v where run = 'wide' and samples > 0 "
                     "order by error_ns desc, hostname")
    assert len(clocks) == nodes - 1 and f": {nodes - 1} hosts, " in line and len(line) < 400, line
    listed = line.split("least certain: ")[1].split(";")[0].split(", ")
    assert [x.split()[0] for x in listed] == [h for h, _o, _e in clocks[: CLOCK_HOSTS_LISTED // 2]]
    command = line.split("every host: `profdb ")[1].rstrip("`")
    assert command == "sql \"select * from host_clock_v where run = 'wide'\""
    r = run_cli("sql", "--db", db, "--format", "json", command[5:-1])
    assert len(json.loads(r.stdout)) == nodes
    # `profdb runs` sums its clock column up the same way (a 1,024-node run's cell was 40 kB)
    r = run_cli("runs", "--db", db, "--format", "json")
    (info,) = json.loads(r.stdout)
    assert info["clock_offsets"].startswith(f"{nodes - 1} hosts, ") and line.endswith(": " + info["clock_offsets"])


def test_bad_input_is_a_note_never_a_traceback(tmp_path: Path, run_cli: Invoke) -> None:
    db = tmp_path / "s.db"
    # a single rank
    run_cli("ingest", "--db", db, "--run", "one", DATA / "kineto/nccl_data.json.gz")
    for q in ("--stragglers", "--collectives", "--steps"):
        r = run_cli("query", q, "--db", db, "--run", "one")
        assert r.exit_code == 0 and "Traceback" not in r.stderr
    r = run_cli("query", "--stragglers", "--db", db, "--run", "one")
    assert r.stderr.startswith("no clear straggler: run 'one' has 1 rank, nothing to compare")
    # a host whose clock cannot be placed: its ranks never leave a collective together
    run = generate(tmp_path / "gen", nodes=2, late_rank=1, clock_ns={0: 0, 1: 2_000_000_000})
    path = run.files[3]
    text = path.read_text().splitlines()
    rows = list(csv.reader(text))
    head = rows[0]
    end = head.index("End_Timestamp")
    for row in rows[1:]:
        if "ncclDevKernel" in row[head.index("Kernel_Name")]:
            row[end] = str(int(row[end]) + 1_000_000)
    buf = io.StringIO()
    csv.writer(buf, quoting=csv.QUOTE_NONNUMERIC).writerows([rows[0]] + [_nums(r) for r in rows[1:]])
    path.write_text(buf.getvalue())
    run_cli("ingest", "--db", db, "--run", "nohost", *sorted((tmp_path / "gen").glob("rank*")))
    r = run_cli("ranks", "--db", db, "--run", "nohost")
    assert "no clock offset for host(s) node01" in r.stderr
    r = run_cli("query", "--stragglers", "--db", db, "--run", "nohost")
    assert "host node01: no blocking collective in common" in r.stderr
    assert r.stderr.startswith("likely straggler: rank 1 "), r.stderr


def test_ranks_on_clocks_centuries_apart_still_ingest_and_name_no_rank(tmp_path: Path, run_cli: Invoke,
                                                                         store_url: str) -> None:
    """The real torchrun job with two ranks' traces stripped of their time base (times since the
    profiler's start, as a trace written without one gives) beside two that keep it: each file's times
    fit in 64 bits, but the ranks' waits on each other (~57 years each, on one host's clock) summed
    over the job's collectives do not, and the ingest's analysis could not be stored (a traceback,
    before this was handled). The ingest lands, names no rank, says why, and the store keeps the
    largest figure a BIGINT holds."""
    import gzip

    from profdb.store.timeline import CLAMPED_NOTE

    folder = tmp_path / "job"
    folder.mkdir()
    for path in sorted((DATA / "kineto/torchrun4_cpu").glob("*.json.gz")):
        text = gzip.decompress(path.read_bytes()).decode()
        if path.name.startswith(("rank1", "rank3")):
            assert '"baseTimeNanoseconds": 1790857026000000000' in text
            text = text.replace('"baseTimeNanoseconds": 1790857026000000000', '"baseTimeNanoseconds": 0')
        (folder / path.name).write_bytes(gzip.compress(text.encode()))
    run_cli("ingest", "--db", store_url, folder)
    ((caused, notes),) = query_url(store_url, "select max(wait_caused_ns), max(notes_json) from rank_analysis "
                                              "join run_analysis using (run_id)")
    assert caused == 2**63 - 1 and CLAMPED_NOTE in json.loads(notes)
    for q in ("--stragglers", "--collectives", "--steps", "--imbalance"):
        r = run_cli("query", q, "--db", store_url)
        assert r.stderr.startswith("no clear straggler: collective ends do not line up"), (q, r.stderr)
        assert q == "--imbalance" or CLAMPED_NOTE in r.stderr, (q, r.stderr)


def _nums(row: list[str]) -> list[Any]:
    out: list[Any] = []
    for v in row:
        try:
            out.append(int(v))
        except ValueError:
            out.append(v)
    return out


def _both_ways(db: Path, run: str) -> tuple[Any, Any]:
    """The run's analysis as the questions compute it (calls matched in SQL order, timeline.match_stored)
    and as the pure function computes it from the same stored calls read back as objects."""
    from profdb.store import collectives, findings, timeline
    from profdb.store.db import open_db
    from profdb.store.scope import scope_of

    engine = open_db(str(db))
    try:
        with engine.connect() as conn:
            scope = scope_of(conn, run)
            fast = timeline.analyze_run(conn, scope)
            stored = timeline.load_timelines(conn, {r.id: r.global_rank for r in scope.ranks})
            slow = collectives.analyze([stored[r.id] for r in scope.ranks if r.id in stored],
                                       findings.identities(scope), fast.clocks)
    finally:
        engine.dispose()
    return fast, slow


def test_matching_in_sql_order_equals_matching_the_call_objects(
    dlrm_files: list[Path], tmp_path: Path, run_cli: Invoke
) -> None:
    """The questions match the stored calls in the index's order without an object per call; the
    result (instances, per-rank figures, notes) must be the pure function's on the same calls, on
    the real DLRM job and on a multi-host run whose ranks made different numbers of calls."""
    db = tmp_path / "s.db"
    run_cli("ingest", "--db", db, "--run", "dlrm", *dlrm_files)
    generate(tmp_path / "gen", nodes=2, late_rank=1)
    run_cli("ingest", "--db", db, "--run", "gen", *sorted((tmp_path / "gen").glob("rank*")))
    # rank 2's profile lost its last two all-reduces, rank 3 alone called a broadcast (a truncated profile,
    # and a call nothing matches)
    sql_rw = __import__("sqlite3").connect(db)
    with sql_rw:
        sql_rw.execute("delete from collective_call where rank_id = (select r.id from rank r join run on "
                       "run.id = r.run_id where run.name = 'gen' and r.global_rank = 2) and seq >= 28")
        sql_rw.execute("insert into collective_call select rank_id, family, group_name, 'broadcast', seq, run_id, "
                       "start_ns, end_ns, bytes, busy_before_ns, window_ns from collective_call where rank_id = "
                       "(select r.id from rank r join run on run.id = r.run_id where run.name = 'gen' and "
                       "r.global_rank = 3) and seq < 2")
    sql_rw.close()
    for run, n in (("dlrm", 8), ("gen", 30)):
        fast, slow = _both_ways(db, run)
        assert len(fast.instances) == n and fast.family == slow.family
        assert fast.instances == slow.instances
        assert fast.ranks == slow.ranks and fast.steps == slow.steps and fast.notes == slow.notes
        assert (fast.end_spread_ns, fast.duration_ns, fast.apart) == (slow.end_spread_ns, slow.duration_ns, slow.apart)
    assert [len(i.ranks) for i in fast.instances][-3:] == [4, 3, 3]
    assert any("allreduce: ranks made 28-30 calls" in n for n in fast.notes), fast.notes
    assert any("broadcast: called on rank 3 only (2 calls), not matched" in n for n in fast.notes), fast.notes


def _load_generator() -> Any:
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("bench_generate", Path(__file__).parents[1] / "benchmarks" /
                                                  "generate.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_benchmark_generator_run_names_its_planted_rank(tmp_path: Path, run_cli: Invoke) -> None:
    """benchmarks/generate.py's CSV run (the 10M-row benchmark store, here at 48k dispatches): its
    collectives block, so the ends line up, and the verdict names the planted rank, host side; the
    instances it entered last and the wait it caused are the ones computed from the raw CSV files."""
    gen = _load_generator()
    g = gen.generate_csv(tmp_path / "csv", dispatches=48_000, ranks=8, hosts=2, counters=0)
    db = tmp_path / "s.db"
    run_cli("ingest", "--db", db, "--run", "big", *sorted((tmp_path / "csv").glob("rank*")))
    # from the raw files: per rank its collective kernels in time order (k-th call per collective),
    # each host's clock from the common ends of the all-reduces, then who arrived last and the wait
    calls: dict[int, dict[str, list[tuple[int, int]]]] = {}
    host: dict[int, str] = {}
    for rel in g.files:
        rank = int(Path(rel).parts[0].removeprefix("rank"))
        host[rank] = Path(rel).parts[1]
        with open(tmp_path / "csv" / rel, newline="") as f:
            for row in csv.DictReader(f):
                if row["Kernel_Name"].startswith("ncclDevKernel_"):
                    coll = row["Kernel_Name"].split("_")[1]
                    calls.setdefault(rank, {}).setdefault(coll, []).append(
                        (int(row["Start_Timestamp"]), int(row["End_Timestamp"])))
    offset = {}
    for r in sorted(host):
        if host[r] not in offset:
            ends = [b[1] - a[1] for a, b in zip(calls[0]["AllReduce"], calls[r]["AllReduce"])]
            offset[host[r]] = sorted(ends)[len(ends) // 2]
    lasts = {r: 0 for r in host}
    caused = {r: 0 for r in host}
    for coll, first in calls[0].items():
        for k in range(len(first)):
            arrive = {r: calls[r][coll][k][0] - offset[host[r]] for r in host}
            last = max(arrive, key=arrive.__getitem__)
            lasts[last] += 1
            caused[last] += sum(arrive[last] - a for a in arrive.values())
    n = sum(lasts.values())
    assert lasts[g.slow_rank] >= n - 1  # late at every collective (the first may go to a rank starting late)

    r = run_cli("query", "--stragglers", "--db", db, "--format", "csv")
    line = r.stderr.splitlines()[0]
    assert line.startswith(f"likely straggler: rank {g.slow_rank} (host {host[g.slow_rank]}, "), line
    assert f"entered last at {lasts[g.slow_rank]} of {n} collectives" in line and "cause: host side" in line
    rows = {int(x["global_rank"]): x for x in rows_of(r.stdout)}
    assert {k: int(x["entered_last"]) for k, x in rows.items()} == lasts
    # the clock offsets are estimated within a few us; the waits agree within that per rank and instance
    assert int(rows[g.slow_rank]["wait_caused_ns"]) == pytest.approx(caused[g.slow_rank], abs=n * 8 * 4_000)
    assert caused[g.slow_rank] > n * 7 * gen.LATE_NS * 0.9


def _analysis_rows(db: Path, run: str) -> dict[str, list[tuple[Any, ...]]]:
    """What the store keeps of a run's analysis (every column but ids, when and under which
    fingerprint; ranks by their global rank)."""
    out = {}
    for table in ("run_analysis", "rank_analysis", "step_analysis", "host_clock"):
        names = [c[1] for c in sql(db, f"PRAGMA table_info({table})")]
        cols = [c for c in names if c not in ("id", "run_id", "rank_id", "computed_at", "fingerprint")]
        out[table] = sorted(sql(db, f"SELECT {', '.join(f't.{c}' for c in cols)}, rank.global_rank FROM {table} t "
                                    f"JOIN run ON run.id = t.run_id LEFT JOIN rank ON rank.id = "
                                    f"{'t.rank_id' if 'rank_id' in names else 'NULL'} WHERE run.name = ?", run),
                            key=repr)
    return out


def _stored_again(db: Path, run: str) -> dict[str, list[tuple[Any, ...]]]:
    """The run's analysis stored again from the stored calls alone (as a transfer or reclassify does)."""
    from profdb.store import timeline
    from profdb.store.db import open_db

    engine = open_db(str(db))
    try:
        with engine.begin() as conn:
            timeline.store_analysis(conn, run)
    finally:
        engine.dispose()
    return _analysis_rows(db, run)


def test_an_ingests_own_calls_are_matched_as_the_stored_ones(
    dlrm_files: list[Path], tmp_path: Path, run_cli: Invoke, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ingest matches the calls it has just stored from its own columns (collectives.match_calls)
    instead of reading them back, only when they are all the run has: on the real DLRM job and the
    real torchrun + gloo job the stored analysis is the one made from the stored calls; a run whose
    ranks came in two ingests is matched from the store the second time, and comes out as if
    ingested at once."""
    from profdb.store import collectives, timeline

    paths: list[str] = []
    stored, columns = timeline.match_stored, collectives.match_calls
    monkeypatch.setattr(timeline, "match_stored", lambda *a: paths.append("stored") or stored(*a))
    monkeypatch.setattr(collectives, "match_calls", lambda *a: paths.append("kept") or columns(*a))
    monkeypatch.setattr(collectives, "MATCH_IMPORT_CALLS", 0)  # (small runs: kept when numpy is loaded anyway)
    cpu = sorted((DATA / "kineto/torchrun4_cpu").glob("rank*.json.gz"))
    db = tmp_path / "s.db"
    for run, files in (("dlrm", dlrm_files), ("cpu", cpu)):
        paths.clear()
        run_cli("ingest", "--db", db, "--run", run, *files)
        assert paths == ["kept"]
        kept = _analysis_rows(db, run)
        assert kept["run_analysis"] and len(kept["rank_analysis"]) == len(files)
        paths.clear()
        assert _stored_again(db, run) == kept
        assert paths == ["stored"]
    # the same real ranks in two ingests: the second one's calls are not all the run's
    paths.clear()
    run_cli("ingest", "--db", db, "--run", "dlrm-halves", *dlrm_files[:5])
    run_cli("ingest", "--db", db, "--run", "dlrm-halves", *dlrm_files[5:])
    assert paths == ["kept", "stored"]
    whole = _analysis_rows(db, "dlrm")
    halves = _analysis_rows(db, "dlrm-halves")
    assert halves == whole
    # more calls than an ingest keeps (memory stays bounded): all let go, and read back from the store
    paths.clear()
    monkeypatch.setattr(collectives, "KEEP_CALLS", 10)
    run_cli("ingest", "--db", db, "--run", "dlrm-many-calls", *dlrm_files)
    assert paths == ["stored"] and _analysis_rows(db, "dlrm-many-calls") == whole
    calls = collectives.CallColumns(most=5)
    calls.add(["kernel"] * 4, ["g"] * 4, ["allreduce"] * 4, [0, 1, 2, 3], [1] * 4, [1] * 4, [2] * 4, [None] * 4,
              [0] * 4, [1] * 4)
    assert calls.rows == 4 and calls.worth_matching()
    calls.add(["kernel"] * 2, ["g"] * 2, ["allreduce"] * 2, [4, 5], [1] * 2, [1] * 2, [2] * 2, [None] * 2, [0] * 2,
              [1] * 2)
    assert calls.dropped and calls.rows == 0 and not calls.keys and not calls.worth_matching()
