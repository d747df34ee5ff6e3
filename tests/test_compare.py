"""`profdb compare`, the regression gate, `profdb trend` and `profdb tag`, end to end from the CLI.

The store holds nightly runs of one generated 8-rank job (2 hosts x 4 GPUs) that differ only by
noise (their seeds), then a run with one kernel planted 30% slower: on one rank (a straggler) or on
all ranks (the kernel itself regressed). Compare and the gate must find that kernel and only it, and
must stay quiet between the noise-only runs."""

from __future__ import annotations

import csv
import io
import json
import math
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from conftest import Invoke, sql
from gen_rocprof_run import KERNELS, generate
from profdb.cli.main import cli
from profdb.store.compare import compare, regressions, run_figures
from profdb.store.runs import all_runs
from profdb.store.db import open_db
from profdb.store.ingest import ingest_paths

GEMM = KERNELS[0]
ADD = KERNELS[3]
ALLREDUCE = KERNELS[4]
BASELINE_RUNS = [f"night{i}" for i in range(5)]


def _ingest_runs(root: Path, db: Path, planted: dict[str, dict[str, object]]) -> None:
    """Five noise-only runs, then the ``planted`` ones in order (name -> generate() arguments)."""
    for i, name in enumerate(BASELINE_RUNS + list(planted)):
        kwargs: dict[str, object] = {"slow_rank": None, "seed": 100 + i, "counters": False}
        kwargs.update(planted.get(name, {}))
        out = root / name
        generate(out, nodes=2, gpus_per_node=4, calls=20, **kwargs)  # type: ignore[arg-type]
        ingest_paths([out], str(db), run=name)
        shutil.rmtree(out)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("nightly")
    db = root / "store.db"
    _ingest_runs(
        root,
        db,
        {
            "straggler": {"slow_rank": 5, "slow_kernel": GEMM, "slow_factor": 1.3},
            "allslow": {"slow_all_ranks": True, "slow_kernel": GEMM, "slow_factor": 1.3},
        },
    )
    return db


def invoke(*args: object) -> Result:
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def rows_json(r: Result) -> list[dict[str, object]]:
    assert r.exit_code == 0, r.output + r.stderr
    return json.loads(r.stdout)  # type: ignore[no-any-return]


def test_compare_finds_the_straggler_kernel_and_only_it(store: Path) -> None:
    r = invoke("compare", "--db", store, "--baseline", "last:5", "straggler", "--format", "json")
    rows = rows_json(r)
    by_name = {row["name"]: row for row in rows}
    assert set(by_name) == set(KERNELS)
    slower = [row["name"] for row in rows if row["status"] == "slower"]
    # the generated all-reduce blocks (issue 12): the seven other ranks wait for rank 5 in it, so it is
    # slower too (communication is compared, not gated per name), after the planted kernel
    assert slower == [GEMM, ALLREDUCE]
    gemm = by_name[GEMM]
    # one rank of eight 30% slower: the slowest rank's time grows ~30%, the time per rank ~30%/8
    assert 1.25 < gemm["max_ratio"] < 1.35  # type: ignore[operator]
    assert 1.02 < gemm["ratio"] < 1.06  # type: ignore[operator]
    assert gemm["new_suspect_rank"] == 5 and gemm["moved_rank"] == 5
    assert gemm["moved_share_pp"] > 2  # type: ignore[operator]
    assert gemm["new_imbalance"] > 1.2 > gemm["base_imbalance"]  # type: ignore[operator]
    for name in (KERNELS[1], KERNELS[2], KERNELS[3]):
        assert by_name[name]["status"] == "same"
        assert abs(by_name[name]["ratio"] - 1) < 0.01  # type: ignore[operator]
    assert "median of 5 runs (last:5: night0, night1, night2, night3, night4)" in r.stderr


