"""Parsing input files in worker processes for ``ingest_paths``, while the one writer (the calling
process) owns the store's only transaction.

Each worker takes the next file (largest first, from a shared counter), streams its records through
the file's reader and turns them into the writer's row tuples in batches: ids of interned names come
from the writer (one request per batch that meets new names, answered from its in-memory table),
categories are classified once per name, and the per-(rank, name, kind) summary and the steps of the
file are kept in the worker and sent when the file is done. The writer only inserts rows with
executemany and merges summaries. Workers never open the store: a failed or interrupted ingest
still rolls back in one place. Messages go over one duplex pipe per worker, so a slow writer makes
the workers wait (memory stays bounded by a few batches per worker).

Small ingests (or PROFDB_INGEST_WORKERS=0) run the same parsing in the writer's process
(``parse_here``). Messages, worker -> writer: ("names", [new names]) answered by [ids]; ("rows", task, table, rows);
("done", task, counts, summary, steps); ("error", task, exception, traceback text)."""

from __future__ import annotations

import multiprocessing as mp
import os
import re
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any, Callable, Iterator, Protocol, cast

from . import classify, lifetime, readers, validate
from .records import Activity, Aggregate, Counter, SourceInfo

BATCH = 20000
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
#: below this much input the files are parsed in the writer process (no start-up cost)
PARALLEL_MIN_BYTES = 16 << 20
ENV_WORKERS = "PROFDB_INGEST_WORKERS"


@dataclass(frozen=True)
class Task:
    index: int
    path: Path
    reader: str
    info: SourceInfo
    rank_id: int
    source_id: int
    #: one rank section of a multi-rank file (reader.read_rank), or None
    section: int | None = None


def worker_count(total_bytes: int, files: int) -> int:
    """Workers for an ingest: $PROFDB_INGEST_WORKERS if set (0 = parse in the writer), else one per
    CPU when the input is large enough to pay for starting them."""
    env = os.environ.get(ENV_WORKERS)
    if env is not None and env.strip():
        try:
            n = int(env)
        except ValueError:
            n = 0
        return max(0, min(n, files))
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if cpus < 2 or files < 2 or total_bytes < PARALLEL_MIN_BYTES:
        return 0
    return min(cpus, files)


# --------------------------------------------------------------------------- worker side


class _Channel(Protocol):
    def send(self, obj: Any) -> None: ...

    def recv(self) -> Any: ...


class _Names:
    """The worker's copy of the writer's name table, filled on demand."""

    def __init__(self, conn: _Channel) -> None:
        self.conn = conn
        self.ids: dict[str, int] = {}

    def resolve(self, names: set[str]) -> None:
        new = [n for n in names if n not in self.ids]
        if new:
            self.conn.send(("names", new))
            self.ids.update(zip(new, self.conn.recv()))


def _parse(task: Task, conn: _Channel, names: _Names, cats: dict[tuple[str, str], str]) -> None:
    reader = readers.by_name(task.reader)
    rank_id, source_id = task.rank_id, task.source_id
    counts: dict[str, int] = {}
    summary: dict[tuple[int, str], list[Any]] = {}
    steps: list[tuple[int, int, int]] = []
    acts: list[Activity] = []
    ctrs: list[Counter] = []
    ids = names.ids

    def flush_acts() -> None:
        validate.activities(acts, task.path)
        names.resolve({a[1] for a in acts})
        rows = []
        for a in acts:
            kind = a[0]
            name = a[1]
            nid = ids[name]
            cat = a[4]
            if cat is None:
                key = (kind, name)
                cat = cats.get(key)
                if cat is None:
                    cat = cats[key] = classify.category(kind, name)
            d = a[3]
            rows.append((rank_id, source_id, kind, cat, nid, a[2], d) + a[5:])
            s = summary.get((nid, kind))
            if s is None:
                summary[(nid, kind)] = [cat, 1, d, d, d, float(d) * d]
            else:
                s[1] += 1
                s[2] += d
                if d < s[3]:
                    s[3] = d
                if d > s[4]:
                    s[4] = d
                s[5] += float(d) * d
            counts[kind] = counts.get(kind, 0) + 1
            if kind == "annotation" and name.startswith("ProfilerStep#"):
                m = _STEP.match(name)
                if m:
                    steps.append((int(m.group(1)), a[2], d))
        conn.send(("rows", task.index, "activity", rows))

    def flush_ctrs() -> None:
        validate.counters(ctrs, task.path)
        names.resolve({c[0] for c in ctrs} | {c[1] for c in ctrs})
        rows: list[tuple[Any, ...]]
        if all(s == 1 and mn is None and mx is None for _k, _n, _v, _d, s, mn, mx in ctrs):
            table = "counter1"  # per-dispatch values: the writer binds six columns, not nine
            # (tuple unpacking: several times cheaper than NamedTuple attribute access)
            rows = [(rank_id, source_id, ids[k], ids[n], d, v) for k, n, v, d, _s, _mn, _mx in ctrs]
        else:
            table = "counter"
            rows = [(rank_id, source_id, ids[c.kernel], ids[c.name], c.dispatch_id, c.value, c.samples, c.min_value,
                     c.max_value) for c in ctrs]
        counts["counter"] = counts.get("counter", 0) + len(rows)
        conn.send(("rows", task.index, table, rows))

    if task.section is not None:
        records = reader.read_rank(task.path, task.info, task.section)  # type: ignore[attr-defined]
    else:
        records = reader.read(task.path, task.info)
    rec: Any
    for rec in records:
        t = type(rec)
        if t is Activity:
            acts.append(rec)
            if len(acts) >= BATCH:
                flush_acts()
                acts = []
        elif t is Counter:
            ctrs.append(rec)
            if len(ctrs) >= BATCH:
                flush_ctrs()
                ctrs = []
        elif t is Aggregate:
            g = rec
            validate.aggregate(g, task.path)
            names.resolve({g.name})
            nid = ids[g.name]
            cat = g.category or cats.get((g.kind, g.name)) or classify.category(g.kind, g.name)
            mean = g.total_ns / g.calls if g.calls else 0.0
            sumsq = g.sum_sq_ns if g.sum_sq_ns is not None else g.calls * mean * mean
            s = summary.get((nid, g.kind))
            if s is None:
                summary[(nid, g.kind)] = [cat, g.calls, g.total_ns, g.min_ns, g.max_ns, sumsq]
            else:
                s[1] += g.calls
                s[2] += g.total_ns
                s[3] = min(s[3], g.min_ns)
                s[4] = max(s[4], g.max_ns)
                s[5] += sumsq
            counts["aggregate"] = counts.get("aggregate", 0) + 1
    if acts:
        flush_acts()
    if ctrs:
        flush_ctrs()
    conn.send(("done", task.index, counts, [(k[0], k[1], *v) for k, v in summary.items()], steps))


