"""Small rocprofv3 kernel and counter traces are read several at a time (one pyarrow parse of their
bytes joined: ``rocprof_csv.read_group``), and an ingest worker takes a run of them at once
(``ingest_workers._group_end``). Each file must come out exactly as it does read on its own: the same
column batches (names in the same order), the same store, the same error naming the same file and
line; files that cannot be read together are read one by one."""

from __future__ import annotations

import csv
import gzip
import shutil
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from profdb.store import columnar, ingest, ingest_columns, ingest_workers
from profdb.store.batches import Coded, Interned
from profdb.store.errors import InputError
from profdb.store.readers import rocprof_csv
from profdb.store.records import SourceInfo

from conftest import sql
from pg_fixtures import query_url
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
    return [[(b.records(), getattr(b, "names", None) or (b.kernels, b.counters)) for b in batches]
            for batches in got.per_file()]


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
        group = rocprof_csv.read_group(paths, _info(paths[0]))
        assert group is not None and len(group.batches) > 1
        got = group.per_file()
        assert sum(len(b) for b in got) > len(paths)  # (files cut in parts)
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


def _ingest(db: Path | str, inputs: Path, monkeypatch: pytest.MonkeyPatch, workers: int, grouped: bool,
            spy: Path | None = None, as_one: bool = True, group_bytes: int = 1 << 20, hold: int = 0,
            ranks: slice = slice(None)) -> None:
    """Ingest ``inputs`` (``grouped``: small files read in groups; ``as_one``: a group's files parsed as
    one batch where they can be, ``ingest_columns.parse_group``, else each on its own and their batches
    and summaries joined; ``hold``: ``ingest_workers.HOLD_ROWS``; ``ranks``: which rank folders)."""
    monkeypatch.setenv(ingest_workers.ENV_WORKERS, str(workers))
    monkeypatch.setattr(rocprof_csv, "GROUP_FILE_BYTES", (256 << 10) if grouped else 0)
    monkeypatch.setattr(rocprof_csv, "GROUP_BYTES", group_bytes)  # (several groups per worker)
    # (by default a worker holds nothing before the store's ids come: it waits for them at its first
    # message; what is parsed before they come is held and completed, and compared, in
    # test_groups_parsed_before_the_ids_come_are_completed_or_parsed_again)
    monkeypatch.setattr(ingest_workers, "HOLD_ROWS", hold)
    parse_group = ingest_columns.parse_group
    if not as_one:
        monkeypatch.setattr(ingest_columns, "parse_group", lambda *a: None)
    if spy is not None:
        read_group = rocprof_csv.read_group
        concat = ingest_columns.concat

        def counted(paths: list[Path], info: SourceInfo) -> Any:
            with spy.open("a") as f:  # (workers are forked: they inherit this)
                f.write(f"{len(paths)}\n")
            return read_group(paths, info)

        def joined(batches: list[Any]) -> list[Any]:
            out = concat(batches)
            with spy.open("a") as f:
                f.write("".join(f"joined {len(b.get('segments', [None]))}\n" for b in out))
            return out

        join_summaries = ingest_columns.join_summaries

        def summaries(done: list[Any]) -> Any:
            out = join_summaries(done)
            with spy.open("a") as f:
                f.write(f"summaries {len(out.tasks) if out is not None else 0}\n")
            return out

        def as_one_batch(tasks: list[Any], *a: Any) -> Any:
            done = parse_group(tasks, *a) if as_one else None
            with spy.open("a") as f:
                f.write(f"as one {len(tasks) if done is not None else 0}\n")
            return done

        monkeypatch.setattr(rocprof_csv, "read_group", counted)
        monkeypatch.setattr(ingest_columns, "concat", joined)
        monkeypatch.setattr(ingest_columns, "join_summaries", summaries)
        monkeypatch.setattr(ingest_columns, "parse_group", as_one_batch)
    ingest.ingest_paths(sorted(inputs.glob("rank*"))[ranks], str(db), run="many")


def _record_groups(monkeypatch: pytest.MonkeyPatch, spy: Path) -> None:
    """``ingest_columns.parse_group`` recording, for each file of a group it was given, a line "PATH
    True" (the group was parsed as one batch) or "PATH False" (given up) in ``spy``."""
    parse_group = ingest_columns.parse_group
    spy.touch()

    def recorded(tasks: list[Any], *a: Any) -> Any:
        done = parse_group(tasks, *a)
        with spy.open("a") as f:  # (workers are forked: they inherit this)
            f.write("".join(f"{t.path} {done is not None}\n" for t in tasks))
        return done

    monkeypatch.setattr(ingest_columns, "parse_group", recorded)


