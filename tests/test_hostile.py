"""Hostile and damaged inputs (issue 14): every case ends in exit 1 with a message naming the file
and the fix, never a traceback or a hang, and the store's bytes are unchanged.

The inputs are the real samples in tests/data, edited in one place each (the edit is the test)."""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import Invoke, file_bytes, sql
from profdb.store import validate
from profdb.store.ingest_workers import ENV_WORKERS

KINETO = Path(__file__).parent / "data" / "kineto" / "torchrun4_cpu" / "rank0_iter5_7.json.gz"
CSV = Path(__file__).parent / "data" / "rocprofv3_csv" / "rocm-systems_2025-08" / "kernel_trace.csv"


@pytest.fixture
def seeded(data: Path, db_path: Path, run_cli: Invoke) -> bytes:
    run_cli("ingest", "--db", db_path, data / "kineto" / "torchrun4_cpu" / "rank1_iter5_7.json.gz")
    content = file_bytes(db_path)
    assert content is not None
    return content


def _fails(run_cli: Invoke, db_path: Path, before: bytes, *args: object, match: str) -> str:
    r = run_cli("ingest", "--db", db_path, *args, ok=False)
    assert r.exit_code == 1, r.output + r.stderr
    assert match in r.stderr, r.stderr
    assert "Traceback" not in r.output + r.stderr
    assert file_bytes(db_path) == before
    return r.stderr


def kineto(tmp_path: Path, edit: Callable[[dict[str, Any]], None], name: str = "rank0.json") -> Path:
    """The real rank-0 trace with ``edit`` applied, written as ``name`` in its own folder."""
    trace = json.loads(gzip.decompress(KINETO.read_bytes()))
    edit(trace)
    out = tmp_path / "in" / name
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(trace))
    return out


def first_x(trace: dict[str, Any]) -> dict[str, Any]:
    return next(e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "user_annotation")


def test_negative_duration(tmp_path: Path, db_path: Path, run_cli: Invoke, seeded: bytes) -> None:
    f = kineto(tmp_path, lambda t: first_x(t).update(dur=-5.0))
    _fails(run_cli, db_path, seeded, f, match=f"{f}: annotation 'gloo:all_reduce'")
    _fails(run_cli, db_path, seeded, f, match="(negative duration)")


def test_a_long_name_is_quoted_cut(tmp_path: Path, db_path: Path, run_cli: Invoke, seeded: bytes) -> None:
    """A 60,000-character annotation name (under profdb's limit) with a negative duration: the message
    quotes its start and gives its length, not 60 kB."""
    f = kineto(tmp_path, lambda t: first_x(t).update(name="k" * 60_000, dur=-5.0))
    err = _fails(run_cli, db_path, seeded, f, match=f"{f}: annotation 'kkkk")
    assert "... (60,002 characters) at " in err and "(negative duration)" in err and len(err) < 1_000, err[:2_000]


@pytest.mark.parametrize(
    "value, match",
    [(1e16, "does not fit in 64 bits"), (1e400, "numeric (floating point) overflow"),
     # (inside 64 bits alone, past them once the trace's baseTimeNanoseconds is added: a traceback before)
     (9.2e15, "ends past what 64 bits hold on the file's clock (time base 1790857026000000000 ns)")],
)
def test_time_out_of_range(tmp_path: Path, db_path: Path, run_cli: Invoke, seeded: bytes, value: float, match: str) -> None:
    f = kineto(tmp_path, lambda t: first_x(t).update(ts=value))
    if value > 1e300:  # json.dumps writes Infinity for 1e400: write the literal the attacker would
        f.write_text(f.read_text().replace("Infinity", "1e400"))
    _fails(run_cli, db_path, seeded, f, match=match)


def test_integers_beyond_64_bits(tmp_path: Path, db_path: Path, run_cli: Invoke, seeded: bytes, data: Path) -> None:
    """Valid JSON with integers beyond 64 bits (json.load and HTA read it): one in an arg profdb does not
    read is read past (the same rows as without it); one profdb keeps is refused, naming its field;
    a collective's message size no BIGINT holds is stored as unknown (it was a traceback)."""
    def sentinel(t: dict[str, Any]) -> None:
        for e in t["traceEvents"]:
            if e.get("ph") == "X":
                e.setdefault("args", {})["Record function id"] = 2**64 - 1

    plain, odd = kineto(tmp_path / "a", lambda t: None), kineto(tmp_path / "b", sentinel)
    rows = []
    for f in (plain, odd):
        db = tmp_path / f"{f.parent.parent.name}.db"
        run_cli("ingest", "--db", db, "--run", "r", f)
        rows.append(sql(db, "SELECT kind, start_ns, duration_ns FROM activity ORDER BY 1, 2, 3"))
    assert rows[0] and rows[1] == rows[0]
    f = kineto(tmp_path / "c", lambda t: first_x(t).update(ts=10**20))
    _fails(run_cli, db_path, seeded, f, match=f"{f}: start time (ns) 100000000000000000000000 does not fit in 64 bits")
    doc = json.loads(gzip.decompress((data / "kineto" / "nccl_data.json.gz").read_bytes()))
    nccl = [e for e in doc["traceEvents"] if e.get("cat") == "kernel" and e["name"].startswith("ncclKernel")]
    for e in nccl[:3]:
        e["args"]["In msg nelems"] = 4 * 10**18
    big = tmp_path / "nccl" / "nccl_data.json"
    big.parent.mkdir()
    big.write_text(json.dumps(doc))
    run_cli("ingest", "--db", db_path, "--run", "nccl", big)
    sizes = sql(db_path, "SELECT bytes FROM collective_call c JOIN run r ON r.id = c.run_id WHERE r.name = 'nccl' "
                         "AND c.family = 'kernel'")
    assert len(sizes) == len(nccl) and sum(b is None for (b,) in sizes) == 3


