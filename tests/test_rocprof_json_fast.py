"""rocprof_json_fast (msgspec slices) against rocprof_json's reference ijson reader: the real
908_results.json.gz sample (TraceLens's test data, tests/data/rocprof_json/SOURCES.txt) read whole and
in tiny slices, and edited copies of it: layouts the fast path reads, and those it must leave to the
reference (which then reads the file alone, so both give the same records or the same error)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_reader_rocprof_json import SAMPLE, _small_doc, sample_process

from profdb.store.errors import InputError
from profdb.store.readers import rocprof_json
from profdb.store.readers import rocprof_json_fast as fast
from profdb.store.readers.base import open_binary
from profdb.store.records import Activity


@pytest.fixture(scope="module")
def proc() -> dict[str, Any]:
    return sample_process()


def _fast(path: Path) -> list[Activity]:
    """The fast path alone (raises Fallback where it leaves the file to the reference)."""
    with open_binary(path) as f:
        checked = fast.check(f)
    with open_binary(path) as f:
        return [a for batch in fast.records(f, checked) for a in batch]


def _reference(path: Path) -> list[Activity] | str:
    try:
        return list(rocprof_json._read(path))
    except Exception as e:  # (read() turns these into InputError; the text is compared below)
        return f"{type(e).__name__}"


def _read(path: Path) -> list[Activity] | str:
    try:
        return list(rocprof_json.read(path, rocprof_json.inspect(path)))
    except InputError:
        return "InputError"


def _small(proc: dict[str, Any], n: int = 200) -> dict[str, Any]:
    """The reader test's reduced sample (n dispatches, their symbols, two memory copies) with the
    process's other sections kept as they are, the first copy given a stream, the second no byte count."""
    small = _small_doc(proc, n)
    copies = small["buffer_records"]["memory_copy"]
    copies[0]["stream_id"] = {"handle": 0}
    del copies[1]["bytes"]
    out = {k: v for k, v in proc.items() if k != "buffer_records"}
    out.update((k, v) for k, v in small.items() if k != "buffer_records")
    out["buffer_records"] = {**proc["buffer_records"], **small["buffer_records"]}
    return out


def _write(path: Path, procs: list[dict[str, Any]], indent: int | None = None) -> Path:
    path.write_text(json.dumps({"rocprofiler-sdk-tool": procs}, indent=indent))
    return path


def test_the_real_sample_is_read_alike_by_both_paths() -> None:
    got = _fast(SAMPLE)
    assert len(got) == 43915
    assert got == _reference(SAMPLE)


def test_the_real_sample_in_tiny_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    # blocks of 1 KB and slices of 4 KB: keys cut by a block's end, arrays ending inside a slice,
    # items longer than a slice (a kernel symbol of ~2 KB), every array met in many pieces
    monkeypatch.setattr(fast, "READ", 1 << 10)
    monkeypatch.setattr(fast, "SLICE", 4 << 10)
    assert _fast(SAMPLE) == _reference(SAMPLE)


def test_a_key_cut_by_the_end_of_a_block(proc: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path / "a.json", [_small(proc)])
    at = path.read_bytes().index(b'"agents"')
    monkeypatch.setattr(fast, "READ", at + 3)  # the first block ends inside '"agents"'
    assert _fast(path) == _reference(path)


