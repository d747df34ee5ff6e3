"""The columnar half of an ingest worker (``ingest_workers._parse``): batches a reader yields as columns
(``columnar``: rocprofv3 kernel and counter CSV) turned into the writer's column batches with numpy,
no Python step per row. Imported when such a file is parsed, so the ingests of other formats do not
load numpy."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from itertools import repeat
from operator import itemgetter
from typing import Any, NamedTuple, cast

import numpy as np

from . import classify, columnar
from .batches import SHAPE_TABLES, Coded, Interned
from .errors import InputError
from .ingest_workers import (
    Columns,
    DoneMsg,
    GroupDoneMsg,
    NamedSummaryRow,
    Parsed,
    RowsMsg,
    SummaryColumns,
    Task,
    _Channel,
    batch_rows,
    unsigned_times,
)


def parse_columns(
    task: Task,
    batches: Iterable[columnar.Batch],
    conn: _Channel,
    cats: dict[tuple[str, str], str],
    counts: dict[str, int],
    summary: RunningSums,
    done: dict[tuple[str, str], NamedSummaryRow],
    timeline: columnar.ColumnTimeline,
    read: Callable[[], int] = lambda: 0,
) -> None:
    """``_parse`` for a file read as column batches (``columnar``: ``batches``): the same rows, summary and
    timeline, computed with numpy over each batch; no Python step per row. (Only kinds without nesting
    or steps are read as columns: self time is the total.) Names and launch shapes go to the writer
    as they are (``bulk.Interned``), which interns them and maps the rows to their ids: the worker
    never waits for ids (2,048 small files: a worker waited for them 3.0 s of its 7.1 s, while the
    writer inserted the other worker's rows). So the file's summary is keyed by name, not id
    (``Parsed.named``): a batch's summary goes to ``done`` as final rows when none of its (name,
    kind) keys was met before in the file (a small file is one batch), built in C; otherwise it is
    added to ``summary``'s running sums (numpy columns). ``read()``: the bytes of the file read so far,
    sent with each batch (``RowsMsg.read``)."""
    unsigned = unsigned_times(task)
    for b in batches:
        if isinstance(b, columnar.CounterColumns):
            columnar.check_counters(b, task.path)
            cols: Columns = {
                "rank_id": task.rank_id, "source_id": task.source_id,
                "kernel_name_id": Interned(b.kernels, b.kernel_index),
                "counter_name_id": Interned(b.counters, b.counter_index),
                "dispatch_id": b.dispatch_id, "value": b.value, "samples": 1, "min_value": None, "max_value": None,
            }
            counts["counter"] = counts.get("counter", 0) + len(b)
            conn.send(RowsMsg(task.index, "counter_columns", cols, read()))
            continue
        columnar.check_activities(b, task.path, unsigned)
        kind = b.kind
        entry_cats = _categories(b, cats)
        grouped = columnar.group_durations(b.name_index, b.duration_ns, len(b.names))
        timeline.add_columns(b)
        _summarize(task.rank_id, kind, grouped, b.names, entry_cats, summary, done)
        counts[kind] = counts.get(kind, 0) + len(b)
        cols = _activity_columns(b, entry_cats, task.rank_id, task.source_id)
        conn.send(RowsMsg(task.index, "activity_columns", cols, read()))


def _categories(b: columnar.ActivityColumns, cats: dict[tuple[str, str], str]) -> list[str]:
    """Each dictionary entry's category (``cats``: the worker's, filled as names come)."""
    kind = b.kind
    entry_cats = []
    for n in b.names:
        cat = b.category or cats.get((kind, n))
        if cat is None:
            cat = cats[(kind, n)] = classify.category(kind, n)
        entry_cats.append(cat)
    return entry_cats


def _activity_columns(b: columnar.ActivityColumns, entry_cats: list[str], rank_id: Any, source_id: Any) -> Columns:
    """The writer's columns of an activity batch (``rank_id``, ``source_id``: ints, or arrays with
    ``segments`` added by the caller)."""
    cols: Columns = {"rank_id": rank_id, "source_id": source_id, "kind": b.kind,
                     "name_id": Interned(b.names, b.name_index), "start_ns": b.start_ns,
                     "duration_ns": b.duration_ns, "args": None}
    distinct = tuple(dict.fromkeys(entry_cats))
    if len(distinct) == 1:
        cols["category"] = distinct[0]
    else:
        code = {c: i for i, c in enumerate(distinct)}
        cols["category"] = Coded(np.array([code[c] for c in entry_cats], dtype=np.int64)[b.name_index], distinct)
    corr = b.ints.get("correlation")
    cols["correlation"] = None if corr is None else _constant_or(corr)
    for table, fields in SHAPE_TABLES.items():  # (launch_id, origin_id)
        cols[f"{table}_id"] = Interned(*_shapes(b, fields), table=table)
    return cols


def parse_group(
    tasks: Sequence[Task], group: columnar.GroupBatches, cats: dict[tuple[str, str], str]
) -> GroupParse | None:
    """``parse_columns`` of a group of small files read in one parse (``read_group``), as one batch with
    the files' rows in order: one batch of rows (``segments`` naming each file's), one ``GroupDoneMsg``
    with their summaries as columns (grouped by file and name at once) and each file's timeline. What
    each file read on its own gives, without the per-file steps that cost 2,048 files of ~490 rows
    ~2.6 ms each (a summary, launch shapes and categories per file, then joined again). Made without
    the store's ids, which ``GroupParse.messages`` puts in: a worker parses groups this way before
    they come too (``_Late.send_parsed``). None when the group is not one batch of activities whose
    names are distinct and valid: the caller then parses each file on its own (which names a file at
    fault)."""
    if len(group.batches) != 1 or not isinstance(group.batches[0], columnar.ActivityColumns):
        return None
    b = group.batches[0]
    names = b.names
    if len(set(names)) != len(names):  # (two entries that decode to one name: merged per file, not here)
        return None
    try:
        columnar.check_activities(b, tasks[0].path, unsigned_times(tasks[0]))
    except InputError:
        return None
    kind = b.kind
    entry_cats = _categories(b, cats)
    counts = np.array(group.counts, dtype=np.int64)
    n_files, n_names = len(tasks), len(names)
    key = np.repeat(np.arange(n_files, dtype=np.int64), counts) * n_names + b.name_index
    keys, inverse = np.unique(key, return_inverse=True)
    calls, total, lo, hi, sq = columnar.sums(inverse.reshape(-1), b.duration_ns, len(keys))  # (all keys have calls)
    if total.dtype == object:  # (a file whose durations add up past int64: read on its own, validate.summed names it)
        return None
    key_file, key_name = np.divmod(keys, n_names)
    text = {kind: 0}
    cat_code = np.array([text.setdefault(c, len(text)) for c in entry_cats], dtype=np.int64)
    # (row 0, each row's rank id, is put in by ``GroupParse.messages``)
    ints = np.stack([key_file, key_name, np.zeros(len(keys), dtype=np.int64), cat_code[key_name],
                     calls, total, lo, hi, total])  # (self time is the total)
    summary = JoinedSummary(np.bincount(key_file, minlength=n_files).tolist(), names, tuple(text), ints, sq)
    # each file's timeline, its rows a slice of the batch's (the dictionary shared: planned once)
    plan = columnar.entry_plan(kind, names, b.category)
    parsed = []
    at = 0
    for t, n in zip(tasks, group.counts):
        timeline = columnar.ColumnTimeline(t.info.time_base_ns)
        if n:
            timeline.add_columns(b.view(at, at + n), plan)
        parsed.append(Parsed({kind: n} if n else {}, [], [], timeline.file_timeline()))
        at += n
    cols = _activity_columns(b, entry_cats, None, None)
    return GroupParse([t.index for t in tasks], list(group.counts), cols, summary, parsed)


class GroupParse(NamedTuple):
    """A group of small files parsed as one batch (``parse_group``), all but the store's ids."""

    #: the files' task indexes, and their rows in the batch, in order
    tasks: list[int]
    counts: list[int]
    #: the batch's columns, ``rank_id`` and ``source_id`` None
    cols: Columns
    #: the files' summary rows, row 0 of ``ints`` each row's file (its place in ``tasks``)
    summary: JoinedSummary
    parsed: list[Parsed]

    def weight(self) -> int:
        """Its rows, as ``ingest_workers.HOLD_ROWS`` counts them: activities, summary rows and calls."""
        calls = sum(len(c) for p in self.parsed if p.timeline is not None for c in p.timeline.calls.values())
        return sum(self.counts) + int(self.summary.ints.shape[1]) + calls

    def messages(self, ids: Sequence[tuple[int, int]]) -> tuple[RowsMsg, GroupDoneMsg]:
        """The batch and the files' results to send, with each file's (rank id, source id) in the
        store, in ``tasks``' order. Once: the summary's row 0 is overwritten."""
        rank_ids = np.array([r for r, _s in ids], dtype=np.int64)
        source_ids = np.array([s for _r, s in ids], dtype=np.int64)
        counts = np.array(self.counts, dtype=np.int64)
        ints = self.summary.ints
        ints[0] = rank_ids[ints[0]]
        cols = {**self.cols, "rank_id": np.repeat(rank_ids, counts), "source_id": np.repeat(source_ids, counts)}
        cols["segments"] = [(r, s, n) for (r, s), n in zip(ids, self.counts) if n]
        return RowsMsg(self.tasks[0], "activity_columns", cols), GroupDoneMsg(self.tasks, self.parsed, self.summary)


