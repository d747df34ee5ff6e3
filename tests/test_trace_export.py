"""`profdb timeline` (issue 18): one merged, clock-aligned Chrome trace for the whole job. Checked on real
traces (torchrun4_cpu, HTA's 2-rank set, an nsys export) and a generated multi-host rocprofv3 CSV run with a
host clock shifted by a known offset, against sums computed from the raw files (json / csv / sqlite3), not
against the code under test; read back by `profdb ingest` (the round trip) and rendered in headless Chromium."""

from __future__ import annotations

import csv
import gzip
import json
import os
import shutil
import sqlite3
import subprocess
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from conftest import Invoke, sql
from gen_collective_run import generate

DATA = Path(__file__).parent / "data"
TORCHRUN = DATA / "kineto/torchrun4_cpu"
HTA = DATA / "kineto/hta_trace_filter_2ranks"
NSYS = DATA / "nsys_sqlite/saxpy-mpi-cuda_nsys_perlmutter0.sqlite"
VIEWER = Path(__file__).parent / "timeline_viewer.html"

#: the Kineto categories of complete events profdb reads (FORMATS.md), written out here for the raw sums
READ_CATS = {"kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset", "cpu_op", "Operator",
             "user_annotation", "gpu_user_annotation", "cuda_runtime", "cuda_driver", "Runtime", "Driver",
             "python_function"}


def load(path: Path) -> dict[str, Any]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as f:
        data = json.load(f)
    assert isinstance(data, dict)
    return data


def raw_events(path: Path) -> list[dict[str, Any]]:
    """The complete events of a raw Kineto file profdb reads."""
    return [e for e in load(path)["traceEvents"] if e.get("ph") == "X" and e.get("cat") in READ_CATS
            and e.get("ts") is not None]


def raw_rank(path: Path) -> int:
    return int(load(path)["distributedInfo"]["rank"])


def totals(events: list[dict[str, Any]]) -> tuple[int, int]:
    return len(events), sum(round((e.get("dur") or 0) * 1000) for e in events)


def to_ns(us: float) -> int:
    return round(us * 1000)


def check_valid(trace: dict[str, Any]) -> None:
    """The trace-event format's rules (the Chrome Trace Event Format document): a top-level object with a
    traceEvents list; X events with name, cat, numeric ts/dur >= 0, integer pid/tid; M events naming
    processes and threads; v2 flow fields only on X events, with an integer bind_id."""
    assert isinstance(trace["traceEvents"], list) and trace["traceEvents"]
    for e in trace["traceEvents"]:
        assert e["ph"] in ("X", "M"), e
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
        if e["ph"] == "M":
            assert e["name"] in ("process_name", "process_sort_index", "thread_name", "thread_sort_index")
            assert isinstance(e["args"], dict)
            continue
        assert isinstance(e["name"], str) and isinstance(e["cat"], str)
        assert isinstance(e["ts"], (int, float)) and isinstance(e["dur"], (int, float)) and e["dur"] >= 0
        if "bind_id" in e:
            assert isinstance(e["bind_id"], int) and isinstance(e["flow_in"], bool) and isinstance(e["flow_out"], bool)
    assert isinstance(trace["otherData"], dict) and isinstance(trace["baseTimeNanoseconds"], int)


def per_pid(trace: dict[str, Any]) -> dict[int, tuple[int, int]]:
    out: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for e in trace["traceEvents"]:
        if e["ph"] == "X":
            out[e["pid"]][0] += 1
            out[e["pid"]][1] += to_ns(e["dur"])
    return {p: (n, t) for p, (n, t) in out.items()}


def flows(trace: dict[str, Any]) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for e in trace["traceEvents"]:
        if "bind_id" in e:
            out[e["bind_id"]].append(e)
    return out


def check_chain(events: list[dict[str, Any]]) -> None:
    """One flow is a chain in time order: out only, then in and out, then in only."""
    events = sorted(events, key=lambda e: (e["ts"], e["pid"]))
    assert [(e["flow_in"], e["flow_out"]) for e in events] == (
        [(False, True)] + [(True, True)] * (len(events) - 2) + [(True, False)])