def test_gate_fails_on_the_planted_kernel_with_one_line(store: Path) -> None:
    r = invoke("compare", "--db", store, "--baseline", "last:5", "straggler", "--fail-on-regression", "10%", "--format", "csv")
    assert r.exit_code == 1
    gate = [line for line in r.stderr.splitlines() if line.startswith("regression over 10%")]
    assert len(gate) == 1, r.stderr
    line = gate[0]
    assert "gemm_kernel" in line and "slowest-rank time" in line and "on rank 5" in line
    assert "more:" not in line  # the planted kernel only
    for other in KERNELS[1:]:
        assert other.split("(")[0] not in line
    # the table still goes to stdout, untouched by the verdict
    assert next(csv.reader(io.StringIO(r.stdout)))[0] == "name"


def test_gate_finds_a_kernel_regressed_on_all_ranks(store: Path) -> None:
    r = invoke("compare", "--db", store, "-b", "last:5,tag:none=none", "allslow", "--fail-on-regression", "10%")
    assert r.exit_code == 1  # no run is tagged: the error path
    assert "no run with none=none before 'allslow'" in r.stderr
    r = invoke("compare", "--db", store, "night4", "allslow", "--fail-on-regression", "10%")
    assert r.exit_code == 1
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith("regression over 10% vs run 'night4': void gemm_kernel")
    assert "time per rank" in line and "more:" not in line
    pct = float(line.rsplit("(", 1)[1].rstrip("%)"))
    assert 25 < pct < 35


def test_gate_is_quiet_between_noise_only_runs(store: Path) -> None:
    for i in range(1, len(BASELINE_RUNS)):
        new = BASELINE_RUNS[i]
        for spec in (BASELINE_RUNS[i - 1], f"last:{i}", BASELINE_RUNS[0]):
            r = invoke("compare", "--db", store, "-b", spec, new, "--fail-on-regression", "5%", "--format", "json")
            assert r.exit_code == 0, r.stderr
            assert "no regression over 5%" in r.stderr
            assert {row["status"] for row in json.loads(r.stdout)} == {"same"}


def test_imbalance_regression(tmp_path: Path) -> None:
    """A heavy straggler makes the run's imbalance a regression of its own, listed after the kernel."""
    db = tmp_path / "s.db"
    _ingest_runs(tmp_path, db, {"heavy": {"slow_rank": 2, "slow_kernel": ADD, "slow_factor": 2.0}})
    engine = open_db(str(db))
    try:
        with engine.connect() as conn:
            result = compare(conn, "heavy", "last:5", gate=0.10)
            runs = {r.name: r for r in all_runs(conn)}
            base = run_figures(conn, [runs[n] for n in BASELINE_RUNS], "base", ("kernel",))
            new = run_figures(conn, [runs["heavy"]], "new", ("kernel",))
    finally:
        engine.dispose()
    metrics = [(r.metric, r.name) for r in result.regressions]
    # the all-reduce grows too: the other ranks wait in it for rank 2 (a blocking collective, issue 12)
    assert metrics == [("max", ADD), ("mean", ALLREDUCE), ("imbalance", None)]
    assert result.regressions[0].rank == 2
    imb = result.regressions[2]
    assert imb.base < 1.01 and imb.new > 1.3
    # the same figures straight from the library agree
    assert [(r.metric, r.name) for r in regressions(base, new, 0.10)] == metrics
    # below the noise floor a kernel is not gated: raise the floor above every kernel's share
    assert [r.metric for r in regressions(base, new, 0.10, min_share=0.5)] == ["imbalance"]