def _summarize(
    rank_id: int, kind: str, g: columnar.Grouped, names: list[str], entry_cats: list[str],
    summary: RunningSums, done: dict[tuple[str, str], NamedSummaryRow],
) -> None:
    """One batch's grouped durations into the file's summary (``parse_columns``). Rows and keys are
    made by zip and map, in C: 2,048 small files meet 655k (rank, name) keys, at ~2 us each through
    Totals objects in the worker and again in the writer. A key met again (every name in every batch
    of a large file: 158k times in the 32 files of the benchmark's long run, in batches of 1 MB then)
    is added to the running sums as columns (``RunningSums``), not through a Totals object each (2-3%
    of that run's CPU, in-process)."""
    if not g.entries:
        return
    if len(g.entries) == 1:
        knames: tuple[str, ...] = (names[g.entries[0]],)
        kcats: tuple[str, ...] = (entry_cats[g.entries[0]],)
    else:
        pick = itemgetter(*g.entries)
        knames, kcats = pick(names), pick(entry_cats)
    keys = list(zip(knames, repeat(kind)))
    rows = dict(zip(keys, zip(repeat(rank_id), knames, repeat(kind), kcats, g.calls, g.total, g.lo, g.hi, g.sq,
                              g.total)))  # (non-nested kinds: self time is the total)
    # (two entries can decode to one name: distinct invalid UTF-8 bytes both read as U+FFFD)
    if len(rows) == len(keys) and done.keys().isdisjoint(keys) and summary.slot.keys().isdisjoint(keys):
        done.update(rows)
        return
    new = [k for k in keys if k not in summary.slot]
    if new:  # (a key met by an earlier batch of the file has running sums from now on, in the order met)
        cat_of = dict(zip(keys, kcats))
        summary.create(new, [done[k][3] if k in done else cat_of[k] for k in new])
        moved = [done.pop(k) for k in new if k in done]
        if moved:
            summary.add([(r[1], r[2]) for r in moved], *(list(c) for c in list(zip(*moved))[4:9]))
    summary.add(keys, g.calls, g.total, g.lo, g.hi, g.sq)


