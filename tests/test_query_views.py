"""The SQL views of migration 0002 give the same answers as the library and the CLI, on SQLite and on
PostgreSQL (the test session's server, see pg_fixtures.py), and both engines give the same results."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import pytest
from click.testing import CliRunner
from gen_kineto_run import generate
from gen_store import HandRank, fill_run
from sqlalchemy import Connection, text

from profdb.cli.main import cli
from profdb.store import queries
from profdb.store.db import open_db
from profdb.store.ingest import ingest_paths
from profdb.store.scope import resolve_run

DATA = Path(__file__).parent / "data"
RUNS = ("gen8", "torchrun4", "hand")


def _fill(url: str, root: Path) -> None:
    gen = generate(root / "gen8", slow_rank=5, slow_host=1, steps=3)
    ingest_paths([str(p) for p in sorted(gen.root.glob("rank*"))], url, run="gen8")
    ingest_paths([str(DATA / "kineto" / "torchrun4_cpu")], url, run="torchrun4")
    eng = open_db(url)
    try:
        ranks = [HandRank(g, None if g == 3 else f"h{g // 2}", None if g == 3 else g % 2) for g in range(4)]
        ranks[0].add("kernel", "gemm", 100, 100).add("kernel", "only_on_0", 50).add("memset", "Memset", 3)
        ranks[1].add("kernel", "gemm", 300).add("kernel", "zero", 0)
        ranks[2].add("kernel", "gemm", 200).add("memcpy", "Memcpy DtoD", 10)
        ranks[3].add("kernel", "gemm", 200)
        for hr, comm in zip(ranks, (400, 100, 300, 300)):
            hr.add("kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", comm)
        for hr, durs in zip(ranks, ((10, 10), (10, 30), (20,), (10, 10))):
            hr.steps = dict(enumerate(durs))
        fill_run(eng, "hand", ranks, world_size=6)
    finally:
        eng.dispose()


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp(f"views-{request.param}")
    if request.param == "sqlite":
        url = f"sqlite:///{root / 'store.db'}"
        _fill(url, root)
        yield url
        return
    server = request.getfixturevalue("pg_server")  # session server from pg_fixtures (skips with the reason)
    dbname, url = server.create_database("profdb_test_views")
    try:
        _fill(url, root)
        yield url
    finally:
        server.drop_database(dbname)


@pytest.fixture
def conn(store: str) -> Iterator[Connection]:
    eng = open_db(store)
    try:
        with eng.connect() as c:
            yield c
    finally:
        eng.dispose()


def view(conn: Connection, sql: str, **params: Any) -> list[dict[str, Any]]:
    return [dict(r) for r in conn.execute(text(sql), params).mappings()]


def as_dicts(result: queries.Result) -> list[dict[str, Any]]:
    return [dict(zip(result.headers, row)) for row in result.rows]


def num(v: Any) -> Any:
    """Decimal (PostgreSQL NUMERIC) -> int/float, for comparison."""
    if v is None or isinstance(v, (str, int, float)):
        return v
    f = float(v)
    return int(f) if f.is_integer() else f


#: the library's headers say whose mean (mean_per_rank_ns, mean_per_call_ns); the views keep mean_ns
VIEW_COLUMN = {"mean_per_rank_ns": "mean_ns", "mean_per_call_ns": "mean_ns"}

SAME = [
    "calls", "mean_per_rank_ns", "max_ns", "min_ns", "recoverable_ns", "slowest_rank", "slowest_host", "slowest_local_rank",
    "fastest_rank", "fastest_host", "fastest_local_rank", "suspect_rank", "category",
]


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("kind", [None, "gpu", "cpu_op"])
def test_imbalance_view_equals_library(conn: Connection, run: str, kind: str | None) -> None:
    lib = queries.imbalance(conn, run, kind, top=0)
    rows = {(r["kind"], r["name"]): r for r in view(conn, "select * from imbalance_v where run = :run", run=run)}
    got = as_dicts(lib)
    assert got, "nothing to compare"
    for d in got:
        v = rows[(d["kind"], d["name"])]
        assert {c: d[c] for c in SAME} == {c: num(v[VIEW_COLUMN.get(c, c)]) for c in SAME}, d["name"]
        if v["imbalance"] is None:
            assert d["imbalance"] is None
        else:
            assert d["imbalance"] == pytest.approx(num(v["imbalance"]))
        assert num(v["absent_ranks"]) == (len(d["missing_ranks"].split(",")) if d["missing_ranks"] else 0)
    # the library lists exactly the view's rows of its kinds (communication from the comm kind)
    scope = resolve_run(conn, run)
    kinds, _ = queries.select_kinds(conn, scope, kind, ("kernel",))
    ck = queries.comm_kind(conn, scope)
    expect = {k for k, v in rows.items() if (k[0] in kinds and v["category"] != "communication")
              or (k[0] == ck and v["category"] == "communication")}
    assert {(d["kind"], d["name"]) for d in got} == expect
    compute = [d["recoverable_ns"] for d in got if d["category"] != "communication"]
    assert compute == sorted(compute, reverse=True)


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("kind", ["kernel", "cpu_op", "annotation", "memcpy"])
def test_hotspot_view_equals_library(conn: Connection, run: str, kind: str) -> None:
    lib = as_dicts(queries.hotspots(conn, run, kind, top=0))
    rows = {r["name"]: r for r in view(conn, "select * from hotspot_v where run = :run and kind = :k", run=run, k=kind)}
    assert {d["name"] for d in lib} == set(rows)
    for d in lib:
        v = rows[d["name"]]
        for c in ("total_ns", "calls", "mean_per_call_ns", "ranks", "rank_min_ns", "rank_max_ns", "category"):
            assert d[c] == num(v[VIEW_COLUMN.get(c, c)]), (d["name"], c)
        assert d["share_pct"] == pytest.approx(num(v["share_pct"]))


@pytest.mark.parametrize("run", RUNS)
def test_step_view_equals_library(conn: Connection, run: str) -> None:
    lib = as_dicts(queries.steps(conn, run))
    rows = view(conn, "select * from step_imbalance_v where run = :run order by step", run=run)
    assert len(lib) == len(rows) > 0
    for d, v in zip(lib, rows):
        for c in queries.STEP_HEADERS:
            if c.startswith("waited_on") or c in ("wait_caused_ns", "entered_last"):
                continue  # from the collective timeline (collective_arrival_v), not the step durations
            if c == "imbalance":
                assert d[c] == pytest.approx(num(v[c]))
            else:
                assert d[c] == num(v[VIEW_COLUMN.get(c, c)]), c


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("by, col, view_name", [("host", "hostname", "host_rollup_v"),
                                                ("local-rank", "local_rank", "local_rank_rollup_v")])
def test_rollup_views_equal_library(conn: Connection, run: str, by: str, col: str, view_name: str) -> None:
    scope = resolve_run(conn, run)
    kinds, _ = queries.select_kinds(conn, scope, None, ("kernel",))
    ck = queries.comm_kind(conn, scope)
    lib = as_dicts(queries.imbalance(conn, run, by=by))
    rows = view(conn, f"select * from {view_name} where run = :run", run=run)
    assert {d[col] for d in lib} == {r[col] for r in rows}
    for d in lib:
        mine = [r for r in rows if r[col] == d[col]]
        ranks = {num(r["ranks"]) for r in mine}
        assert ranks == {d["ranks"]}
        compute = sum(num(r["total_ns"]) for r in mine if r["kind"] in kinds and r["category"] != "communication")
        comm = sum(num(r["total_ns"]) for r in mine if r["kind"] == ck and r["category"] == "communication")
        assert d["compute_ns"] == compute // d["ranks"]
        assert d["communication_ns"] == comm // d["ranks"]


@pytest.mark.parametrize("run", RUNS)
def test_rank_total_view_equals_rank_split(conn: Connection, run: str) -> None:
    lib = queries.rank_split(conn, run)
    scope = resolve_run(conn, run)
    kinds, _ = queries.select_kinds(conn, scope, None, queries.GPU_KINDS)
    ck = queries.comm_kind(conn, scope)
    rows = view(conn, "select * from rank_total_v where run = :run", run=run)
    for d in as_dicts(lib):
        mine = [r for r in rows if r["global_rank"] == d["global_rank"]]
        assert d["compute_ns"] == sum(num(r["total_ns"]) for r in mine
                                      if r["kind"] in kinds and r["category"] not in ("communication", "memory"))
        assert d["memory_ns"] == sum(num(r["total_ns"]) for r in mine
                                     if r["kind"] in kinds and r["category"] == "memory")
        assert d["communication_ns"] == sum(num(r["total_ns"]) for r in mine
                                            if r["kind"] == ck and r["category"] == "communication")


def test_kernel_imbalance_view_and_zero_filled_name_rank_view(conn: Connection) -> None:
    rows = view(conn, "select * from name_rank_v where run = 'hand' and name = 'only_on_0' order by global_rank")
    assert [(r["global_rank"], num(r["present"]), num(r["total_ns"])) for r in rows] == [
        (0, 1, 50), (1, 0, 0), (2, 0, 0), (3, 0, 0)
    ]
    k = view(conn, "select name from kernel_imbalance_v where run = 'hand' order by name")
    assert [r["name"] for r in k] == ["gemm", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "only_on_0", "zero"]
    (z,) = view(conn, "select imbalance, mean_ns from imbalance_v where run = 'hand' and name = 'zero'")
    assert z["imbalance"] is None and num(z["mean_ns"]) == 0


@pytest.mark.parametrize("question", ["--imbalance", "--hotspots", "--steps", "--ranks"])
def test_cli_equals_library(store: str, conn: Connection, question: str) -> None:
    r = CliRunner().invoke(cli, ["query", question, "--run", "gen8", "--db", store, "--format", "json", "--top", "0"]
                           if question in ("--imbalance", "--hotspots") else
                           ["query", question, "--run", "gen8", "--db", store, "--format", "json"],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output
    fn = {"--imbalance": lambda: queries.imbalance(conn, "gen8", top=0),
          "--hotspots": lambda: queries.hotspots(conn, "gen8", top=0),
          "--steps": lambda: queries.steps(conn, "gen8"),
          "--ranks": lambda: queries.rank_split(conn, "gen8")}[question]
    lib = fn()
    assert json.loads(r.stdout) == as_dicts(lib)
    assert r.stderr.splitlines()[0] == lib.headline


def test_engines_agree(pg_url: str, tmp_path: Path) -> None:
    """Same inputs in SQLite and PostgreSQL: every question gives the same rows."""
    results: list[list[Any]] = []
    for engine_name, url in (("sqlite", f"sqlite:///{tmp_path / 'agree.db'}"), ("postgresql", pg_url)):
        _fill(url, tmp_path / engine_name)
        eng = open_db(url)
        out: list[Any] = []
        with eng.connect() as c:
            for run in RUNS:
                for res in (queries.imbalance(c, run, top=0), queries.imbalance(c, run, by="host"),
                            queries.imbalance(c, run, by="local-rank"), queries.hotspots(c, run, top=0),
                            queries.steps(c, run), queries.rank_split(c, run)):
                    out.append((res.headline, sorted(map(repr, res.rows))))
        eng.dispose()
        results.append(out)
    assert results[0] == results[1]


def test_run_sql_gives_plain_numbers(conn: Connection) -> None:
    res = queries.run_sql(conn, "select sum(total_ns) as t, avg(total_ns) as a, count(*) as n from summary")
    assert res.headers == ["t", "a", "n"]
    t, a, n = res.rows[0]
    assert type(t) is int and type(n) is int and isinstance(a, (int, float))
