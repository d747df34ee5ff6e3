"""rocprofv3 JSON reader: the real 908_results.json.gz sample, the tables-after-records layout, memory
copies, and damaged files. Expected values are computed here with plain json/gzip."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from profdb.store import readers
from profdb.store.errors import InputError
from profdb.store.readers import rocprof_json
from profdb.store.records import Activity

DATA = Path(__file__).parent / "data" / "rocprof_json"
SAMPLE = DATA / "908_results.json.gz"


def sample_process() -> dict[str, Any]:
    """The sample's one process item, parsed with plain json."""
    with gzip.open(SAMPLE, "rt") as f:
        tool = json.load(f)["rocprofiler-sdk-tool"]
    assert len(tool) == 1
    return dict(tool[0])


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    return sample_process()


FIRST_PASSES: list[Path] = []


@pytest.fixture(scope="module")
def records() -> list[Activity]:
    """The sample's records, read once; counts the first passes the reader makes (there should be none)."""
    real = rocprof_json._collect_tables

    def counting(path: Path) -> Any:
        FIRST_PASSES.append(path)
        return real(path)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(rocprof_json, "_collect_tables", counting)
        info = rocprof_json.inspect(SAMPLE)
        out = list(rocprof_json.read(SAMPLE, info))
    acts = [r for r in out if isinstance(r, Activity)]
    assert len(acts) == len(out)
    return acts


def test_detected_by_content_not_name(tmp_path: Path) -> None:
    assert readers.detect(SAMPLE) is rocprof_json
    odd = tmp_path / "results.data"  # no .json extension
    odd.write_bytes(gzip.decompress(SAMPLE.read_bytes())[:200_000])
    assert rocprof_json.detect(odd)


def test_identity_from_metadata(doc: dict[str, Any]) -> None:
    info = rocprof_json.inspect(SAMPLE)
    assert info.hint.hostname == doc["metadata"]["node"]["hostname"] == "smci350-zts-gtu-c6-25"
    assert info.hint.pid == doc["metadata"]["pid"] == 908
    assert info.hint.global_rank is None  # rocprofv3 JSON holds no rank
    assert info.ranks == []


def test_dispatch_count_duration_and_names(doc: dict[str, Any], records: list[Activity]) -> None:
    dispatches = doc["buffer_records"]["kernel_dispatch"]
    symbols = {s["kernel_id"]: s["formatted_kernel_name"] for s in doc["kernel_symbols"]}
    assert len(records) == len(dispatches) == 43915
    assert all(r.kind == "kernel" for r in records)
    assert sum(r.duration_ns for r in records) == sum(d["end_timestamp"] - d["start_timestamp"] for d in dispatches)
    assert {r.name for r in records} == {symbols[d["dispatch_info"]["kernel_id"]] for d in dispatches}


def test_devices_streams_and_fields(doc: dict[str, Any], records: list[Activity]) -> None:
    node_of = {a["id"]["handle"]: a["node_id"] for a in doc["agents"]}
    first = doc["buffer_records"]["kernel_dispatch"][0]
    r = records[0]
    assert r.device == node_of[first["dispatch_info"]["agent_id"]["handle"]] == 2
    assert r.start_ns == first["start_timestamp"]
    assert r.correlation == first["correlation_id"]["internal"]
    assert (r.grid_x, r.block_x) == (first["dispatch_info"]["grid_size"]["x"], first["dispatch_info"]["workgroup_size"]["x"])
    assert r.stream == first["stream_id"]["handle"]
    assert r.pid == 908 and r.tid == first["thread_id"]


def test_normal_layout_needs_no_first_pass(records: list[Activity]) -> None:
    # rocprofv3 writes agents and kernel_symbols before buffer_records: one pass suffices.
    assert len(records) == 43915
    assert SAMPLE not in FIRST_PASSES