def _timelines(db: Path) -> dict[str, Any]:
    rank = "(select global_rank from rank where id = rank_id)"
    return {
        "calls": sorted(sql(db, f"select {rank}, family, group_name, collective, seq, start_ns, end_ns, bytes, "
                                "busy_before_ns, window_ns from collective_call")),
        "timeline": sorted(sql(db, f"select {rank}, first_ns, last_ns, work_domain, busy_ns, comm_ns, exposed_comm_ns "
                                   "from rank_timeline")),
    }


def _summary(db: Path) -> dict[str, Any]:
    """Every summary row exactly: self time, and sums of squares as stored (floats summed in row order)."""
    rank = "(select global_rank from rank where id = s.rank_id)"
    return {"summary, exactly": sorted(sql(db, f"select {rank}, n.value, s.kind, s.category, s.calls, s.total_ns, "
                                               "s.min_ns, s.max_ns, s.self_ns, s.sum_sq_ns from summary s "
                                               "join name n on n.id = s.name_id"))}


def _spans(db: Path) -> dict[str, Any]:
    """Each file's fact rows as its spans reach them (``fact_span``: id ranges), and the rows a span
    reaches that are not its file's, or that no span reaches (both must be none)."""
    path = "(select path from source_file where id = f.source_id)"
    wrong = 0
    for fact in ("activity", "counter"):
        wrong += sql(db, f"select count(*) from fact_span f join {fact} a on a.id between f.first_id and f.last_id "
                         f"where f.fact = '{fact}' and (a.rank_id != f.rank_id or a.source_id != f.source_id)")[0][0]
        wrong += sql(db, f"select (select count(*) from {fact}) - coalesce((select sum(last_id - first_id + 1) "
                         f"from fact_span where fact = '{fact}'), 0)")[0][0]
    return {"spans": sorted(sql(db, f"select {path}, f.fact, sum(f.last_id - f.first_id + 1) from fact_span f "
                                    "group by f.source_id, f.fact")),
            "rows not in their file's spans": wrong}


