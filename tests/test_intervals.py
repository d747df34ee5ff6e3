"""Self time of nested ranges and busy time as a union (store/intervals.py), on hand cases and on the
real torchrun4_cpu traces, against a sweep over the raw JSON written here."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from math import comb
from pathlib import Path
from typing import Any

import pytest

from profdb.store.intervals import Coverage, merge, self_times, union_length
from profdb.store.metrics import p_at_least
from profdb.store.readers import kineto_json
from profdb.store.records import Activity
from conftest import Invoke, sql


def test_nested_ranges_keep_only_their_own_time() -> None:
    #  parent [0, 100) holds a [10, 30) which holds b [12, 20); c [50, 60) is a second child
    spans = [("t", 0, 100), ("t", 10, 20), ("t", 12, 8), ("t", 50, 10)]
    assert self_times(spans) == [100 - 20 - 10, 20 - 8, 8, 10]


def test_equal_starts_the_longer_is_the_parent_and_equal_ranges_the_first_given() -> None:
    assert self_times([("t", 0, 10), ("t", 0, 40)]) == [10, 30]
    assert self_times([("t", 5, 10), ("t", 5, 10)]) == [0, 10]
    assert self_times([("t", 5, 10), ("t", 5, 10)][::-1]) == [0, 10]


def test_a_child_running_past_its_parent_is_clipped_and_zero_length_takes_nothing() -> None:
    # child [80, 130) overruns parent [0, 100): only [80, 100) is the child's; [100, 130) is counted nowhere
    assert self_times([("t", 0, 100), ("t", 80, 50)]) == [80, 20]
    assert self_times([("t", 0, 100), ("t", 30, 0), ("t", 30, 0)]) == [100, 0, 0]


def test_lanes_do_not_nest_into_each_other() -> None:
    assert self_times([("a", 0, 100), ("b", 10, 20)]) == [100, 20]


def test_union_and_coverage() -> None:
    ivs = [(0, 10), (5, 15), (20, 30), (30, 31), (40, 40)]
    assert merge(ivs) == [(0, 15), (20, 31)]
    assert union_length(ivs) == 26
    c = Coverage(ivs)
    assert c.total == 26
    assert c.within(0, 100) == 26
    assert c.within(12, 25) == 3 + 5
    assert c.within(15, 20) == 0
    assert c.within(30, 10) == 0


def test_p_at_least_is_the_binomial_tail() -> None:
    assert p_at_least(0, [0.5] * 4) == 1.0
    assert p_at_least(4, [0.5] * 4) == pytest.approx(1 / 16)
    assert p_at_least(5, [1 / 8] * 8) == pytest.approx(sum(comb(8, k) * (1 / 8) ** k * (7 / 8) ** (8 - k) for k in range(5, 9)))


def _raw_lanes(path: Path) -> dict[tuple[int, int], list[tuple[int, int]]]:
    with gzip.open(path, "rt") as f:
        doc = json.load(f)
    lanes: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") == "cpu_op":
            s = round(e["ts"] * 1000)
            lanes[(e["pid"], e["tid"])].append((s, s + round(e["dur"] * 1000)))
    return lanes


def _sweep(ivs: list[tuple[int, int]]) -> int:
    ivs = sorted(ivs)
    total, cs, ce = 0, ivs[0][0], ivs[0][1]
    for s, e in ivs[1:]:
        if s > ce:
            total += ce - cs
            cs, ce = s, e
        else:
            ce = max(ce, e)
    return total + ce - cs


@pytest.mark.parametrize("rank", range(4))
def test_cpu_op_self_time_adds_up_to_100_percent_where_inclusive_double_counts(data: Path, rank: int) -> None:
    path = data / f"kineto/torchrun4_cpu/rank{rank}_iter5_7.json.gz"
    info = kineto_json.inspect(path)
    ops = [a for a in kineto_json.read(path, info) if isinstance(a, Activity) and a.kind == "cpu_op"]
    selfs = self_times([((a.pid, a.tid), a.start_ns, a.duration_ns) for a in ops])
    assert all(s >= 0 for s in selfs)
    raw = _raw_lanes(path)
    union = sum(_sweep(v) for v in raw.values())
    inclusive = sum(e - s for v in raw.values() for s, e in v)
    # self times add up to the time some cpu_op ran (no op here runs past its parent's end)
    assert sum(selfs) == union
    # hotspot shares by name: self shares add up to 100%, inclusive shares to more than 200%
    by_name_self: dict[str, int] = defaultdict(int)
    by_name_incl: dict[str, int] = defaultdict(int)
    for a, s in zip(ops, selfs):
        by_name_self[a.name] += s
        by_name_incl[a.name] += a.duration_ns
    assert sum(v / union for v in by_name_self.values()) == pytest.approx(1.0)
    incl_shares = sum(v / union for v in by_name_incl.values())
    assert incl_shares == pytest.approx(inclusive / union)
    assert incl_shares > 2.0


def _self_totals(spans: list[tuple[object, int, int, object]], fold: int, walk: int,
                 monkeypatch: pytest.MonkeyPatch, hold: int = 256) -> tuple[list[tuple[object, int]], bool]:
    """``SelfTotals`` fed ``(lane, start, duration, key)`` in batches of 100, folding every ``fold``
    ranges, keeping ``hold`` ranges back per lane and walking ``walk`` at a time: its totals (in order)
    and whether it folded."""
    got, folded, _in_order = _self_totals_walked(spans, fold, walk, monkeypatch, hold)
    return got, folded


def _self_totals_walked(spans: list[tuple[object, int, int, object]], fold: int, walk: int,
                        monkeypatch: pytest.MonkeyPatch, hold: int = 256,
                        ) -> tuple[list[tuple[object, int]], bool, bool]:
    """``_self_totals``, and whether the folds were walked as they came (the ranges in order)."""
    from profdb.store import columnar, intervals

    monkeypatch.setattr(intervals, "FOLD", fold)
    monkeypatch.setattr(columnar, "_WALK", walk)
    monkeypatch.setattr(columnar, "HOLD", hold)
    t = intervals.SelfTotals()
    for at in range(0, len(spans), 100):
        for lane, start, duration, key in spans[at : at + 100]:
            t.spans.append((lane, start, duration))  # (as the ingest worker feeds it)
            t.keys.append(key)
        t.compact()
    folded = t.folded
    in_order = folded and t._walk.in_order
    return list(t.totals().items()), folded, in_order


def _sorts_counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The ranges of each sort the end walk makes from now on (``columnar._sort_and_walk``, counted)."""
    from profdb.store import columnar

    counted: list[int] = []
    orig = columnar._sort_and_walk

    def sort_and_walk(cols: Any, *a: Any) -> None:
        counted.append(cols.shape[1])
        orig(cols, *a)

    monkeypatch.setattr(columnar, "_sort_and_walk", sort_and_walk)
    return counted