def test_the_fast_path_reads_what_rocprofv3_writes(proc: dict[str, Any], tmp_path: Path) -> None:
    small = _small(proc)
    second = json.loads(json.dumps(small))  # a second process: its own pid and GPU
    second["metadata"]["pid"] = 4242
    for a in second["agents"]:
        if a["type"] == 2:
            a["node_id"] += 100
    second["buffer_records"]["kernel_dispatch"] = second["buffer_records"]["kernel_dispatch"][:50]
    empty = json.loads(json.dumps(small))
    empty["buffer_records"]["kernel_dispatch"] = []
    cases = {
        "copies": _write(tmp_path / "a.json", [small]),
        "two processes": _write(tmp_path / "b.json", [small, second]),
        "pretty-printed": _write(tmp_path / "c.json", [small], indent=2),
        "no dispatches": _write(tmp_path / "d.json", [empty]),
    }
    # an integer past 64 bits where profdb reads nothing: valid JSON, read by both
    big = tmp_path / "e.json"
    huge = '"size": 123456789012345678901234567890'
    big.write_text((tmp_path / "a.json").read_text().replace('"size": 184', huge, 1))
    cases["big integer elsewhere"] = big
    for what, path in cases.items():
        got = _fast(path)  # (no Fallback)
        assert got == _reference(path), what
    two = _fast(cases["two processes"])
    assert {a.pid for a in two} == {908, 4242}
    gpus = {a.device for a in two if a.pid == 908 and a.device is not None}
    assert {a.device for a in two if a.pid == 4242} == {d + 100 for d in gpus}
    copies = [a for a in _fast(cases["copies"]) if a.kind == "memcpy"]
    assert [c.name for c in copies] == ["MEMORY_COPY_HOST_TO_DEVICE", "MEMORY_COPY_DEVICE_TO_HOST"]
    assert [json.loads(c.args or "{}").get("bytes") for c in copies] == [1 << 20, None]


def _edits(proc: dict[str, Any]) -> dict[str, Callable[[Path], Path]]:
    """Files the fast path must leave to the reference, each made from the small sample."""
    small = _small(proc)

    def proc(change: Callable[[dict[str, Any]], Any]) -> Callable[[Path], Path]:
        def make(path: Path) -> Path:
            p = json.loads(json.dumps(small))
            change(p)
            return _write(path, [p])
        return make

    def text(old: str, new: str, count: int = 1) -> Callable[[Path], Path]:
        def make(path: Path) -> Path:
            t = json.dumps({"rocprofiler-sdk-tool": [small]})
            assert old in t
            path.write_text(t.replace(old, new, count))
            return path
        return make

    def raw(content: str) -> Callable[[Path], Path]:
        def make(path: Path) -> Path:
            path.write_text(content)
            return path
        return make

    def first(p: dict[str, Any]) -> dict[str, Any]:
        d: dict[str, Any] = p["buffer_records"]["kernel_dispatch"][0]
        return d

    def reorder(*keys: str) -> Callable[[dict[str, Any]], None]:
        def change(p: dict[str, Any]) -> None:
            items = [(k, p.pop(k)) for k in keys]
            p.update(items)
        return change

    return {
        "tables after records": proc(reorder("buffer_records", "agents", "kernel_symbols")),
        "metadata after records": proc(reorder("buffer_records", "metadata")),
        "strings after records": proc(reorder("buffer_records", "strings")),
        "a stream handle as an int": proc(lambda p: first(p).update(stream_id=3)),
        "a handle without its int": proc(lambda p: first(p)["dispatch_info"].update(agent_id={})),
        "correlation_id 0": proc(lambda p: first(p).update(correlation_id=0)),
        "a thread id as text": proc(lambda p: first(p).update(thread_id="908")),
        "a timestamp as a float": proc(lambda p: first(p).update(start_timestamp=1.5)),
        "a timestamp as true": proc(lambda p: first(p).update(end_timestamp=True)),
        "grid sizes as text": proc(lambda p: first(p)["dispatch_info"].update(grid_size={"x": "1"})),
        "an unknown kernel_id": proc(lambda p: first(p)["dispatch_info"].update(kernel_id=10**9)),
        "no kernel_symbols": proc(lambda p: p.pop("kernel_symbols")),
        "kernel_symbols null": proc(lambda p: p.update(kernel_symbols=None)),
        "a copy's bytes as true": proc(lambda p: p["buffer_records"]["memory_copy"][0].update(bytes=True)),
        "a copy's correlation_id as text": proc(lambda p: p["buffer_records"]["memory_copy"][0].update(correlation_id="x")),
        "an agent's id as a number": proc(lambda p: p["agents"][0].update(id=5)),
        "a dispatch not an object": proc(lambda p: p["buffer_records"]["kernel_dispatch"].insert(3, 7)),
        "records outside buffer_records": proc(
            lambda p: p.update(callback_records={"kernel_dispatch": p["buffer_records"]["kernel_dispatch"][:2]})),
        "a dotted key naming records": proc(
            lambda p: p.update({"buffer_records.kernel_dispatch": p["buffer_records"]["kernel_dispatch"][:2]})),
        "a key with an escape": text('"kernel_symbols"', '"kernel\\u005fsymbols"'),
        "metadata twice": text('"agents":', '"metadata": {"pid": 77}, "agents":'),
        "kernel_dispatch twice": text('"memory_copy":', '"kernel_dispatch": [], "memory_copy":'),
        "nested too deep": proc(lambda p: first(p).update(extra=json.loads("[" * 80 + "]" * 80))),
        "metadata nested too deep": proc(lambda p: p["metadata"].update(extra=json.loads("[" * 80 + "]" * 80))),
        "vertical tabs between dispatches": text('"stream_id": {"handle": 0}}, {', '"stream_id": {"handle": 0}}\v, {', -1),
        "a comma before the closing bracket": text('}}], "hip_api"', '}},], "hip_api"'),
        "cut short": raw(json.dumps({"rocprofiler-sdk-tool": [small]})[:-900]),
        "not an object at the top": raw("[1, 2]"),
    }


