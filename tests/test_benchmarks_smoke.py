"""The benchmark generators at tiny size: their files parse with profdb's own readers, carry the
rank identity profdb resolves, match the real rocprofv3 headers, and show the planted straggler."""

from __future__ import annotations

import csv
import gzip
import importlib.util
import json
import sys
from collections import defaultdict
from pathlib import Path
from types import ModuleType

import pytest

from profdb.store import readers
from profdb.store.records import Activity, Counter

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT.parent / "shared" / "samples"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "benchmarks" / f"{name}.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


gen = _load("generate")


def test_csv_run_parses_with_the_rocprofv3_reader(tmp_path: Path) -> None:
    g = gen.generate_csv(tmp_path, dispatches=4000, ranks=4, hosts=2, counters=2)
    assert g.rows == {"kernel_trace": 4000, "counter_collection": 8000}
    meta = json.loads((tmp_path / gen.META).read_text())
    assert meta["files"] == g.files and meta["slow_rank"] == g.slow_rank == 2
    totals: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    n_kernels = n_counters = 0
    hosts = set()
    for rel in g.files:
        path = tmp_path / rel
        rank = int(path.parts[-3].removeprefix("rank"))
        hosts.add(path.parts[-2])
        reader = readers.detect(path)
        assert reader is not None and reader.NAME == "rocprof-csv", rel
        info = reader.inspect(path)
        assert info.hint.pid == int(path.name.split("_")[0])
        for rec in reader.read(path, info):
            if isinstance(rec, Activity):
                assert rec.kind == "kernel" and rec.duration_ns > 0 and rec.device == 2 + rank % 2
                totals[rank][rec.name] += rec.duration_ns
                n_kernels += 1
            else:
                assert isinstance(rec, Counter) and rec.name in gen.COUNTERS[:2] and rec.dispatch_id
                n_counters += 1
    assert (n_kernels, n_counters) == (4000, 8000)
    assert hosts == {"mi300x-n000", "mi300x-n001"}
    # the planted straggler: slowest rank in the planted kernel, by about SLOW_FACTOR
    slow = {r: t[g.slow_kernel] for r, t in totals.items()}
    assert max(slow, key=slow.__getitem__) == g.slow_rank
    others = [v for r, v in slow.items() if r != g.slow_rank]
    assert slow[g.slow_rank] / (sum(others) / len(others)) == pytest.approx(gen.SLOW_FACTOR, rel=0.1)
    assert len({name for t in totals.values() for name in t}) >= 300  # a few hundred kernel names


def test_csv_headers_are_the_real_rocprofv3_2025_ones(tmp_path: Path) -> None:
    real = SAMPLES / "rocprofv3_csv" / "rocm-systems_2025-08"
    if not real.exists():
        pytest.skip("shared/samples not beside the checkout")
    g = gen.generate_csv(tmp_path, dispatches=50, ranks=1, hosts=1, counters=1)
    for rel in g.files:
        kind = "counter_collection" if "counter_collection" in rel else "kernel_trace"
        ours = (tmp_path / rel).read_text().splitlines()
        assert ours[0] == (real / f"{kind}.csv").read_text().splitlines()[0]
        rows = list(csv.reader(ours))
        assert {len(r) for r in rows} == {len(rows[0])}


def test_generation_is_deterministic(tmp_path: Path) -> None:
    a = gen.generate_csv(tmp_path / "a", dispatches=300, ranks=2, hosts=1, counters=1)
    b = gen.generate_csv(tmp_path / "b", dispatches=300, ranks=2, hosts=1, counters=1)
    assert a.files == b.files
    for rel in a.files:
        assert (tmp_path / "a" / rel).read_bytes() == (tmp_path / "b" / rel).read_bytes()
    c = gen.generate_csv(tmp_path / "c", dispatches=300, ranks=2, hosts=1, counters=1, seed=1)
    assert c.files != a.files  # other pids