@pytest.fixture(scope="module")
def torchrun_raw() -> dict[int, list[dict[str, Any]]]:
    return {raw_rank(p): raw_events(p) for p in sorted(TORCHRUN.glob("*.json.gz"))}


def test_torchrun_export_is_the_raw_files_on_one_timeline(
    store_url: str, tmp_path: Path, run_cli: Invoke, torchrun_raw: dict[int, list[dict[str, Any]]]
) -> None:
    run_cli("ingest", "--db", store_url, "--run", "t4", TORCHRUN)
    out = tmp_path / "job.json.gz"
    r = run_cli("timeline", "--db", store_url, "-o", out)
    verdict = run_cli("query", "--stragglers", "--db", store_url).stderr.splitlines()[0]
    assert r.stderr.splitlines()[0] == verdict and verdict.startswith("likely straggler: rank 2")
    with gzip.open(out, "rb") as f:
        assert f.read(2)  # a gzip stream
    trace = load(out)
    check_valid(trace)
    assert trace["otherData"]["straggler_verdict"] == verdict and trace["profdb"]["verdict"] == verdict
    # one process per rank, named and sorted by rank
    meta = [e for e in trace["traceEvents"] if e["ph"] == "M"]
    names = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    assert names == {g: f"rank {g} (host vm)" for g in range(4)}
    assert {e["pid"]: e["args"]["sort_index"] for e in meta if e["name"] == "process_sort_index"} == {
        g: g for g in range(4)}
    # per rank: the raw file's complete events, count and total duration, to the nanosecond
    assert per_pid(trace) == {g: totals(ev) for g, ev in torchrun_raw.items()}
    # threads as in the source: the raw (pid, tid) pairs of each rank
    threads = defaultdict(set)
    for e in meta:
        if e["name"] == "thread_name":
            threads[e["pid"]].add(e["args"]["name"])
    for g, ev in torchrun_raw.items():
        assert threads[g] == {f"thread {e['tid']} (pid {e['pid']})" for e in ev}
    # one host: no shift, so ts is the raw time less the run's first event, to the nanosecond
    base = {g: int(load(p)["baseTimeNanoseconds"]) for g, p in
            ((raw_rank(p), p) for p in TORCHRUN.glob("*.json.gz"))}
    origin = min(base[g] + to_ns(e["ts"]) for g, ev in torchrun_raw.items() for e in ev)
    assert trace["baseTimeNanoseconds"] == origin
    got = sorted((e["pid"], to_ns(e["ts"]), e["name"]) for e in trace["traceEvents"] if e["ph"] == "X")
    want = sorted((g, base[g] + to_ns(e["ts"]) - origin, e["name"]) for g, ev in torchrun_raw.items() for e in ev)
    assert got == want
    # flows: the k-th gloo:all_reduce of every rank shares one bind_id, chained in arrival order
    raw_calls = {g: sorted(to_ns(e["ts"]) + base[g] - origin for e in ev if e["name"] == "gloo:all_reduce")
                 for g, ev in torchrun_raw.items()}
    linked = flows(trace)
    assert len(linked) == 3 == len(raw_calls[0])
    for k, fid in enumerate(sorted(linked, key=lambda f: min(e["ts"] for e in linked[f]))):
        events = linked[fid]
        assert all(e["name"] == "gloo:all_reduce" for e in events)
        assert sorted((e["pid"], to_ns(e["ts"])) for e in events) == [(g, raw_calls[g][k]) for g in range(4)]
        check_chain(events)
    assert "9 collective links" in r.stdout