def test_a_step_number_beyond_64_bits_is_no_step(tmp_path: Path, db_path: Path, run_cli: Invoke) -> None:
    """``ProfilerStep#N`` with an N no BIGINT holds is kept as a plain annotation, not a step (it was a
    traceback at the insert into the step tables); the trace's other steps are stored as they are."""
    huge = "ProfilerStep#" + "9" * 30

    def rename(t: dict[str, Any]) -> None:
        steps = sorted((e for e in t["traceEvents"] if e.get("ph") == "X"
                        and str(e.get("name", "")).startswith("ProfilerStep#")), key=lambda e: e["ts"])
        steps[0]["name"] = huge

    plain, odd = kineto(tmp_path / "a", lambda t: None), kineto(tmp_path / "b", rename)
    got = []
    for f, db in ((plain, tmp_path / "a.db"), (odd, db_path)):
        run_cli("ingest", "--db", db, "--run", "r", f)
        got.append((sql(db, "SELECT step FROM step ORDER BY step"), sql(db, "SELECT step FROM step_timeline ORDER BY step"),
                    sql(db, "SELECT count(*) FROM activity a JOIN name n ON n.id = a.name_id WHERE n.value = ?", huge)))
    (steps, timeline_steps, _), (odd_steps, odd_timeline, (named,)) = got
    assert len(steps) >= 2 and odd_steps == steps[1:] and odd_timeline == timeline_steps[1:]
    assert named == (1,)


def test_a_time_base_beyond_64_bits(tmp_path: Path, db_path: Path, run_cli: Invoke, seeded: bytes) -> None:
    """A Kineto baseTimeNanoseconds no BIGINT holds is refused with the file named (it was a traceback
    at the insert of the source file's row)."""
    f = kineto(tmp_path, lambda t: t.update(baseTimeNanoseconds=2**64))
    _fails(run_cli, db_path, seeded, f,
           match=f"{f}: its time base (the clock its times count from) is 18446744073709551616, not a time in ns")


def test_text_in_integer_column(tmp_path: Path, db_path: Path, run_cli: Invoke, seeded: bytes) -> None:
    def edit(t: dict[str, Any]) -> None:
        t["traceEvents"].append(
            {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": first_x(t)["ts"], "dur": 1.0,
             "args": {"grid": ["lots", 1, 1], "block": [1, 1, 1]}}
        )

    f = kineto(tmp_path, edit)
    _fails(run_cli, db_path, seeded, f, match=f"{f}: grid_x is 'lots' (str), not an integer")


@pytest.mark.parametrize(
    "rank, match",
    [
        (-1, "distributedInfo + host_name) gives global_rank = -1, outside 0.."),
        (True, "gives global_rank = True (bool), not an integer"),
        (10**30, "outside 0.."),
    ],
)
def test_bad_rank_in_file(tmp_path: Path, db_path: Path, run_cli: Invoke, seeded: bytes, rank: Any, match: str) -> None:
    f = kineto(tmp_path, lambda t: t["distributedInfo"].update(rank=rank), name="trace.json")
    _fails(run_cli, db_path, seeded, f, match=match)


def test_huge_world_size(tmp_path: Path, db_path: Path, run_cli: Invoke, seeded: bytes) -> None:
    f = kineto(tmp_path, lambda t: t["distributedInfo"].update(world_size=10**9))
    _fails(run_cli, db_path, seeded, f, match=f"world_size = 1000000000, outside 1..{validate.MAX_WORLD_SIZE}")


def test_huge_rank_folder(tmp_path: Path, db_path: Path, run_cli: Invoke, seeded: bytes) -> None:
    d = tmp_path / ("rank" + "9" * 23)
    d.mkdir()
    trace = json.loads(gzip.decompress(KINETO.read_bytes()))
    del trace["distributedInfo"]
    (d / "trace.json").write_text(json.dumps(trace))
    _fails(run_cli, db_path, seeded, d, match="path (rank99999999999999999999999/) gives global_rank")


@pytest.mark.parametrize(
    "field, value, match",
    [
        ("global_rank", -1, "rank manifest"),
        ("global_rank", True, "no integer global_rank"),
        ("world_size", "8", "field 'world_size' is '8', not int"),
        ("hostname", 5, "field 'hostname' is 5, not str"),
        ("command", "python train.py", "not a list of strings"),
        ("run", ["a"], "field 'run' is ['a'], not str"),
        # (the rank table's BIGINT: a traceback at the insert before)
        ("exit_code", -(10**30), "field 'exit_code' is -1000000000000000000000000000000, beyond 64 bits"),
        ("exit_code", 2**63, "field 'exit_code' is 9223372036854775808, beyond 64 bits"),
    ],
)
def test_bad_manifest_fields(
    tmp_path: Path, db_path: Path, run_cli: Invoke, seeded: bytes, field: str, value: Any, match: str
) -> None:
    f = kineto(tmp_path, lambda t: t.pop("distributedInfo"), name="trace.json")
    manifest = {"profdb_manifest": 1, "global_rank": 0, field: value}
    (f.parent / "profdb-rank.json").write_text(json.dumps(manifest))
    _fails(run_cli, db_path, seeded, f, match=match)