class _Here:
    """The writer's end of the channel when parsing in the writer's own process: what ``_parse``
    sends is handled at once, so small ingests run the same code as the workers, without processes."""

    def __init__(self, answer_names: Callable[[list[str]], list[int]], insert: Callable[[str, list[Any]], None]) -> None:
        self.answer_names = answer_names
        self.insert = insert
        self.reply: Any = None
        self.done: tuple[dict[str, int], list[Any], list[tuple[int, int, int]]] | None = None

    def send(self, msg: Any) -> None:
        if msg[0] == "names":
            self.reply = self.answer_names(msg[1])
        elif msg[0] == "rows":
            self.insert(msg[2], msg[3])
        elif msg[0] == "done":
            self.done = (msg[2], msg[3], msg[4])

    def recv(self) -> Any:
        reply, self.reply = self.reply, None
        return reply


def parse_here(
    task: Task,
    answer_names: Callable[[list[str]], list[int]],
    insert: Callable[[str, list[Any]], None],
    cats: dict[tuple[str, str], str],
) -> tuple[dict[str, int], list[Any], list[tuple[int, int, int]]]:
    """Parse ``task`` in this process: rows go to ``insert`` as they are built; returns the file's
    (counts, summary rows, steps), as a worker's "done" message carries them."""
    here = _Here(answer_names, insert)
    _parse(task, here, _Names(here), cats)
    assert here.done is not None
    return here.done


def _worker(tasks: list[Task], counter: Any, conn: Connection) -> None:
    lifetime.die_with_parent()
    names = _Names(conn)
    cats: dict[tuple[str, str], str] = {}
    task: Task | None = None
    try:
        while True:
            with counter.get_lock():
                i = counter.value
                counter.value += 1
            if i >= len(tasks):
                break
            task = tasks[i]
            _parse(task, conn, names, cats)
        conn.send(("exit",))
    except BaseException as e:  # reported to the writer, which rolls back and raises it
        try:
            conn.send(("error", task.index if task else -1, e, traceback.format_exc()))
        except Exception:  # the exception itself does not pickle
            conn.send(("error", task.index if task else -1, RuntimeError(repr(e)), traceback.format_exc()))
    finally:
        conn.close()


# --------------------------------------------------------------------------- writer side


class WorkerError(Exception):
    """A worker failed on a task: ``error`` is what it raised (re-raised by the writer)."""

    def __init__(self, index: int, error: BaseException, trace: str) -> None:
        super().__init__(f"task {index}: {error!r}")
        self.index = index
        self.error = error
        self.trace = trace


class Parsers:
    """A set of worker processes parsing ``tasks``; iterate ``messages()`` in the writer."""

    def __init__(self, tasks: list[Task], workers: int) -> None:
        methods = mp.get_all_start_methods()
        ctx: Any = mp.get_context("fork" if "fork" in methods else "spawn")
        # largest first, so the last file to finish is a small one
        self.tasks = sorted(tasks, key=lambda t: -t.path.stat().st_size)
        self.counter = ctx.Value("i", 0)
        self.procs: list[Any] = []
        self.conns: list[Connection] = []
        for _ in range(max(1, workers)):
            mine, theirs = ctx.Pipe(duplex=True)
            p = ctx.Process(target=_worker, args=(self.tasks, self.counter, theirs), daemon=True)
            p.start()
            theirs.close()
            self.procs.append(p)
            self.conns.append(mine)

    def messages(self, answer_names: Any) -> Iterator[tuple[Any, ...]]:
        """Row batches and per-file results as workers send them; name requests are answered here
        with ``answer_names(list_of_names) -> list_of_ids``. Raises WorkerError on a worker's error."""
        live = {c: p for c, p in zip(self.conns, self.procs)}
        while live:
            for ready in wait(list(live)):
                conn = cast(Connection, ready)
                try:
                    msg: Any = conn.recv()
                except EOFError:
                    proc = live.pop(conn)
                    proc.join(5)
                    raise WorkerError(-1, RuntimeError(f"an ingest worker died (exit code {proc.exitcode})"), "")
                kind = msg[0]
                if kind == "names":
                    conn.send(answer_names(msg[1]))
                elif kind == "exit":
                    live.pop(conn)
                elif kind == "error":
                    raise WorkerError(msg[1], msg[2], msg[3])
                else:
                    yield msg

    def close(self) -> None:
        for c in self.conns:
            c.close()
        for p in self.procs:
            if p.is_alive():
                p.terminate()
        for p in self.procs:
            p.join(10)

    def __enter__(self) -> "Parsers":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
