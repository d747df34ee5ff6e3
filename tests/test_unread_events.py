"""Events profdb does not read are named, never dropped without a word. Real Kineto traces from
HolisticTraceAnalysis's test data (tests/data/SOURCES.txt): one of Meta's MTIA accelerator, whose device
work is in categories mtia_ccp_events and mtia_runtime, and one recorded by the CUPTI range profiler,
whose kernels are cuda_profiler_range replays. Before, both ingested without a note and every question
said the run "has no GPU activity", answering about its CPU operators. The counts asserted are the
raw files' own (json.load here), and the fast path (kineto_fast) and the reference (ijson) agree on
them, also when the fast path hands over to the reference halfway through a file. Nsight Systems: the
replays of CUDA graphs recorded as one span each, whose kernels are in no kernel row."""

from __future__ import annotations

import gzip
import json
import sqlite3
import tarfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from conftest import Invoke, sql
from profdb.store.readers import kineto_fast, kineto_json
from profdb.store.records import SourceInfo

KINETO = Path(__file__).parent / "data" / "kineto"
MTIA = KINETO / "mtia_inference_rank_0.json.gz"
CUPTI = KINETO / "cupti_profiler_benchmark_result_924719_1679055439_trace.json.gz"
_NO_INFO = SourceInfo(format="kineto", kind="trace")


def _complete_events(path: Path) -> Counter[str]:
    """The file's complete events (ph X) by category, as json.load reads it."""
    with gzip.open(path) as f:
        events = json.load(f)["traceEvents"]
    return Counter(e["cat"] for e in events if e.get("ph") == "X")


def test_the_samples_hold_device_events_of_categories_profdb_does_not_read() -> None:
    """What the raw files hold (the other tests' expectations rest on it)."""
    assert _complete_events(MTIA) == {"cpu_op": 10346, "user_annotation": 1696, "mtia_ccp_events": 1313,
                                      "mtia_runtime": 823, "Trace": 1}
    assert _complete_events(CUPTI) == {"cuda_runtime": 1862, "cpu_op": 375, "cuda_profiler_range": 77,
                                       "user_annotation": 8, "Trace": 2}


def test_the_ingest_and_every_question_name_the_mtia_device_events(db_path: Path, run_cli: Invoke) -> None:
    raw = _complete_events(MTIA)
    r = run_cli("ingest", "--db", db_path, "--run", "mtia", MTIA)
    device = f"{raw['mtia_ccp_events']:,} events of category mtia_ccp_events (MTIA device events)"
    runtime = f"{raw['mtia_runtime']:,} events of category mtia_runtime (MTIA runtime calls)"
    assert f"note: not read, in no figure: {device}; {runtime}; in 1 file: {MTIA}." in r.output, r.output
    stored = sql(db_path, "SELECT unread_json FROM source_file")
    assert [json.loads(u) for (u,) in stored] == [{
        "events of category mtia_ccp_events (MTIA device events)": raw["mtia_ccp_events"],
        "events of category mtia_runtime (MTIA runtime calls)": raw["mtia_runtime"],
    }]
    for question in ("--hotspots", "--ranks", "--imbalance"):
        q = run_cli("query", "--db", db_path, question)
        assert f"not read, in no figure: {device}; {runtime}; in 1 file: {MTIA}" in q.stderr, (question, q.stderr)
        assert "has no GPU activity profdb reads (kernel" in q.stderr, (question, q.stderr)
    t = run_cli("timeline", "--db", db_path, "-o", db_path.parent / "merged.json")
    assert f"not read, in no figure: {device}; {runtime}" in t.output + t.stderr, t.output
    # what is read is as before: the host's operators and annotations, every one
    assert sql(db_path, "SELECT kind, SUM(calls) FROM summary GROUP BY kind ORDER BY kind") == [
        ("annotation", raw["user_annotation"]), ("cpu_op", raw["cpu_op"])]


@pytest.mark.parametrize("value", ["not json", "[1, 2]", '{"events": "many"}'])
def test_a_damaged_unread_cell_is_named_not_a_traceback(db_path: Path, run_cli: Invoke, value: str) -> None:
    run_cli("ingest", "--db", db_path, "--run", "mtia", MTIA)
    con = sqlite3.connect(db_path)
    con.execute("UPDATE source_file SET unread_json = ?", (value,))
    con.commit()
    con.close()
    q = run_cli("query", "--db", db_path, "--hotspots", ok=False)
    assert q.exit_code == 1, q.output
    assert f"source_file.unread_json of {MTIA} is {value!r}, not a JSON object of counts" in q.output, q.output


