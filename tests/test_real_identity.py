"""Identity and device on real traces written by others (issue 13): names that look like the
tensorboard handler's but are not, and the GPU each rank used."""

from __future__ import annotations

import gzip
import json
import random
import re
import sqlite3
import tarfile
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from profdb.cli.main import cli
from profdb.store.readers import kineto_fast, kineto_json
from profdb.store.readers.base import head, tail


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


#: the byte-by-byte form of kineto_json._EVENT_ARGS, before its runs were made possessive
_PLAIN_STR = rb'"(?:[^"\\]|\\.)*"'
_PLAIN_EVENT_ARGS = re.compile(rb"\{((?:" + _PLAIN_STR + rb'|[^{}"])*)"args"\s*:\s*\{((?:' + _PLAIN_STR + rb'|[^{}"])*)\}')


def test_event_args_pattern_finds_what_the_plain_one_does_on_real_traces(data: Path) -> None:
    """The events with args that device detection reads, in the head and tail of every real Kineto
    trace in tests/data, whole and cut at random points (a head or tail blob starts and ends
    mid-event): the same matches, spans and groups as the pattern taking one byte at a time."""
    rnd = random.Random(15)
    blobs: list[bytes] = []
    for path in sorted((data / "kineto").rglob("*.json*")):
        blobs += [head(path, 65536), tail(path, 65536)]
    assert len(blobs) >= 20 and sum(b.count(b'"args"') for b in blobs) > 1000
    cuts = []
    for b in blobs:
        for _ in range(4):
            i, j = sorted(rnd.sample(range(len(b)), 2))
            cuts.append(b[i:j])
    checked = 0
    for b in blobs + cuts:
        got = [(m.span(), m.groups()) for m in kineto_json._EVENT_ARGS.finditer(b)]
        assert got == [(m.span(), m.groups()) for m in _PLAIN_EVENT_ARGS.finditer(b)]
        checked += len(got)
    assert checked > 1000


def test_event_args_pattern_on_braces_in_names_and_unclosed_strings() -> None:
    blob = (b'{"ph": "X", "cat": "kernel", "name": "k{lambda()#1}<\\"{\\">", "args": {"device": 3, "s": "}{"}}, '
            b'{"ph": "X", "cat": "kernel", "name": "unclosed ' + b"x" * 200_000)
    got = [m.groups() for m in kineto_json._EVENT_ARGS.finditer(blob)]
    assert got == [m.groups() for m in _PLAIN_EVENT_ARGS.finditer(blob)]
    assert got == [(b'"ph": "X", "cat": "kernel", "name": "k{lambda()#1}<\\"{\\">", ', b'"device": 3, "s": "}{"')]
    assert kineto_json._gpu_devices(blob, b"") == [3]


def _plain_devices(blob: bytes) -> set[int]:
    """What the byte-by-byte pattern finds: the devices of the GPU events with args in ``blob``."""
    found = set()
    for m in _PLAIN_EVENT_ARGS.finditer(blob):
        if kineto_json._GPU_CAT.search(m.group(1)):
            d = kineto_json._ARG_DEVICE.search(m.group(2))
            if d:
                found.add(int(d.group(1)))
    return found


def test_devices_decoded_by_msgspec_are_the_patterns_on_real_traces(data: Path) -> None:
    """Device detection decodes the whole events of a head or tail blob with msgspec, and falls back
    to the pattern only when a blob is not as expected. On every real GPU trace in tests/data: the
    decoded path reads every blob, and finds the devices the pattern finds."""
    checked = 0
    for path in sorted((data / "kineto").rglob("*.json*")):
        h, t = head(path, 65536), tail(path, 65536)
        if b'"traceEvents"' not in h:
            continue
        for at_start, blob in ((True, h.split(b'"traceEvents"', 1)[-1]), (False, t)):
            if kineto_json._GPU_CAT.search(blob) is None:
                continue
            got = kineto_fast.event_devices(blob, at_start)
            assert got is not None, (path, at_start)
            assert got == _plain_devices(blob), (path, at_start)
            checked += 1
    assert checked >= 10


def test_devices_decoded_on_edges_of_blobs() -> None:
    kernel = '{{"ph": "X", "cat": "kernel", "name": "{name}", "ts": 1, "dur": 1, "args": {{"device": {d}}}}}'
    events = ", ".join([
        '{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 5, "args": {"Input Dims": [[2, 2]]}}',
        kernel.format(name="k}, {lambda()#1}", d=2),  # a boundary-like run inside a name
        kernel.format(name="k", d=3),
    ])
    trailer = ', "deviceProperties": [{"id": 2}, {"id": 3}], "distributedInfo": {"rank": 0}}'
    whole = ('{"schemaVersion": 1, "traceEvents": [' + events + "]" + trailer).encode()
    after = whole.split(b'"traceEvents"', 1)[1]
    # a small file: the head holds every event and the trailer
    assert kineto_fast.event_devices(after, at_start=True) == {2, 3}
    # a head cut inside the last event: the events before the cut
    assert kineto_fast.event_devices(after[: after.index(b'"k", "ts"') + 3], at_start=True) == {2}
    # a tail starting inside the name that holds "}, {": read from the next real event
    tail_blob = whole[whole.index(b"lambda") :]
    assert kineto_fast.event_devices(tail_blob, at_start=True) is None
    assert kineto_fast.event_devices(tail_blob, at_start=False) == {3}
    assert kineto_json._gpu_devices(after, tail_blob) == [2, 3]
    # not an event list: the pattern's turn
    assert kineto_fast.event_devices(b': [{"ph": "X", "cat": "kernel", "args": [1, 2]}, {"x": 1}]', True) is None
    assert kineto_fast.event_devices(b'{"cat": "kernel", "args": {"device": 1}}, {"cat": nope}', False) is None


def test_top_values_longer_than_the_first_window_are_read_whole() -> None:
    props = b"[" + b", ".join(b'{"id": %d, "name": "%s"}' % (i, b"x" * 300) for i in range(40)) + b"]"
    blob = b'{"deviceProperties": ' + props + b', "baseTimeNanoseconds": 1700000000123456789}'
    assert len(props) > kineto_json._VALUE_WINDOW
    assert kineto_json._top_value(blob, "deviceProperties") == json.loads(props)
    assert kineto_json._top_value(blob, "baseTimeNanoseconds") == 1700000000123456789
    # a number running past the window is not cut there
    digits = b"7" * (kineto_json._VALUE_WINDOW + 100)
    assert kineto_json._top_value(b'{"n": ' + digits + b', "x": 1}', "n") == int(digits)
    # a value cut by the blob's end is no value
    assert kineto_json._top_value(blob[: len(blob) - 3000], "deviceProperties") is None
