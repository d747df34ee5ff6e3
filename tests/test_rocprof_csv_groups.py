"""Small rocprofv3 kernel and counter traces are read several at a time (one pyarrow parse of their
bytes joined: ``rocprof_csv.read_group``), and an ingest worker takes a run of them at once
(``ingest_workers._group_end``). Each file must come out exactly as it does read on its own: the same
column batches (names in the same order), the same store, the same error naming the same file and
line; files that cannot be read together are read one by one."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path
from typing import Any

import pytest

from profdb.store import ingest, ingest_workers
from profdb.store.errors import InputError
from profdb.store.readers import rocprof_csv
from profdb.store.records import SourceInfo

from conftest import sql
from test_ingest_parallel import _content, _generate
from test_rocprof_csv_fastpath import CC, CC_ROWS, KT, KT_ROWS

DATA = Path(__file__).parent / "data" / "rocprofv3_csv"
#: the real samples (tests/data/SOURCES.txt): both column layouts, kernel and counter traces
SAMPLES = [DATA / "rocm-systems_2025-08" / "kernel_trace.csv", DATA / "rocm-systems_2025-08" / "counter_collection.csv",
           DATA / "rocprofiler-sdk_2024-10" / "kernel_trace.csv",
           DATA / "rocprofiler-sdk_2024-10" / "counter_collection.csv"]
#: the hostile lines pyarrow reads as int64 cells, one row per line (no float cell, no name over two lines)
KT_PLAIN = [r for r in KT_ROWS if r and "64.0" not in r and "\n" not in r]
CC_PLAIN = [r for r in CC_ROWS if '"1e3"' not in r]


def _info(path: Path) -> SourceInfo:
    return rocprof_csv.inspect(path)


def _alone(path: Path) -> list[Any]:
    """The file read on its own: its records, batch by batch, and each batch's names in order."""
    return [(b.records(), getattr(b, "names", None) or (b.kernels, b.counters))
            for b in rocprof_csv.read_columns(path, _info(path))]


def _grouped(paths: list[Path]) -> list[list[Any]]:
    got = rocprof_csv.read_group(paths, _info(paths[0]))
    assert got is not None
    return [[(b.records(), getattr(b, "names", None) or (b.kernels, b.counters)) for b in batches] for batches in got]


def _flat(batches: list[Any]) -> list[Any]:
    return [r for records, _names in batches for r in records]


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_copies_of_a_real_sample_read_together_as_each_alone(tmp_path: Path, sample: Path) -> None:
    paths = []
    for i in range(5):
        p = tmp_path / f"rank{i}" / sample.name
        p.parent.mkdir()
        shutil.copyfile(sample, p)
        paths.append(p)
    got = _grouped(paths)
    assert all(g == _alone(p) for g, p in zip(got, paths)) and _flat(got[0])


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
@pytest.mark.parametrize("bom", ["", "\ufeff"])
def test_hostile_but_plain_lines_in_every_position(tmp_path: Path, newline: str, bom: str) -> None:
    """Quotes, doubled quotes, commas in names, empty and quoted integer cells, blank lines, CRLF, a BOM,
    files with no row and files whose last line has no line end: each file of the group as read alone."""
    paths = []
    for first in range(len(KT_PLAIN)):
        rows = KT_PLAIN[first:] + KT_PLAIN[:first]
        body = newline.join(rows[: first + 1] + [""] + rows[first + 1 :])  # (a blank line somewhere)
        end = newline if first % 2 else ""
        p = tmp_path / f"{first}_kernel_trace.csv"
        p.write_bytes((bom + KT + newline + body + end).encode())
        paths.append(p)
    header_only = tmp_path / "9_kernel_trace.csv"
    header_only.write_bytes((bom + KT + newline).encode())
    paths.insert(3, header_only)
    got = _grouped(paths)
    assert [len(_flat(g)) for g in got] == [len(_flat(_alone(p))) for p in paths]
    assert got == [_alone(p) for p in paths]
    assert got[3] == []


def test_counter_files_read_together(tmp_path: Path) -> None:
    paths = []
    for first in range(len(CC_PLAIN)):
        p = tmp_path / f"{first}_counter_collection.csv"
        p.write_text(CC + "\n" + "\n".join(CC_PLAIN[first:] + CC_PLAIN[:first]) + "\n")
        paths.append(p)
    assert _grouped(paths) == [_alone(p) for p in paths]