def test_compare_by_rank_and_host(store: Path) -> None:
    rows = rows_json(invoke("compare", "--db", store, "-b", "last:5", "straggler", "--by", "rank", "--format", "json"))
    assert [r["global_rank"] for r in rows][0] == 5
    assert sorted(r["global_rank"] for r in rows) == list(range(8))
    top = rows[0]
    assert top["hostname"] == "node01" and top["share_change_pp"] > 0  # type: ignore[operator]
    assert top["new_comm_per_rank_ns"] < top["base_comm_per_rank_ns"]  # type: ignore[operator]  # the straggler waits less
    rows = rows_json(invoke("compare", "--db", store, "-b", "last:5", "straggler", "--by", "host", "--format", "json"))
    assert [(r["hostname"], r["ranks"]) for r in rows] == [("node01", 4), ("node00", 4)]
    assert rows[0]["share_change_pp"] > 0 > rows[1]["share_change_pp"]  # type: ignore[operator]
    # --name narrows the rank view to one kernel: rank 5's share of gemm moves by ~3 points
    rows = rows_json(
        invoke("compare", "--db", store, "-b", "last:5", "straggler", "--by", "rank", "--name", "gemm", "--format", "json")
    )
    assert rows[0]["global_rank"] == 5 and rows[0]["share_change_pp"] > 2  # type: ignore[operator]


def test_tags_select_baselines(store: Path, tmp_path: Path, run_cli: Invoke) -> None:
    db = tmp_path / "tagged.db"
    shutil.copy(store, db)
    for name in BASELINE_RUNS:
        run_cli("tag", "--db", db, name, "branch=main")
    r = run_cli("tag", "--db", db, "night2", "branch=dev", "commit=abc123")
    assert json.loads(r.stdout) == {"branch": "dev", "commit": "abc123"}
    assert sql(db, "select metadata_json from run where name = 'night2'") == [('{"branch": "dev", "commit": "abc123"}',)]
    r = run_cli("compare", "--db", db, "-b", "tag:branch=dev", "straggler")
    assert "vs run 'night2' (tag:branch=dev)" in r.stderr
    r = run_cli("compare", "--db", db, "-b", "last:2,tag:branch=main", "straggler")
    assert "median of 2 runs (last:2,tag:branch=main: night3, night4)" in r.stderr
    r = run_cli("compare", "--db", db, "-b", "last:9,tag:branch=main", "straggler")
    assert "only 4 of 9 runs with branch=main exist before 'straggler'" in r.stderr
    r = run_cli("trend", "--db", db, "--where", "branch=main", "--format", "csv")
    assert [row[0] for row in csv.reader(io.StringIO(r.stdout))][1:] == ["night0", "night1", "night3", "night4"]
    r = run_cli("tag", "--db", db, "night2", "--remove", "commit")
    assert json.loads(r.stdout) == {"branch": "dev"}
    r = run_cli("tag", "--db", db, "night2", "--remove", "nope", ok=False)
    assert r.exit_code == 1 and "run 'night2' has no tag 'nope'" in r.stderr
    r = run_cli("tag", "--db", db, "night2", "novalue", ok=False)
    assert r.exit_code == 1 and "'novalue' is not KEY=VALUE" in r.stderr


def test_trend_shows_the_series(store: Path) -> None:
    rows = rows_json(invoke("trend", "--db", store, "--name", "%gemm_kernel%", "--format", "json"))
    assert [r["run"] for r in rows] == BASELINE_RUNS + ["straggler", "allslow"]
    assert all(r["ranks"] == 8 and r["calls"] == 8 * 20 for r in rows)
    base = rows[:5]
    assert all(r["imbalance"] < 1.02 for r in base)  # type: ignore[operator]
    assert all(abs(r["vs_first"] - 1) < 0.01 for r in base[1:])  # type: ignore[operator]
    strag, allslow = rows[5], rows[6]
    assert strag["suspect_rank"] == 5 and strag["imbalance"] > 1.2  # type: ignore[operator]
    assert 1.25 < strag["max_ns"] / base[-1]["max_ns"] < 1.35  # type: ignore[operator]
    assert 1.25 < allslow["vs_first"] < 1.35 and allslow["imbalance"] < 1.02  # type: ignore[operator]
    # the exact figure, against the store read with plain sqlite3
    total = sql(
        store,
        "select sum(total_ns) from summary_v where run = 'allslow' and name like 'void gemm%'",
    )[0][0]
    assert allslow["total_ns"] == total and allslow["mean_per_rank_ns"] == round(total / 8)
    r = invoke("trend", "--db", store, "--last", "3")
    assert r.exit_code == 0 and len(r.stdout.strip().splitlines()) == 2 + 3
    assert "largest step up: 'allslow'" in r.stderr
    # the whole run: its straggler as `profdb query --imbalance` names it (none when balanced)
    rows = rows_json(invoke("trend", "--db", store, "--format", "json"))
    # the one verdict (issue 12): rank 5 enters every all-reduce last, but its 30% slower GEMM makes it
    # ~2% late per step, below the verdict's 10% materiality gate: no run names a straggler
    assert [r["suspect_rank"] for r in rows] == [None] * 7
    r = invoke("query", "--stragglers", "--db", store, "--run", "straggler")
    assert r.stderr.startswith("no clear straggler: rank 5 (host node01, local_rank ?) entered last at 20 of 20")