class RunningSums:
    """A file's running summary of the (name, kind) keys met in more than one batch, as numpy columns
    (calls, total, min, max, sum of squares), one slot per key in the order the keys came: what a
    ``Totals`` per key holds, added a batch at a time without a Python step per key beyond finding its
    slot. Totals are int64 while they are sure to fit (each below 2**62 before an addition); past that
    the column holds Python integers, exact as Totals' (the store's BIGINT refuses what does not fit).
    Sums of squares are float64 additions in the same order as Totals' Python floats: the same values."""

    _SAFE = 1 << 62

    def __init__(self) -> None:
        self.slot: dict[tuple[str, str], int] = {}
        self.keys: list[tuple[str, str]] = []
        self.cats: list[str] = []
        self.calls = np.zeros(0, dtype=np.int64)
        self.total: Any = np.zeros(0, dtype=np.int64)
        self.lo: Any = np.zeros(0, dtype=np.int64)
        self.hi: Any = np.zeros(0, dtype=np.int64)
        self.sq = np.zeros(0, dtype=np.float64)

    def create(self, keys: list[tuple[str, str]], cats: list[str]) -> None:
        """Slots for new keys (``cats``: each one's category), in this order."""
        for key in keys:
            self.slot[key] = len(self.keys)
            self.keys.append(key)
        self.cats += cats
        self._grow(len(self.keys))

    def add(self, keys: list[tuple[str, str]], calls: Sequence[int], total: Sequence[int], lo: Sequence[int],
            hi: Sequence[int], sq: Sequence[float]) -> None:
        """Add one group of calls to each key's sums (durations: never negative, ``validate``)."""
        at = np.array(list(map(self.slot.__getitem__, keys)), dtype=np.intp)
        if self.total.dtype != object and (max(total) >= self._SAFE or max(hi) >= self._SAFE):
            self._exact()
        values = [np.array(v, dtype=self.total.dtype) for v in (total, lo, hi)]
        np.add.at(self.calls, at, np.array(calls, dtype=np.int64))
        np.add.at(self.total, at, values[0])
        np.minimum.at(self.lo, at, values[1])
        np.maximum.at(self.hi, at, values[2])
        np.add.at(self.sq, at, np.array(sq, dtype=np.float64))
        if self.total.dtype != object and int(self.total[at].max()) >= self._SAFE:
            self._exact()

    def _exact(self) -> None:
        """From now on, totals, minima and maxima as Python integers (exact whatever their size)."""
        self.total, self.lo, self.hi = (a.astype(object) for a in (self.total, self.lo, self.hi))

    def _grow(self, n: int) -> None:
        if n <= len(self.calls):
            return
        size = max(n, 2 * len(self.calls), 64)
        big = np.iinfo(np.int64)
        fill = {"calls": 0, "total": 0, "lo": big.max, "hi": big.min, "sq": 0.0}
        for name, v in fill.items():
            old = getattr(self, name)
            new = np.full(size, v, dtype=old.dtype)
            new[: len(old)] = old
            setattr(self, name, new)

    def rows(self, rank_id: int) -> list[NamedSummaryRow]:
        """The summary rows (``NamedSummaryRow``: self time is the total), in the order the keys came."""
        n = len(self.keys)
        if not n:
            return []
        names, kinds = zip(*self.keys)
        total = self.total[:n].tolist()
        return list(zip(repeat(rank_id), names, kinds, self.cats, self.calls[:n].tolist(), total,
                        self.lo[:n].tolist(), self.hi[:n].tolist(), self.sq[:n].tolist(), total))