def test_step_ranks_and_time_window_select_the_raw_events(
    db_path: Path, tmp_path: Path, run_cli: Invoke, torchrun_raw: dict[int, list[dict[str, Any]]]
) -> None:
    run_cli("ingest", "--db", db_path, "--run", "t4", TORCHRUN)
    # --step 6: per rank, the events starting within its own ProfilerStep#6
    out = tmp_path / "step.json"
    run_cli("timeline", "--db", db_path, "--step", "6", "-o", out)
    trace = load(out)
    check_valid(trace)
    want = {}
    for g, ev in torchrun_raw.items():
        (step,) = [e for e in ev if e["name"] == "ProfilerStep#6"]
        lo, hi = to_ns(step["ts"]), to_ns(step["ts"]) + to_ns(step["dur"])
        want[g] = totals([e for e in ev if lo <= to_ns(e["ts"]) < hi])
    assert per_pid(trace) == want and all(n > 10 for n, _ in want.values())
    assert trace["profdb"]["window"]["step"] == 6
    for events in flows(trace).values():  # the step's one all_reduce, on every rank
        assert sorted(e["pid"] for e in events) == [0, 1, 2, 3]
        check_chain(events)
    assert len(flows(trace)) == 1
    # --ranks: only those processes
    out = tmp_path / "ranks.json"
    run_cli("timeline", "--db", db_path, "--ranks", "1-2", "-o", out)
    trace = load(out)
    assert per_pid(trace) == {g: totals(torchrun_raw[g]) for g in (1, 2)}
    assert [r["global_rank"] for r in trace["profdb"]["ranks"]] == [1, 2]
    # --from/--to: a window on the common clock, from the run's first event
    out = tmp_path / "window.json"
    run_cli("timeline", "--db", db_path, "--from", "10ms", "--to", "30.5ms", "-o", out)
    trace = load(out)
    base = {raw_rank(p): int(load(p)["baseTimeNanoseconds"]) for p in TORCHRUN.glob("*.json.gz")}
    origin = min(base[g] + to_ns(e["ts"]) for g, ev in torchrun_raw.items() for e in ev)
    want = {}
    for g, ev in torchrun_raw.items():
        inside = [e for e in ev if 10_000_000 <= base[g] + to_ns(e["ts"]) - origin < 30_500_000]
        if inside:
            want[g] = totals(inside)
    assert per_pid(trace) == want and sum(n for n, _ in want.values()) > 100
    assert trace["baseTimeNanoseconds"] == origin
    assert min(e["ts"] for e in trace["traceEvents"] if e["ph"] == "X") >= 10_000


def test_round_trip_gives_back_the_per_rank_totals(db_path: Path, tmp_path: Path, run_cli: Invoke) -> None:
    """`profdb ingest` of the merged file (a multi-rank Kineto file, split by its profdb block) gives
    back every rank with the same per (name, kind) calls and totals, steps and verdict."""
    for name, src in (("t4", TORCHRUN), ("hta", HTA)):
        run_cli("ingest", "--db", db_path, "--run", name, src)
        out = tmp_path / f"{name}.json.gz"
        run_cli("timeline", "--db", db_path, "--run", name, "-o", out)
        back = tmp_path / f"{name}-back.db"
        run_cli("ingest", "--db", back, "--run", name, out)

        q = ("select r.global_rank, r.hostname, r.local_rank, n.value, s.kind, s.calls, s.total_ns, s.min_ns, s.max_ns "
             "from summary s join rank r on r.id = s.rank_id join name n on n.id = s.name_id join run u on "
             "u.id = r.run_id where u.name = ? order by 1, 4, 5")
        before, after = sql(db_path, q, name), sql(back, q, name)
        assert after == before and len(before) > 20
        qs = ("select r.global_rank, st.step, st.duration_ns from step st join rank r on r.id = st.rank_id "
              "join run u on u.id = r.run_id where u.name = ? order by 1, 2")
        assert sql(back, qs, name) == sql(db_path, qs, name)
        origins = sql(back, "select identity_origin from source_file")
        assert all("profdb block" in o for (o,) in origins) and len(origins) == len(sql(back, "select * from rank"))
        v1 = run_cli("query", "--stragglers", "--db", db_path, "--run", name).stderr.splitlines()[0]
        v2 = run_cli("query", "--stragglers", "--db", back, "--run", name).stderr.splitlines()[0]
        assert v2 == v1