@pytest.mark.parametrize("fmt", ["table", "csv", "json", "jsonl"])
def test_formats(store: Path, fmt: str) -> None:
    r = invoke("compare", "--db", store, "-b", "last:5", "straggler", "--format", fmt)
    assert r.exit_code == 0, r.stderr
    if fmt == "table":
        head = r.stdout.splitlines()[0]
        assert head.split()[:4] == ["name", "kind", "category", "status"] and "base_mean_per_rank " in head
        assert " ms" in r.stdout or " us" in r.stdout
    elif fmt == "csv":
        assert len(list(csv.reader(io.StringIO(r.stdout)))) == 1 + len(KERNELS)
    elif fmt == "json":
        assert len(json.loads(r.stdout)) == len(KERNELS)
    else:
        assert [json.loads(line)["status"] for line in r.stdout.splitlines()][0] == "slower"


def test_real_sample_against_itself(data: Path, tmp_path: Path, run_cli: Invoke) -> None:
    """The real 4-rank torchrun trace, ingested twice: CPU-only, so cpu_op is compared; all the same."""
    db = tmp_path / "s.db"
    src = data / "kineto" / "torchrun4_cpu"
    run_cli("ingest", "--db", db, "--run", "a", src)
    run_cli("ingest", "--db", db, "--run", "b", src)
    r = run_cli("compare", "--db", db, "--fail-on-regression", "1%", "--min-share", "0", "--top", "0", "--format", "json")
    rows = json.loads(r.stdout)
    n_names = sql(db, "select count(distinct name) from summary_v where run = 'a' and kind = 'cpu_op'")[0][0]
    assert len(rows) == n_names > 10
    assert {row["status"] for row in rows} == {"same"} and {row["ratio"] for row in rows} == {1.0}
    assert "has no GPU activity (kernel); showing cpu_op instead" in r.stderr
    assert "no regression over 1% in 'b' vs previous run 'a'" in r.stderr


def test_errors(store: Path, tmp_path: Path) -> None:
    cases = [
        (["compare", "night0"], 1, "no run before 'night0' to compare with"),
        (["compare", "nosuch", "night1"], 1, "no run named 'nosuch'"),
        (["compare", "-b", "last:x", "night1"], 1, "N must be a positive integer"),
        (["compare", "-b", "first:3", "night1"], 1, "no run named 'first:3'"),
        (["compare", "night1", "night1"], 1, "the baseline and the new run are the same run"),
        (["compare", "a", "b", "c"], 2, "at most two runs"),
        (["compare", "-b", "night0", "night0", "night1"], 2, "not both"),
        (["compare", "--fail-on-regression", "abc"], 2, "'abc' is not a percentage"),
        (["trend", "--until", "nosuch"], 1, "no run named 'nosuch'"),
        (["trend", "--where", "branch=main"], 1, "no runs with branch=main"),
        (["tag", "night1"], 2, "give KEY=VALUE pairs"),
    ]
    for args, code, msg in cases:
        r = invoke(*args, "--db", store)
        assert r.exit_code == code, (args, r.output, r.stderr)
        assert msg in r.stderr, (args, r.stderr)
    missing = tmp_path / "none.db"
    r = invoke("compare", "--db", missing)
    assert r.exit_code == 1 and "no profdb store at" in r.stderr and not missing.exists()