def test_manifest_far_above_is_ignored(tmp_path: Path, db_path: Path, run_cli: Invoke) -> None:
    """A stray manifest in a shared folder high above the inputs does not relabel them."""
    far = tmp_path / "scratch"
    deep = far / "a" / "b" / "c" / "d"
    deep.mkdir(parents=True)
    (far / "profdb-rank.json").write_text(
        json.dumps({"profdb_manifest": 1, "global_rank": 0, "world_size": 1, "hostname": "elsewhere", "run": "stray"})
    )
    shutil.copy(KINETO, deep / "rank0.json.gz")
    run_cli("ingest", "--db", db_path, deep)
    assert sql(db_path, "select r.name, r.world_size, k.hostname from run r join rank k on k.run_id = r.id") == [
        ("d", 4, json.loads(gzip.decompress(KINETO.read_bytes()))["host_name"])
    ]


def test_manifest_of_another_rank_is_ignored_with_rank_flag(tmp_path: Path, db_path: Path, run_cli: Invoke) -> None:
    d = tmp_path / "out" / "rank0001"
    d.mkdir(parents=True)
    (d / "profdb-rank.json").write_text(
        json.dumps({"profdb_manifest": 1, "global_rank": 1, "world_size": 2, "hostname": "other", "run": "stray"})
    )
    trace = json.loads(gzip.decompress(KINETO.read_bytes()))
    del trace["distributedInfo"]
    (d / "trace.json").write_text(json.dumps(trace))
    run_cli("ingest", "--db", db_path, "--rank", "0", "--run", "mine", d / "trace.json")
    assert sql(db_path, "select r.name, r.world_size, k.global_rank, k.hostname from run r join rank k on k.run_id = r.id") == [
        ("mine", None, 0, trace["host_name"])
    ]


@pytest.mark.parametrize("events", [{}, "x", 3, None])
def test_trace_events_not_a_list(tmp_path: Path, db_path: Path, run_cli: Invoke, seeded: bytes, events: Any) -> None:
    f = kineto(tmp_path, lambda t: t.update(traceEvents=events))
    _fails(run_cli, db_path, seeded, f, match=f"{f}: \"traceEvents\" is not a list of events")


@pytest.mark.parametrize("event", [[1, 2], "X", {"ph": "X", "cat": "kernel", "ts": "soon", "dur": 1}, {"ph": "X", "cat": "kernel", "ts": 1, "args": [1]}])
def test_odd_event_shapes(tmp_path: Path, db_path: Path, run_cli: Invoke, seeded: bytes, event: Any) -> None:
    f = kineto(tmp_path, lambda t: t["traceEvents"].append(event))
    _fails(run_cli, db_path, seeded, f, match=f"{f}: ")


def test_fifo_in_a_folder_is_skipped(tmp_path: Path, db_path: Path, run_cli: Invoke) -> None:
    d = tmp_path / "rank0"
    d.mkdir()
    shutil.copy(CSV, d / "kernel_trace.csv")
    os.mkfifo(d / "zz_kernel_stats.csv")
    run_cli("ingest", "--db", db_path, d)
    assert sql(db_path, "select count(*) from source_file") == [(1,)]
    r = run_cli("ingest", "--db", db_path, "--run", "x", d / "zz_kernel_stats.csv", ok=False)
    assert r.exit_code == 1 and "zz_kernel_stats.csv: not a regular file or folder" in r.stderr


def test_validate_counters_rejects_nan() -> None:
    from profdb.store.errors import InputError
    from profdb.store.records import Counter

    with pytest.raises(InputError, match="x.csv: counter 'SQ_WAVES' of 'k' has the value nan"):
        validate.counters([Counter("k", "SQ_WAVES", 1.0), Counter("k", "SQ_WAVES", float("nan"))], Path("x.csv"))


def test_rank_flag_overrides_a_bad_rank_in_the_file(tmp_path: Path, db_path: Path, run_cli: Invoke) -> None:
    f = kineto(tmp_path, lambda t: t["distributedInfo"].update(rank=-1), name="trace.json")
    run_cli("ingest", "--db", db_path, "--rank", "0", f)
    assert sql(db_path, "select global_rank from rank") == [(0,)]