def _constant_or(col: columnar.Ints) -> Any:
    same, value = col.constant()
    return value if same else col


def _shapes(b: columnar.ActivityColumns, fields: tuple[str, ...]) -> tuple[list[tuple[int | None, ...]], Any]:
    """The batch's distinct launch shapes or origins (``fields``: bulk.LAUNCH_COLS or ORIGIN_COLS), and
    each row's number among them (None when every row has the one). Found with numpy (np.unique over
    the varying columns' rows); the writer interns them (``bulk.Interned``)."""
    const: dict[str, int | None] = {}
    varying: list[str] = []
    for f in fields:
        col = b.ints.get(f)
        if col is None:
            const[f] = None
            continue
        same, value = col.constant()
        if same:
            const[f] = value
        else:
            varying.append(f)
    if not varying:
        return [tuple(const[f] for f in fields)], None
    parts = []
    for f in varying:
        col = b.ints[f]
        parts.append(col.values)
        if col.null is not None:
            parts.append(col.null.astype(np.int64))
    table = np.stack(parts, axis=1)
    first, inverse = _distinct_rows(table, b.name_index)
    uniq = table[first]
    # (the shapes are built column by column, then zipped: a dict per shape was ~1 us a shape)
    values_of: dict[str, Any] = {f: repeat(v) for f, v in const.items()}
    j = 0
    for f in varying:
        values: list[Any] = uniq[:, j].tolist()
        j += 1
        if b.ints[f].null is not None:
            values = [None if empty else v for v, empty in zip(values, uniq[:, j].tolist())]
            j += 1
        values_of[f] = values
    shapes: list[tuple[int | None, ...]] = list(zip(*(values_of[f] for f in fields)))
    return shapes, inverse


def _distinct_rows(table: Any, by: Any) -> tuple[Any, Any]:
    """The distinct rows of a 2-d int64 array: (index of one row of each, each row's distinct number).
    Usually every row of one name has one shape: checked by comparing each row with its name's first
    row (one comparison), and then only the names' first rows are told apart."""
    names, first_of_name, name_inverse = np.unique(by, return_index=True, return_inverse=True)
    if bool((table == table[first_of_name[name_inverse]]).all()):
        first, inverse = _distinct_keyed(table[first_of_name])
        return first_of_name[first], inverse[name_inverse.reshape(-1)]
    return _distinct_keyed(table)