def test_same_answers_on_postgresql(tmp_path: Path, pg_url: str) -> None:
    """The same runs in SQLite and in PostgreSQL: compare, the gate, trend, tags and the report's
    numbers agree (portable SQLAlchemy Core, no engine-specific SQL)."""
    from profdb.store import compare as cmp
    from profdb.store import runs, trend
    from profdb.store.report import build_report

    def fill(url: str) -> None:
        for i in range(4):
            out = tmp_path / f"r{i}"
            if not out.exists():
                generate(out, nodes=2, gpus_per_node=2, calls=5, slow_rank=1 if i == 3 else None, slow_factor=1.5, seed=i, counters=False)
            ingest_paths([out], url, run=f"n{i}")

    def answers(url: str) -> list[object]:
        engine = open_db(url)
        try:
            with engine.begin() as conn:
                runs.tag_run(conn, "n1", {"branch": "main"})
            with engine.connect() as conn:
                got: list[object] = []
                for by in cmp.BY:
                    res = cmp.compare(conn, "n3", "last:3", by=by, gate=0.10)
                    got += [res.result.headers, res.result.rows, res.result.headline, [r.line() for r in res.regressions]]
                got.append(cmp.compare(conn, "n3", "tag:branch=main").result.rows)
                for name_like in ("gemm", None):  # without created_at: each store stamped its own runs
                    got.append([row[:1] + row[2:] for row in trend.trend(conn, name_like, 10).rows])
                rep = build_report(conn, "n3")
                got += [rep.heatmap.values, rep.heatmap.names, rep.verdict, rep.straggler]
                return got
        finally:
            engine.dispose()

    lite = f"sqlite:///{tmp_path / 's.db'}"
    fill(lite)
    fill(pg_url)
    a, b = answers(lite), answers(pg_url)
    assert _close(a, b)
    regs = a[3]
    assert isinstance(regs, list) and len(regs) == 1 and "gemm_kernel" in regs[0] and "on rank 1" in regs[0]


def _close(x: object, y: object) -> bool:
    """Equal, floats to 1e-9 relative (the engines sum in different orders)."""
    if isinstance(x, float) and isinstance(y, (int, float)):
        return math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(x, (list, tuple)) and isinstance(y, (list, tuple)):
        return len(x) == len(y) and all(_close(a, b) for a, b in zip(x, y))
    return x == y


@pytest.mark.parametrize("by", ["kernel", "rank"])
def test_compare_table_fits_a_terminal(store: Path, by: str) -> None:
    """On a 120-column terminal the compare table fits: the before / after detail is left out first
    (display.DROP_ORDER), the names stay distinct, and what changed (status, time per rank before and
    after, ratio, the suspect rank) stays."""
    from profdb.cli.output import table_lines

    engine = open_db(str(store))
    try:
        with engine.connect() as conn:
            res = compare(conn, "straggler", "last:5", by=by).result
    finally:
        engine.dispose()
    lines = table_lines(res.headers, res.rows, 120)
    assert max(len(line) for line in lines) <= 120, lines[0]
    head = lines[0].split()
    if by == "kernel":
        assert head[:2] == ["name", "status"]
        assert {"base_mean_per_rank", "new_mean_per_rank", "ratio", "new_suspect_rank"} <= set(head)
        names = [line.split("  ")[0] for line in lines[2:]]
        assert len(set(names)) == len(names) == len(KERNELS)
    else:
        assert {"global_rank", "base_busy_per_rank", "new_busy_per_rank", "share_change_pp"} <= set(head)