def test_record_output_placeholders_name_one_folder(tmp_path: Path) -> None:
    """-o 'out-{hostname}': the manifest and the profiler's {rank_dir} are the same folder."""
    from profdb.store.launch import detect_context
    from profdb.store.record import plan_rank

    context = detect_context({"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "1"}, hostname="nid7")
    plan = plan_rank(tmp_path / "out-{hostname}", ["rocprofv3", "-d", "{rank_dir}", "--", "python", "t.py"], context)
    assert plan.rank_dir == tmp_path / "out-nid7" / "rank0003"
    assert plan.argv[2] == str(plan.rank_dir)


def test_record_huge_rank_range_is_a_usage_error(tmp_path: Path, run_cli: Invoke) -> None:
    r = run_cli("record", "-o", tmp_path / "o", "--ranks", "0-99999999999", "--", "true", ok=False)
    assert r.exit_code == 2, r.output + r.stderr
    assert "goes beyond rank" in r.stderr


ROCM25 = CSV.parent


def _rank_file(tmp_path: Path, name: str, content: bytes) -> Path:
    out = tmp_path / "rank0000" / name
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(content)
    return out


def _csv_with(name: str, column: str, value: str) -> bytes:
    """The real 2025 sample ``name`` with ``column`` of its third row (line 4) set to ``value``."""
    lines = (ROCM25 / name).read_text().splitlines()
    header = next(csv.reader([lines[0]]))
    row = next(csv.reader([lines[3]]))
    row[header.index(column)] = value
    buf = io.StringIO()
    csv.writer(buf, quoting=csv.QUOTE_MINIMAL, lineterminator="").writerow(row)
    lines[3] = buf.getvalue()
    return ("\n".join(lines) + "\n").encode()


def test_csv_cut_inside_its_last_field(tmp_path: Path, db_path: Path, run_cli: Invoke, seeded: bytes) -> None:
    """The memcpy whose End_Timestamp lost its last digits would last -1,057,962 s."""
    raw = (ROCM25 / "memory_copy_trace.csv").read_bytes().rstrip(b"\n")
    f = _rank_file(tmp_path, "memory_copy_trace.csv", raw[:-10])
    _fails(run_cli, db_path, seeded, "--run", "x", f, match=f"{f}: memcpy 'MEMORY_COPY_DEVICE_TO_HOST'")


def test_a_trace_whose_activity_spans_past_64_bits(tmp_path: Path, db_path: Path, run_cli: Invoke, seeded: bytes,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The real trace without its time base, its first all-reduce moved to -9.2e18 ns and the other two
    to +9.2e18: each time fits in 64 bits, but the window before the second call (from the end of the
    first) does not, and storing it was a traceback; refused, naming the file, in workers and without."""

    def edit(t: dict[str, Any]) -> None:
        t["baseTimeNanoseconds"] = 0
        calls = [e for e in t["traceEvents"] if e.get("ph") == "X" and e.get("name") == "gloo:all_reduce"]
        assert len(calls) == 3
        for e, ts in zip(calls, (-9.2e15, 9.2e15, 9.2e15 + 100)):
            e["ts"] = ts

    f = kineto(tmp_path, edit)
    for workers in ("1", "0"):
        monkeypatch.setenv(ENV_WORKERS, workers)
        _fails(run_cli, db_path, seeded, "--run", "x", f, match=f"{f}: its activity spans 18400000000")
    _fails(run_cli, db_path, seeded, "--run", "x", f, match="past what 64 bits hold (292 years)")


@pytest.mark.parametrize("name", ["kernel_trace.csv", "hip_runtime_trace.csv"])
def test_csv_durations_that_add_up_past_64_bits(
    tmp_path: Path, db_path: Path, run_cli: Invoke, seeded: bytes, name: str
) -> None:
    """Every row ending at 2**63 - 1 ns: each duration fits, their sums do not. A kernel trace's totals
    wrapped negative in the column batch's int64 sums (a wrong summary stored, silently); an API
    trace's exact totals were a traceback at the insert. Both are refused, naming the file."""
    rows = list(csv.reader(io.StringIO((ROCM25 / name).read_text())))
    end = rows[0].index("End_Timestamp")
    for r in rows[1:]:
        r[end] = str(2**63 - 1)
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    f = _rank_file(tmp_path, name, out.getvalue().encode())
    _fails(run_cli, db_path, seeded, "--run", "x", f, match=f"{f}: ")
    _fails(run_cli, db_path, seeded, "--run", "x", f, match="its durations add up to ")
    _fails(run_cli, db_path, seeded, "--run", "x", f, match=" ns, past what 64 bits hold")


def _long_kernels(tmp_path: Path, sub: str, durations: list[int]) -> Path:
    """The real 2025 kernel trace as ``tmp_path/rank0000/sub/kernel_trace.csv``, its first kernel's first
    calls lasting ``durations`` ns from t = 1000 (each file's figures fit in 64 bits)."""
    rows = list(csv.reader(io.StringIO((ROCM25 / "kernel_trace.csv").read_text())))
    start, end, name = (rows[0].index(c) for c in ("Start_Timestamp", "End_Timestamp", "Kernel_Name"))
    first = rows[1][name]
    at = [r for r in rows[1:] if r[name] == first]
    assert len(at) >= len(durations)
    for r, d in zip(at, durations):
        r[start], r[end] = "1000", str(1000 + d)
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    f = tmp_path / "rank0000" / sub / "kernel_trace.csv"
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(out.getvalue())
    return f


# two calls of 4.6e18 ns (overlapping: the busy time is one of them) and one of 5e16: 9.25e18 together
_DURATIONS = {"a": [46 * 10**17, 46 * 10**17], "b": [5 * 10**16]}


def test_a_ranks_files_whose_totals_add_up_past_64_bits(
    tmp_path: Path, db_path: Path, run_cli: Invoke, seeded: bytes
) -> None:
    """Two kernel traces of one rank, each name's total inside 64 bits in each, past them together:
    the writer's merge of their summaries was a traceback at the insert; now refused naming both."""
    a, b = (_long_kernels(tmp_path, sub, d) for sub, d in _DURATIONS.items())
    err = _fails(run_cli, db_path, seeded, "--run", "x", "--allow-duplicate-ranks", tmp_path / "rank0000",
                 match=f"{a}, {b}: the durations of 'void addition_kernel<float>")
    assert "(kernel) of rank 0's files add up to 9250000000000031080 ns, past what 64 bits hold" in err


@pytest.mark.parametrize("second", ["summary", "busy"])
def test_a_ranks_files_past_64_bits_with_those_stored(
    tmp_path: Path, db_path: Path, run_cli: Invoke, second: str
) -> None:
    """The same, one file ingested after the other into the rank: SQLite's upsert turned the summed
    total into a REAL 9.25e18 and stored it silently (``summary``); two files each busy 5e18 ns summed
    the rank's busy time past 64 bits at the insert, a traceback (``busy``). Both refused naming the
    new file."""
    if second == "summary":
        a, b = (_long_kernels(tmp_path, sub, d) for sub, d in _DURATIONS.items())
        match = "the durations of 'void addition_kernel<float>"
        figure = "add up to about 9.25e+18 ns"
    else:
        a, b = (_long_kernels(tmp_path, sub, [5 * 10**18 + k]) for k, sub in enumerate("ab"))
        match, figure = "the busy time", "add up to 10000000000000000001 ns"
    run_cli("ingest", "--db", db_path, "--run", "x", a)
    before = file_bytes(db_path)
    assert before is not None
    err = _fails(run_cli, db_path, before, "--run", "x", "--allow-duplicate-ranks", b, match=f"{b}: {match}")
    assert f"of rank 0's files with those stored for it before {figure}, past what 64 bits hold" in err
    assert sql(db_path, "SELECT DISTINCT typeof(total_ns) FROM summary") == [("integer",)]


def test_merging_stores_whose_rank_adds_up_past_64_bits(tmp_path: Path, run_cli: Invoke) -> None:
    """``profdb merge`` adds a rank's summary onto the destination's in SQL too: refused, not a REAL."""
    a, b = (_long_kernels(tmp_path, sub, d) for sub, d in _DURATIONS.items())
    one, two = tmp_path / "one.db", tmp_path / "two.db"
    run_cli("ingest", "--db", one, "--run", "x", a)
    run_cli("ingest", "--db", two, "--run", "x", b)
    before = file_bytes(one)
    r = run_cli("merge", "--allow-duplicate-ranks", "--db", one, two, ok=False)
    assert r.exit_code == 1, r.output + r.stderr
    assert "of one rank's files add up to about 9.25e+18 ns, past what 64 bits hold" in r.stderr
    assert "Traceback" not in r.output + r.stderr
    assert file_bytes(one) == before


@pytest.mark.parametrize("batch", [20_000, 1], ids=["one-batch", "a-batch-each"])
def test_kineto_durations_that_add_up_past_64_bits(
    tmp_path: Path, db_path: Path, run_cli: Invoke, seeded: bytes, monkeypatch: pytest.MonkeyPatch, batch: int
) -> None:
    """The record path's check: two annotations of one name, 5e18 ns each (each inside 64 bits), are
    refused, read in one batch or in batches of one record (the name's total over the file)."""
    from profdb.store import ingest_workers

    monkeypatch.setattr(ingest_workers, "BATCH", batch)  # (a small input is parsed in this process)

    def edit(t: dict[str, Any]) -> None:
        xs = [e for e in t["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "user_annotation"][:2]
        for e in xs:
            e["ts"], e["dur"], e["name"] = 0, 5e15, "two of a kind"

    f = kineto(tmp_path, edit)
    _fails(run_cli, db_path, seeded, f, match=f"{f}: its durations add up to 1")


@pytest.mark.parametrize("cell", ["inf", "-nan", "12x", "1e999"])
@pytest.mark.parametrize("name, column", [("kernel_trace.csv", "Start_Timestamp"), ("memory_copy_trace.csv", "Stream_Id"),
                                          ("memory_copy_trace.csv", "Start_Timestamp")])
def test_csv_number_cell_that_is_no_integer(
    tmp_path: Path, db_path: Path, run_cli: Invoke, seeded: bytes, cell: str, name: str, column: str
) -> None:
    """A number cell of the real 2025 sample that is no integer (infinite, NaN, text) names the file,
    its line and the value, on the columnar path (kernels) and the row path (copies): 'inf' was an
    OverflowError without a line."""
    f = _rank_file(tmp_path, name, _csv_with(name, column, cell))
    err = _fails(run_cli, db_path, seeded, "--run", "x", f, match=f"'{cell}' is not an integer")
    assert f"{f}: line 4: " in err


@pytest.mark.parametrize("name", ["kernel_trace.csv", "memory_copy_trace.csv"])
def test_a_huge_cell_is_quoted_cut(tmp_path: Path, db_path: Path, run_cli: Invoke, seeded: bytes, name: str) -> None:
    """A 70,000-character timestamp cell: the message quotes its start and says how long it is (the
    row path quoted it whole, in Python's own words: "invalid literal for int() with base 10")."""
    f = _rank_file(tmp_path, name, _csv_with(name, "Start_Timestamp", "a" * 70_000))
    err = _fails(run_cli, db_path, seeded, "--run", "x", f, match=f"{f}: line 4: ")
    assert "'aaaa" in err and "(70,002 characters) is not an integer" in err and len(err) < 1_000, err[:2_000]


def test_csv_cut_inside_its_header(tmp_path: Path, db_path: Path, run_cli: Invoke, seeded: bytes) -> None:
    raw = CSV.read_bytes()
    f = _rank_file(tmp_path, "kernel_trace.csv", raw[: raw.index(b"\n") - 5])
    _fails(run_cli, db_path, seeded, "--run", "x", f, match=f"{f}: the file ends inside its header line")


def test_csv_invalid_utf8_in_first_row(tmp_path: Path, db_path: Path, run_cli: Invoke, seeded: bytes) -> None:
    raw = (ROCM25 / "hip_trace.csv").read_bytes()
    first = raw.index(b"\n") + 1
    f = _rank_file(tmp_path, "hip_trace.csv", raw[:first + 1] + b"\xff\xfe" + raw[first + 1:])
    run_cli("ingest", "--db", db_path, "--run", "x", f)  # undecodable bytes become U+FFFD, as in every row
    assert sql(db_path, "select count(*) from source_file where path = ?", str(f)) == [(1,)]


_NSYS, _RPD = "nsys_sqlite/saxpy-mpi-cuda_nsys_perlmutter0.sqlite", "legacy_rpd/matmul_result.rpd"
_NO_TIME = "start or end time is empty or not a number"


@pytest.mark.parametrize("source, table, column, value, says", [
    (_NSYS, "CUPTI_ACTIVITY_KIND_KERNEL", "start", "x", _NO_TIME),
    (_NSYS, "CUPTI_ACTIVITY_KIND_KERNEL", "end", "a" * 5_000, _NO_TIME),
    (_RPD, "rocpd_op", "end", "x", _NO_TIME),
    (_NSYS, "CUPTI_ACTIVITY_KIND_KERNEL", "streamId", "a" * 5_000, "stream is 'aaaa"),
    (_RPD, "rocpd_op", "queueId", "a" * 5_000, "stream is 'aaaa"),
])
def test_a_cell_of_a_sqlite_profile_that_is_no_number(
    tmp_path: Path, db_path: Path, run_cli: Invoke, seeded: bytes, data: Path, source: str, table: str, column: str,
    value: str, says: str,
) -> None:
    """A time or a stream stored as text in a real Nsight Systems export or RPD trace. A time is named as
    such (it was "a row has an empty timestamp (unsupported operand type(s) for -: 'str' and 'int')");
    a 5,000-character text is quoted cut, not whole."""
    import sqlite3

    f = tmp_path / "rank0" / Path(source).name
    f.parent.mkdir()
    shutil.copy(data / source, f)
    with sqlite3.connect(f) as c:
        c.execute(f"UPDATE {table} SET \"{column}\" = ? WHERE rowid = (SELECT MIN(rowid) FROM {table})", (value,))
    c.close()
    err = _fails(run_cli, db_path, seeded, "--run", "x", "--rank", "0", f, match=f"{f}: ")
    assert says in err and len(err) < 1_000 and "operand" not in err, err[:2_000]
    assert says == _NO_TIME or "... (5,002 characters) (str), not an integer" in err, err


def test_recursive_view_in_an_rpd_input_is_stopped(
    tmp_path: Path, data: Path, db_path: Path, run_cli: Invoke, seeded: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real RPD with its rocpd_string table replaced by a view that never ends: refused when
    the query is prepared, instead of hanging."""
    import sqlite3

    f = tmp_path / "rank0" / "trace.rpd"
    f.parent.mkdir()
    shutil.copy(data / "legacy_rpd" / "matmul_result.rpd", f)
    con = sqlite3.connect(f)
    con.executescript(
        "ALTER TABLE rocpd_string RENAME TO s0;"
        "CREATE VIEW rocpd_string AS WITH RECURSIVE r(id, string) AS (SELECT id, string FROM s0 "
        "UNION ALL SELECT id + 1000000, string FROM r) SELECT id, string FROM r WHERE id < 0;"
    )
    con.close()
    _fails(run_cli, db_path, seeded, "--run", "x", f, match=f"{f}: a view in it is recursive")


def test_endless_view_is_stopped_by_the_step_budget(
    tmp_path: Path, data: Path, db_path: Path, run_cli: Invoke, seeded: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A view that is not recursive but enormous (a cross join of the file's strings, six deep):
    stopped after the step budget (lowered here so the test is quick; the real file fits in it)."""
    import sqlite3

    from profdb.store.readers import sqlite_common

    monkeypatch.setattr(sqlite_common, "STEPS_MIN", 10**7)
    monkeypatch.setattr(sqlite_common, "STEPS_PER_BYTE", 10)
    f = tmp_path / "rank0" / "trace.rpd"
    f.parent.mkdir()
    shutil.copy(data / "legacy_rpd" / "matmul_result.rpd", f)
    run_cli("ingest", "--db", tmp_path / "ok.db", f)
    con = sqlite3.connect(f)
    con.executescript(
        "ALTER TABLE rocpd_op RENAME TO o0;"
        "CREATE VIEW rocpd_op AS SELECT o0.* FROM o0, s0 a, s0 b, s0 c, s0 d, s0 e WHERE a.id + b.id + c.id + d.id + e.id < 0;"
        "CREATE TABLE s0 AS SELECT * FROM rocpd_string;"
    )
    con.close()
    _fails(run_cli, db_path, seeded, "--run", "x", f, match=f"{f}: reading it was stopped after")


def test_deeply_nested_json_gz(tmp_path: Path, db_path: Path, run_cli: Invoke, seeded: bytes) -> None:
    """A few hundred gzip bytes of nested arrays (millions of levels) inside traceEvents."""
    n = 2_000_000
    blob = gzip.compress(b'{"distributedInfo": {"rank": 0}, "traceEvents": [' + b"[" * n + b"]" * n + b"]}", 9)
    assert len(blob) < 10_000
    f = tmp_path / "rank0.json.gz"
    f.write_bytes(blob)
    _fails(run_cli, db_path, seeded, "--run", "x", f, match=f"{f}: arrays or objects are nested more than 64 levels")


def test_long_name(tmp_path: Path, db_path: Path, run_cli: Invoke, seeded: bytes) -> None:
    f = kineto(tmp_path, lambda t: first_x(t).update(name="a" * (validate.MAX_NAME_CHARS + 1)))
    _fails(run_cli, db_path, seeded, "--run", "x", f, match=f"{f}: a name is 65537 characters long")


def test_rank_outside_the_world_names_the_file(tmp_path: Path, db_path: Path, run_cli: Invoke, seeded: bytes) -> None:
    f = kineto(tmp_path, lambda t: t["distributedInfo"].update(rank=7), name="trace.json")
    _fails(run_cli, db_path, seeded, "--run", "x", f, match=f"{f}: rank 7 is outside the world size 4")


@pytest.mark.parametrize("env, match", [
    ({"RANK": "-1", "WORLD_SIZE": "2"}, "global_rank = -1, outside 0.."),
    ({"RANK": "0", "WORLD_SIZE": "1000000000"}, "world_size = 1000000000, outside 1.."),
])
def test_rocpd_environment_with_bad_rank(
    tmp_path: Path, db_path: Path, run_cli: Invoke, seeded: bytes, env: dict[str, str], match: str
) -> None:
    from fixtures_rocpd import sample_process, write_rocpd

    f = write_rocpd(tmp_path / "7_results.db", [sample_process(7, env, n=3)])
    _fails(run_cli, db_path, seeded, "--run", "x", f, match=match)
    assert f"{f}: " in run_cli("ingest", "--db", db_path, "--run", "x", f, ok=False).stderr


def test_nan_counter_is_refused_on_both_engines(tmp_path: Path, db_path: Path, run_cli: Invoke, seeded: bytes) -> None:
    """SQLite stored NaN as NULL (IntegrityError), PostgreSQL as NaN (then no export to SQLite): refused."""
    import csv
    import io

    rows = list(csv.reader(io.StringIO((ROCM25 / "counter_collection.csv").read_text())))
    rows[1][rows[0].index("Counter_Value")] = "nan"
    out = io.StringIO()
    csv.writer(out, quoting=csv.QUOTE_NONNUMERIC).writerows(rows)
    f = _rank_file(tmp_path, "counter_collection.csv", out.getvalue().encode())
    _fails(run_cli, db_path, seeded, "--run", "x", f, match="has the value nan, not a finite number")


def test_deeply_nested_metrix_json(tmp_path: Path, db_path: Path, run_cli: Invoke, seeded: bytes) -> None:
    n = 1_000_000
    f = tmp_path / "rank0" / "metrix_results.json"
    f.parent.mkdir()
    f.write_bytes(b'{"_rank": {"global_rank": 0}, "k": ' + b"[" * n + b"]" * n + b"}")
    r = run_cli("ingest", "--db", db_path, "--run", "x", "--format", "metrix", f, ok=False)
    assert r.exit_code == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"{f}: arrays or objects are nested more than 64 levels" in r.stderr and file_bytes(db_path) == seeded


def test_nan_counter_is_refused_on_postgresql(tmp_path: Path, pg_url: str, run_cli: Invoke) -> None:
    """PostgreSQL would store NaN (and then fail to export it to SQLite): refused at ingest, nothing stored."""
    import csv
    import io

    run_cli("ingest", "--db", pg_url, "--run", "x", KINETO)
    rows = list(csv.reader(io.StringIO((ROCM25 / "counter_collection.csv").read_text())))
    rows[1][rows[0].index("Counter_Value")] = "nan"
    out = io.StringIO()
    csv.writer(out, quoting=csv.QUOTE_NONNUMERIC).writerows(rows)
    f = _rank_file(tmp_path, "counter_collection.csv", out.getvalue().encode())
    count = "select count(*) as n from counter"
    assert run_cli("sql", count, "--db", pg_url, "--format", "csv").stdout == "n\n0\n"
    r = run_cli("ingest", "--db", pg_url, "--run", "x", f, ok=False)
    assert r.exit_code == 1 and f"{f}: " in r.stderr and "has the value nan, not a finite number" in r.stderr
    assert run_cli("sql", count, "--db", pg_url, "--format", "csv").stdout == "n\n0\n"


def _without_root_rights(argv: list[str]) -> list[str]:
    """root reads every file: run ``argv`` without the capabilities that let it (as a user would)."""
    if os.geteuid() != 0:
        return argv
    caps = "-dac_override,-dac_read_search"
    if not shutil.which("setpriv"):
        pytest.skip("running as root without setpriv: no file root cannot read")
    return ["setpriv", "--bounding-set", caps, "--inh-caps", caps, "--", *argv]


def test_unreadable_inputs_are_named(tmp_path: Path, db_path: Path, seeded: bytes) -> None:
    """An unreadable file (given, or in a folder) and an unreadable folder: an error naming it, not
    'not a profiler output' or a quiet skip."""
    import subprocess
    import sys

    folder = tmp_path / "in"
    (folder / "sub").mkdir(parents=True)
    shutil.copy(KINETO, folder / "rank0.json.gz")
    shutil.copy(KINETO.with_name("rank2_iter5_7.json.gz"), folder / "sub" / "rank2.json.gz")
    profdb = [sys.executable, "-m", "profdb.cli.main", "ingest", "--db", str(db_path), "--run", "x"]
    cases = [
        (folder / "rank0.json.gz", folder / "rank0.json.gz", "cannot read it (Permission denied); check its permissions"),
        (folder / "rank0.json.gz", folder, "rank0.json.gz: cannot read it (Permission denied)"),
        (folder / "sub", folder, "sub: cannot list this folder (Permission denied); check its permissions"),
    ]
    for locked, given, message in cases:
        locked.chmod(0)
        try:
            r = subprocess.run(_without_root_rights([*profdb, str(given)]), capture_output=True, text=True)
        finally:
            locked.chmod(0o755 if locked.is_dir() else 0o644)
        assert r.returncode == 1 and message in r.stderr and "Traceback" not in r.stderr, (given, r.stderr)
        assert file_bytes(db_path) == seeded


def test_folder_walk_keeps_os_walks_files_and_order(tmp_path: Path) -> None:
    # inputs._walk lists a folder with os.scandir (no stat per file); what it keeps, and in which
    # order, is what os.walk and a stat per file kept: regular files and links to them, sorted, top
    # down; no FIFO (or link to one), no dot names, no manifest, no walk into a linked folder
    import stat

    from profdb.store import inputs
    from profdb.store.manifest import MANIFEST_NAME

    root = tmp_path / "job"
    for folder in ("b/z", "a", "a/c", ".hidden", "a/c/d"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    for f in ("b/z/1.csv", "b/0.csv", "a/x.csv", "a/c/d/deep.csv", ".hidden/h.csv", "a/.dot.csv", "Z.csv",
              "a/c/" + MANIFEST_NAME, "B.csv"):
        (root / f).write_text("x")
    os.mkfifo(root / "a" / "fifo.csv")
    (root / "a" / "link.csv").symlink_to(root / "b" / "0.csv")
    (root / "a" / "fifo_link.csv").symlink_to(root / "a" / "fifo.csv")
    (root / "a" / "dangling.csv").symlink_to(root / "nowhere.csv")
    (root / "linked_folder").symlink_to(root / "b")
    expected = []
    for top, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            p = Path(top) / name
            try:
                regular = stat.S_ISREG(p.stat().st_mode)
            except OSError:
                regular = False
            if not name.startswith(".") and name != MANIFEST_NAME and regular:
                expected.append(p)
    got = inputs._walk(root)
    assert got == expected
    assert [p.relative_to(root).as_posix() for p in got] == [
        "B.csv", "Z.csv", "a/link.csv", "a/x.csv", "a/c/d/deep.csv", "b/0.csv", "b/z/1.csv"]


def test_real_path_with_remembered_folders_is_realpath(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the same file named twice (through a linked folder, a link to it, a relative path, "..") is
    # read once: inputs.expand keys files by manifest.real_path, which remembers resolved folders
    from profdb.store.manifest import real_path

    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "f.csv").write_text("x")
    (tmp_path / "l").symlink_to(tmp_path / "a" / "b")
    (tmp_path / "a" / "lf.csv").symlink_to(tmp_path / "a" / "b" / "f.csv")
    (tmp_path / "up").symlink_to(tmp_path / "a" / "b")  # up/.. is a/, not tmp_path
    monkeypatch.chdir(tmp_path / "a")
    folders: dict[str, str] = {}
    names = [tmp_path / "a" / "b" / "f.csv", tmp_path / "l" / "f.csv", Path("lf.csv"), Path("b/f.csv"),
             tmp_path / "up" / ".." / "b" / "f.csv", tmp_path / "l" / "missing.csv"]
    for p in names + names:  # the second time from the remembered folders
        assert real_path(p, folders) == os.path.realpath(p), p
    assert len({real_path(p, folders) for p in names[:5]}) == 1


def _rocprof_json_starting_at(tmp_path: Path, data: Path, start: int) -> Path:
    trace = json.loads(gzip.decompress((data / "rocprof_json" / "908_results.json.gz").read_bytes()))
    trace["rocprofiler-sdk-tool"][0]["buffer_records"]["kernel_dispatch"][0]["start_timestamp"] = start
    return _rank_file(tmp_path, "908_results.json", json.dumps(trace).encode())


def _rpd_starting_at(tmp_path: Path, data: Path, start: int) -> Path:
    import sqlite3

    f = _rank_file(tmp_path, "mytrace.rpd", gzip.decompress((data / "legacy_rpd" / "mytrace.rpd.gz").read_bytes()))
    with sqlite3.connect(f) as c:
        c.execute("UPDATE rocpd_op SET start = ? WHERE rowid = (SELECT MIN(rowid) FROM rocpd_op)", (start,))
    c.close()
    return f


@pytest.mark.parametrize("workers", ["0", "1"])
@pytest.mark.parametrize("case", ["csv kernels (columns)", "csv copies (rows)", "csv kernels read as a group",
                                  "rocprofv3 json", "rpd"])
def test_a_start_before_the_clock_zero(tmp_path: Path, db_path: Path, run_cli: Invoke, seeded: bytes, data: Path,
                                       monkeypatch: pytest.MonkeyPatch, case: str, workers: str) -> None:
    """rocprofv3 and rpd_tracer write unsigned ns: a negative start is damage. A rocprofv3 JSON whose
    first start_timestamp was -5 ingested, its kernel 63,858 s long on the store's clock, and
    --hotspots put it first at 99.99% of the run's kernel time. Refused now, naming the file and the
    record, in each path that reads these formats, in workers and without."""
    monkeypatch.setenv(ENV_WORKERS, workers)
    args: list[object] = ["--run", "x", "--rank", "0"]
    if case == "csv kernels (columns)":
        f = _rank_file(tmp_path, "kernel_trace.csv", _csv_with("kernel_trace.csv", "Start_Timestamp", "-7"))
    elif case == "csv copies (rows)":
        f = _rank_file(tmp_path, "memory_copy_trace.csv", _csv_with("memory_copy_trace.csv", "Start_Timestamp", "-7"))
    elif case == "csv kernels read as a group":  # (small files of one kind, several ranks: read together in a worker)
        f = tmp_path / "job"
        for r in range(3):
            raw = _csv_with("kernel_trace.csv", "Start_Timestamp", "-7" if r == 1 else "1")
            (f / f"rank{r}").mkdir(parents=True)
            (f / f"rank{r}" / "kernel_trace.csv").write_bytes(raw)
        args = ["--run", "x"]
    elif case == "rocprofv3 json":
        f = _rocprof_json_starting_at(tmp_path, data, -5)
    else:
        f = _rpd_starting_at(tmp_path, data, -3)
    err = _fails(run_cli, db_path, seeded, *args, f, match="before its clock's zero")
    assert f"{f / 'rank1' / 'kernel_trace.csv' if case.endswith('group') else f}: " in err, err
    assert "starts at -" in err and "unsigned" in err, err


def test_a_start_at_the_clock_zero_is_read(tmp_path: Path, db_path: Path, run_cli: Invoke, data: Path) -> None:
    """A start of 0 ns is a time the producers can give: the bound is 0, not 1. (Kineto's times, signed
    floats relative to its base, are read as before: test_a_trace_whose_activity_spans_past_64_bits.)"""
    f = _rocprof_json_starting_at(tmp_path, data, 0)
    run_cli("ingest", "--db", db_path, "--run", "x", "--rank", "0", f)
    assert sql(db_path, "SELECT MIN(start_ns) FROM activity") == [(0,)]