def test_files_cut_across_record_batches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Files whose rows are split between two of the group's record batches (and batches that hold
    several files): each file's rows once, in order, names in the order the file alone has them."""
    gen = _generate()
    gen.generate_csv(tmp_path / "run", dispatches=2400, ranks=8, hosts=2, counters=2, short=True)
    for kind in ("kernel_trace", "counter_collection"):
        paths = sorted((tmp_path / "run").glob(f"rank*/*/*_{kind}.csv"))
        monkeypatch.setattr(rocprof_csv, "BLOCK", 1 << 20)
        alone = [_flat(_alone(p)) for p in paths]
        monkeypatch.setattr(rocprof_csv, "BLOCK", 7000)
        got = rocprof_csv.read_group(paths, _info(paths[0]))
        assert got is not None and sum(len(b) for b in got) > len(paths)  # (files cut in parts)
        assert [[r for b in batches for r in b.records()] for batches in got] == alone, kind


def _pair(tmp_path: Path, second: str, name: str = "kernel_trace") -> list[Path]:
    header, rows = (KT, KT_PLAIN) if name == "kernel_trace" else (CC, CC_PLAIN)
    a = tmp_path / f"1_{name}.csv"
    a.write_text(header + "\n" + "\n".join(rows) + "\n")
    b = tmp_path / f"2_{name}.csv"
    b.write_text(second)
    return [a, b]


@pytest.mark.parametrize(
    "second",
    [
        pytest.param(KT.replace('"Kind",', "") + "\n", id="another header"),
        pytest.param(KT + "\n" + KT_ROWS[0].replace(",16,64,", ",16,64.0,") + "\n", id="a float cell"),
        pytest.param(KT + "\n" + KT_ROWS[0].replace(",100,200,", ",100,2x0,") + "\n", id="not a number"),
        pytest.param(KT + "\n" + KT_ROWS[2] + "\n", id="a name over two lines"),
        pytest.param(KT + "\n" + KT_ROWS[0][:60] + "\n", id="a cut line"),
        pytest.param(KT + "\n" + KT_ROWS[0][:60], id="a cut last line"),
        pytest.param(KT + "\n" + '"KERNEL_DISPATCH","Agent 4",1,1,834304,1,10,"open quote', id="an open quote"),
        pytest.param(KT + "\n" + KT_ROWS[0].replace(",100,200,", ",,200,") + "\n", id="no start"),
        pytest.param(KT + "\n" + KT_ROWS[0].replace(",100,200,", ",-9223372036854775807,9223372036854775807,") + "\n",
                     id="a duration past 64 bits"),
        pytest.param("", id="an empty file"),
    ],
)
def test_files_that_cannot_be_read_together_are_read_one_by_one(tmp_path: Path, second: str) -> None:
    paths = _pair(tmp_path, second)
    assert rocprof_csv.read_group(paths, _info(paths[0])) is None


def test_files_missing_a_column_they_need_are_read_one_by_one(tmp_path: Path) -> None:
    """pyarrow's error for a column the header lacks is not an ArrowInvalid (ArrowKeyError): each file is
    then read on its own, whose error names it."""
    header = KT.replace(',"End_Timestamp"', "")
    paths = []
    for i in range(2):
        paths.append(tmp_path / f"{i}_kernel_trace.csv")
        paths[-1].write_text(header + "\n" + KT_PLAIN[0].replace(",100,200,", ",100,") + "\n")
    assert rocprof_csv.read_group(paths, SourceInfo(format="rocprof-csv", kind="kernel_trace")) is None


def test_a_gzip_file_is_read_on_its_own(tmp_path: Path) -> None:
    paths = _pair(tmp_path, KT + "\n" + KT_PLAIN[0] + "\n")
    paths[1].write_bytes(gzip.compress(paths[1].read_bytes()))
    assert rocprof_csv.read_group(paths, _info(paths[0])) is None


def _task(i: int, path: Path, size: int, kind: str = "kernel_trace", reader: str = "rocprof-csv") -> Any:
    info = SourceInfo(format=reader, kind=kind)
    return ingest_workers.Task(i, path, reader, info, 1, i, None, size)


