"""The columnar ingest path (store/columnar.py) against the record path it replaces: on real rocprofv3
traces (tests/data) and generated multi-host runs with collective kernels, the column batches read
back as the same records, and the numpy timeline (``ColumnTimeline``) equals ``TimelineBuilder``'s;
summaries equal sums computed from the raw CSV with the csv module."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
from gen_collective_run import generate

from profdb.store import columnar
from profdb.store.collectives import TimelineBuilder
from profdb.store.readers import rocprof_csv

DATA = Path(__file__).parent / "data" / "rocprofv3_csv"
REAL = sorted(DATA.glob("*/kernel_trace.csv"))


def _timelines(path: Path, block: int) -> tuple[object, object]:
    info = rocprof_csv.inspect(path)
    old = TimelineBuilder(info.time_base_ns)
    new = columnar.ColumnTimeline(info.time_base_ns)
    rocprof_csv.BLOCK, keep = block, rocprof_csv.BLOCK
    try:
        for b in rocprof_csv.read_columns(path, info):
            assert isinstance(b, columnar.ActivityColumns)
            old.add_many(b.records())
            new.add_columns(b)
    finally:
        rocprof_csv.BLOCK = keep
    return old.finish(0), new.finish(0)


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.parent.name)
def test_real_kernel_traces_same_timeline_and_sums(path: Path) -> None:
    old, new = _timelines(path, 1 << 20)
    assert new == old
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    want: dict[str, list[int]] = {}
    for r in rows:
        want.setdefault(r["Kernel_Name"], []).append(int(r["End_Timestamp"]) - int(r["Start_Timestamp"]))
    info = rocprof_csv.inspect(path)
    got: dict[str, list[int]] = {}
    for b in rocprof_csv.read_columns(path, info):
        assert isinstance(b, columnar.ActivityColumns)
        for e, calls, total, lo, hi, sq in zip(*columnar.group_durations(b.name_index, b.duration_ns, len(b.names))):
            d = want[b.names[e]]
            got[b.names[e]] = [calls, total, lo, hi]
            assert sq == pytest.approx(sum(float(x) * x for x in d))
    assert got == {n: [len(d), sum(d), min(d), max(d)] for n, d in want.items()}


def test_generated_run_with_collective_kernels_same_timeline_in_small_batches(tmp_path: Path) -> None:
    run = generate(tmp_path / "run", nodes=2, late_rank=1)
    kernels = [p for p in run.files.values() if p.name.endswith("kernel_trace.csv")]
    assert kernels
    for path in kernels:
        old, new = _timelines(path, 4096)  # many batches: unions of unions, calls split across batches
        assert new == old
        assert any(new.calls.values())  # (the run has collective kernels: the records path ran too)


def test_union_and_cover_match_the_python_intervals() -> None:
    from profdb.store.intervals import Coverage

    rng = np.random.default_rng(7)
    starts = rng.integers(0, 10_000, 2_000)
    ends = starts + rng.integers(-5, 50, 2_000)  # some empty and some reversed intervals: dropped
    py = Coverage(list(zip(starts.tolist(), ends.tolist())))
    npc = columnar.Cover(starts, ends)
    assert npc.starts.tolist() == py.starts and npc.ends.tolist() == py.ends and npc.total == py.total
    pairs = rng.integers(-100, 10_100, (300, 2))
    for a, b in pairs.tolist():
        assert npc.within(a, b) == py.within(a, b)
    assert npc.within_many(pairs[:, 0], pairs[:, 1]) == [py.within(a, b) for a, b in pairs.tolist()]


def test_union_of_sorted_intervals_takes_no_sort_and_gives_the_same() -> None:
    """``union``'s short ways (a large file's work comes sorted, often already a union): intervals
    sorted by start, overlapping and touching, and a union given again, each the Python union; touching
    intervals join, empty ones go, in every way."""
    from profdb.store.intervals import merge

    rng = np.random.default_rng(8)
    starts = np.sort(rng.integers(0, 10_000, 2_000))
    ends = starts + rng.integers(-5, 50, 2_000)
    pairs = list(zip(starts.tolist(), ends.tolist()))
    cases = [
        (starts, ends),  # sorted, overlapping, some empty
        tuple(np.array(c, dtype=np.int64) for c in zip(*merge(pairs))),  # already a union
        (np.array([0, 5, 20, 30]), np.array([5, 10, 30, 31])),  # touching: [0, 10) and [20, 31)
        (np.array([0, 7, 20]), np.array([5, 7, 25])),  # disjoint, one empty
    ]
    for s, e in cases:
        want = merge(zip(s.tolist(), e.tolist()))
        got = columnar.union(s, e)
        assert list(zip(got[0].tolist(), got[1].tolist())) == want
    assert columnar.union(*cases[2])[0].tolist() == [0, 20]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_work_and_comm_answer_as_the_union_of_both(seed: int) -> None:
    """``WorkAndComm`` (work's union and communication's, never a union of both) against ``Cover`` of
    both: its total and ``within`` of windows that begin and end inside intervals, on their edges,
    between them, outside all of them, and empty or reversed ones."""
    rng = np.random.default_rng(seed)
    ws = rng.integers(0, 20_000, 3_000)
    we = ws + rng.integers(0, 40, 3_000)
    cs = rng.integers(0, 20_000, 400)
    ce = cs + rng.integers(0, 200, 400)
    work = columnar.Cover(ws, we)
    both = columnar.WorkAndComm(work, *columnar.union(cs, ce))
    want = columnar.Cover(np.concatenate((ws, cs)), np.concatenate((we, ce)))
    assert both.total == want.total and both.comm_ns == columnar.Cover(cs, ce).total
    edges = np.concatenate((ws[:100], we[:100], cs[:100], ce[:100], cs[:100] + 1, ce[:100] - 1,
                            rng.integers(-50, 20_100, 400)))
    for a, b in rng.choice(edges, (3_000, 2)).tolist():
        assert both.within(a, b) == want.within(a, b)
    assert type(both.within(0, 20_000)) is int and both.within(5, 5) == 0


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_calls_ordered_windowed_and_numbered_as_the_python_builder_does(seed: int) -> None:
    """ColumnTimeline._family_calls (numpy) against TimelineBuilder._family_calls on calls with equal
    starts (and equal ends), several groups and collectives, sizes or none, overlapping calls, a
    first event after some calls."""
    from profdb.store.intervals import Coverage

    rng = np.random.default_rng(seed)
    n = 3_000
    starts = rng.integers(0, 4_000, n)
    ends = starts + rng.integers(0, 30, n)
    groups = rng.choice(["", "pg0", "pg1"], n)
    colls = rng.choice(["allreduce", "allgather", "broadcast"], n)
    sizes = [None if x < 0.3 else int(x * 1000) for x in rng.random(n)]
    items = list(zip(starts.tolist(), ends.tolist(), groups.tolist(), colls.tolist(), sizes))
    ws = rng.integers(0, 4_000, 2_000)
    we = ws + rng.integers(1, 100, 2_000)
    work_py = Coverage(list(zip(ws.tolist(), we.tolist())))
    work_np = columnar.Cover(ws, we)
    old = TimelineBuilder()._family_calls(5, "rccl", list(items), work_py, 2_000)
    new = columnar.ColumnTimeline()._family_calls(5, "rccl", list(items), work_np, 2_000)
    assert len(new) == n and new == old
    assert len({(c.start_ns, c.end_ns) for c in old}) < n  # (ties present: equal starts, equal ends)


@pytest.mark.parametrize("per_name", [True, False, "extreme"])
def test_distinct_launch_shapes_found_exactly(per_name: bool | str) -> None:
    """The launch shapes of a batch (ingest_columns._distinct_rows): rows of equal shape share one
    number, rows of different shapes never do, whether or not each name has one shape, and when the
    columns' ranges are too wide to combine as they are (the whole int64 range)."""
    from profdb.store.ingest_columns import _distinct_rows

    rng = np.random.default_rng(3)
    names = rng.integers(0, 40, 5_000).astype(np.int32)
    if per_name == "extreme":
        edge = np.array([-(2**63), 2**63 - 1, 0, -1, 2**62], dtype=np.int64)
        table = np.stack([edge[rng.integers(0, 5, 5_000)], rng.integers(0, 1 << 40, 5_000) % 7 << 30,
                          edge[rng.integers(0, 5, 5_000)], rng.integers(-(2**62), 2**62, 5_000) % 3], axis=1)
    elif per_name:
        table = np.stack([names.astype(np.int64) * 7 % 5, names.astype(np.int64) % 3, np.full(5_000, 1 << 40)], axis=1)
    else:
        table = np.stack([rng.integers(0, 1 << 33, 5_000) % 9 * (1 << 33), rng.integers(0, 4, 5_000),
                          rng.integers(-3, 3, 5_000)], axis=1)
    first, inverse = _distinct_rows(table, names)
    rows = [tuple(r) for r in table.tolist()]
    assert [rows[i] for i in first.tolist()] == sorted(set(rows)) or len(set(rows)) == len(first)
    number = {rows[i]: k for k, i in enumerate(first.tolist())}
    assert len(number) == len(first) == len(set(rows))
    assert [number[r] for r in rows] == inverse.tolist()