def test_the_cupti_range_profiler_kernels_are_named(db_path: Path, run_cli: Invoke) -> None:
    r = run_cli("ingest", "--db", db_path, "--run", "cupti", "--rank", "0", CUPTI)
    said = ("77 events of category cuda_profiler_range (kernels replayed by the CUPTI range profiler, whose "
            "spans are not kernel times)")
    assert f"note: not read, in no figure: {said}; in 1 file: {CUPTI}." in r.output, r.output
    q = run_cli("query", "--db", db_path, "--hotspots")
    assert said in q.stderr and "has no GPU activity profdb reads" in q.stderr, q.stderr


NSYS = Path(__file__).parent / "data" / "nsys_sqlite" / "saxpy-mpi-cuda_nsys_perlmutter0.sqlite"


def test_cuda_graph_executions_nsys_recorded_as_one_span_are_named(tmp_path: Path, db_path: Path,
                                                                   run_cli: Invoke) -> None:
    """``nsys profile --cuda-graph-trace=graph`` records each replay of a CUDA graph as one row of
    CUPTI_ACTIVITY_KIND_GRAPH_TRACE and none of its kernels in the kernel table: a job that runs its
    steps as graphs looked idle. No public export with such rows was found; the real saxpy export
    (tests/data/nsys_sqlite) is given the table, with CUPTI's CUpti_ActivityGraphTrace2 fields, and
    three planted replays."""
    path = tmp_path / "saxpy-graphs.sqlite"
    path.write_bytes(NSYS.read_bytes())
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_GRAPH_TRACE (start INTEGER NOT NULL, end INTEGER NOT NULL, "
                "deviceId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, "
                "contextId INTEGER NOT NULL, graphId INTEGER NOT NULL)")
    con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_GRAPH_TRACE VALUES (?, ?, 0, 7, ?, 1, 1, 109)",
                    [(1000 * k, 1000 * k + 800, k) for k in range(1, 4)])
    con.commit()
    con.close()
    r = run_cli("ingest", "--db", db_path, "--run", "graphs", "--rank", "0", path)
    said = ("3 rows of CUPTI_ACTIVITY_KIND_GRAPH_TRACE (CUDA graph executions, recorded as one span each "
            "(--cuda-graph-trace=graph): their kernels are in no kernel row; profile with --cuda-graph-trace=node)")
    assert f"note: not read, in no figure: {said}; in 1 file: {path}." in r.output, r.output
    q = run_cli("query", "--db", db_path, "--hotspots")
    assert said in q.stderr, q.stderr
    assert "has no GPU activity" not in q.stderr  # (the export's own kernels are read)


@pytest.fixture(scope="module")
def dlrm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dlrm")
    with tarfile.open(KINETO / "dlrm_8rank" / "dlrm_kineto.tar.gz") as tar:
        tar.extractall(out, filter="data")
    return out / "dlrm_kineto"


@pytest.mark.parametrize("inputs", [["torchrun4_cpu"], ["dlrm"], ["event_sync_trace.json.gz"],
                                    ["nccl_data.json.gz"], ["deepseek_train_rank0.json.gz"],
                                    ["../nsys_sqlite/saxpy-mpi-cuda_nsys_perlmutter0.sqlite", "--rank", "0"],
                                    ["../nsys_sqlite/perlmutter-cloverleaf-cuda.sqlite", "--rank", "0"]])
def test_traces_whose_events_are_all_read_say_nothing(db_path: Path, run_cli: Invoke, dlrm: Path,
                                                       inputs: list[str]) -> None:
    """The profiler's own "Trace" span and the GPU's synchronisation waits (cuda_sync, in the event
    sync trace) are left out on purpose: no note. So are the flows (ph s/f) and metadata (ph M)."""
    path = dlrm if inputs[0] == "dlrm" else KINETO / inputs[0]
    r = run_cli("ingest", "--db", db_path, "--run", "all", path, *inputs[1:])
    assert "not read" not in r.output, r.output
    assert sql(db_path, "SELECT COUNT(*) FROM source_file WHERE unread_json IS NOT NULL") == [(0,)]
    q = run_cli("query", "--db", db_path, "--hotspots")
    assert "not read" not in q.stderr and "profdb reads" not in q.stderr, q.stderr


