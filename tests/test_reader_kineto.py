"""Kineto reader on the real traces, checked against a plain json load of the same file."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from profdb.store.errors import InputError
from profdb.store.readers import detect, kineto_json
from profdb.store.records import Activity

TRACES = [
    "nccl_data.json.gz",
    "rank0.json.gz",
    "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    "mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "inference_rank_1.json.gz",
    "distributed_info_not_found.json.gz",
    "hta_trace_filter_2ranks/sampled_rank-0.json.gz",
    "torchrun4_cpu/rank2_iter5_7.json.gz",
    # (a harness's 26 KB "metadata" object before traceEvents: found beyond the 16 KiB head)
    "tracelens_mi300_gaunernst_bert-small-uncased__1016001.json.gz",
]
KINDS = {
    "kernel": "kernel", "Kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset", "cpu_op": "cpu_op",
    "user_annotation": "annotation", "gpu_user_annotation": "gpu_annotation", "cuda_runtime": "api",
    "cuda_driver": "api", "Runtime": "api", "python_function": "python",
}


def _expected(path: Path) -> tuple[dict[str, int], dict[str, int], dict]:
    doc = json.load(gzip.open(path))
    counts: dict[str, int] = {}
    durs: dict[str, int] = {}
    for e in doc["traceEvents"]:
        kind = KINDS.get(e.get("cat", ""))
        if e.get("ph") == "X" and kind and "ts" in e:
            counts[kind] = counts.get(kind, 0) + 1
            durs[kind] = durs.get(kind, 0) + round(e.get("dur", 0) * 1000)
    return counts, durs, doc


@pytest.mark.parametrize("name", TRACES)
def test_counts_and_durations_match_json(data: Path, name: str) -> None:
    path = data / "kineto" / name
    assert detect(path) is kineto_json
    info = kineto_json.inspect(path)
    counts, durs, doc = _expected(path)
    got_counts: dict[str, int] = {}
    got_durs: dict[str, int] = {}
    for r in kineto_json.read(path, info):
        assert isinstance(r, Activity)
        got_counts[r.kind] = got_counts.get(r.kind, 0) + 1
        got_durs[r.kind] = got_durs.get(r.kind, 0) + r.duration_ns
    assert got_counts == counts
    assert got_durs == durs
    di = doc.get("distributedInfo") or {}
    assert info.hint.global_rank == di.get("rank")
    assert info.hint.world_size == di.get("world_size")
    assert info.hint.hostname == doc.get("host_name")
    assert info.time_base_ns == doc.get("baseTimeNanoseconds", 0)
    host_pids = {
        e["pid"] for e in doc["traceEvents"]
        if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation", "cuda_runtime", "Runtime")
    }
    assert info.hint.pid in host_pids and len(host_pids) == 1


def test_the_events_array_is_looked_for_past_a_harness_block(tmp_path: Path, data: Path) -> None:
    """Past the head, the events array is looked for in the first MiB: the real TraceLens trace with its
    "metadata" block grown to 200 KB is found and read whole; grown past the MiB it is not found, and
    ``--format kineto`` says where it looked. A JSON object with a large block and no events array is no
    Kineto trace."""
    plain = tmp_path / "results.json"
    plain.write_text(json.dumps({"metadata": {"notes": "x" * 40000}, "events": [{"ph": "X"}]}))
    assert detect(plain) is None
    source = data / "kineto" / "tracelens_mi300_gaunernst_bert-small-uncased__1016001.json.gz"
    counts, durs, doc = _expected(source)
    for size, found in ((200_000, True), (2 << 20, False)):
        doc["metadata"]["padding"] = "y" * size
        path = tmp_path / f"padded{size}.json"
        path.write_text(json.dumps(doc))
        if found:
            assert detect(path) is kineto_json
            got: dict[str, int] = {}
            for r in kineto_json.read(path, kineto_json.inspect(path)):
                got[r.kind] = got.get(r.kind, 0) + 1
            assert got == counts
        else:
            assert detect(path) is None
            with pytest.raises(InputError, match=r'no "traceEvents" list in its first 1 MiB or its last 64 KiB'):
                kineto_json.inspect(path)


def test_kernel_args(data: Path) -> None:
    path = data / "kineto" / "nccl_data.json.gz"
    kernels = [r for r in kineto_json.read(path, kineto_json.inspect(path)) if r.kind == "kernel"]  # type: ignore[union-attr]
    k = kernels[0]
    assert isinstance(k, Activity)
    assert k.device == 0 and k.stream == 7 and k.correlation is not None and k.grid_x is not None
    nccl = [r for r in kernels if isinstance(r, Activity) and r.name.startswith("ncclKernel")]
    assert nccl, "the trace has NCCL kernels"
    assert any(r.args and "Collective name" in json.loads(r.args) for r in nccl) or all(r.args is None for r in nccl)


def test_rocm_variant(data: Path) -> None:
    path = data / "kineto" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    kernels = [r for r in kineto_json.read(path, kineto_json.inspect(path)) if isinstance(r, Activity) and r.kind == "kernel"]
    assert kernels and all(k.device == 2 and k.grid_x is None for k in kernels)


def test_truncated_gzip(tmp_path: Path, data: Path) -> None:
    raw = (data / "kineto" / "torchrun4_cpu" / "rank0_iter5_7.json.gz").read_bytes()
    bad = tmp_path / "rank0_iter5_7.json.gz"
    bad.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(InputError, match="rank0_iter5_7.json.gz.*truncated"):
        kineto_json.inspect(bad)


def test_truncated_plain_json(tmp_path: Path, data: Path) -> None:
    text = gzip.decompress((data / "kineto" / "torchrun4_cpu" / "rank0_iter5_7.json.gz").read_bytes())
    bad = tmp_path / "rank0.json"
    bad.write_bytes(text[: len(text) // 2])
    with pytest.raises(InputError, match="rank0.json.*truncated"):
        kineto_json.inspect(bad)