@pytest.mark.parametrize("tiny", [False, True], ids=["2 MB slices", "4 KB slices"])
def test_what_the_fast_path_leaves_to_the_reference(
    proc: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny: bool
) -> None:
    if tiny:  # (many cuts: an odd item met at a slice's end, a damaged end met after slices were read)
        monkeypatch.setattr(fast, "READ", 1 << 10)
        monkeypatch.setattr(fast, "SLICE", 4 << 10)
    for what, make in _edits(proc).items():
        path = make(tmp_path / (re.sub(r"\W+", "_", what) + ".json"))
        with pytest.raises(fast.Fallback):
            _fast(path)
        ref = _reference(path)
        got = _read(path)
        if isinstance(ref, str):
            assert isinstance(got, str), what  # (the reference's error, as read() words it)
        else:
            assert got == ref, what


def test_an_ingest_reads_the_sample_as_the_reference_does(monkeypatch: pytest.MonkeyPatch) -> None:
    info = rocprof_json.inspect(SAMPLE)
    batches = list(rocprof_json.activity_batches(SAMPLE, info, None))
    assert len(batches) > 1  # a list per slice
    fast_read = [a for b in batches for a in b]

    def refuse(f: Any) -> Any:
        raise fast.Fallback("refused")

    monkeypatch.setattr(fast, "check", refuse)
    assert [a for b in rocprof_json.activity_batches(SAMPLE, info, None) for a in b] == fast_read


def test_a_file_changed_between_the_passes_fails_the_read(proc: dict[str, Any], tmp_path: Path) -> None:
    # the first pass proved the arrays' places in a; b moves a dispatch array into callback_records
    small = _small(proc)
    a = _write(tmp_path / "a.json", [small])
    moved = json.loads(json.dumps(small))
    moved["callback_records"] = {"kernel_dispatch": moved["buffer_records"].pop("kernel_dispatch")}
    b = _write(tmp_path / "b.json", [moved])
    with open_binary(a) as f:
        checked = fast.check(f)
    with open_binary(b) as f, pytest.raises(fast.Fallback, match="not what the first pass read"):
        for _ in fast.records(f, checked):
            pass


def test_a_file_changed_between_the_passes_is_an_input_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def changed(f: Any, checked: Any) -> Any:
        raise fast.Fallback("a slice does not decode")
        yield  # (a generator, as records is)

    monkeypatch.setattr(fast, "records", changed)
    with pytest.raises(InputError, match="908_results.json.gz: the file changed while profdb read it"):
        list(rocprof_json.read(SAMPLE, rocprof_json.inspect(SAMPLE)))