def test_stored_rows_are_the_raw_csv_rows(tmp_path: Path) -> None:
    """Every kernel of real and generated rocprofv3 traces, as activity_v shows it after an ingest
    (columns, launch shapes interned in ``launch``), equals the row the csv module reads from the file."""
    import sqlite3

    from profdb.store.ingest import ingest_paths
    from profdb.store.identity import IdentityFlags

    run = generate(tmp_path / "run", nodes=2)
    want = []
    for g, path in sorted(run.files.items()):
        with path.open(newline="") as f:
            for r in csv.DictReader(f):
                start, end = int(r["Start_Timestamp"]), int(r["End_Timestamp"])
                want.append((g, r["Kernel_Name"], start, end - start, int(r["Agent_Id"].split()[-1]),
                             int(r["Stream_Id"]), int(r["Correlation_Id"]), int(r["Thread_Id"]),
                             *(int(r[c]) for c in ("Grid_Size_X", "Grid_Size_Y", "Grid_Size_Z", "Workgroup_Size_X",
                                                   "Workgroup_Size_Y", "Workgroup_Size_Z"))))
    db = tmp_path / "s.db"
    ingest_paths([tmp_path / "run"], str(db), run="r", flags=IdentityFlags())
    con = sqlite3.connect(db)
    got = con.execute("select global_rank, name, start_ns, duration_ns, device, stream, correlation, tid, grid_x, "
                      "grid_y, grid_z, block_x, block_y, block_z from activity_v where kind = 'kernel'").fetchall()
    shapes = con.execute("select count(*) from launch").fetchone()[0]
    con.close()
    assert sorted(got) == sorted(want)
    assert 0 < shapes < len(want) / 10  # interned: far fewer shapes than rows