def test_grouped_ingest_stores_what_one_file_at_a_time_stores(
    many: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stores = {}
    spies = {}
    for label, workers, grouped, as_one in (("plain", 0, False, False), ("workers", 2, False, False),
                                            ("grouped", 2, True, True), ("grouped, files joined", 2, True, False)):
        db = tmp_path / f"{label}.db"
        spy = spies[label] = tmp_path / f"{label}.txt"
        spy.touch()
        with monkeypatch.context() as m:
            _ingest(db, many, m, workers, grouped, spy if grouped else None, as_one)
        stores[label] = _content(db) | _summary(db) | _timelines(db) | _spans(db)
    for label in ("grouped", "grouped, files joined"):
        lines = spies[label].read_text().splitlines()
        sizes = [int(n) for n in lines if n.isdigit()]
        assert len(sizes) >= 4 and max(sizes) > 5 and sum(sizes) == 96  # (every file, in groups of several)
        # once the store's ids have come, a group's kernel files are parsed as one batch
        # (ingest_columns.parse_group); before, or when that is off, each on its own, and their batches
        # and summaries go to the writer joined (ingest_columns.concat, join_summaries): in how many
        # messages depends on the writer's pace (batches held until the store's ids come are joined
        # too: on a loaded machine a worker's whole share can go in one), so only sizes are checked
        as_one = [int(n.split()[2]) for n in lines if n.startswith("as one")]
        joined = [int(n.split()[1]) for n in lines if n.startswith("joined")]
        summaries = [int(n.split()[1]) for n in lines if n.startswith("summaries")]
        if label == "grouped":
            assert max(as_one) > 5 and sum(as_one) >= 12, as_one
        else:
            assert not any(as_one)
            assert max(joined) > 5 and sum(joined) > 24, joined
            assert len(summaries) >= 4 and max(summaries) > 5 and sum(summaries) > 48
    assert len(stores["plain"]["activity"]) == 24_000 and stores["plain"]["calls"]
    assert stores["plain"]["rows not in their file's spans"] == 0 and len(stores["plain"]["spans"]) == 96
    for key in stores["plain"]:
        for label in stores:
            assert stores[label][key] == stores["plain"][key], (label, key)


def test_groups_parsed_before_the_ids_come_are_completed_or_parsed_again(
    many: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The workers parse groups of small files as one batch (``parse_group``) before the writer has
    opened the store, and hold them (``_Late.send_parsed``); the ids are put in when they come. A second
    ingest into the run, of its stored ranks and new ones: a held group holding a file stored already
    is parsed again without it (``_Late.redo``). The stores are those of the writer's process, each
    file alone. (The writer here sends the ids only once the workers have taken every file, so all
    but the groups they were parsing then are held.)"""
    spy = tmp_path / "held.txt"
    spy.touch()
    send_ids, send_parsed = ingest_workers.Parsers.send_ids, ingest_workers._Late.send_parsed

    def late_ids(self: Any, ids: Any) -> None:
        while self.counter.value < len(self.tasks):
            time.sleep(0.01)
        send_ids(self, ids)

    def recorded(self: Any, tasks: list[Any], parsed: Any) -> None:
        with spy.open("a") as f:  # (workers are forked: they inherit this)
            f.write(f"{'held' if self.ids is None else 'sent'} {len(tasks)}\n")
        send_parsed(self, tasks, parsed)

    stores = {}
    for label, workers in (("alone", 0), ("held", 2)):
        db = tmp_path / f"{label}.db"
        for ranks in (slice(8, 24), slice(None)):
            with monkeypatch.context() as m:
                m.setattr(ingest_workers.Parsers, "send_ids", late_ids)
                m.setattr(ingest_workers._Late, "send_parsed", recorded)
                m.setattr(ingest_workers, "PARALLEL_MIN_BYTES", 0)
                _ingest(db, many, m, workers, True, group_bytes=1 << 19, hold=10**9, ranks=ranks)
        stores[label] = _content(db) | _summary(db) | _timelines(db) | _spans(db)
    lines = spy.read_text().splitlines()
    held = [int(n.split()[1]) for n in lines if n.startswith("held")]
    assert len(held) >= 4 and sum(held) >= 24, lines
    assert len(stores["alone"]["activity"]) == 24_000 and stores["alone"]["rows not in their file's spans"] == 0
    assert len(stores["alone"]["spans"]) == 96
    for key in stores["alone"]:
        assert stores["held"][key] == stores["alone"][key], key


@pytest.mark.parametrize("which", ["rocm-systems_2025-08", "rocprofiler-sdk_2024-10", "hostile lines"])
def test_real_and_hostile_files_parsed_as_one_batch_store_what_each_alone_stores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, which: str
) -> None:
    """``parse_group`` on real rocprofv3 kernel traces (40 copies of a sample's, each a rank of its
    own, with its counter files) or on the hostile lines (quotes, commas in names, empty cells, blank
    lines, a last line without its line end, a file without a row): the store is the one the
    in-process path makes of each file alone."""
    files: list[tuple[str, bytes]] = []
    empty = (KT + "\n").encode()
    if which == "hostile lines":
        for first in range(len(KT_PLAIN)):
            rows = KT_PLAIN[first:] + KT_PLAIN[:first]
            body = "\n".join(rows[: first + 1] + [""] + rows[first + 1 :]) + ("\n" if first % 2 else "")
            files += [("kernel_trace.csv", (KT + "\n" + body).encode())] * 5
        files.append(("kernel_trace.csv", empty))  # (the smallest: in the last group)
    else:
        for sample in (DATA / which / "kernel_trace.csv", DATA / which / "counter_collection.csv"):
            files += [(sample.name, sample.read_bytes())] * 40
    inputs = tmp_path / "inputs"
    for rank, (name, data) in enumerate(files):
        p = inputs / f"rank{rank:04d}" / "node-a" / f"{1000 + rank}_{name}"
        p.parent.mkdir(parents=True)
        p.write_bytes(data)
    stores = {}
    spy = tmp_path / "spy.txt"
    for label, workers, grouped in (("alone", 0, False), ("as one", 2, True)):
        db = tmp_path / f"{label}.db"
        with monkeypatch.context() as m:  # (groups of a few files, many per worker: its first goes file by file)
            _record_groups(m, spy)
            _ingest(db, inputs, m, workers, grouped, group_bytes=8 << 10)
        stores[label] = _content(db) | _summary(db) | _timelines(db) | _spans(db)
    as_one = [Path(line.rpartition(" ")[0]).read_bytes() for line in spy.read_text().splitlines()
              if line.endswith(" True")]
    assert len(as_one) > 12 and files[0][1] in as_one and (empty in as_one) == (which == "hostile lines")
    assert len(stores["alone"]["activity"]) > 40 and stores["alone"]["rows not in their file's spans"] == 0
    for key in stores["alone"]:
        assert stores["as one"][key] == stores["alone"][key], key


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


def test_a_file_whose_durations_add_up_past_64_bits_in_a_group_is_named_as_when_read_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """40 copies of a real kernel trace, one with every row ending at 2**63 - 1 ns: read with its group
    as one batch, the group's sums come out as Python integers past int64 and ``parse_group`` gives
    up, so the group is read file by file and the error is validate.summed's naming that file, as
    when every file is read alone."""
    sample = (DATA / "rocm-systems_2025-08" / "kernel_trace.csv").read_text()
    lines = sample.splitlines(keepends=True)
    header = next(csv.reader(lines[:1]))
    start = header.index("Start_Timestamp")
    assert header[start + 1] == "End_Timestamp"
    for i, (line, row) in enumerate(zip(lines[1:], csv.reader(lines[1:])), 1):
        times = f",{row[start]},{row[start + 1]},"  # (the file's own layout kept: numbers unquoted)
        assert line.count(times) == 1
        lines[i] = line.replace(times, f",{row[start]},{2**63 - 1},")
    damaged = "".join(lines)
    # (the others padded with blank lines to the same size: tasks go largest first, and a worker reads
    # its first group file by file, so the damaged file must not come first)
    good = sample + "\n" * (len(damaged) - len(sample))
    inputs = tmp_path / "inputs"
    for rank in range(40):
        p = inputs / f"rank{rank:04d}" / "node-a" / f"{1000 + rank}_kernel_trace.csv"
        p.parent.mkdir(parents=True)
        p.write_text(damaged if rank == 31 else good)
    bad = inputs / "rank0031" / "node-a" / "1031_kernel_trace.csv"
    spy = tmp_path / "spy.txt"
    messages = {}
    for grouped in (False, True):
        db = tmp_path / f"store{grouped}.db"
        with monkeypatch.context() as m, pytest.raises(InputError) as err:
            _record_groups(m, spy)
            _ingest(db, inputs, m, 2, grouped, group_bytes=8 << 10)
        messages[grouped] = str(err.value)
        assert not db.exists()
    assert f"{bad} False" in spy.read_text().splitlines()  # (its group was tried as one batch, and given up)
    assert messages[True] == messages[False]
    assert messages[True].startswith(f"{bad}: its durations add up to ")


def _rows(cols: dict[str, Any], n: int) -> list[dict[str, Any]]:
    """A column batch's rows as plain values (what the writer stores of them, before ids)."""
    def cell(v: Any, i: int) -> Any:
        if isinstance(v, Interned):
            return v.values[0] if v.index is None else v.values[int(v.index[i])]
        if isinstance(v, Coded):
            return v.values[int(v.codes[i])]
        if isinstance(v, columnar.Ints):
            return None if v.null is not None and bool(v.null[i]) else int(v.values[i])
        if isinstance(v, np.ndarray):
            return int(v[i])
        return v
    return [{k: cell(v, i) for k, v in cols.items() if k != "segments"} for i in range(n)]


def _batch(rank: int, n: int, category: Any, correlation: Any, names: list[str], index: Any) -> dict[str, Any]:
    return {"rank_id": rank, "source_id": 100 + rank, "kind": "kernel", "category": category,
            "name_id": Interned(names, index), "start_ns": np.arange(n, dtype=np.int64) + 1000 * rank,
            "duration_ns": np.full(n, rank + 1, dtype=np.int64), "correlation": correlation,
            "launch_id": Interned([(1, 1, 1, 64, 1, 1), (rank, 1, 1, 64, 1, 1)], np.arange(n) % 2, table="launch"),
            "origin_id": Interned([(0, 0, rank, rank)], None, table="origin"), "args": None}


def test_small_files_column_batches_are_joined_row_for_row() -> None:
    """``ingest_columns.concat``: every kind of column a kernel batch holds, constants that differ between
    files, names shared or not, empty cells in one file only: the joined batch holds each file's
    rows in order, and names the files' runs of rows (segments)."""
    batches = [
        _batch(1, 3, "compute", None, ["a", "b"], np.array([0, 1, 0])),
        _batch(2, 2, Coded(np.array([1, 0]), ("compute", "communication")), 7, ["b", "c"], np.array([1, 0])),
        _batch(3, 4, "communication", columnar.Ints(np.array([5, 0, 6, 0]), np.array([False, True, False, True])),
               ["a"], None),
        _batch(4, 1, "compute", np.array([9]), ["d"], np.array([0])),
    ]
    out = ingest_columns.concat(batches)
    assert len(out) == 1
    joined = out[0]
    assert joined["segments"] == [(1, 101, 3), (2, 102, 2), (3, 103, 4), (4, 104, 1)]
    assert joined["kind"] == "kernel" and joined["args"] is None  # (the same in every file: one constant)
    assert isinstance(joined["rank_id"], np.ndarray) and isinstance(joined["category"], Coded)
    assert isinstance(joined["correlation"], columnar.Ints) and joined["correlation"].null is not None
    assert sorted(joined["name_id"].values) == ["a", "b", "c", "d"]  # (each name once)
    expected = [r for b in batches for r in _rows(b, len(b["start_ns"]))]
    assert _rows(joined, 10) == expected
    # one origin for every row of every file, names met by one file only: still one value where one
    same = ingest_columns.concat([_batch(5, 2, "compute", 1, ["x"], None), _batch(5, 3, "compute", 1, ["x"], None)])
    assert same[0]["name_id"] == Interned(["x"], None) and same[0]["rank_id"] == 5 and same[0]["correlation"] == 1


def test_batches_that_cannot_be_joined_go_as_they_are(monkeypatch: pytest.MonkeyPatch) -> None:
    a, b, c = (_batch(i, 2, "compute", None, ["a"], None) for i in (1, 2, 3))
    del c["args"]  # (another set of columns: not joined with the others)
    d = _batch(4, 2, "compute", "not an int", ["a"], None)  # (a column of no type concat joins)
    out = ingest_columns.concat([a, b, c])
    assert [len(x.get("segments", [None])) for x in out] == [2, 1] and out[1] is c
    assert ingest_columns.concat([a, d]) == [a, d]
    monkeypatch.setattr(ingest_columns, "CONCAT_ROWS", 4)  # (a joined batch holds this many rows at most)
    assert [x["segments"] for x in ingest_columns.concat([a, b, b, a])] == [[(1, 101, 2), (2, 102, 2)],
                                                                           [(2, 102, 2), (1, 101, 2)]]


@pytest.mark.parametrize("as_one", [True, False], ids=["group as one batch", "files joined"])
def test_joined_batches_go_into_postgresql_as_into_sqlite(
    many: Path, tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch, as_one: bool
) -> None:
    """PostgreSQL loads a batch of several files (``parse_group``'s, or ``concat``'s) through COPY, its
    rank and source ids as columns."""
    spy = tmp_path / "groups.txt"
    sqlite_db = tmp_path / "grouped.db"
    for url in (str(sqlite_db), pg_url):
        with monkeypatch.context() as m:
            _ingest(url, many, m, 2, True, spy, as_one)
    made = "as one" if as_one else "joined"
    assert any(n.startswith(made) and int(n.split()[-1]) > 5 for n in spy.read_text().splitlines())
    rank = "(select global_rank from rank where id = a.rank_id)"
    src = "(select path from source_file where id = a.source_id)"
    stored = (f"select {rank}, {src}, a.kind, a.category, n.value, a.start_ns, a.duration_ns, a.correlation "
              "from activity a join name n on n.id = a.name_id")
    summary = "select global_rank, kind, category, name, calls, total_ns, min_ns, max_ns from summary_v"
    for q in (stored, summary):
        a = sorted(query_url(f"sqlite:///{sqlite_db}", q))
        b = sorted(tuple(int(v) if isinstance(v, Decimal) else v for v in r) for r in query_url(pg_url, q))
        assert len(a) > 1000 and a == b


def _named(rank: int, rows: list[tuple[str, str, str, int]]) -> Any:
    """A column file's DoneMsg: summary rows by name (``Parsed.named``), from (name, kind, category, calls)."""
    summary = [(rank, name, kind, cat, calls, 10 * calls, 1, 9, 100.5 * calls, 10 * calls)
               for name, kind, cat, calls in rows]
    return ingest_workers.DoneMsg(rank, ingest_workers.Parsed({"kernel": len(rows)}, summary, [], None, named=True))


def test_a_groups_summaries_travel_as_columns_and_come_back_as_each_files_rows() -> None:
    """``join_summaries`` / ``split_summaries``: each file gets back its own summary rows (as columns), the
    names' ids in, as the writer made them from the rows by name (``Writer._with_name_ids``), with the ids the
    writer gives (new names interned as they come)."""
    done = [_named(1, [("b", "kernel", "compute", 3), ("a", "kernel", "communication", 1)]),
            _named(2, []),
            _named(3, [("c", "kernel", "compute", 2), ("a", "memcpy", "memory", 4), ("b", "kernel", "compute", 5)])]
    joined = ingest_columns.join_summaries(done)
    assert joined is not None and joined.tasks == [1, 2, 3] and all(not p.summary for p in joined.parsed)
    ids = {"a": 7, "b": 3, "c": 12}
    asked: list[list[Any]] = []

    def ids_of(names: list[Any]) -> list[Any]:
        asked.append(names)
        return [ids[n] for n in names]

    back = ingest_columns.split_summaries(joined, ids_of)
    assert len(asked) == 1 and sorted(asked[0]) == ["a", "b", "c"]  # (each name asked once for the group)
    for before, after in zip(done, back):
        assert after.task == before.task and not after.parsed.named
        assert after.parsed._replace(summary=[]) == before.parsed._replace(summary=[], named=False)
        expected = sorted((r[0], ids[r[1]], *r[2:]) for r in before.parsed.summary)
        got = after.parsed.summary
        assert isinstance(got, ingest_workers.SummaryColumns)  # (the writer binds them as columns)
        assert len(got) == len(expected) and got.rank_id() == (expected[0][0] if expected else 0)
        assert got.rows() == expected  # (in name id order)
        assert all(type(v) is type(w) for r, e in zip(got.rows(), expected) for v, w in zip(r, e))


def test_summaries_that_do_not_fit_int64_columns_go_as_they_are() -> None:
    a = _named(1, [("a", "kernel", "compute", 1)])
    b = _named(2, [("a", "kernel", "compute", 1)])
    huge = b._replace(parsed=b.parsed._replace(summary=[(2, "a", "kernel", "compute", 1, 1 << 70, 1, 1, 1.0, 1)]))
    assert ingest_columns.join_summaries([a, huge]) is None


@pytest.mark.parametrize("producer", ["rocm-systems_2025-08", "rocprofiler-sdk_2024-10"])
def test_real_samples_of_many_ranks_store_the_same_joined_as_one_by_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, producer: str
) -> None:
    """The real kernel and counter traces (each column layout), copied as 24 ranks' files: ingested by
    two workers (grouped, each file parsed on its own, batches and summaries joined: not as one batch,
    ``parse_group``, which the other tests here compare) and in the writer's process (each file alone),
    the stores hold the same rows, summaries, timelines and spans."""
    inputs = tmp_path / "job"
    for r in range(24):
        for name in ("kernel_trace.csv", "counter_collection.csv"):
            dest = inputs / f"rank{r:04d}" / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(DATA / producer / name, dest)
    spy = tmp_path / "groups.txt"
    stores = {}
    for label, workers in (("alone", 0), ("joined", 2)):
        db = tmp_path / f"{label}.db"
        with monkeypatch.context() as m:
            m.setattr(ingest_workers, "PARALLEL_MIN_BYTES", 0)
            _ingest(db, inputs, m, workers, True, spy if workers else None, as_one=False)
        stores[label] = _content(db) | _timelines(db) | _spans(db)
    lines = spy.read_text().splitlines()
    assert any(n.startswith("joined") and int(n.split()[1]) > 2 for n in lines)
    assert any(n.startswith("summaries") and int(n.split()[1]) > 2 for n in lines)
    assert stores["alone"]["activity"] and stores["alone"]["counter"] and stores["alone"]["summary"]
    assert stores["alone"]["rows not in their file's spans"] == 0
    for key in stores["alone"]:
        assert stores["joined"][key] == stores["alone"][key], key