def _mtia_with(tmp_path: Path, edit: Any) -> tuple[Path, Counter[str]]:
    """The MTIA sample decompressed, with ``edit`` applied to its events; its unread counts."""
    with gzip.open(MTIA) as f:
        trace = json.load(f)
    edit(trace["traceEvents"])
    tmp_path.mkdir()
    path = tmp_path / "mtia_rank_0.json"
    path.write_text(json.dumps(trace))
    counts = Counter(e["cat"] for e in trace["traceEvents"]
                     if e.get("ph") == "X" and e["cat"] in ("mtia_ccp_events", "mtia_runtime"))
    return path, counts


def _odd_args_halfway(events: list[dict[str, Any]]) -> None:
    """The args of the device event halfway through made a list: no struct the fast path decodes (it
    hands over to the reference there), an event the reference skips (a category it does not read)."""
    device = [e for e in events if e.get("cat") == "mtia_ccp_events"]
    device[len(device) // 2]["args"] = [1, 2]


@pytest.mark.parametrize("size", [(kineto_fast.SLICE, kineto_fast.READ), (4096, 1000)], ids=["slice2M", "slice4096"])
def test_the_fast_path_and_the_reference_count_alike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     size: tuple[int, int]) -> None:
    monkeypatch.setattr(kineto_fast, "SLICE", size[0])
    monkeypatch.setattr(kineto_fast, "READ", size[1])
    for path, raw in [_mtia_with(tmp_path / "plain", lambda events: None),
                      _mtia_with(tmp_path / "odd", _odd_args_halfway)]:
        ref: dict[str, int] = {}
        records = list(kineto_json._read_reference(path, None, unread=ref))
        assert ref == raw, path
        handed: list[int] = []
        reference = kineto_json._read_reference

        def spy(path: Path, pid: int | None, skip: int = 0, unread: dict[str, int] | None = None) -> Any:
            handed.append(skip)
            return reference(path, pid, skip, unread)

        monkeypatch.setattr(kineto_json, "_read_reference", spy)
        got: dict[str, int] = {}
        batches = list(kineto_json.activity_batches(path, _NO_INFO, None, got))
        monkeypatch.setattr(kineto_json, "_read_reference", reference)
        assert [a for b in batches for a in b] == records
        assert got == {kineto_json.unread_what(c): n for c, n in raw.items()}, path
        if "odd" in str(path):  # (handed over halfway: the slices read before and the rest, each counted once)
            assert len(handed) == 1 and 0 < handed[0] < len(json.loads(path.read_text())["traceEvents"]), handed
        else:  # (the fast path read it all)
            assert handed == []


ROCPROF_JSON = Path(__file__).parent / "data" / "rocprof_json" / "908_results.json.gz"


def _rocprof_with_api_records(tmp_path: Path) -> tuple[Path, dict[str, int]]:
    """The real rocprofv3 JSON sample (empty API arrays: it was recorded with kernel tracing only) with
    records planted in three of its buffer_records arrays, as rocprofv3 --sys-trace fills them."""
    with gzip.open(ROCPROF_JSON) as f:
        doc = json.load(f)
    records = doc["rocprofiler-sdk-tool"][0]["buffer_records"]
    assert records["hip_api"] == [] and records["marker_api"] == [] and records["rccl_api"] == []
    call = {"size": 48, "kind": 2, "operation": 46, "correlation_id": {"internal": 12, "external": 0, "ancestor": 0},
            "start_timestamp": 63860000000000, "end_timestamp": 63860000001000, "thread_id": 908}
    planted = {"hip_api": 1200, "marker_api": 7, "rccl_api": 31}
    for key, n in planted.items():
        records[key] = [call] * n
    path = tmp_path / "908_results.json"
    path.write_text(json.dumps(doc))
    return path, planted


