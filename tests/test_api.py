"""The Python API (``import profdb``, api/): the CLI's questions with the CLI's csv columns and values,
on both engines, on the real example job (examples/torchrun4_cpu) and the HTA 2-rank traces."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
from click.testing import CliRunner

import profdb
from profdb.cli.main import cli
from profdb.cli.query import QUESTIONS
from profdb.store.ingest import ingest_paths

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def store(store_url: str, data: Path) -> str:
    ingest_paths([str(ROOT / "examples" / "torchrun4_cpu")], store_url, run="torchrun4_cpu")
    ingest_paths([str(data / "kineto" / "hta_trace_filter_2ranks")], store_url, run="hta")
    return store_url


def cli_csv(store: str, *args: str) -> tuple[list[str], list[list[str]]]:
    r = CliRunner().invoke(cli, [*args, "--db", store, "--format", "csv"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    table = list(csv.reader(io.StringIO(r.stdout)))
    return table[0], table[1:]


def as_csv(v: object) -> str:
    return "" if v is None else str(v)


@pytest.mark.parametrize(
    "method, args, cli_args",
    [
        ("imbalance", {"run": "torchrun4_cpu"}, ["query", "--imbalance", "--run", "torchrun4_cpu"]),
        ("imbalance", {"run": "torchrun4_cpu", "by": "host"}, ["query", "--imbalance", "--by", "host",
                                                               "--run", "torchrun4_cpu"]),
        ("hotspots", {"run": "hta", "top": 0}, ["query", "--hotspots", "--top", "0", "--run", "hta"]),
        ("hotspots", {"run": "hta", "kind": "gpu", "name_like": "nccl"},
         ["query", "--hotspots", "--kind", "gpu", "--name", "nccl", "--run", "hta"]),
        ("steps", {"run": "torchrun4_cpu"}, ["query", "--steps", "--run", "torchrun4_cpu"]),
        ("ranks", {"run": "hta"}, ["query", "--ranks", "--run", "hta"]),
        ("runs", {}, ["runs"]),
        ("list_ranks", {"run": "hta"}, ["ranks", "--run", "hta"]),
        ("trend", {"last": 5}, ["trend", "--last", "5"]),
    ],
)
def test_api_answers_as_the_cli_csv(store: str, method: str, args: dict[str, object], cli_args: list[str]) -> None:
    with profdb.connect(store) as db:
        result = getattr(db, method)(**args)
    headers, rows = cli_csv(store, *cli_args)
    assert result.headers == headers
    assert rows, "nothing to compare"
    assert [[as_csv(v) for v in row] for row in result.rows] == rows
    frame = result.to_pandas()
    assert list(frame.columns) == headers and len(frame) == len(rows)


def test_every_cli_question_is_a_method(store: str) -> None:
    db = profdb.connect(store)
    assert [q[0] for q in db.questions()] == [q.name for q in QUESTIONS]
    for q in QUESTIONS:
        assert q.name in dir(db)
        assert getattr(db, q.name)(run="torchrun4_cpu").headers
    with pytest.raises(TypeError, match="takes run and"):
        db.steps(run="hta", top=3)
    with pytest.raises(AttributeError):
        db.no_such_question  # noqa: B018
    with pytest.raises(profdb.ProfdbError, match="no run named 'nope'"):
        db.imbalance(run="nope")
    db.close()


def test_figures_from_the_raw_traces(store: str) -> None:
    """The hotspot totals through the API equal the sums of the kernel durations in the HTA files."""
    import gzip
    import json
    from collections import Counter

    totals: Counter[str] = Counter()
    for f in sorted((Path(__file__).parent / "data" / "kineto" / "hta_trace_filter_2ranks").glob("*.json.gz")):
        with gzip.open(f, "rt") as fh:
            for e in json.load(fh)["traceEvents"]:
                if e.get("cat") == "kernel" and e.get("ph") == "X":
                    totals[e["name"]] += round(e["dur"] * 1000)
    frame = profdb.connect(store).hotspots(run="hta", top=5).to_pandas()
    for name, total in zip(frame["name"], frame["total_ns"]):
        assert abs(int(total) - totals[name]) <= 2 * 1000, name  # us floats rounded to ns per event
    assert frame["mean_per_call_ns"].notna().all()


def test_sql_and_read_only(store: str) -> None:
    db = profdb.connect(store)
    (n,) = db.sql("select count(*) as n from run").rows[0]
    assert n == 2
    db.sql("delete from step")  # rolled back: read-only unless write=True
    assert db.sql("select count(*) from step").rows[0][0] > 0


def test_missing_store_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(profdb.ProfdbError, match="no profdb store at .*profdb ingest"):
        profdb.connect(str(tmp_path / "none.db"))
    assert not (tmp_path / "none.db").exists()


def test_pandas_read_sql_on_the_views(store: str) -> None:
    pd = pytest.importorskip("pandas")
    from sqlalchemy import create_engine

    engine = create_engine(store)
    try:
        frame = pd.read_sql("select * from imbalance_v where run = 'torchrun4_cpu'", engine)
    finally:
        engine.dispose()
    assert {"name", "mean_ns", "imbalance", "slowest_rank"} <= set(frame.columns) and len(frame) > 0