def test_hta_two_ranks_match_the_raw_files(db_path: Path, tmp_path: Path, run_cli: Invoke) -> None:
    files = sorted(HTA.glob("*.json.gz"))
    run_cli("ingest", "--db", db_path, "--run", "hta", *files)
    out = tmp_path / "hta.json"
    run_cli("timeline", "--db", db_path, "-o", out)
    trace = load(out)
    check_valid(trace)
    raw = {raw_rank(p): raw_events(p) for p in files}
    assert per_pid(trace) == {g: totals(ev) for g, ev in raw.items()}
    # the NCCL kernels: the k-th of each collective on both ranks linked (kernel family, both ranks)
    linked = flows(trace)
    assert linked and all(sorted(e["pid"] for e in ev) == [0, 1] for ev in linked.values())
    assert all(e["cat"] == "kernel" and e["name"].startswith("ncclKernel") for ev in linked.values() for e in ev)
    for ev in linked.values():
        check_chain(ev)
    raw_nccl = {g: sum(1 for e in ev if e["cat"] == "kernel" and e["name"].startswith("ncclKernel"))
                for g, ev in raw.items()}
    assert len(linked) == min(raw_nccl.values())


def test_shifted_host_comes_out_aligned(db_path: Path, tmp_path: Path, run_cli: Invoke) -> None:
    """A rocprofv3 CSV run over two hosts whose clocks differ by 1.507 s (tests/gen_collective_run.py):
    in the merged file every collective's ranks leave together, and arrive in the generated order."""
    run = generate(tmp_path / "gen", nodes=2, gpus_per_node=2, steps=30, late_rank=3)
    assert run.clock_ns["node01"] == 1_507_000_000
    for g in range(4):  # rank by rank, to give each its local_rank (the files do not say it)
        run_cli("ingest", "--db", db_path, "--run", "gen", "--local-rank", g % 2, run.root / f"rank{g:04d}")
    out = tmp_path / "gen.json.gz"
    run_cli("timeline", "--db", db_path, "-o", out)
    trace = load(out)
    check_valid(trace)
    # per rank: the raw CSV's kernels, count and total
    raw: dict[int, list[tuple[int, int]]] = {}
    for g, path in run.files.items():
        with open(path, newline="") as f:
            raw[g] = [(int(r["Start_Timestamp"]), int(r["End_Timestamp"])) for r in csv.DictReader(f)]
    assert per_pid(trace) == {g: (len(v), sum(e - s for s, e in v)) for g, v in raw.items()}
    names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert names == {0: "rank 0 (host node00, local_rank 0)", 1: "rank 1 (host node00, local_rank 1)",
                     2: "rank 2 (host node01, local_rank 0)", 3: "rank 3 (host node01, local_rank 1)"}
    offsets = {o["host"]: o for o in trace["profdb"]["clock"]["offsets"]}
    assert abs(offsets["node01"]["offset_ns"] - 1_507_000_000) <= max(offsets["node01"]["error_ns"], 10_000)
    linked = flows(trace)
    assert len(linked) == 30
    base = trace["baseTimeNanoseconds"]
    for k, fid in enumerate(sorted(linked, key=lambda f: min(e["ts"] for e in linked[f]))):
        events = linked[fid]
        assert sorted(e["pid"] for e in events) == [0, 1, 2, 3]
        ends = [to_ns(e["ts"]) + to_ns(e["dur"]) for e in events]
        # generated: everyone leaves within 3 us of the others; unaligned, node01 would be 1.507 s off
        assert max(ends) - min(ends) <= 3_000 + 2 * offsets["node01"]["error_ns"]
        arrivals = [e["pid"] for e in sorted(events, key=lambda e: (e["ts"], e["pid"]))]
        assert arrivals == run.arrival_order[k]
        check_chain(events)
        # each call at its raw start less its host's offset, on the file's clock
        for e in events:
            shift = offsets[run.host_of[e["pid"]]]["offset_ns"]
            start = base + to_ns(e["ts"])
            assert start + shift in {s for s, _ in raw[e["pid"]]}
    # rank 3 starts late every step: it is the last arrival, and the verdict says so in the metadata
    assert trace["otherData"]["straggler_verdict"].startswith("likely straggler: rank 3 (host node01")
    # read back, the ranks keep their hosts and local ranks, and their clocks are now one clock
    back = tmp_path / "back.db"
    run_cli("ingest", "--db", back, "--run", "gen", out)
    assert sql(back, "select global_rank, hostname, local_rank from rank order by 1") == [
        (0, "node00", 0), (1, "node00", 1), (2, "node01", 0), (3, "node01", 1)]
    ((offset, error),) = sql(back, "select offset_ns, error_ns from host_clock where hostname = 'node01'")
    assert abs(offset) <= error + 3_000 < 20_000
    q = ("select r.global_rank, n.value, s.calls, s.total_ns from summary s join rank r on r.id = s.rank_id "
         "join name n on n.id = s.name_id order by 1, 2")
    assert sql(back, q) == sql(db_path, q)