def _small_doc(doc: dict[str, Any], n: int = 60) -> dict[str, Any]:
    """A reduced copy of the sample with n dispatches and two memory copies added."""
    dispatches = doc["buffer_records"]["kernel_dispatch"][:n]
    used = {d["dispatch_info"]["kernel_id"] for d in dispatches}
    gpu = dispatches[0]["dispatch_info"]["agent_id"]["handle"]
    cpu = next(a["id"]["handle"] for a in doc["agents"] if a["type"] == 1)
    t = dispatches[-1]["end_timestamp"]
    copies = [
        {"size": 72, "kind": 10, "operation": 2, "thread_id": 908, "correlation_id": {"internal": 9001, "external": 0},
         "start_timestamp": t + 10, "end_timestamp": t + 5010, "dst_agent_id": {"handle": gpu},
         "src_agent_id": {"handle": cpu}, "bytes": 1 << 20},
        {"size": 72, "kind": 10, "operation": 3, "thread_id": 908, "correlation_id": {"internal": 9002, "external": 0},
         "start_timestamp": t + 6000, "end_timestamp": t + 6400, "dst_agent_id": {"handle": cpu},
         "src_agent_id": {"handle": gpu}, "bytes": 4096},
    ]  # fmt: skip
    return {
        "metadata": doc["metadata"],
        "agents": doc["agents"],
        "strings": {"buffer_records": doc["strings"]["buffer_records"]},
        "kernel_symbols": [s for s in doc["kernel_symbols"] if s["kernel_id"] in used],
        "buffer_records": {"kernel_dispatch": dispatches, "memory_copy": copies},
    }


def _write(path: Path, proc: dict[str, Any], order: list[str]) -> Path:
    item = {k: proc[k] for k in order}
    path.write_text(json.dumps({"rocprofiler-sdk-tool": [item]}))
    return path


def test_tables_after_records_give_the_same_records(doc: dict[str, Any], tmp_path: Path) -> None:
    small = _small_doc(doc)
    normal = _write(tmp_path / "a.json", small, ["metadata", "agents", "strings", "kernel_symbols", "buffer_records"])
    late = _write(tmp_path / "b.json", small, ["metadata", "buffer_records", "strings", "kernel_symbols", "agents"])
    a = list(rocprof_json.read(normal, rocprof_json.inspect(normal)))
    with pytest.MonkeyPatch.context() as mp:
        real = rocprof_json._collect_tables

        def counting(p: Path) -> Any:
            FIRST_PASSES.append(p)
            return real(p)

        mp.setattr(rocprof_json, "_collect_tables", counting)
        b = list(rocprof_json.read(late, rocprof_json.inspect(late)))
    assert FIRST_PASSES.count(late) == 1 and normal not in FIRST_PASSES  # one extra pass, tables only
    assert a == b
    assert len(a) == 62
    assert [r.device for r in a if r.kind == "kernel"] == [2] * 60  # agents resolved although they come last


def test_memory_copies(doc: dict[str, Any], tmp_path: Path) -> None:
    path = _write(tmp_path / "c.json", _small_doc(doc), ["metadata", "agents", "strings", "kernel_symbols", "buffer_records"])
    copies = [r for r in rocprof_json.read(path, rocprof_json.inspect(path)) if r.kind == "memcpy"]
    assert [c.name for c in copies] == ["MEMORY_COPY_HOST_TO_DEVICE", "MEMORY_COPY_DEVICE_TO_HOST"]
    assert [c.duration_ns for c in copies] == [5000, 400]
    assert [json.loads(c.args or "{}")["bytes"] for c in copies] == [1 << 20, 4096]
    assert copies[0].device == 2 and copies[1].device == 2  # the GPU end of each copy
    assert copies[0].category == "memory"


def test_truncated_gzip_is_an_input_error(tmp_path: Path) -> None:
    cut = tmp_path / "908_results.json.gz"
    cut.write_bytes(SAMPLE.read_bytes()[:800_000])
    assert rocprof_json.detect(cut)  # the head still looks right
    with pytest.raises(InputError, match="908_results.json.gz"):
        rocprof_json.inspect(cut)


def test_missing_kernel_symbols_is_an_input_error(doc: dict[str, Any], tmp_path: Path) -> None:
    path = _write(tmp_path / "d.json", _small_doc(doc), ["metadata", "agents", "strings", "buffer_records"])
    with pytest.raises(InputError, match="kernel_symbols"):
        list(rocprof_json.read(path, rocprof_json.inspect(path)))


def test_missing_metadata_is_an_input_error(doc: dict[str, Any], tmp_path: Path) -> None:
    path = _write(tmp_path / "e.json", _small_doc(doc), ["agents", "kernel_symbols", "buffer_records"])
    with pytest.raises(InputError, match="metadata"):
        rocprof_json.inspect(path)