def _distinct_keyed(table: Any) -> tuple[Any, Any]:
    """``_distinct_rows`` by one exact integer key per row: each column's offset from its minimum, the
    columns combined in mixed radix (a column whose range would carry the key past 2**62 is numbered
    by np.unique first, and the key renumbered), so np.unique runs on one column (np.unique(axis=0)
    sorts a structured view: 190 us against ~70 us for 320 rows of 3 columns; offsets instead of
    numbering every column: ~45 -> ~20 us for 122 rows of 3)."""
    limit = 1 << 62
    key = np.zeros(len(table), dtype=np.int64)
    size = 1
    for j in range(table.shape[1] if len(table) else 0):
        col = table[:, j]
        lo = int(col.min())
        span = int(col.max()) - lo + 1
        if size * span >= limit and size > 1:
            values, key = np.unique(key, return_inverse=True)
            key = key.reshape(-1)
            size = len(values)
        if size * span < limit:
            code = col - lo  # (span < 2**62: no overflow)
        else:
            values, code = np.unique(col, return_inverse=True)
            code = code.reshape(-1)
            span = len(values)
        key = key * span + code
        size *= span
    _keys, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    return first, inverse.reshape(-1)


#: rows at most in one batch ``concat`` makes (a group of small files is ~2 MB of CSV: ~12k short rows)
CONCAT_ROWS = 65_536


def concat(batches: Sequence[Columns]) -> list[Columns]:
    """Column batches of consecutive files (``ingest_workers._Late``: a group's, or those held until the
    store's ids came), as few batches of their rows, in order: each sent, pickled and inserted once, not
    once per file (2,048 files of ~490 rows: the writer spent ~0.6 ms a file in per-batch work, its
    shapes interned one statement per file). A file's rank and source ids become columns, and each
    output batch names its files' rows in order (``segments``: (rank id, source id, rows), for
    ``Writer.insert_columns``). Batches whose columns differ (another table, a column left out) are not
    joined."""
    out: list[Columns] = []
    run: list[Columns] = []
    rows = 0
    for b in batches:
        n = batch_rows(b)
        if run and (rows + n > CONCAT_ROWS or b.keys() != run[0].keys()):
            out += _joined(run)
            run, rows = [], 0
        run.append(b)
        rows += n
    if run:
        out += _joined(run)
    return out


def _joined(run: list[Columns]) -> list[Columns]:
    """``run``'s batches as one (``concat``), or as they are when a column cannot be joined."""
    if len(run) < 2 or "segments" in run[0]:
        return run
    sizes = [batch_rows(b) for b in run]
    out: Columns = {}
    for key in run[0]:
        v = _join([b[key] for b in run], sizes)
        if v is _CANNOT:
            return run
        out[key] = v
    out["segments"] = [(b["rank_id"], b["source_id"], n) for b, n in zip(run, sizes)]
    return [out]


_CANNOT = object()


def _join(values: list[Any], sizes: list[int]) -> Any:
    """One column of joined batches: a constant they all hold stays one; names and launch shapes
    (``Interned``) are put in one list of distinct values; strings (a category) become ``Coded``;
    integers (constants, arrays, ``columnar.Ints``, None for empty cells) one array, or ``Ints`` when a
    cell is empty. ``_CANNOT`` for anything else."""
    first = values[0]
    if all(type(v) is type(first) for v in values) and (first is None or type(first) in (int, str)):
        if all(v == first for v in values):
            return first
    if all(isinstance(v, Interned) for v in values):
        return _join_interned(values, sizes)
    if all(isinstance(v, (str, Coded)) for v in values):
        return _join_coded(values, sizes)
    return _join_ints(values, sizes)


def _join_interned(values: list[Interned], sizes: list[int]) -> Any:
    table = values[0].table
    if any(v.table != table for v in values):
        return _CANNOT
    number: dict[Any, int] = {}
    parts = []
    for v, n in zip(values, sizes):
        codes = np.fromiter((number.setdefault(x, len(number)) for x in v.values), dtype=np.int64,
                            count=len(v.values))
        parts.append(np.full(n, codes[0], dtype=np.int64) if v.index is None else codes[v.index])
    if len(number) == 1:
        return Interned(list(number), None, table)
    return Interned(list(number), np.concatenate(parts), table)


