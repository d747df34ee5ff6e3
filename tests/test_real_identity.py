"""Identity and device on real traces written by others (issue 13): names that look like the
tensorboard handler's but are not, and the GPU each rank used."""

from __future__ import annotations

import gzip
import json
import sqlite3
import tarfile
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from profdb.cli.main import cli
from profdb.store.readers import kineto_json


def _dlrm(data: Path, tmp_path: Path) -> Path:
    """PARAM's 8-rank DLRM Kineto traces (tests/data/kineto/dlrm_8rank, unmodified tarball), unpacked."""
    with tarfile.open(data / "kineto" / "dlrm_8rank" / "dlrm_kineto.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    return tmp_path / "dlrm_kineto"


def _raw(path: Path) -> dict[str, Any]:
    if path.name.endswith(".gz"):
        with gzip.open(path, "rt") as f:
            raw: dict[str, Any] = json.load(f)
    else:
        with open(path) as f:
            raw = json.load(f)
    return raw


def test_dlrm_worker_names_invent_no_hosts(data: Path, tmp_path: Path) -> None:
    folder = _dlrm(data, tmp_path)
    db = tmp_path / "p.db"
    r = CliRunner().invoke(cli, ["ingest", "--db", str(db), str(folder)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "ranks: 8 of world size 8" in r.output and "hosts" not in r.output
    expected = {}
    for f in sorted(folder.iterdir()):
        raw = _raw(f)
        host_pids = {e["pid"] for e in raw["traceEvents"] if e.get("cat") == "cpu_op"}
        devices = {e["args"]["device"] for e in raw["traceEvents"] if e.get("cat") == "kernel"}
        assert len(host_pids) == 1 and len(devices) == 1
        expected[raw["distributedInfo"]["rank"]] = (None, host_pids.pop(), devices.pop(), f.name)
    with sqlite3.connect(db) as conn:
        got = {
            g: (h, pid, dev, Path(p).name)
            for g, h, pid, dev, p in conn.execute(
                "select r.global_rank, r.hostname, r.pid, r.device, s.path from rank r join source_file s on s.rank_id = r.id"
            )
        }
        origins = [o for (o,) in conn.execute("select identity_origin from source_file")]
    assert got == expected
    # worker0_step_12.<ns>: "pid 12" in the name is not the file's pid: said, not taken
    assert all("hostname not taken" in o and "with pid 12" in o for o in origins), origins
    assert all("device from args.device" in o for o in origins), origins


def test_device_from_kernel_args_on_real_traces(data: Path) -> None:
    for rel in ("kineto/hta_trace_filter_2ranks/sampled_rank-1.json.gz", "kineto/mi250_minitoy_train_ROCm6_2_kineto.json.gz"):
        path = data / rel
        raw = _raw(path)
        devices = {e["args"]["device"] for e in raw["traceEvents"] if e.get("cat") == "kernel"}
        assert len(devices) == 1
        hint = kineto_json.inspect(path).hint
        assert hint.device == devices.pop() and "args.device" in hint.device_origin
        # a device index is not a local rank
        assert hint.local_rank is None


def test_cpu_only_trace_has_no_device(data: Path) -> None:
    hint = kineto_json.inspect(data / "kineto" / "torchrun4_cpu" / "rank0_iter5_7.json.gz").hint
    assert hint.device is None and hint.device_origin == ""


def test_several_devices_leave_device_unset(tmp_path: Path) -> None:
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 7, "ts": 1, "dur": 1},
        {"ph": "X", "cat": "kernel", "name": "k{lambda()#1}", "pid": 0, "tid": 1, "ts": 2, "dur": 1, "args": {"device": 0}},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 1, "tid": 1, "ts": 3, "dur": 1, "args": {"device": 1}},
    ]
    f = tmp_path / "rank0.json"
    f.write_text(json.dumps({"schemaVersion": 1, "deviceProperties": [{"id": 0}, {"id": 1}], "traceEvents": events}))
    info = kineto_json.inspect(f)
    assert info.hint.device is None and info.metadata["devices"] == [0, 1]
    f.write_text(json.dumps({"schemaVersion": 1, "deviceProperties": [{"id": 3}], "traceEvents": events[:1]}))
    hint = kineto_json.inspect(f).hint
    assert hint.device == 3 and hint.device_origin.startswith("deviceProperties")
