"""A ``rocprofv3 --sys-trace --output-format csv`` folder (issue 13): one API trace per domain per
process, plus memory allocation and scratch memory traces, ingested through the CLI.

The files are the real samples (tests/data/rocprofv3_csv, rocprofiler-sdk's docs) under the names the
tool writes (rocprofiler-sdk source/lib/output/domain_type.cpp: ``<pid>_hip_api_trace.csv``,
``_hsa_api_trace.csv``, ``_marker_api_trace.csv``, ``_rccl_api_trace.csv``, ``_kernel_trace.csv``,
``_memory_copy_trace.csv``, ``_memory_allocation_trace.csv``, ``_scratch_memory_trace.csv``,
``_counter_collection.csv``, and the ``_*_stats.csv`` / ``_agent_info.csv`` it also writes), in the
default ``%hostname%/%pid%`` layout under the rank folders ``profdb record`` makes. No sample holds an
HSA API trace: it is written with the producer's columns (generateCSV.cpp, the same as every API trace)."""

from __future__ import annotations

import csv
import shutil
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from profdb.cli.main import cli
from profdb.store.readers import rocprof_csv
from profdb.store.records import Activity

SAMPLE = "rocprofv3_csv/rocm-systems_2025-08"
#: producer file name suffix -> real sample file
AS_WRITTEN = {
    "hip_api_trace": "hip_trace.csv",
    "marker_api_trace": "marker_api_trace.csv",
    "rccl_api_trace": "rccl_trace.csv",
    "kernel_trace": "kernel_trace.csv",
    "memory_copy_trace": "memory_copy_trace.csv",
    "memory_allocation_trace": "memory_allocation_trace.csv",
    "scratch_memory_trace": "scratch_memory_trace.csv",
    "counter_collection": "counter_collection.csv",
    "hip_api_stats": "hip_api_stats.csv",  # written alongside with --stats: not read
}
HSA_ROWS: list[list[object]] = [
    ["Domain", "Function", "Process_Id", "Thread_Id", "Correlation_Id", "Start_Timestamp", "End_Timestamp"],
    ["HSA_CORE_API", "hsa_init", 4242, 4242, 1, 1000, 1500],
    ["HSA_AMD_EXT_API", "hsa_amd_memory_pool_allocate", 4242, 4242, 2, 2000, 2600],
    ["HSA_CORE_API", "hsa_queue_create", 4242, 4243, 3, 3000, 3900],
]


def _rank_folder(data: Path, root: Path, rank: int, pid: int) -> Path:
    d = root / f"rank{rank}" / f"node{rank // 2:02d}"
    d.mkdir(parents=True)
    for kind, sample in AS_WRITTEN.items():
        shutil.copyfile(data / SAMPLE / sample, d / f"{pid}_{kind}.csv")
    with open(d / f"{pid}_hsa_api_trace.csv", "w", newline="") as f:
        csv.writer(f, quoting=csv.QUOTE_NONNUMERIC).writerows(HSA_ROWS)  # as rocprofv3 quotes: text only
    return d


def _count(path: Path) -> int:
    with open(path, newline="") as f:
        return sum(1 for _ in csv.DictReader(f))


def test_sys_trace_folder_ingests_every_trace(data: Path, tmp_path: Path) -> None:
    root = tmp_path / "out"
    folders = [_rank_folder(data, root, r, 5000 + r) for r in range(2)]
    db = tmp_path / "p.db"
    r = CliRunner().invoke(cli, ["ingest", "--db", str(db), str(root / "rank0"), str(root / "rank1")], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "files: 18 ingested" in r.output  # 9 traces per rank; the two *_stats.csv are not read
    assert "not profiler outputs profdb reads" in r.stderr and "hip_api_stats.csv" in r.stderr

    # every trace file of a rank, as its own content kind, with all its rows
    d = folders[0]
    expected = {p.name: _count(p) for p in d.iterdir() if not p.name.endswith("_stats.csv")}
    with sqlite3.connect(db) as conn:
        got = {
            Path(p).name: (kind, rows)
            for p, kind, rows in conn.execute(
                "select s.path, s.content_kind, s.rows from source_file s join rank k on k.id = s.rank_id "
                "where k.global_rank = 0"
            )
        }
        ranks = conn.execute("select global_rank, hostname, pid from rank order by global_rank").fetchall()
        mem = conn.execute(
            "select a.kind, a.category, count(*) from activity a join source_file s on s.id = a.source_id "
            "where s.content_kind in ('memory_allocation_trace', 'scratch_memory_trace') group by a.kind, a.category"
        ).fetchall()
    assert {n: k for n, (k, _) in got.items()} == {n: n.split("_", 1)[1][:-4] for n in expected}
    assert {n: rows for n, (_, rows) in got.items()} == expected
    assert ranks == [(0, "node00", 5000), (1, "node00", 5001)]
    # allocations and scratch are host-side memory operations, not GPU time
    n_mem = _count(d / "5000_memory_allocation_trace.csv") + _count(d / "5000_scratch_memory_trace.csv")
    assert mem == [("api", "memory", n_mem * 2)]


def test_two_hip_traces_of_one_rank_still_collide(data: Path, tmp_path: Path) -> None:
    """Per-domain kinds do not hide real duplicates: two HIP API traces claiming rank 0."""
    d = tmp_path / "rank0"
    d.mkdir()
    shutil.copyfile(data / SAMPLE / "hip_trace.csv", d / "11_hip_api_trace.csv")
    shutil.copyfile(data / SAMPLE / "hip_runtime_trace.csv", d / "12_hip_api_trace.csv")
    r = CliRunner().invoke(cli, ["ingest", "--db", str(tmp_path / "p.db"), str(d)])
    assert r.exit_code == 1 and "both claim rank 0 (rocprof-csv hip_api_trace)" in r.output


@pytest.mark.parametrize(
    "sample, kind",
    [
        ("hip_trace.csv", "hip_api_trace"),  # HIP_COMPILER_API_EXT rows
        ("hip_runtime_trace.csv", "hip_api_trace"),  # HIP_RUNTIME_API_EXT
        ("rccl_trace.csv", "rccl_api_trace"),
        ("marker_api_trace.csv", "marker_api_trace"),
        ("rocpd-to-csv.csv", "hip_api_trace"),  # rocpd2csv output
    ],
)
def test_api_kind_from_the_domain_when_the_name_does_not_say(data: Path, sample: str, kind: str) -> None:
    assert rocprof_csv.inspect(data / SAMPLE / sample).kind == kind


def test_allocation_and_scratch_rows_match_the_csv(data: Path) -> None:
    path = data / SAMPLE / "memory_allocation_trace.csv"
    recs = list(rocprof_csv.read(path, rocprof_csv.inspect(path)))
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(a.name, a.duration_ns) for a in recs if isinstance(a, Activity)] == [
        (e["Operation"], int(e["End_Timestamp"]) - int(e["Start_Timestamp"])) for e in rows
    ]
    path = data / SAMPLE / "scratch_memory_trace.csv"
    recs = list(rocprof_csv.read(path, rocprof_csv.inspect(path)))
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(a.name, a.stream, a.device) for a in recs if isinstance(a, Activity)] == [
        (e["Operation"], int(e["Queue_Id"]), int(e["Agent_Id"].split()[-1])) for e in rows
    ]