def _join_coded(values: list[str | Coded], sizes: list[int]) -> Coded:
    number: dict[str, int] = {}
    parts = []
    for v, n in zip(values, sizes):
        if isinstance(v, str):
            parts.append(np.full(n, number.setdefault(v, len(number)), dtype=np.int64))
        else:
            codes = np.array([number.setdefault(x, len(number)) for x in v.values], dtype=np.int64)
            parts.append(codes[v.codes])
    return Coded(np.concatenate(parts), tuple(number))


def _join_ints(values: list[Any], sizes: list[int]) -> Any:
    parts = []
    nulls = []
    empty = False
    for v, n in zip(values, sizes):
        none = np.zeros(n, dtype=np.bool_)
        if v is None:
            parts.append(np.zeros(n, dtype=np.int64))
            nulls.append(~none)
            empty = True
        elif type(v) is int:
            parts.append(np.full(n, v, dtype=np.int64))
            nulls.append(none)
        elif isinstance(v, np.ndarray) and v.dtype.kind in "iu" and len(v) == n:
            parts.append(v.astype(np.int64, copy=False))
            nulls.append(none)
        elif isinstance(v, columnar.Ints) and len(v.values) == n:
            parts.append(v.values)
            nulls.append(none if v.null is None else v.null)
            empty = empty or v.null is not None
        else:
            return _CANNOT
    joined = np.concatenate(parts)
    if empty:
        return columnar.Ints(joined, np.concatenate(nulls))
    if any(isinstance(v, columnar.Ints) for v in values):
        return columnar.Ints(joined)
    return joined


class JoinedSummary(NamedTuple):
    """The summary rows of several files as columns (``join_summaries``), in the files' order, ``sizes``
    rows each; names, kinds and categories are numbers in ``names`` and ``text``."""

    sizes: list[int]
    names: list[str]
    text: tuple[str, ...]
    #: 9 x rows: rank id, name, kind, category (numbers), calls, total, min, max and self time (ns)
    ints: Any
    sum_sq: Any


def join_summaries(done: Sequence[DoneMsg]) -> GroupDoneMsg | None:
    """The ``DoneMsg`` of several column files (``Parsed.named``) as one message, their summary rows as
    columns: a file of 320 names sent 320 tuples, which the writer unpickled and then took apart to put
    the ids in (2,048 small files: ~0.8 s of its time). None when a value is not an int64 one."""
    rows = [r for m in done for r in cast("list[NamedSummaryRow]", m.parsed.summary)]
    names: dict[str, int] = {}
    text: dict[str, int] = {}
    ints = np.zeros((9, 0), dtype=np.int64)
    sum_sq = np.zeros(0, dtype=np.float64)
    if rows:
        cols = list(zip(*rows))
        name, word = names.setdefault, text.setdefault
        try:
            ints = np.array([cols[0], [name(n, len(names)) for n in cols[1]], [word(k, len(text)) for k in cols[2]],
                             [word(c, len(text)) for c in cols[3]], *cols[4:8], cols[9]], dtype=np.int64)
            sum_sq = np.array(cols[8], dtype=np.float64)
        except (TypeError, ValueError, OverflowError):
            return None
    sizes = [len(m.parsed.summary) for m in done]
    return GroupDoneMsg([m.task for m in done], [m.parsed._replace(summary=[], named=False) for m in done],
                        JoinedSummary(sizes, list(names), tuple(text), ints, sum_sq))


def split_summaries(msg: GroupDoneMsg, ids_of: Callable[[list[Any]], list[Any]]) -> list[DoneMsg]:
    """Each file's ``DoneMsg`` of a ``join_summaries`` or ``parse_group`` message, its summary rows with
    the names' ids in (``ids_of``: the writer's, interning new names) as ``SummaryColumns``, each
    file's in name id order (``bulk.add_summaries`` writes rows in key order: little to sort then)."""
    s: JoinedSummary = msg.summary
    ints, sum_sq = s.ints, s.sum_sq
    if s.names:
        ints = ints.copy()
        ints[1] = np.array(ids_of(s.names), dtype=np.int64)[ints[1]]
        order = np.lexsort((ints[1], np.repeat(np.arange(len(s.sizes)), s.sizes)))
        ints, sum_sq = ints[:, order], sum_sq[order]
    out = []
    at = 0
    for task, parsed, n in zip(msg.tasks, msg.parsed, s.sizes):
        out.append(DoneMsg(task, parsed._replace(summary=SummaryColumns(ints[:, at : at + n], sum_sq[at : at + n],
                                                                        s.text))))
        at += n
    return out
