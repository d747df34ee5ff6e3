"""Classification recorded per source file and `profdb reclassify` (issue 13), on the real DeepSeek
training trace: ingested with the DeepEP rules disabled (the old answer), then re-classified with
the shipped rules; every figure is checked against sums computed from the raw file."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from conftest import Invoke, sql
from profdb.store import classify

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
DEEPEP = re.compile(r"^void dpsk::ep::internode::(dispatch|combine|notify_dispatch|cached_notify)<")


pytestmark = pytest.mark.usefixtures("no_user_rules")


def _raw(path: Path) -> tuple[int, dict[str, int], float]:
    """(kernel events, DeepEP kernel events by name, DeepEP share of kernel time) from the raw file."""
    with gzip.open(path, "rt") as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel"]
    by_name: dict[str, int] = {}
    for e in events:
        if DEEPEP.match(e["name"]):
            by_name[e["name"]] = by_name.get(e["name"], 0) + 1
    total = sum(e["dur"] for e in events)
    comm = sum(e["dur"] for e in events if DEEPEP.match(e["name"]))
    return len(events), by_name, comm / total


def _comm_kernels(db: Path) -> dict[str, int]:
    return dict(
        sql(db, "select name, count(*) from activity_v where kind = 'kernel' and category = 'communication' group by 1")
    )


def test_reclassify_a_stored_run_after_the_rules_change(data: Path, tmp_path: Path, run_cli: Invoke) -> None:
    path = data / "kineto" / "deepseek_train_rank0.json.gz"
    kernels, deepep, share = _raw(path)
    assert len(deepep) == 5 and 0.4 < share < 0.5  # dispatch (2 variants), combine, notify_dispatch, cached_notify
    db = tmp_path / "s.db"
    # ingested with DeepEP disabled: no communication kernels, and the rules recorded for the file
    (tmp_path / "profdb.toml").write_text('[classify]\ndisable = ["deepep"]\n')
    run_cli("ingest", "--db", db, "--run", "dsk", path)
    old = sql(db, "select digest, shipped_version, rules_json from classification_rules")
    assert len(old) == 1 and '"disabled":["deepep"]' in old[0][2]
    assert sql(db, "select digest, sources from run_rules_v where run = 'dsk'") == [(old[0][0], 1)]
    assert _comm_kernels(db) == {}
    summary_before = sql(db, "select kind, name, calls, total_ns from summary_v order by 1, 2")

    # the rules change (the user drops the file): a dry run changes nothing
    (tmp_path / "profdb.toml").unlink()
    r = run_cli("reclassify", "--db", db, "--run", "dsk", "--dry-run", "--format", "json")
    assert "dry run" in r.stderr and _comm_kernels(db) == {}
    r = run_cli("reclassify", "--db", db, "--run", "dsk", "--format", "json")
    moved = json.loads(r.stdout)
    assert {(m["name"], m["before"], m["after"]) for m in moved} == {
        (n, "compute", "communication") for n in deepep
    }
    assert f"communication share of kernel time: 0.0% -> {share * 100:.1f}%" in r.stderr
    new_digest = classify.load_rules().digest
    assert f"{old[0][0]} (1 files) -> communication rules {new_digest}" in r.stderr
    # activity and summary agree with the raw file, and nothing else changed
    assert _comm_kernels(db) == deepep
    assert dict(
        sql(db, "select name, sum(calls) from summary_v where category = 'communication' and kind = 'kernel' group by 1")
    ) == deepep
    assert sql(db, "select kind, name, calls, total_ns from summary_v order by 1, 2") == summary_before
    assert sql(db, "select count(*) from activity where kind = 'kernel'") == [(kernels,)]
    assert sql(db, "select digest from run_rules_v where run = 'dsk'") == [(new_digest,)]
    # the same answer as ingesting with today's rules
    fresh = tmp_path / "fresh.db"
    run_cli("ingest", "--db", fresh, "--run", "dsk", path)
    q = "select kind, name, category, calls, total_ns from summary_v order by 1, 2"
    assert sql(fresh, q) == sql(db, q)
    # again: nothing moves
    r = run_cli("reclassify", "--db", db, "--run", "dsk", "--format", "json")
    assert json.loads(r.stdout) == [] and "0 name(s) moved" in r.stderr


def test_a_run_ingested_with_two_rule_sets_says_so(data: Path, tmp_path: Path, run_cli: Invoke) -> None:
    """Two ranks of a real torchrun job ingested in two parts, the second with an extra pattern: the
    questions and the report name the two digests; compare notes that the runs' rules differ."""
    src = data / "kineto" / "torchrun4_cpu"
    db = tmp_path / "s.db"
    run_cli("ingest", "--db", db, "--run", "job", src / "rank0_iter5_7.json.gz", src / "rank1_iter5_7.json.gz")
    run_cli("ingest", "--db", db, "--run", "job", "--comm-pattern", "^aten::mm$", src / "rank2_iter5_7.json.gz")
    digests = sql(db, "select digest, sources from run_rules_v where run = 'job' order by sources desc")
    assert [n for _, n in digests] == [2, 1]
    r = run_cli("query", "--db", db, "--run", "job", "--imbalance", "--kind", "cpu_op")
    assert "classified with 2 rule sets" in r.stderr and digests[0][0] in r.stderr and digests[1][0] in r.stderr
    out = tmp_path / "r.html"
    run_cli("report", "--db", db, "--run", "job", "-o", out)
    assert 'id="rule-digests"' in out.read_text()
    # re-classifying makes them one, with the rules in force now (aten::mm back to compute)
    r = run_cli("reclassify", "--db", db, "--run", "job", "--format", "json")
    assert {(m["name"], m["after"]) for m in json.loads(r.stdout)} == {("aten::mm", "compute")}
    assert len(sql(db, "select digest from run_rules_v where run = 'job'")) == 1
    r = run_cli("query", "--db", db, "--run", "job", "--imbalance", "--kind", "cpu_op")
    assert "rule sets" not in r.stderr

    # a second run classified otherwise: compare says the rules differ
    run_cli("ingest", "--db", db, "--run", "other", "--comm-pattern", "^aten::mm$", src / "rank3_iter5_7.json.gz",
            src / "rank0_iter5_7.json.gz", src / "rank1_iter5_7.json.gz")
    r = run_cli("compare", "--db", db, "job", "other")
    assert "classified with different communication rules" in r.stderr