def test_a_worker_takes_runs_of_small_files_of_one_kind(tmp_path: Path) -> None:
    big = rocprof_csv.GROUP_FILE_BYTES + 1
    small = rocprof_csv.GROUP_FILE_BYTES // 4
    p = tmp_path / "x.csv"
    tasks = [_task(0, p, big), _task(1, p, small), _task(2, p, small), _task(3, p, small, "counter_collection"),
             _task(4, p, small, "counter_collection"), _task(5, p, small, "memory_copy_trace"), _task(6, p, small)]
    ends = []
    i = 0
    while i < len(tasks):
        i = ingest_workers._group_end(tasks, i)
        ends.append(i)
    assert ends == [1, 3, 5, 6, 7]
    per_group = rocprof_csv.GROUP_BYTES // small
    many = [_task(i, p, small) for i in range(per_group + 5)]
    assert ingest_workers._group_end(many, 0) == per_group and ingest_workers._group_end(many, per_group) == len(many)


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A job profiled briefly: many ranks of small kernel and counter traces, short names."""
    root = tmp_path_factory.mktemp("many")
    _generate().generate_csv(root, dispatches=24_000, ranks=48, hosts=6, counters=1, short=True)
    return root


def _ingest(db: Path, inputs: Path, monkeypatch: pytest.MonkeyPatch, workers: int, grouped: bool,
            spy: Path | None = None) -> None:
    monkeypatch.setenv(ingest_workers.ENV_WORKERS, str(workers))
    monkeypatch.setattr(rocprof_csv, "GROUP_FILE_BYTES", (256 << 10) if grouped else 0)
    monkeypatch.setattr(rocprof_csv, "GROUP_BYTES", 1 << 20)  # (several groups per worker)
    if spy is not None:
        read_group = rocprof_csv.read_group

        def counted(paths: list[Path], info: SourceInfo) -> Any:
            with spy.open("a") as f:  # (workers are forked: they inherit this)
                f.write(f"{len(paths)}\n")
            return read_group(paths, info)

        monkeypatch.setattr(rocprof_csv, "read_group", counted)
    ingest.ingest_paths(sorted(inputs.glob("rank*")), str(db), run="many")


def _timelines(db: Path) -> dict[str, Any]:
    rank = "(select global_rank from rank where id = rank_id)"
    return {
        "calls": sorted(sql(db, f"select {rank}, family, group_name, collective, seq, start_ns, end_ns, bytes, "
                                "busy_before_ns, window_ns from collective_call")),
        "timeline": sorted(sql(db, f"select {rank}, first_ns, last_ns, work_domain, busy_ns, comm_ns, exposed_comm_ns "
                                   "from rank_timeline")),
    }


def test_grouped_ingest_stores_what_one_file_at_a_time_stores(
    many: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = tmp_path / "groups.txt"
    stores = {}
    for label, workers, grouped in (("plain", 0, False), ("workers", 2, False), ("grouped", 2, True)):
        db = tmp_path / f"{label}.db"
        with monkeypatch.context() as m:
            _ingest(db, many, m, workers, grouped, spy if grouped else None)
        stores[label] = _content(db) | _timelines(db)
    sizes = [int(n) for n in spy.read_text().split()]
    assert len(sizes) >= 4 and max(sizes) > 5 and sum(sizes) == 96  # (every file, in groups of several)
    assert len(stores["plain"]["activity"]) == 24_000 and stores["plain"]["calls"]
    for key in stores["plain"]:
        assert stores["grouped"][key] == stores["plain"][key], key
        assert stores["workers"][key] == stores["plain"][key], key


def test_a_damaged_file_in_a_group_is_named_as_when_read_alone(
    many: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inputs = tmp_path / "inputs"
    shutil.copytree(many, inputs)
    bad = sorted(inputs.glob("rank0031/*/*_kernel_trace.csv"))[0]
    lines = bad.read_text().splitlines(keepends=True)
    lines[40] = lines[40][: len(lines[40]) // 2] + "\n"
    bad.write_text("".join(lines))
    messages = {}
    for grouped in (False, True):
        db = tmp_path / f"store{grouped}.db"
        with monkeypatch.context() as m, pytest.raises(InputError) as err:
            _ingest(db, inputs, m, 2, grouped)
        messages[grouped] = str(err.value)
        assert not db.exists()  # (a store made by the failed ingest is removed)
    assert messages[True] == messages[False]
    assert messages[True].startswith(f"{bad}: line 41 has ")
