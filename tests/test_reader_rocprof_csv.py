"""rocprofv3 CSV reader on the real samples (both column layouts), checked against plain csv."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from profdb.store.errors import InputError
from profdb.store.readers import detect, rocprof_csv
from profdb.store.records import Activity, Counter

LAYOUTS = ["rocm-systems_2025-08", "rocprofiler-sdk_2024-10"]


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_kernel_trace_matches_csv(data: Path, layout: str) -> None:
    path = data / "rocprofv3_csv" / layout / "kernel_trace.csv"
    assert detect(path) is rocprof_csv
    info = rocprof_csv.inspect(path)
    assert info.kind == "kernel_trace"
    recs = list(rocprof_csv.read(path, info))
    expected = _rows(path)
    assert len(recs) == len(expected) > 0
    assert all(isinstance(r, Activity) and r.kind == "kernel" for r in recs)
    assert sum(r.duration_ns for r in recs) == sum(int(e["End_Timestamp"]) - int(e["Start_Timestamp"]) for e in expected)
    assert {r.name for r in recs} == {e["Kernel_Name"] for e in expected}
    first = recs[0]
    assert first.grid_x == int(expected[0]["Grid_Size_X"]) and first.block_x == int(expected[0]["Workgroup_Size_X"])
    # "Agent 4" (2025) and 1 (2024) both become integers
    agent = expected[0]["Agent_Id"]
    assert first.device == int(agent.split()[-1])


@pytest.mark.parametrize("layout", LAYOUTS)
def test_counter_collection_matches_csv(data: Path, layout: str) -> None:
    path = data / "rocprofv3_csv" / layout / "counter_collection.csv"
    info = rocprof_csv.inspect(path)
    assert info.kind == "counter_collection" and info.hint.pid == int(_rows(path)[0]["Process_Id"])
    recs = list(rocprof_csv.read(path, info))
    expected = _rows(path)
    assert len(recs) == len(expected)
    assert all(isinstance(r, Counter) for r in recs)
    assert sum(r.value for r in recs) == pytest.approx(sum(float(e["Counter_Value"]) for e in expected))
    assert {r.name for r in recs} == {e["Counter_Name"] for e in expected}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_memory_copy_trace(data: Path, layout: str) -> None:
    path = data / "rocprofv3_csv" / layout / "memory_copy_trace.csv"
    recs = list(rocprof_csv.read(path, rocprof_csv.inspect(path)))
    expected = _rows(path)
    assert [r.name for r in recs] == [e["Direction"] for e in expected]
    assert all(r.kind == "memcpy" and r.category == "memory" for r in recs)  # type: ignore[union-attr]


def test_api_traces_and_rocpd2csv(data: Path) -> None:
    d = data / "rocprofv3_csv" / "rocm-systems_2025-08"
    for name in ("hip_trace.csv", "rccl_trace.csv", "marker_api_trace.csv", "rocpd-to-csv.csv"):
        path = d / name
        info = rocprof_csv.inspect(path)
        recs = list(rocprof_csv.read(path, info))
        assert len(recs) == len(_rows(path))
    marker = list(rocprof_csv.read(d / "marker_api_trace.csv", rocprof_csv.inspect(d / "marker_api_trace.csv")))
    assert {r.kind for r in marker} == {"annotation"}  # type: ignore[union-attr]


def test_stats_and_other_csvs_are_not_claimed(data: Path) -> None:
    d = data / "rocprofv3_csv" / "rocm-systems_2025-08"
    assert detect(d / "hip_api_stats.csv") is None
    # allocation and scratch traces are read (issue 13: every trace rocprofv3 --sys-trace writes)
    assert detect(d / "memory_allocation_trace.csv") is rocprof_csv
    assert detect(d / "scratch_memory_trace.csv") is rocprof_csv


def test_missing_required_column(tmp_path: Path, data: Path) -> None:
    src = (data / "rocprofv3_csv" / "rocm-systems_2025-08" / "kernel_trace.csv").read_text().splitlines()
    header = src[0].replace('"End_Timestamp",', "")
    bad = tmp_path / "kernel_trace.csv"
    bad.write_text("\n".join([header] + src[1:]) + "\n")
    with pytest.raises(InputError, match=r"kernel_trace\.csv.*missing required column.*End_Timestamp"):
        rocprof_csv.inspect(bad)


def test_truncated_line_is_an_error(tmp_path: Path, data: Path) -> None:
    text = (data / "rocprofv3_csv" / "rocm-systems_2025-08" / "kernel_trace.csv").read_text()
    bad = tmp_path / "kernel_trace.csv"
    bad.write_text(text[: len(text) - 60])
    with pytest.raises(InputError, match=r"line \d+ has \d+ fields.*truncated"):
        list(rocprof_csv.read(bad, rocprof_csv.inspect(bad)))
