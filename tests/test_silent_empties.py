"""Silent empties (issue 13): a file that produces no rows is named with why, and `--format kineto`
forced on a PyTorch execution trace fails in inspect saying what the file is. Both files are written
here by the real tool (CPU torch): torch.profiler with nothing in its window, and
torch.profiler.ExecutionTraceObserver."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import Invoke, sql
from test_record_launchers import needs_torchrun

WRITE = """
import sys
import torch
from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile

out = sys.argv[1]
et = ExecutionTraceObserver().register_callback(out + "/et.json")
et.start()
x = torch.randn(8, 8)
y = x @ x
et.stop()
et.unregister_callback()
with profile(activities=[ProfilerActivity.CPU]) as p:
    pass  # nothing happens in the profiler's window
p.export_chrome_trace(out + "/empty.pt.trace.json")
"""


@pytest.fixture(scope="module")
def torch_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("torch_files")
    subprocess.run([sys.executable, "-c", WRITE, str(out)], check=True, capture_output=True, timeout=300)
    return out


@needs_torchrun
def test_an_empty_trace_is_named_with_why(torch_files: Path, data: Path, db_path: Path, run_cli: Invoke) -> None:
    empty = torch_files / "empty.pt.trace.json"
    trace = json.loads(empty.read_text())
    # metadata, instant events and the profiler's own span (cat "Trace"): no timed event of a kind profdb reads
    assert {e["cat"] for e in trace["traceEvents"] if e.get("ph") == "X"} <= {"Trace"}
    # ingested with two real, non-empty traces: the line names the empty one only
    src = data / "kineto" / "torchrun4_cpu"
    r = run_cli("ingest", "--db", db_path, "--run", "j", "--rank", "0", empty)
    assert "files: 1 ingested" in r.output
    assert "files with no rows: 1" in r.output
    assert f"{empty}: no rows ingested (no complete events (ph X)" in r.output
    r = run_cli("ingest", "--db", db_path, "--run", "j", src / "rank1_iter5_7.json.gz", src / "rank2_iter5_7.json.gz")
    assert "files with no rows" not in r.output
    assert sql(db_path, "select rows from source_v where path = ?", str(empty.resolve())) == [(0,)]


@needs_torchrun
def test_kineto_forced_on_an_execution_trace_says_what_it_is(torch_files: Path, db_path: Path, run_cli: Invoke) -> None:
    et = torch_files / "et.json"
    head = json.loads(et.read_text())
    assert "nodes" in head and "traceEvents" not in head
    r = run_cli("ingest", "--db", db_path, "--format", "kineto", "--rank", "0", et, ok=False)
    assert r.exit_code == 1
    assert f"{et}: this is a PyTorch execution trace (ExecutionTraceObserver, schema {head['schema']})" in r.stderr
    assert "not a Kineto trace" in r.stderr and not db_path.exists()


@needs_torchrun
def test_an_execution_trace_is_named_without_format(torch_files: Path, data: Path, tmp_path: Path,
                                                    run_cli: Invoke) -> None:
    """Without --format: named alone on the command line (exit 1, nothing stored), and among the skipped
    files of a folder that also holds a real Kineto trace (ingested)."""
    et = torch_files / "et.json"
    said = "a PyTorch execution trace: a graph of operators without timings (torch.profiler.ExecutionTraceObserver)"
    r = run_cli("ingest", "--db", tmp_path / "one.db", "--rank", "0", et, ok=False)
    assert r.exit_code == 1 and f"{et}: {said}" in r.stderr, r.stderr
    assert not (tmp_path / "one.db").exists()
    job = tmp_path / "job"
    job.mkdir()
    (job / "rank0_et.json").write_bytes(et.read_bytes())
    (job / "rank0_trace.json.gz").write_bytes((data / "kineto" / "torchrun4_cpu" / "rank0_iter5_7.json.gz").read_bytes())
    r = run_cli("ingest", "--db", tmp_path / "job.db", "--rank", "0", job)
    assert f"skipped: {said[:25]} ({job / 'rank0_et.json'}): a graph of operators" in r.output + r.stderr
    assert "files: 1 ingested" in r.output


def test_a_json_file_without_trace_events_forced_as_kineto(data: Path, tmp_path: Path, run_cli: Invoke) -> None:
    """A real JSON that is neither: rocprofv3's JSON output, forced as kineto."""
    path = tmp_path / "results.json"
    with gzip.open(data / "rocprof_json" / "908_results.json.gz") as f:
        path.write_bytes(f.read())
    r = run_cli("ingest", "--db", tmp_path / "s.db", "--format", "kineto", "--rank", "0", path, ok=False)
    assert r.exit_code == 1 and 'not a Kineto / Chrome trace (no "traceEvents" list' in r.stderr