def test_real_rocprofv3_csv_sample(db_path: Path, tmp_path: Path, run_cli: Invoke) -> None:
    """rocprofv3's own CSV example (kernels, copies, HIP runtime calls): every row, on its stream or thread."""
    folder = DATA / "rocprofv3_csv/rocm-systems_2025-08"
    files = {"kernel": "kernel_trace.csv", "gpu_memcpy": "memory_copy_trace.csv",
             "cuda_runtime": "hip_runtime_trace.csv"}
    run_cli("ingest", "--db", db_path, "--run", "rc", "--rank", "0", *(folder / f for f in files.values()))
    out = tmp_path / "rc.json.gz"
    run_cli("timeline", "--db", db_path, "-o", out)
    trace = load(out)
    check_valid(trace)
    for cat, name in files.items():
        with open(folder / name, newline="") as f:
            rows = list(csv.DictReader(f))
        want = (len(rows), sum(int(r["End_Timestamp"]) - int(r["Start_Timestamp"]) for r in rows))
        got = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] == cat]
        assert (len(got), sum(to_ns(e["dur"]) for e in got)) == want and want[0] > 0
    with open(folder / "kernel_trace.csv", newline="") as f:
        streams = {int(r["Stream_Id"]) for r in csv.DictReader(f)}
    kernels = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] == "kernel"]
    assert {e["args"]["stream"] for e in kernels} == streams