#: real traces with nested ranges (CPU ops, annotations): Kineto GPU and CPU-only
NESTED_REAL = ["kineto/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz", "kineto/deepseek_train_rank0.json.gz",
               "kineto/nccl_data.json.gz", "kineto/rank0.json.gz", "kineto/torchrun4_cpu/rank0_iter5_7.json.gz"]


@pytest.mark.parametrize("name", NESTED_REAL)
def test_self_totals_folded_as_columns_are_the_plain_ones(data: Path, name: str,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A large file's nested ranges are folded into int64 columns (``SelfTotals``; memory: ~32 bytes a
    range, not ~250); on real traces, folding every 16 ranges and walking 7 at a time (lanes cut across
    walks) gives every key the self time never folding gives, keys in the same order, plain ints."""
    from profdb.store.readers import detect
    from profdb.store.records import NESTED_KINDS

    path = data / name
    reader = detect(path)
    assert reader is not None
    acts = [a for a in reader.read(path, reader.inspect(path)) if isinstance(a, Activity) and a.kind in NESTED_KINDS]
    assert len(acts) > 400  # (folds: dozens)
    spans: list[tuple[object, int, int, object]] = [
        ((a.kind, a.pid, a.tid, a.device), a.start_ns, a.duration_ns, (a.name, a.kind)) for a in acts]
    plain, folded_before = _self_totals(spans, 1 << 40, 1 << 16, monkeypatch)
    folded, folded_now, in_order = _self_totals_walked(spans, 16, 7, monkeypatch)
    assert (folded_before, folded_now) == (False, True)
    # (real traces come in stack order, or within HOLD of it: each fold is walked when it comes)
    assert in_order
    assert folded == plain
    assert all(type(v) is int for _k, v in folded)
    assert sum(v for _k, v in plain) > 0
    # kept back one range per lane, a late one (a child given before its parent of the same start, a
    # GPU annotation given after later ones) sorts before a walked range in some traces: then the
    # chunks kept are walked again at the end, and the totals are the same
    assert _self_totals_walked(spans, 16, 7, monkeypatch, hold=1)[0] == plain


def test_self_walk_of_a_real_rpd_trace_out_of_order_sorts_in_pieces(
        data: Path, monkeypatch: pytest.MonkeyPatch, run_cli: Invoke, tmp_path: Path) -> None:
    """rpd_tracer writes a ROCTx range when it ends, so its ranges come out of stack order (the real
    rocmProfileData sample: 11,884 ranges, one lane, 4,038 of them given after a later-starting one, one
    11,883 places late). Folded every 256 and sorted at most 1,024 at a time at the end, they get the
    self times the plain path gives; the same through an ingest (every annotation's self time)."""
    from profdb.store import columnar, intervals
    from profdb.store.readers import detect
    from profdb.store.records import NESTED_KINDS

    path = data / "legacy_rpd/mytrace.rpd.gz"
    reader = detect(path)
    assert reader is not None
    acts = [a for a in reader.read(path, reader.inspect(path)) if isinstance(a, Activity) and a.kind in NESTED_KINDS]
    assert len(acts) == 11884
    spans: list[tuple[object, int, int, object]] = [
        ((a.kind, a.pid, a.tid, a.device), a.start_ns, a.duration_ns, (a.name, a.kind)) for a in acts]
    plain, folded_before = _self_totals(spans, 1 << 40, 1 << 16, monkeypatch)
    sorted_at_once = _sorts_counted(monkeypatch)
    monkeypatch.setattr(columnar, "END_WALK", 1024)
    folded, folded_now, in_order = _self_totals_walked(spans, 256, 7, monkeypatch)
    assert (folded_before, folded_now, in_order) == (False, True, False)
    assert folded == plain and sum(v for _k, v in plain) > 0
    assert sum(sorted_at_once) == len(spans) and len(sorted_at_once) >= 12 and max(sorted_at_once) <= 1024

    def self_ns(db: Path) -> list[tuple[Any, ...]]:
        return sql(db, "SELECT n.value, s.calls, s.total_ns, s.self_ns FROM summary s JOIN name n ON n.id = s.name_id "
                       "WHERE s.kind = 'annotation' ORDER BY n.value")

    sorted_at_once.clear()
    from profdb.store import ingest_workers

    monkeypatch.setenv(ingest_workers.ENV_WORKERS, "0")  # (in this process, where the sorts are counted)
    run_cli("ingest", path, "--db", tmp_path / "walked.db", "--rank", 0)
    assert sum(sorted_at_once) == len(spans) and len(sorted_at_once) >= 12
    walked = self_ns(tmp_path / "walked.db")
    monkeypatch.setattr(intervals, "FOLD", 1 << 40)
    run_cli("ingest", path, "--db", tmp_path / "plain.db", "--rank", 0)
    assert walked == self_ns(tmp_path / "plain.db") and len(walked) > 10
    assert any(own < total for _n, _c, total, own in walked)
    # and from the raw file: on one lane the self times add up to the union of the ranges
    import sqlite3

    raw = tmp_path / "mytrace.rpd"
    raw.write_bytes(gzip.decompress(path.read_bytes()))
    con = sqlite3.connect(raw)
    ranges = sorted(con.execute("SELECT a.start, a.end FROM rocpd_api a JOIN rocpd_string s ON s.id = a.apiName_id "
                                "WHERE s.string = 'UserMarker'").fetchall())
    con.close()
    lanes = {(a.pid, a.tid) for a in acts}
    assert len(ranges) == len(acts) and len(lanes) == 1
    assert sum(own for _n, _c, _t, own in walked) == union_length(ranges) == 456_763_032


def test_self_totals_folded_at_the_edges(monkeypatch: pytest.MonkeyPatch) -> None:
    """Folded columns keep the plain path's rules where they are easy to get wrong: equal starts (the
    longer, then the first given, is the parent), zero and negative durations (nothing), a child past its
    parent's end (clipped), lanes interleaved in input order, times at the ends of int64, and
    random nestings."""
    import random

    top = (1 << 63) - 1
    spans: list[tuple[object, int, int, object]] = [
        ("a", 0, 100, "p"), ("a", 0, 100, "q"), ("b", 0, 40, "r"), ("a", 0, 140, "s"), ("a", 30, 0, "z"),
        ("a", 50, -5, "z"), ("b", 10, 90, "r"), ("a", 90, 500, "c"),
        ("x", top - 100, 100, "big"), ("x", top - 50, 50, "small"), ("x", -(1 << 63), 10, "low"),
        # an end past int64 (a start and a duration that fit, on a clock with a negative time base)
        ("y", top - 5, 10, "over"), ("y", top - 3, 2, "in"),
    ]
    rng = random.Random(7)
    for _ in range(3000):
        spans.append((rng.choice("abcd"), rng.randrange(10_000), rng.choice((0, 1, 5, 50, 500, 5000)),
                      rng.randrange(40)))
    want: dict[object, int] = {}
    for (lane, start, duration, key), own in zip(spans, self_times([s[:3] for s in spans])):
        want[key] = want.get(key, 0) + own
    assert (want["big"], want["small"], want["low"], want["over"], want["in"]) == (50, 50, 10, 8, 2)
    for fold, walk in ((16, 7), (100, 1), (3000, 2)):
        got, folded = _self_totals(spans, fold, walk, monkeypatch)
        assert folded
        assert got == list(want.items())
    # fed one range at a time (SelfTotals.add, as a transfer feeds it): it folds by itself
    from profdb.store import intervals

    monkeypatch.setattr(intervals, "FOLD", 16)
    t = intervals.SelfTotals()
    for lane, start, duration, key in spans:
        t.add(lane, start, duration, key)
    assert t.folded and len(t.spans) < 16
    assert list(t.totals().items()) == list(want.items())


def _unordered_spans() -> list[tuple[object, int, int, object]]:
    import random

    rng = random.Random(11)
    return [(rng.choice("abc"), rng.randrange(100_000), rng.choice((0, 3, 40, 700, 9000)), rng.randrange(30))
            for _ in range(5000)]


def _plain_totals(spans: list[tuple[object, int, int, object]]) -> list[tuple[object, int]]:
    want: dict[object, int] = {}
    for (_lane, _start, _duration, key), own in zip(spans, self_times([s[:3] for s in spans])):
        want[key] = want.get(key, 0) + own
    return list(want.items())


def test_self_walk_takes_ranges_in_order_as_they_come(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ranges given in stack order (lanes interleaved) are walked a fold at a time, keeping back at most
    ``HOLD`` a lane, so what a file's worker holds does not grow with it; in any other order the kept
    chunks are sorted and walked at the end. Both give the plain path's totals."""
    from profdb.store import columnar, intervals

    spans = _unordered_spans()
    want = _plain_totals(spans)
    got, folded, in_order = _self_totals_walked(spans, 64, 9, monkeypatch, hold=4)
    assert (got, folded, in_order) == (want, True, False)
    # the same ranges in stack order per lane (start, the longer first), the lanes interleaved
    ordered = sorted(spans, key=lambda s: (s[1], -max(s[2], 0)))
    want = _plain_totals(ordered)
    for hold in (0, 1, 4, 256):
        got, folded, in_order = _self_totals_walked(ordered, 64, 9, monkeypatch, hold=hold)
        assert (got, folded, in_order) == (want, True, True)
    # held back: at most HOLD per lane after each fold
    monkeypatch.setattr(intervals, "FOLD", 64)
    monkeypatch.setattr(columnar, "HOLD", 4)
    t = intervals.SelfTotals()
    for lane, start, duration, key in ordered:
        t.add(lane, start, duration, key)
        if t.folded:
            assert t._walk.back.shape[1] <= 3 * 4
    assert t._walk.in_order and t._walk.kept.memory is None
    assert list(t.totals().items()) == want


def test_self_walk_out_of_order_sorts_in_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    """Out of order, the end walk sorts the ranges piece by piece (at most about ``END_WALK`` at once),
    not all of them: the pieces are cut by (lane, start), each range goes to its piece in input order,
    so the totals are the one sort's. Also with one start shared by many ranges (a piece cannot cut
    them: it is larger), and where the pieces cannot be made (no second temporary file; keys past 62
    bits) all are sorted at once, as before."""
    import tempfile

    from profdb.store import columnar

    spans = _unordered_spans()
    want = _plain_totals(spans)
    sorted_at_once = _sorts_counted(monkeypatch)
    monkeypatch.setattr(columnar, "END_WALK", 512)
    got, folded, in_order = _self_totals_walked(spans, 64, 9, monkeypatch, hold=4)
    assert (got, folded, in_order) == (want, True, False)
    assert sum(sorted_at_once) == len(spans) and len(sorted_at_once) >= 10 and max(sorted_at_once) <= 512
    # many ranges of one lane and start (a tie the pieces keep together), and a lane out of order
    # (interleaved with the others, so that each chunk's ranges are moved to their pieces)
    tied = [r for i, s in enumerate(spans) for r in ((("a", 500, i % 11 * 30, i % 7), s) if i < 2000 else (s,))]
    sorted_at_once.clear()
    assert _self_totals_walked(tied, 64, 9, monkeypatch, hold=4)[0] == _plain_totals(tied)
    assert sum(sorted_at_once) == len(tied) and max(sorted_at_once) >= 2000
    # keys past 62 bits: one sort of them all
    wide = [(lane, start if i % 2 else start + (1 << 61), d, key) for i, (lane, start, d, key) in enumerate(spans)]
    sorted_at_once.clear()
    assert _self_totals_walked(wide, 64, 9, monkeypatch, hold=4)[0] == _plain_totals(wide)
    assert sorted_at_once == [len(wide)]
    # no second temporary file (the first one, for the chunks, is made): one sort of them all
    real = tempfile.TemporaryFile
    made: list[int] = []

    def only_one(*a: object, **k: object) -> object:
        made.append(1)
        if len(made) > 1:
            raise OSError(28, "No space left on device")
        return real(*a, **k)

    sorted_at_once.clear()
    with monkeypatch.context() as m:
        m.setattr(tempfile, "TemporaryFile", only_one)
        assert _self_totals_walked(spans, 64, 9, m, hold=4)[0] == want
    assert sorted_at_once == [len(spans)] and len(made) == 2

    # the disk fills while the pieces are written: the kept chunks are sorted at once
    class FillsSecond:
        """The second temporary file: full after ten pieces."""

        made = 0

        def __init__(self, *a: object, **k: object) -> None:
            FillsSecond.made += 1
            self.second = FillsSecond.made > 1
            self.f = real(*a, **k)
            self.writes = 0

        def write(self, b: bytes) -> int:
            self.writes += 1
            if self.second and self.writes > 10:
                raise OSError(28, "No space left on device")
            return int(self.f.write(b))

        def __enter__(self) -> object:
            return self

        def __exit__(self, *a: object) -> None:
            self.f.close()

        def __getattr__(self, name: str) -> object:
            return getattr(self.f, name)

    sorted_at_once.clear()
    with monkeypatch.context() as m:
        m.setattr(tempfile, "TemporaryFile", FillsSecond)
        assert _self_totals_walked(spans, 64, 9, m, hold=4)[0] == want
    assert sorted_at_once == [len(spans)] and FillsSecond.made == 2


def test_self_walk_out_of_order_holds_a_piece_not_the_file() -> None:
    """The end walk's memory: 409,600 ranges out of order, sorted all at once, take ~60 bytes each
    (~25 MB); sorted 16,384 at a time, the walk's peak (tracemalloc sees numpy's arrays) stays under
    a few chunks' worth, and the sums are the same."""
    import tracemalloc

    import numpy as np

    from profdb.store import columnar

    rng = np.random.default_rng(5)
    chunks = [np.stack((rng.integers(0, 3, 16_384), rng.integers(0, 10**9, 16_384), rng.integers(0, 10**5, 16_384),
                        rng.integers(0, 50, 16_384))).astype(np.int64) for _ in range(25)]
    want = [0] * 50
    columnar.self_time_sums([c.copy() for c in chunks], want)
    walk = columnar.SelfWalk()
    for c in chunks:
        walk.add(c, 50)
    assert not walk.in_order
    del chunks
    got = [0] * 50
    old = columnar.END_WALK
    columnar.END_WALK = 16_384
    tracemalloc.start()
    try:
        walk.finish(got)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        columnar.END_WALK = old
    assert got == want
    assert peak < 6 << 20, peak  # (the file's ranges: 13 MB as columns)


def test_self_walk_of_too_many_lanes_is_done_at_the_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """A lane's stack is kept between folds; a file of more than ``MAX_LANES`` lanes (hostile: a thread
    per range) would hold one for each, so it is walked at its end instead, as before: same totals."""
    from profdb.store import columnar

    ordered = sorted(_unordered_spans(), key=lambda s: (s[1], -max(s[2], 0)))
    spans = [((lane, i % 50), start, duration, key) for i, (lane, start, duration, key) in enumerate(ordered)]
    want = _plain_totals(spans)
    assert _self_totals_walked(spans, 64, 9, monkeypatch)[1:] == (True, True)
    monkeypatch.setattr(columnar, "MAX_LANES", 100)
    assert _self_totals_walked(spans, 64, 9, monkeypatch) == (want, True, False)


def test_self_walk_keeps_its_chunks_in_memory_without_a_temporary_file(monkeypatch: pytest.MonkeyPatch) -> None:
    """Out of order, the walk needs every chunk again at the end: kept in a temporary file; where none
    can be made, or the disk fills while writing one, in memory (the chunks written so far read back)."""
    import tempfile

    from profdb.store import columnar

    spans = _unordered_spans()
    want = _plain_totals(spans)

    def no_file(*_a: object, **_k: object) -> object:
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(tempfile, "TemporaryFile", no_file)
        assert _self_totals_walked(spans, 64, 9, m, hold=4)[0] == want

    class Fills:
        """A temporary file that fills after three chunks."""

        def __init__(self, *a: object, **k: object) -> None:
            self.f = real(*a, **k)
            self.writes = 0

        def write(self, b: bytes) -> int:
            self.writes += 1
            if self.writes > 3:
                raise OSError(28, "No space left on device")
            return int(self.f.write(b))

        def __getattr__(self, name: str) -> object:
            return getattr(self.f, name)

    real = tempfile.TemporaryFile
    kept: list[tuple[bool, int]] = []
    with monkeypatch.context() as m:
        m.setattr(tempfile, "TemporaryFile", Fills)
        orig_add = columnar._Kept.add

        def add(self: columnar._Kept, chunk: object) -> None:
            orig_add(self, chunk)  # type: ignore[arg-type]
            kept.append((self.file is not None, len(self.memory or ())))

        m.setattr(columnar._Kept, "add", add)
        assert _self_totals_walked(spans, 64, 9, m, hold=4)[0] == want
    # three chunks in the file, then all of them in memory (a fold of each batch of 100)
    assert kept == [(True, 0)] * 3 + [(False, n) for n in range(4, len(spans) // 100 + 1)]