def test_merge_keeps_the_recorded_rules(data: Path, tmp_path: Path, run_cli: Invoke) -> None:
    src = data / "kineto" / "torchrun4_cpu"
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    run_cli("ingest", "--db", a, "--run", "job", "--comm-pattern", "^aten::mm$", src)
    digest = sql(a, "select digest from run_rules_v")
    run_cli("merge", "--db", b, a)
    assert sql(b, "select digest, sources from run_rules_v") == [(digest[0][0], 4)]
    assert sql(b, "select rules_json from classification_rules") == sql(a, "select rules_json from classification_rules")


def test_reclassify_on_both_backends(data: Path, store_url: str, run_cli: Invoke) -> None:
    """The real 4-rank CPU job ingested with aten::mm as communication, then re-classified: the 4 ranks'
    aten::mm rows go back to compute (counted from the raw files), on SQLite and PostgreSQL."""
    src = data / "kineto" / "torchrun4_cpu"
    calls = 0
    for f in sorted(src.glob("*.json.gz")):
        with gzip.open(f, "rt") as fh:
            calls += sum(1 for e in json.load(fh)["traceEvents"] if e.get("ph") == "X" and e.get("name") == "aten::mm")
    assert calls > 0
    run_cli("ingest", "--db", store_url, "--run", "job", "--comm-pattern", "^aten::mm$", src)
    r = run_cli("reclassify", "--db", store_url, "--run", "job", "--format", "json")
    moved = json.loads(r.stdout)
    assert [(m["kind"], m["name"], m["before"], m["after"], m["ranks"]) for m in moved] == [
        ("cpu_op", "aten::mm", "communication", "compute", 4)
    ]
    assert f"({calls:,} activity rows, 4 summary rows)" in r.stderr
    r = run_cli("reclassify", "--db", store_url, "--run", "job", "--format", "json")
    assert json.loads(r.stdout) == []