def test_nsys_export_matches_the_raw_database(db_path: Path, tmp_path: Path, run_cli: Invoke) -> None:
    run_cli("ingest", "--db", db_path, "--run", "saxpy", "--rank", "0", NSYS)
    out = tmp_path / "saxpy.json"
    run_cli("timeline", "--db", db_path, "-o", out)
    trace = load(out)
    check_valid(trace)
    con = sqlite3.connect(NSYS)
    try:
        kernels = con.execute("select count(*), sum(end - start) from CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
        copies = con.execute("select count(*), sum(end - start) from CUPTI_ACTIVITY_KIND_MEMCPY").fetchone()
    finally:
        con.close()
    by_cat: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for e in trace["traceEvents"]:
        if e["ph"] == "X":
            by_cat[e["cat"]][0] += 1
            by_cat[e["cat"]][1] += to_ns(e["dur"])
    assert tuple(by_cat["kernel"]) == kernels and tuple(by_cat["gpu_memcpy"]) == copies
    store = sql(db_path, "select count(*), sum(duration_ns) from activity")
    assert per_pid(trace) == {0: store[0]}
    threads = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    streams = {f"GPU {d} stream {s}" for d, s in sql(db_path, "select distinct device, stream from activity_v "
                                                     "where kind in ('kernel', 'memcpy')")}
    assert streams and streams <= threads


def test_bad_requests_say_what_to_do(db_path: Path, tmp_path: Path, run_cli: Invoke) -> None:
    run_cli("ingest", "--db", db_path, "--run", "t4", TORCHRUN)
    out = str(tmp_path / "x.json")
    r = run_cli("timeline", "--db", db_path, "--step", "99", "-o", out, ok=False)
    steps = sorted(int(e["name"].split("#")[1]) for e in raw_events(TORCHRUN / "rank0_iter5_7.json.gz")
                   if e["name"].startswith("ProfilerStep#"))
    assert steps == list(range(steps[0], steps[0] + 3))
    assert r.exit_code == 1 and "no step 99" in r.stderr and f"its steps are {steps[0]}-{steps[-1]}" in r.stderr
    r = run_cli("timeline", "--db", db_path, "--ranks", "0-9", "-o", out, ok=False)
    assert r.exit_code == 1 and "no rank(s) 4-9" in r.stderr
    # one rank-list parser with `record --ranks` (identity.parse_ranks): its bound, not a set of 10^11 ranks
    r = run_cli("timeline", "--db", db_path, "--ranks", "0-99999999999", "-o", out, ok=False)
    assert r.exit_code == 2 and "goes beyond rank" in r.stderr and not Path(out).exists()
    r = run_cli("timeline", "--db", db_path, "--from", "12", "-o", out, ok=False)
    assert r.exit_code == 2 and "with its unit" in r.stderr
    r = run_cli("timeline", "--db", db_path, "--step", "5", "--to", "1s", "-o", out, ok=False)
    assert r.exit_code == 2 and "one or the other" in r.stderr
    r = run_cli("timeline", "--db", db_path, "--from", "100s", "--to", "101s", "-o", out, ok=False)
    assert r.exit_code == 1 and "no activity in 100 s to 101 s of the common clock" in r.stderr
    r = run_cli("timeline", "--db", db_path, "--from", "0", "--to", "1us", "-o", out)  # one rank starts first
    assert "have no activity in the window: left out" in r.stderr
    assert [x["global_rank"] for x in load(Path(out))["profdb"]["ranks"]] == [
        g for g in range(4) if per_pid(load(Path(out))).get(g)]
    Path(out).unlink()
    r = run_cli("timeline", "--db", db_path, "-o", tmp_path / "nowhere" / "x.json", ok=False)
    assert r.exit_code == 1 and "no such folder" in r.stderr
    assert not list(tmp_path.glob(".x.json*")) and not Path(out).exists()
    # a merged trace whose profdb block is damaged is refused by name, never guessed
    good = tmp_path / "good.json"
    run_cli("timeline", "--db", db_path, "-o", good)
    text = good.read_text()
    bad = tmp_path / "bad.json"
    bad.write_text(text.replace('"global_rank": 1,', '"global_rank": 0,', 1))
    r = run_cli("ingest", "--db", tmp_path / "b.db", bad, ok=False)
    assert r.exit_code == 1 and f"{bad}: the profdb block" in r.stderr and "twice" in r.stderr
    bad.write_text(text.replace('"version": 1', '"version": 7', 1))
    r = run_cli("ingest", "--db", tmp_path / "b.db", bad, ok=False)
    assert r.exit_code == 1 and "version 7" in r.stderr
    r = run_cli("ingest", "--db", tmp_path / "b.db", "--rank", "3", good, ok=False)
    assert r.exit_code == 1 and "holds 4 ranks" in r.stderr


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def render(trace: Path, folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The offline viewer page (tests/timeline_viewer.html) over ``trace``, opened in headless Chromium."""
    exe = chromium()
    if exe is None:
        pytest.skip("headless Chromium is not installed (.ci/install.d/chromium.sh installs Debian's chromium)")
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(VIEWER, folder / "index.html")
    (folder / "trace.js").write_text("window.TRACE = " + json.dumps(load(trace)) + ";\n")
    with tempfile.TemporaryDirectory(prefix="profdb-chromium-") as profile:
        return subprocess.run(
            [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
             f"--user-data-dir={profile}", *args, (folder / "index.html").resolve().as_uri()],
            capture_output=True, text=True, timeout=120,
        )


def test_rendered_in_headless_chromium(db_path: Path, tmp_path: Path, run_cli: Invoke) -> None:
    """What Chromium renders of the merged file: one group per rank in rank order with its threads, every
    event drawn, every flow link drawn, the verdict shown."""
    run = generate(tmp_path / "gen", nodes=2, gpus_per_node=2, steps=12, late_rank=3)
    for g in range(4):
        run_cli("ingest", "--db", db_path, "--run", "gen", "--local-rank", g % 2, run.root / f"rank{g:04d}")
    out = tmp_path / "gen.json.gz"
    run_cli("timeline", "--db", db_path, "-o", out)
    done = render(out, tmp_path / "view", "--dump-dom")
    assert done.returncode == 0, done.stderr
    from html.parser import HTMLParser

    class Items(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.items: list[dict[str, str | None]] = []
            self.text: dict[str, str] = {}
            self.current: str | None = None
            self.rects = self.lines = 0

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            a = dict(attrs)
            if tag == "li":
                self.items.append(a)
            self.current = a.get("id")
            self.rects += tag == "rect"
            self.lines += tag == "line" and a.get("class") == "flow"

        def handle_endtag(self, tag: str) -> None:
            self.current = None

        def handle_data(self, data: str) -> None:
            if self.current:
                self.text[self.current] = self.text.get(self.current, "") + data
            if self.items and self.items[-1].get("name") is None:
                self.items[-1]["name"] = data

    dom = Items()
    dom.feed(done.stdout)
    raw = {}
    for g, p in run.files.items():
        with open(p, newline="") as f:
            raw[g] = sum(1 for _ in csv.DictReader(f))
    assert [i["name"] for i in dom.items] == [
        "rank 0 (host node00, local_rank 0)", "rank 1 (host node00, local_rank 1)",
        "rank 2 (host node01, local_rank 0)", "rank 3 (host node01, local_rank 1)"]
    assert {int(str(i["data-pid"])): int(str(i["data-events"])) for i in dom.items} == raw
    assert dom.rects == sum(raw.values()) == int(dom.text["events"])
    assert dom.lines == 12 * 3 == int(dom.text["flows"])  # 12 all-reduces, each a chain over 4 ranks
    assert dom.text["meta"].startswith("run gen: likely straggler: rank 3")


@pytest.mark.skipif(not os.environ.get("PROFDB_DOCS_SCREENSHOT"), reason="refreshes docs/timeline.png on request")
def test_docs_screenshot(db_path: Path, tmp_path: Path, run_cli: Invoke) -> None:
    """Refreshes docs/timeline.png: the merged timeline of the real torchrun4_cpu sample in the offline viewer."""
    run_cli("ingest", "--db", db_path, "--run", "torchrun4_cpu", TORCHRUN)
    trace = tmp_path / "job.json.gz"
    run_cli("timeline", "--db", db_path, "-o", trace)
    out = Path(__file__).parent.parent / "docs" / "timeline.png"
    done = render(trace, tmp_path / "view", f"--screenshot={out}", "--window-size=1240,680")
    assert done.returncode == 0, done.stderr[-2000:]
    assert out.stat().st_size < 300_000


def test_large_output_is_announced_and_progress_reported(
    db_path: Path, tmp_path: Path, run_cli: Invoke, monkeypatch: pytest.MonkeyPatch,
    torchrun_raw: dict[int, list[dict[str, Any]]],
) -> None:
    from profdb.store import db as store_db
    from profdb.store import trace_export

    run_cli("ingest", "--db", db_path, "--run", "t4", TORCHRUN)
    total = sum(len(ev) for ev in torchrun_raw.values())
    monkeypatch.setattr(trace_export, "LARGE_EVENTS", total - 1)
    r = run_cli("timeline", "--db", db_path, "-o", tmp_path / "all.json")
    assert f"large output: about {total:,} events" in r.stderr and "--step N, --from/--to or --ranks" in r.stderr
    r = run_cli("timeline", "--db", db_path, "--ranks", "0", "-o", tmp_path / "r0.json")
    assert "large output" not in r.stderr
    # progress: per rank, with the events written so far (the CLI shows it on a terminal)
    seen: list[tuple[int, int, int, int]] = []
    engine = store_db.open_db(str(db_path), readonly=True)
    try:
        with engine.connect() as conn:
            plan = trace_export.plan_export(conn, "t4", trace_export.Window())
            assert plan.events == total
            trace_export.write_trace(conn, plan, tmp_path / "p.json",
                                     lambda done, n, w, events: seen.append((done, n, w.rank.global_rank, events)))
    finally:
        engine.dispose()
    assert seen == [(g + 1, 4, g, len(torchrun_raw[g])) for g in range(4)]