@pytest.mark.parametrize("how", ["fast", "fast-in-small-slices", "reference"])
def test_rocprof_json_api_records_are_counted_by_both_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           how: str) -> None:
    """The fast path counts hip_api and rccl_api in slices (kept out of the skeleton, as a --sys-trace
    file's millions of HIP calls must be) and marker_api in the skeleton; the reference by ijson."""
    from profdb.store.readers import rocprof_json, rocprof_json_fast

    path, planted = _rocprof_with_api_records(tmp_path)
    read = rocprof_json._read
    used: list[str] = []
    monkeypatch.setattr(rocprof_json, "_read", lambda *a: used.append("reference") or read(*a))
    fast = how != "reference"
    if how == "fast-in-small-slices":  # (1,200 HIP calls of ~200 bytes: ~60 slices)
        monkeypatch.setattr(rocprof_json_fast, "SLICE", 4096)
        monkeypatch.setattr(rocprof_json_fast, "READ", 1000)
    if not fast:  # (the skeleton past its bound: the reference reads it all)
        monkeypatch.setattr(rocprof_json_fast, "SKELETON_MAX", 1000)
    got: dict[str, int] = {}
    rows = sum(len(b) for b in rocprof_json.activity_batches(path, SourceInfo(format="rocprof-json"), None, got))
    assert used == ([] if fast else ["reference"])
    assert rows == 43915  # (the sample's kernel dispatches, as before)
    assert got == {rocprof_json.unread_what(k): n for k, n in planted.items()}


def test_rocprof_json_api_records_are_named(tmp_path: Path, db_path: Path, run_cli: Invoke) -> None:
    path, planted = _rocprof_with_api_records(tmp_path)
    r = run_cli("ingest", "--db", db_path, "--run", "sys", "--rank", "0", path)
    said = ("1,200 records of buffer_records.hip_api (HIP API calls; read from rocprofv3's CSV output); 31 records "
            "of buffer_records.rccl_api (RCCL API calls; read from rocprofv3's CSV output); 7 records of "
            "buffer_records.marker_api (ROCTx markers and ranges; read from rocprofv3's CSV output)")
    assert f"note: not read, in no figure: {said}; in 1 file: {path}." in r.output, r.output
    q = run_cli("query", "--db", db_path, "--hotspots")
    assert said in q.stderr, q.stderr
    plain = run_cli("ingest", "--db", db_path, "--run", "plain", "--rank", "0", ROCPROF_JSON)
    assert "not read" not in plain.output, plain.output


def test_both_engines_keep_and_say_the_events_not_read(store_url: str, run_cli: Invoke) -> None:
    """SQLite and PostgreSQL: the column written by the ingest, read back by every question."""
    run_cli("ingest", "--db", store_url, "--run", "mtia", MTIA)
    q = run_cli("query", "--db", store_url, "--hotspots")
    assert ("not read, in no figure: 1,313 events of category mtia_ccp_events (MTIA device events); 823 events "
            "of category mtia_runtime (MTIA runtime calls)") in q.stderr, q.stderr
    s = run_cli("sql", "--db", store_url, "--format", "json", "SELECT unread_json FROM source_file")
    assert "mtia_ccp_events" in s.output and "1313" in s.output, s.output


def test_categories_past_the_bound_are_counted_together(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A damaged or hostile trace with a category per event must not grow the counts without bound:
    past ``UNREAD_KINDS`` categories the rest are counted together, alike by both paths (the real
    torchrun rank 0 trace with 300 of its CPU ops each given a category of its own)."""
    from profdb.store.readers import base

    with gzip.open(KINETO / "torchrun4_cpu" / "rank0_iter5_7.json.gz") as f:
        trace = json.load(f)
    ops = [e for e in trace["traceEvents"] if e.get("cat") == "cpu_op"]
    for i, e in enumerate(ops[:300]):
        e["cat"] = f"custom_{i}"
    del ops[300]["cat"]  # (an event without a category: named as such, past the bound too)
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps(trace))
    named = {kineto_json.unread_what(f"custom_{i}"): 1 for i in range(base.UNREAD_KINDS)}
    expected = {**named, kineto_json.unread_what(base.OTHER_KINDS): 301 - base.UNREAD_KINDS}
    assert kineto_json.unread_what(base.OTHER_KINDS) == "events of category (any other: past the first 256 named)"
    assert kineto_json.unread_what("") == "events of category (none)"
    for size in ((kineto_fast.SLICE, kineto_fast.READ), (4096, 1000)):  # (one slice; many)
        monkeypatch.setattr(kineto_fast, "SLICE", size[0])
        monkeypatch.setattr(kineto_fast, "READ", size[1])
        got: dict[str, int] = {}
        list(kineto_json.activity_batches(path, _NO_INFO, None, got))
        assert got == expected
    ref: dict[str, int] = {}
    list(kineto_json._read_reference(path, None, unread=ref))
    assert {kineto_json.unread_what(c): n for c, n in ref.items()} == expected