@pytest.mark.parametrize("gz", [False, True])
def test_kineto_traces_parse_with_the_kineto_reader(tmp_path: Path, gz: bool) -> None:
    g = gen.generate_kineto(tmp_path, ranks=3, size_mb=0.6, gz=gz)
    assert len(g.files) == 3 and g.slow_rank == 2
    kernels = 0
    per_rank: dict[int, int] = {}
    steps = set()
    for name in g.files:
        path = tmp_path / name
        reader = readers.detect(path)
        assert reader is not None and reader.NAME == "kineto", name
        info = reader.inspect(path)
        rank = info.hint.global_rank
        assert rank is not None and info.hint.world_size == 3 and info.time_base_ns > 0
        n = 0
        for rec in reader.read(path, info):
            assert isinstance(rec, Activity)
            n += 1
            if rec.kind == "kernel":
                kernels += 1
                per_rank[rank] = per_rank.get(rank, 0) + (rec.duration_ns if rec.name == g.slow_kernel else 0)
                if rec.name.startswith("ncclDevKernel"):
                    assert rec.args and "Collective name" in json.loads(rec.args)
            if rec.kind == "annotation" and rec.name.startswith("ProfilerStep#"):
                steps.add((rank, rec.name))
        assert n > 100
    assert kernels == g.rows["kernels"]
    assert max(per_rank, key=per_rank.__getitem__) == g.slow_rank
    assert len(steps) >= 3
    if not gz:  # plain JSON: the whole file is one valid document with the top-level keys Kineto writes
        docs = [json.loads((tmp_path / f).read_text()) for f in g.files]
        for doc in docs:
            assert {"schemaVersion", "deviceProperties", "distributedInfo", "traceEvents", "baseTimeNanoseconds"} <= set(doc)
            assert {e["cat"] for e in doc["traceEvents"] if e["ph"] in "sf"} == {"ac2g"}
        assert sum(1 for doc in docs for e in doc["traceEvents"] if e["ph"] == "X") == g.rows["x_events"]


def test_runner_measures_a_subprocess_tree() -> None:
    run = _load("run")
    m = run.measure([sys.executable, "-c", "x = bytearray(60 * 2**20); import time; time.sleep(0.3)"])
    assert m.returncode == 0 and m.wall_s >= 0.3
    # ru_maxrss of a forked child counts the parent's pages it shared before exec (pytest's own size, which grows
    # with the suite), so only its floor says something here; the sampled tree PSS is the child's alone
    assert m.max_rss_mb >= 60 and 55 <= m.tree_peak_mb < 200
    assert "activity a" in run.imbalance_sql("x'y") and "'x''y'" in run.imbalance_sql("x'y")


@pytest.mark.parametrize("fmt", ["nsys", "rpd"])
def test_sqlite_jobs_are_the_real_samples_repeated(tmp_path: Path, fmt: str) -> None:
    """Each rank's file of the SQLite formats' job holds its real sample's records ``copies`` times,
    later copies after earlier ones in time, and the files ingest as a job of distinct ranks."""
    from profdb.store.identity import IdentityFlags
    from profdb.store.ingest import ingest_paths

    made = gen.generate_sqlite(tmp_path / fmt, fmt, ranks=2, copies=3)
    sample = gen.REAL_SQLITE[fmt]
    if sample.suffix == ".gz":
        plain = tmp_path / "sample"
        plain.write_bytes(gzip.decompress(sample.read_bytes()))
        sample = plain
    reader = readers.by_name(fmt)
    one = [a for a in reader.read(sample, reader.inspect(sample)) if isinstance(a, Activity)]
    for f in map(Path, made.files):
        acts = [a for a in reader.read(f, reader.inspect(f)) if isinstance(a, Activity)]
        assert len(acts) == 3 * len(one)
        assert sorted((a.kind, a.name) for a in acts) == sorted((a.kind, a.name) for a in one * 3)
        assert len({(a.kind, a.start_ns) for a in acts}) == 3 * len({(a.kind, a.start_ns) for a in one})
    report = ingest_paths([tmp_path / fmt], str(tmp_path / "s.db"), run="job", flags=IdentityFlags())
    assert [r[0] for r in report.ranks] == [0, 1]


def test_rocprof_json_job_is_the_real_sample_repeated(tmp_path: Path) -> None:
    """Each rank's rocprofv3 JSON file holds the real sample's dispatches ``copies`` times, later copies
    after earlier ones in time, read by the fast path, and the files ingest as a job of distinct ranks."""
    from profdb.store.identity import IdentityFlags
    from profdb.store.ingest import ingest_paths
    from profdb.store.readers import rocprof_json, rocprof_json_fast

    made = gen.generate_rocprof_json(tmp_path / "job", ranks=2, copies=2)
    one = list(rocprof_json.read(gen.REAL_ROCPROF_JSON, rocprof_json.inspect(gen.REAL_ROCPROF_JSON)))
    for r, f in enumerate(map(Path, made.files)):
        with open(f, "rb") as fh:
            rocprof_json_fast.check(fh)  # (the fast path reads it: no Fallback)
        acts = list(rocprof_json.read(f, rocprof_json.inspect(f)))
        assert len(acts) == 2 * len(one) == made.rows["kernel_dispatch"] // 2
        assert sorted(a.name for a in acts) == sorted(a.name for a in one * 2)
        assert len({a.start_ns for a in acts}) == 2 * len({a.start_ns for a in one})
        assert min(a.start_ns for a in acts) == min(a.start_ns for a in one) + r
    report = ingest_paths([tmp_path / "job"], str(tmp_path / "s.db"), run="job", flags=IdentityFlags())
    assert [r[0] for r in report.ranks] == [0, 1]