@pytest.mark.parametrize("big", [False, True])
def test_running_sums_give_what_a_totals_per_key_gives(big: bool) -> None:
    """``ingest_columns.RunningSums`` (a file's keys met in several batches, as numpy columns) against
    the per-key ``Totals`` folding it replaced, on random batches with repeated and new keys: the same
    rows in the same order, to the last bit of every float; with totals past 2**62 (``big``) the columns
    turn to Python integers and stay exact (int64 would have wrapped)."""
    from profdb.store.ingest_columns import RunningSums
    from profdb.store.ingest_workers import Totals, _fold

    rng = np.random.default_rng(7 if big else 3)
    names = [f"k{i}" for i in range(40)]
    sums = RunningSums()
    want: dict[tuple[str, str], Totals] = {}
    scale = (1 << 61) if big else 10**6
    for _batch in range(30):
        picked = sorted(set(rng.integers(0, len(names), size=25).tolist()))
        keys = [(names[i], "kernel") for i in picked]
        calls = rng.integers(1, 50, size=len(keys)).tolist()
        lo = rng.integers(0, scale, size=len(keys)).tolist()
        hi = [x + int(d) for x, d in zip(lo, rng.integers(0, scale, size=len(keys)).tolist())]
        total = [h * c for h, c in zip(hi, calls)] if big else [x + h for x, h in zip(lo, hi)]
        sq = (rng.random(len(keys)) * 1e9).tolist()
        cats = ["compute" if i % 3 else "communication" for i in picked]
        new = [k for k in keys if k not in sums.slot]
        sums.create(new, [c for k, c in zip(keys, cats) if k in new])
        sums.add(keys, calls, total, lo, hi, sq)
        for key, cat, *group in zip(keys, cats, calls, total, lo, hi, sq):
            _fold(want, key, cat, *group)
    expected = [t.row(5, name, kind, t.total_ns) for (name, kind), t in want.items()]
    got = sums.rows(5)
    assert got == expected
    assert [type(v) for v in got[0]] == [type(v) for v in expected[0]]
    assert (sums.total.dtype == object) is big
    if big:
        assert max(r[5] for r in got) >= 1 << 63  # (beyond int64: exact Python integers)


KINETO = Path(__file__).parent / "data" / "kineto"
#: real traces with enough work intervals to fold (Kineto GPU and CPU-only, rocprofv3 JSON)
FOLDED_REAL = [
    *(KINETO / n for n in ("rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz", "deepseek_train_rank0.json.gz",
                           "mi250_minitoy_train_ROCm6_2_kineto.json.gz", "nccl_data.json.gz")),
    KINETO / "torchrun4_cpu" / "rank0_iter5_7.json.gz",
    Path(__file__).parent / "data" / "rocprof_json" / "908_results.json.gz",
]


@pytest.mark.parametrize("path", FOLDED_REAL, ids=lambda p: p.name)
def test_unions_folded_as_columns_give_the_same_timeline(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A large file's work unions are folded as numpy columns (``collectives._Union``); on real traces,
    folding every 16 intervals gives the timeline that never folding gives, of plain ints."""
    from profdb.store import collectives
    from profdb.store.readers import detect
    from profdb.store.records import Activity

    reader = detect(path)
    assert reader is not None
    info = reader.inspect(path)
    acts = [a for a in reader.read(path, info) if isinstance(a, Activity)]

    def timeline(compact: int) -> object:
        monkeypatch.setattr(collectives, "_COMPACT", compact)
        t = TimelineBuilder(info.time_base_ns)
        for at in range(0, len(acts), 1000):
            t.add_many(acts[at : at + 1000])
        folded = any(bool(u.columns) for u in (t.device_work, t.cpu_work, t.device_comm, t.host_comm))
        assert folded == (compact == 16)
        return t.finish(0)

    plain, folded = timeline(1 << 40), timeline(16)
    assert folded == plain
    assert {type(v) for v in (folded.busy_ns, folded.comm_ns, folded.exposed_comm_ns)} == {int}  # type: ignore[attr-defined]
    assert all(type(x) is int for s in folded.steps for x in s[1:])  # type: ignore[attr-defined]
    assert all(type(c.busy_before_ns) is int for cs in folded.calls.values() for c in cs)  # type: ignore[attr-defined]
