"""profdb benchmarks: one command, ratios measured in one run on inputs generated here.

    python benchmarks/run.py            # full size (about 25 GB of disk under benchmarks/out, ~15 min)
    python benchmarks/run.py --quick    # smoke size (seconds; targets are printed but not judged)

Run it with the Python of the environment where profdb is installed (its ``profdb`` command is
taken from beside that interpreter, else from PATH). What it measures (README, "Benchmarks"):

1. ``profdb ingest`` of a 1M-dispatch rocprofv3 CSV run (kernel_trace + counter_collection, 32 ranks
   on 4 hosts) / the sqlite3 CLI's ``.import --csv`` of the same files into raw tables, per row
   shape. Target <= 0.5.
2. ``profdb ingest`` of Kineto traces / HolisticTraceAnalysis ``TraceAnalysis(trace_dir=...)`` load
   time on the same traces (HTA runs in its own virtualenv, see --hta-venv). Target <= 0.15.
3. ``profdb query --imbalance`` / a full-scan GROUP BY of the same question (max and mean of per-rank
   totals per kernel) in sqlite3, on one run of >= 10M activity rows. Target <= 0.05 and < 0.3 s.
4. Peak memory of ``profdb ingest`` at 1x and 4x input: the whole process tree's PSS (proportional set
   size: pages a forked worker shares with its parent count once), sampled every 50 ms, and the
   largest single process's max RSS (wait4). Target < 300 MB at 4x, not growing with input. And
   one Kineto trace 4x as large as another (one rank's long profile: a worker holds some of a file
   until its end). Target: flat (< 1.25).
5. ``profdb ingest`` of a 4-rank job's Nsight Systems exports, of its RPD traces (the real samples'
   tables repeated) / the sqlite3 CLI copying the tables profdb reads into one database; and of its
   rocprofv3 JSON files (the real sample's dispatches repeated) / the sqlite3 CLI storing each file's
   dispatches as rows (``json_each``: one parse of the whole file). No target.

Every command is a subprocess; wall times are from the parent, of runs timed without the memory
sampler (the memory beside ratios 1 and 5 is from one more sampled run: ``with_memory``). Generated
inputs are cached in ``--out`` (keyed by their parameters) and reused by later runs; stores are rebuilt
every run except the 10M-row store, which is kept while its input is unchanged (--rebuild to force).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import generate  # noqa: E402


@dataclass
class Sizes:
    csv_dispatches: int
    csv_ranks: int
    csv_hosts: int
    kineto_ranks: int
    kineto_mb: float
    big_dispatches: int
    query_repeats: int
    #: the many-files Kineto shape: a larger job's ranks, each trace small
    kineto_many_ranks: int = 128
    kineto_many_mb: float = 150.0
    #: the SQLite formats' job (Nsight Systems exports, RPD traces): ranks, and the real samples' tables
    #: repeated this many times in each rank's file (~150k events a rank either way)
    sqlite_ranks: int = 4
    nsys_copies: int = 25
    rpd_copies: int = 6
    #: rocprofv3 JSON job (same ranks): the real sample's 43,915 dispatches this many times per rank's file
    rocprof_json_copies: int = 3
    #: benchmark 4's one-trace Kineto shape: one rank's trace of this many MB, and of 4x as many
    kineto_one_mb: float = 150.0
    #: benchmark 4's one-trace RPD shape: the real sample's tables this many times in one rank's file (its
    #: ROCTx ranges come out of stack order: ~300k of them, sorted at the file's end), and 4x as many
    rpd_one_copies: int = 25


FULL = Sizes(1_000_000, 32, 4, 8, 300.0, 10_000_000, 5)
QUICK = Sizes(20_000, 8, 2, 4, 8.0, 200_000, 3, 16, 4.0, 2, 2, 1, 1, 4.0, 2)


# --------------------------------------------------------------------------- measuring


@dataclass
class Measured:
    cmd: list[str]
    wall_s: float
    cpu_s: float
    max_rss_mb: float  # largest single process (wait4 ru_maxrss, includes waited-for descendants)
    tree_peak_mb: float  # peak of the summed PSS of the process and all its descendants (sampled every 50 ms)
    returncode: int
    stdout: str = ""
    stderr: str = ""

    @property
    def cores(self) -> float:
        return self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0


def _children_map() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(b")") + 2 :].split()[1])
        kids.setdefault(ppid, []).append(int(entry.name))
    return kids


def _tree_pss_bytes(root: int) -> int:
    """Proportional set size of the process and all its descendants: shared pages (a forked
    worker's copy of its parent) are counted once in total, not once per process as RSS would."""
    kids = _children_map()
    todo, total = [root], 0
    while todo:
        pid = todo.pop()
        todo.extend(kids.get(pid, []))
        try:
            with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
                for line in f:
                    if line.startswith(b"Pss:"):
                        total += int(line.split()[1]) * 1024
                        break
        except OSError:
            pass
    return total


def measure(cmd: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None,
            check: bool = True, sample_rss: bool = True) -> Measured:
    """Run ``cmd``, timing it and following the memory of its whole process tree."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = [0]
    done = threading.Event()

    def sampler() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _tree_pss_bytes(proc.pid))
            done.wait(0.05)

    th = threading.Thread(target=sampler, daemon=True)
    if sample_rss:
        th.start()
    out: list[str] = []
    err: list[str] = []
    readers = [threading.Thread(target=lambda: out.append(proc.stdout.read() if proc.stdout else "")),
               threading.Thread(target=lambda: err.append(proc.stderr.read() if proc.stderr else ""))]
    for r in readers:
        r.start()
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    done.set()
    for r in readers:
        r.join()
    if sample_rss:
        th.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    m = Measured(cmd, wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024.0, peak[0] / 2**20,
                 proc.returncode, "".join(out), "".join(err))
    if check and m.returncode != 0:
        raise SystemExit(f"benchmark step failed ({m.returncode}): {' '.join(cmd)}\n{m.stderr[-3000:]}")
    return m


def best(runs: list[Measured]) -> Measured:
    """The fastest of repeated runs, with the largest peak memory seen in any of them."""
    fastest = min(runs, key=lambda m: m.wall_s)
    return Measured(**{**asdict(fastest), "tree_peak_mb": max(m.tree_peak_mb for m in runs),
                       "max_rss_mb": max(m.max_rss_mb for m in runs)})


def with_memory(timed: list[Measured], cmd: list[str], db: Path) -> Measured:
    """The best of ``timed`` (runs measured without the memory sampler) with the peak memory of one
    more run of ``cmd`` made to sample it. The sampler reads every process's ``/proc`` entries each
    50 ms from this process: on a 2-core host it takes CPU from the measured command while it runs
    (``short``: 1.54 s sampled, 1.46 s not, medians of 6 interleaved pairs), and the baselines of
    ratios 1 and 5 (one sqlite3 process) were timed without it, so until session 32 profdb's side of
    those ratios carried a cost the other did not."""
    drop_store(db)
    sampled = measure(cmd)
    drop_store(db)
    fastest = best(timed)
    return Measured(**{**asdict(fastest), "tree_peak_mb": sampled.tree_peak_mb,
                       "max_rss_mb": max(sampled.max_rss_mb, *(m.max_rss_mb for m in timed))})


def drop_store(db: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(str(db) + suffix).unlink(missing_ok=True)


def warm(paths: list[Path]) -> None:
    """Read inputs once so both sides of a ratio start from the page cache."""
    for p in paths:
        with open(p, "rb") as f:
            while f.read(1 << 24):
                pass


# --------------------------------------------------------------------------- inputs


def ensure(out: Path, params: dict[str, Any], make: Callable[[], generate.Generated], log: Callable[[str], None]) -> dict[str, Any]:
    """Generate into ``out`` unless it already holds exactly these parameters."""
    meta = out / generate.META
    if meta.exists():
        old = json.loads(meta.read_text())
        if old.get("params") == params:
            log(f"  reusing {out} ({old['bytes'] / 1e6:,.0f} MB)")
            return dict(old)
        shutil.rmtree(out)
    t = time.perf_counter()
    _in_child(make)
    g = json.loads(meta.read_text())
    log(f"  generated {out} ({g['bytes'] / 1e6:,.0f} MB, {g['rows']}) in {time.perf_counter() - t:.1f} s")
    return dict(g)


def _in_child(make: Callable[[], Any]) -> None:
    """Run ``make`` in a forked child process: a generator's memory (~1.4 GB for the 8,192-file run) would
    otherwise stay with this process, and every later command's max RSS (``wait4``'s, which counts what a
    forked child shares with its parent before it execs) would report it."""
    import multiprocessing as mp

    if "fork" not in mp.get_all_start_methods():
        make()
        return
    p = mp.get_context("fork").Process(target=make)
    p.start()
    p.join()
    if p.exitcode != 0:
        raise SystemExit(f"generating the benchmark's input failed (exit code {p.exitcode})")


def csv_params(dispatches: int, scale: float, ranks: int, hosts: int, counters: int) -> dict[str, Any]:
    return dict(scale=scale, dispatches=dispatches, ranks=ranks, hosts=hosts, counters=counters,
                names=320, step_len=480, seed=generate.SEED, version=generate.VERSION)


# --------------------------------------------------------------------------- the benchmarks


def sqlite_import(sqlite3: str, files: list[Path], db: Path) -> Measured:
    """The sqlite3 CLI's own CSV import of every file into one raw table per file kind."""
    drop_store(db)
    lines = [".bail on"]
    created: set[str] = set()
    for f in files:
        table = "counter_collection_raw" if f.name.endswith("_counter_collection.csv") else "kernel_trace_raw"
        skip = " --skip 1" if table in created else ""  # the first import creates the table from the header
        created.add(table)
        lines.append(f".import --csv{skip} '{f}' {table}")
    script = db.with_suffix(".import.sql")
    script.write_text("\n".join(lines) + "\n")
    return measure([sqlite3, str(db), f".read '{script}'"], sample_rss=False)


def imbalance_sql(run: str) -> str:
    """The imbalance question answered from the fact table: per kernel, the max and the mean over the
    run's ranks of each rank's total time (0 for ranks without the kernel), worst first."""
    r = run.replace("'", "''")
    return f"""
WITH ranks AS (SELECT k.id FROM rank k JOIN run r ON r.id = k.run_id WHERE r.name = '{r}'),
per AS (SELECT a.name_id, a.rank_id, SUM(a.duration_ns) AS t FROM activity a
        WHERE a.rank_id IN (SELECT id FROM ranks) AND a.kind = 'kernel' GROUP BY a.name_id, a.rank_id)
SELECT n.value AS name, MAX(per.t) AS max_ns, SUM(per.t) * 1.0 / (SELECT COUNT(*) FROM ranks) AS mean_ns,
       MAX(per.t) / (SUM(per.t) * 1.0 / (SELECT COUNT(*) FROM ranks)) AS imbalance
FROM per JOIN name n ON n.id = per.name_id
GROUP BY per.name_id ORDER BY imbalance DESC LIMIT 10;
"""


def pair_note(pairs: list[float]) -> str:
    """The ratio of each repetition's two runs, taken back to back (the headline ratio divides the best
    of each side, which on a host whose speed drifts may come from different moments)."""
    return (f"pair ratios (repetition k of both sides, back to back): {', '.join(fmt_ratio(r) for r in pairs)}; "
            f"median {fmt_ratio(statistics.median(pairs))}")


def fmt_ratio(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3f}"


@dataclass
class Row:
    what: str
    ratio: float | None
    target: str
    ok: bool | None
    profdb: str
    baseline: str
    command: str
    notes: list[str] = field(default_factory=list)
    cpu_ratio: float | None = None  # the same ratio of CPU seconds (all processes of each side)


@dataclass(frozen=True)
class CsvShape:
    """One row shape of the rocprofv3 CSV ingest benchmark."""

    key: str
    short: bool  # short kernel names (~180 B per kernel_trace row) or long templated ones (~540 B)
    counters: int  # counters per dispatch (0: no counter_collection files)
    ranks: int
    hosts: int
    what: str


def csv_shapes(s: Sizes) -> list[CsvShape]:
    """Every shape, each of ``s.csv_dispatches`` dispatches: long and short names, with and without
    counter files, and many small files (the same dispatches over 16x and 64x the ranks)."""
    r, h = s.csv_ranks, s.csv_hosts
    return [
        CsvShape("long-counters", False, 3, r, h, "long names, 3 counters/dispatch"),
        CsvShape("long", False, 0, r, h, "long names, no counters"),
        CsvShape("short-counters", True, 3, r // 2, h // 2, "short names, 3 counters/dispatch"),
        CsvShape("short", True, 0, r // 2, h // 2, "short names, no counters"),
        CsvShape("short-many-files", True, 0, r * 16, h * 4, "short names, no counters, many small files"),
        # a large job profiled briefly: 2,048 ranks of ~490 dispatches, 8 per node (the per-file costs)
        CsvShape("short-2048-files", True, 0, r * 64, h * 64, "short names, no counters, 2,048 tiny files"),
    ]


@dataclass
class Bench:
    """What every benchmark function gets: the options, where things go, and where results go."""

    a: argparse.Namespace
    sizes: Sizes
    base: Path
    profdb: str
    rows: list[Row] = field(default_factory=list)
    results: dict[str, Any] = field(default_factory=dict)

    def log(self, msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)


def ranks_of(d: Path) -> list[str]:
    return sorted(str(x) for x in d.glob("rank*") if x.is_dir())


def csv_input(b: Bench, shape: CsvShape, scale: float = 1.0) -> tuple[Path, dict[str, Any]]:
    s = b.sizes
    out = b.base / (f"csv-{scale:g}x" if shape.key == "long-counters" else f"csv-{shape.key}-{scale:g}x")
    params = csv_params(s.csv_dispatches, scale, shape.ranks, shape.hosts, shape.counters)
    if shape.short:
        params["short"] = True
    g = ensure(out, params, lambda: generate.generate_csv(
        out, scale=scale, dispatches=s.csv_dispatches, ranks=shape.ranks, hosts=shape.hosts,
        counters=shape.counters, short=shape.short), b.log)
    return out, g


def bench_csv_ingest(b: Bench, shape: CsvShape) -> Measured:
    """1. ``profdb ingest`` / sqlite3 ``.import`` of the same CSV files, one shape; returns the ingest."""
    c1, g1 = csv_input(b, shape)
    files1 = [c1 / f for f in g1["files"]]
    warm(files1)
    db_raw = b.base / "sqlite-import.db"
    db1 = b.base / "ingest-1x.db"
    cmd = [b.profdb, "ingest", "--db", str(db1), "--run", shape.key, *ranks_of(c1)]
    imps: list[Measured] = []
    ingests: list[Measured] = []
    for rep in range(max(1, b.a.repeat)):
        b.log(f"1. [{shape.key}] sqlite3 .import of the CSV run (run {rep + 1}) ...")
        imps.append(sqlite_import(b.a.sqlite3, files1, db_raw))
        counts = subprocess.run(
            [b.a.sqlite3, str(db_raw), "select count(*) from kernel_trace_raw;"
             + (" select count(*) from counter_collection_raw;" if shape.counters else "")],
            capture_output=True, text=True, check=True).stdout.split()
        drop_store(db_raw)
        want = [g1["rows"]["kernel_trace"]] + ([g1["rows"]["counter_collection"]] if shape.counters else [])
        if [int(x) for x in counts] != want:
            raise SystemExit(f"sqlite3 imported {counts} rows, expected {want}")
        b.log(f"   {imps[-1].wall_s:.2f} s ({imps[-1].cpu_s:.1f} s CPU)")
        drop_store(db1)
        b.log(f"1. [{shape.key}] profdb ingest of the same files (run {rep + 1}) ...")
        ingests.append(measure(cmd, sample_rss=False))
        drop_store(db1)
        m = ingests[-1]
        b.log(f"   {m.wall_s:.2f} s ({m.cpu_s:.1f} s CPU, {m.cores:.2f} cores)")
    b.log(f"1. [{shape.key}] profdb ingest once more, its memory sampled ...")
    ing = with_memory(ingests, cmd, db1)
    b.log(f"   tree peak PSS {ing.tree_peak_mb:.0f} MB")
    imp = best(imps)
    ratio = ing.wall_s / imp.wall_s
    cpu_ratio = ing.cpu_s / imp.cpu_s if imp.cpu_s else None
    b.results[f"ingest_{shape.key}"] = asdict(ing) | {"stdout": ing.stdout[-2000:], "stderr": ing.stderr[-2000:]}
    b.results[f"sqlite_import_{shape.key}"] = asdict(imp) | {"stdout": "", "stderr": imp.stderr[-2000:]}
    total_rows = g1["rows"]["kernel_trace"] + g1["rows"]["counter_collection"]
    kt_bytes = sum((c1 / f).stat().st_size for f in g1["files"] if f.endswith("_kernel_trace.csv"))
    b.rows.append(Row(
        f"1. ingest / sqlite3 .import [{shape.key}: {shape.what}] ({len(files1)} CSV files, {total_rows:,} rows, "
        f"{g1['bytes'] / 1e6:,.0f} MB, {kt_bytes / max(1, g1['rows']['kernel_trace']):.0f} B/kernel row)",
        ratio, "<= 0.5", ratio <= 0.5,
        f"{ing.wall_s:.2f} s ({ing.cpu_s:.1f} s CPU, {ing.cores:.2f} cores, {ing.tree_peak_mb:.0f} MB)",
        f"{imp.wall_s:.2f} s ({imp.cpu_s:.1f} s CPU)",
        f"{' '.join(cmd[:5])} {c1}/rank*  vs  sqlite3 DB '.import --csv FILE table' per file",
        [f"CPU-time ratio {fmt_ratio(cpu_ratio)} (profdb's CPU seconds, all processes / sqlite3's)",
         pair_note([i.wall_s / m.wall_s for i, m in zip(ingests, imps)])],
        cpu_ratio=cpu_ratio))
    return ing


def kineto_input(b: Bench, out: Path, ranks: int, size_mb: float) -> dict[str, Any]:
    """``generate.generate_kineto`` into ``out`` unless it holds these traces already."""
    return ensure(out, dict(ranks=ranks, size_mb=size_mb, names=320, gzip=False, seed=generate.SEED,
                            version=generate.KINETO_VERSION),
                  lambda: generate.generate_kineto(out, ranks=ranks, size_mb=size_mb), b.log)


def hta_load_code(trace_dir: Path) -> str:
    """The Python HTA's interpreter runs for benchmark 2: ``TraceAnalysis(trace_dir=...)`` timed alone (its
    imports not), printing the load's seconds, ranks and rows as JSON."""
    return (
        "import json,sys,time\n"
        "from hta.trace_analysis import TraceAnalysis\n"
        "t=time.perf_counter()\n"
        f"ta=TraceAnalysis(trace_dir={str(trace_dir)!r})\n"
        "dt=time.perf_counter()-t\n"
        "print(json.dumps({'load_s':dt,'ranks':len(ta.t.get_ranks()),'rows':sum(len(ta.t.get_trace(r)) for r in ta.t.get_ranks())}))\n"
    )

def bench_kineto(b: Bench, many: bool = False) -> None:
    """2. ``profdb ingest`` of Kineto traces / HTA's TraceAnalysis load of the same traces: a few
    large traces (``kineto``), or, with ``many``, a larger job's many small ones (``kineto-many-files``:
    HTA's load costs less per event there, so the ratio is not the large traces' one)."""
    a, base, profdb, rows, results, s, log = b.a, b.base, b.profdb, b.rows, b.results, b.sizes, b.log
    key = "kineto-many-files" if many else "kineto"
    ranks, size_mb = (s.kineto_many_ranks, s.kineto_many_mb) if many else (s.kineto_ranks, s.kineto_mb)
    kdir = base / key
    kineto_input(b, kdir, ranks, size_mb)
    kfiles = sorted(kdir.glob("rank-*.json"))
    warm(kfiles)
    hta_py = a.hta_venv / "bin" / "python"
    if not hta_py.exists():
        log(f"2. creating {a.hta_venv} with holistictraceanalysis (once) ...")
        subprocess.run([sys.executable, "-m", "venv", str(a.hta_venv)], check=True)
        subprocess.run([str(hta_py), "-m", "pip", "install", "-q", "holistictraceanalysis"], check=True)
    log("2. HTA TraceAnalysis load ...")
    hta_code = hta_load_code(kdir)
    dbk = base / f"ingest-{key}.db"
    cmd = [profdb, "ingest", "--db", str(dbk), "--run", key, *map(str, kfiles)]
    htas: list[tuple[Measured, dict[str, Any]]] = []
    kis: list[Measured] = []
    for rep in range(max(1, a.repeat)):
        log(f"2. HTA TraceAnalysis load (run {rep + 1}) ...")
        hm = measure([str(hta_py), "-c", hta_code])
        hr = json.loads(hm.stdout.strip().splitlines()[-1])
        if hr["ranks"] != len(kfiles):
            raise SystemExit(f"HTA loaded {hr['ranks']} ranks of {len(kfiles)}")
        htas.append((hm, hr))
        log(f"   load {hr['load_s']:.2f} s (process {hm.wall_s:.2f} s, tree peak PSS {hm.tree_peak_mb:.0f} MB)")
        drop_store(dbk)
        log(f"2. profdb ingest of the same traces (run {rep + 1}) ...")
        kis.append(measure(cmd))
        drop_store(dbk)
        log(f"   {kis[-1].wall_s:.2f} s ({kis[-1].cpu_s:.1f} s CPU, {kis[-1].cores:.2f} cores), tree peak PSS {kis[-1].tree_peak_mb:.0f} MB")
    hta, hta_res = min(htas, key=lambda x: x[1]["load_s"])
    ki = best(kis)
    ratio = ki.wall_s / hta_res["load_s"]
    tag = key.replace("-", "_")
    results[f"{tag}_ingest"] = asdict(ki) | {"stdout": ki.stdout[-2000:], "stderr": ki.stderr[-2000:]}
    results[f"hta_load{tag.removeprefix('kineto')}"] = hta_res | {"process_wall_s": hta.wall_s, "process_cpu_s": hta.cpu_s,
                                     "tree_peak_mb": hta.tree_peak_mb}
    rows.append(Row(
        f"2. Kineto ingest / HTA TraceAnalysis load [{key}] ({len(kfiles)} ranks, "
        f"{sum(f.stat().st_size for f in kfiles) / 1e6:,.0f} MB)",
        ratio, "<= 0.15", ratio <= 0.15,
        f"{ki.wall_s:.2f} s ({ki.cpu_s:.1f} s CPU, {ki.cores:.2f} cores, {ki.tree_peak_mb:.0f} MB)",
        f"{hta_res['load_s']:.2f} s load ({hta.wall_s:.2f} s process, {hta.cpu_s:.1f} s CPU with imports, "
        f"{hta.tree_peak_mb:.0f} MB)",
        f"{' '.join(cmd[:5])} {kdir}/rank-*.json  vs  TraceAnalysis(trace_dir={kdir})",
        [f"CPU-time ratio {fmt_ratio(ki.cpu_s / hta.cpu_s if hta.cpu_s else None)} (HTA's process, imports included)",
         pair_note([k.wall_s / r["load_s"] for k, (_m, r) in zip(kis, htas)])],
        cpu_ratio=ki.cpu_s / hta.cpu_s if hta.cpu_s else None))



#: real Kineto traces shipped in tests/data (origins in tests/data/SOURCES.txt): (key, files or a tarball,
#: --rank for traces that do not say theirs). PyTorch's profiles with Python stacks, few files, little
#: per-event args: not the generated shapes' (which have no python_function events)
REAL_KINETO = (
    ("tracelens-h100-qwen", "tracelens_h100_Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz", "0"),
    ("tracelens-mi300-qwen", "tracelens_mi300_Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz", "0"),
    ("deepseek-v3-rank0", "deepseek_train_rank0.json.gz", None),
    ("dlrm-8ranks", "dlrm_8rank/dlrm_kineto.tar.gz", None),
)


def bench_kineto_real(b: Bench) -> None:
    """2, real traces: ``profdb ingest`` of each real Kineto trace (or job) in tests/data / HTA's load of the
    same, as ``bench_kineto`` measures the generated ones. Small inputs: profdb's fixed cost (start-up,
    imports, a new store, its analysis and commit: ~0.4 s) is most of its time, where HTA's load is timed
    without its imports."""
    import gzip
    import tarfile

    a, base, log = b.a, b.base, b.log
    data = HERE.parent / "tests" / "data" / "kineto"
    hta_py = a.hta_venv / "bin" / "python"
    for key, name, rank in REAL_KINETO:
        d = base / "kineto-real" / key
        if not d.is_dir():
            tmp = d.with_name(d.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            if name.endswith(".tar.gz"):
                with tarfile.open(data / name) as tar:
                    tar.extractall(tmp, filter="data")
                for f in tmp.rglob("*.json"):
                    f.rename(tmp / f.name)
            else:
                (tmp / "rank-0.json").write_bytes(gzip.decompress((data / name).read_bytes()))
            tmp.rename(d)
        files = sorted(d.glob("*.json"))
        warm(files)
        db = base / f"ingest-kineto-real-{key}.db"
        cmd = [b.profdb, "ingest", "--db", str(db), "--run", key, *(["--rank", rank] if rank else []), *map(str, files)]
        hta_code = hta_load_code(d)
        htas: list[tuple[Measured, float]] = []
        kis: list[Measured] = []
        for rep in range(max(1, a.repeat)):
            log(f"2. [real {key}] HTA load and profdb ingest (run {rep + 1}) ...")
            hm = measure([str(hta_py), "-c", hta_code])
            htas.append((hm, float(json.loads(hm.stdout.strip().splitlines()[-1])["load_s"])))
            drop_store(db)
            kis.append(measure(cmd))
            drop_store(db)
        hta, load_s = min(htas, key=lambda x: x[1])
        ki = best(kis)
        ratio = ki.wall_s / load_s
        b.results[f"kineto_real_{key}"] = {"profdb_wall_s": ki.wall_s, "profdb_cpu_s": ki.cpu_s, "hta_load_s": load_s}
        b.rows.append(Row(
            f"2. Kineto ingest / HTA TraceAnalysis load [real: {key}] ({len(files)} rank(s), "
            f"{sum(f.stat().st_size for f in files) / 1e6:,.1f} MB)",
            ratio, "<= 0.15", ratio <= 0.15,
            f"{ki.wall_s:.2f} s ({ki.cpu_s:.1f} s CPU, {ki.tree_peak_mb:.0f} MB)",
            f"{load_s:.2f} s load ({hta.wall_s:.2f} s process)",
            f"{' '.join(cmd[:5])} ... {d}/*.json  vs  TraceAnalysis(trace_dir={d})",
            [pair_note([k.wall_s / h for k, (_m, h) in zip(kis, htas)]),
             f"whole processes, imports included on both sides: {fmt_ratio(ki.wall_s / hta.wall_s)}"]))


#: per SQLite format: the tables its reader reads, which the baseline copies
SQLITE_TABLES = {
    "nsys": ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_MEMCPY", "StringIds"),
    "rpd": ("rocpd_op", "rocpd_api", "rocpd_api_ops", "rocpd_kernelapi", "rocpd_copyapi", "rocpd_string"),
}


def bench_sqlite_formats(b: Bench) -> None:
    """5. ``profdb ingest`` of a job's Nsight Systems exports and of its RPD traces (each rank's file the
    real sample's tables repeated: ``generate.generate_sqlite``) / the sqlite3 CLI copying the tables
    profdb reads from every file into one database (``CREATE TABLE .. AS SELECT``: the raw rows
    without understanding them, as ``.import`` is for CSV); and of its rocprofv3 JSON files (the real
    sample's dispatches repeated: ``generate.generate_rocprof_json``) / the sqlite3 CLI storing each
    file's dispatches as rows (``json_each(readfile(FILE), ...)``, which parses the whole file once).
    No target: recorded so a format's speed is seen (per row, these readers do more than the CSV one:
    SQL joins, Python per record)."""
    a, base, s, log = b.a, b.base, b.sizes, b.log
    for fmt in ("nsys", "rpd", "rocprof-json"):
        lines = []
        if fmt == "rocprof-json":
            d, copies = base / fmt, s.rocprof_json_copies
            gen = ensure(d, dict(format=fmt, ranks=s.sqlite_ranks, copies=copies, version=generate.ROCPROF_JSON_VERSION),
                         lambda: generate.generate_rocprof_json(d, ranks=s.sqlite_ranks, copies=copies), log)
            files = [Path(f) for f in gen["files"]]
            for k, f in enumerate(files):  # (one parse of the whole file; its dispatches stored as rows)
                lines.append(f"CREATE TABLE r{k}_kernel_dispatch AS SELECT value FROM json_each(readfile('{f}'), "
                             "'$.\"rocprofiler-sdk-tool\"[0].buffer_records.kernel_dispatch');")
        else:
            d = base / f"sqlite-{fmt}"
            copies = s.nsys_copies if fmt == "nsys" else s.rpd_copies
            gen = ensure(d, dict(format=fmt, ranks=s.sqlite_ranks, copies=copies, version=generate.SQLITE_VERSION),
                         lambda: generate.generate_sqlite(d, fmt, ranks=s.sqlite_ranks, copies=copies), log)
            files = [Path(f) for f in gen["files"]]
            for k, f in enumerate(files):
                lines.append(f"ATTACH '{f}' AS s;")
                lines += [f"CREATE TABLE r{k}_{t} AS SELECT * FROM s.{t};" for t in SQLITE_TABLES[fmt]]
                lines.append("DETACH s;")
        warm(files)
        db, raw = base / f"ingest-{fmt}.db", base / f"copy-{fmt}.db"
        script = raw.with_suffix(".copy.sql")
        script.write_text("\n".join(lines) + "\n")
        cmd = [b.profdb, "ingest", "--db", str(db), "--run", fmt, str(d)]
        ours: list[Measured] = []
        theirs: list[Measured] = []
        for rep in range(max(1, a.repeat)):
            log(f"5. [{fmt}] sqlite3 copy of the tables (run {rep + 1}) ...")
            drop_store(raw)
            theirs.append(measure([a.sqlite3, str(raw), f".read '{script}'"], sample_rss=False))
            drop_store(raw)
            log(f"5. [{fmt}] profdb ingest (run {rep + 1}) ...")
            drop_store(db)
            ours.append(measure(cmd, sample_rss=False))
            drop_store(db)
            if ours[-1].returncode or theirs[-1].returncode:
                raise SystemExit(f"{fmt}: {ours[-1].stderr[-500:]} {theirs[-1].stderr[-500:]}")
        log(f"5. [{fmt}] profdb ingest once more, its memory sampled ...")
        m, t = with_memory(ours, cmd, db), best(theirs)
        rows = sum(v for k, v in gen["rows"].items() if k in SQLITE_TABLES.get(fmt, ("kernel_dispatch",)))
        b.results[f"sqlite_{fmt}_ingest"] = asdict(m) | {"stdout": m.stdout[-2000:], "stderr": m.stderr[-2000:]}
        b.results[f"sqlite_{fmt}_copy"] = asdict(t) | {"stdout": "", "stderr": t.stderr[-2000:]}
        json_job = fmt == "rocprof-json"
        b.rows.append(Row(
            f"5. ingest / sqlite3 copy of the {'records' if json_job else 'tables'} read [{fmt}: {len(files)} ranks, "
            f"each the real sample's {'dispatches' if json_job else 'tables'} x{copies}] ({rows:,} rows in those "
            f"{'arrays' if json_job else 'tables'}, {gen['bytes'] / 1e6:,.0f} MB)",
            m.wall_s / t.wall_s, "none (recorded)", None,
            f"{m.wall_s:.2f} s ({m.cpu_s:.1f} s CPU, {m.cores:.2f} cores, {m.tree_peak_mb:.0f} MB)",
            f"{t.wall_s:.2f} s ({t.cpu_s:.1f} s CPU)",
            f"{' '.join(cmd[:5])} {d}  vs  sqlite3 DB " + (
                "'CREATE TABLE .. AS SELECT value FROM json_each(readfile(FILE), <the dispatches>)' per file" if json_job
                else "'ATTACH FILE; CREATE TABLE .. AS SELECT * FROM <each table read>'"),
            [pair_note([x.wall_s / y.wall_s for x, y in zip(ours, theirs)])],
            cpu_ratio=m.cpu_s / t.cpu_s if t.cpu_s else None))


#: byte-compiles profdb's modules where Python looks for them (each package's __pycache__)
_COMPILE = (
    "import compileall, importlib.util, sys\n"
    "dirs = [d for p in ('profdb', 'profdb.store', 'profdb.store.readers', 'profdb.cli')\n"
    "        for d in importlib.util.find_spec(p).submodule_search_locations]\n"
    "sys.exit(0 if all(compileall.compile_dir(d, maxlevels=0, quiet=1) for d in dirs) else 1)\n"
)


def compile_profdb(log: Callable[[str], None]) -> None:
    """Byte-compile profdb's modules, as ``pip install`` does, before anything is timed. Without it an
    editable checkout under ``PYTHONDONTWRITEBYTECODE=1`` (set on some CI machines and sandboxes)
    compiles every profdb module from source in every process: ~0.1 s of CPU that no installed profdb
    spends (0.12 s of each ingest's start-up on this machine; until session 13 only the query
    benchmark compiled first, so an ``--only ingest`` or ``--only kineto`` run paid it)."""
    r = subprocess.run([sys.executable, "-c", _COMPILE], capture_output=True, text=True)
    if r.returncode:  # (e.g. --profdb names another installation than this Python's)
        log(f"   could not byte-compile profdb's modules with {sys.executable}: start-up may include compiling")
    else:
        log("   profdb's modules byte-compiled (as pip install does), so start-up is timed as a user's")


def bench_query(b: Bench) -> None:
    """3. ``profdb query --imbalance`` / a full-scan GROUP BY of the same question in sqlite3."""
    a, base, profdb, rows, results, s, log = b.a, b.base, b.profdb, b.rows, b.results, b.sizes, b.log
    cbig = base / "csv-10m"
    gbig = ensure(cbig, csv_params(s.big_dispatches, 1.0, s.csv_ranks, s.csv_hosts, 0),
                  lambda: generate.generate_csv(cbig, dispatches=s.big_dispatches, ranks=s.csv_ranks,
                                                hosts=s.csv_hosts, counters=0), log)
    dbb = base / "store-10m.db"
    stamp = base / "store-10m.params"
    want = json.dumps(gbig["params"], sort_keys=True)
    if a.rebuild or not dbb.exists() or not stamp.exists() or stamp.read_text() != want:
        drop_store(dbb)
        stamp.unlink(missing_ok=True)
        log(f"3. building the {gbig['rows']['kernel_trace']:,}-row store with profdb ingest ...")
        bi = measure([profdb, "ingest", "--db", str(dbb), "--run", "big", *ranks_of(cbig)])
        stamp.write_text(want)
        log(f"   {bi.wall_s:.2f} s, {bi.cores:.2f} cores, tree peak PSS {bi.tree_peak_mb:.0f} MB")
        results["ingest_10m"] = asdict(bi) | {"stdout": bi.stdout[-2000:], "stderr": bi.stderr[-2000:]}
    n_act = int(subprocess.run([a.sqlite3, str(dbb), "select count(*) from activity"], capture_output=True,
                               text=True, check=True).stdout)
    log(f"3. full-scan GROUP BY in sqlite3 on {n_act:,} activity rows ...")
    sql = imbalance_sql("big")
    scans = [measure([a.sqlite3, "-csv", str(dbb), sql], sample_rss=False) for _ in range(max(1, s.query_repeats // 2))]
    scan_s = min(m.wall_s for m in scans)
    top = scans[0].stdout.splitlines()[0] if scans[0].stdout else ""
    log(f"   {scan_s:.3f} s; worst kernel: {top[:90]}...")
    if gbig["slow_kernel"] not in top:
        raise SystemExit(f"the full scan does not find the planted slow kernel first: {top[:200]}")
    qcmd = [profdb, "query", "--imbalance", "--db", str(dbb), "--run", "big"]
    probe = measure(qcmd + ["--format", "csv"], check=False, sample_rss=False)
    startup = min(measure([profdb, "--version"], sample_rss=False).wall_s for _ in range(s.query_repeats))
    if probe.returncode != 0:
        log(f"   profdb query --imbalance is not available here ({probe.stderr.strip().splitlines()[-1:] or probe.returncode})")
        rows.append(Row(f"3. query --imbalance / full-scan GROUP BY ({n_act:,} rows)", None, "<= 0.05, < 0.3 s", None,
                        "not available", f"{scan_s:.3f} s", " ".join(qcmd),
                        ["`profdb query --imbalance` is not on this branch yet (issue 3)"]))
    else:
        q_s = min(measure(qcmd, sample_rss=False).wall_s for _ in range(s.query_repeats))
        # the same library call in a warm interpreter: the query without Python's start-up and imports,
        # on the store as the CLI opens it (read through sqlite3 alone, db.open_raw_sqlite)
        lib_code = (
            "import json, time\n"
            "from profdb.store import queries\n"
            "from profdb.store.db import open_raw_sqlite\n"
            "t = time.perf_counter()\n"
            f"db = open_raw_sqlite({str(dbb)!r})\n"
            "queries.imbalance(db, 'big')\n"
            "print(json.dumps({'s': time.perf_counter() - t}))\n"
        )
        lib_s = min(json.loads(measure([sys.executable, "-c", lib_code], sample_rss=False).stdout)["s"]
                    for _ in range(s.query_repeats))
        found = gbig["slow_kernel"] in probe.stdout
        ratio = q_s / scan_s
        log(f"   profdb query --imbalance {q_s:.3f} s (CLI start-up alone {startup:.3f} s; library call {lib_s:.3f} s)")
        results["query"] = {"profdb_cli_s": q_s, "startup_s": startup, "library_s": lib_s, "scan_s": scan_s,
                            "rows": n_act, "found_planted": found, "stdout_head": probe.stdout[:3000]}
        rows.append(Row(
            f"3. query --imbalance / full-scan GROUP BY ({n_act:,} activity rows)",
            ratio, "<= 0.05, < 0.3 s", ratio <= 0.05 and q_s < 0.3,
            f"{q_s:.3f} s CLI (of which start-up {startup:.3f} s); library call {lib_s:.3f} s "
            f"(ratio {lib_s / scan_s:.4f})",
            f"{scan_s:.3f} s",
            f"{' '.join(qcmd)}  vs  sqlite3 -csv {dbb.name} '<imbalance_sql>'",
            [] if found else ["the planted slow kernel was not found in the query's output"]))
        rows.append(stragglers_benchmark(dbb, n_act, s.query_repeats, int(gbig["slow_rank"]), log, results))


def stragglers_benchmark(dbb: Path, n_act: int, repeats: int, slow_rank: int, log: Callable[[str], None],
                         results: dict[str, Any]) -> "Row":
    """3b. ``profdb query --stragglers`` on the big store: the library call in a warm interpreter (the
    collective timeline read from collective_call/rank_timeline, matched, aligned and attributed;
    never a scan of activity). Target < 2 s of library time on >= 10M rows. The generator's
    collectives block across ranks and ``slow_rank`` is planted late at each (generate.LATE_NS): the
    verdict must name it, else the step fails."""
    lib_code = (
        "import json, time\n"
        "from profdb.store import straggler\n"
        "from profdb.store.db import open_db\n"
        f"engine = open_db({str(dbb)!r})\n"
        "with engine.connect() as conn:\n"
        "    t, c = time.perf_counter(), time.process_time()\n"
        "    res = straggler.stragglers(conn, 'big')\n"
        "    s, cpu = time.perf_counter() - t, time.process_time() - c\n"
        "    calls = conn.exec_driver_sql('select count(*) from collective_call').scalar()\n"
        "print(json.dumps({'s': s, 'cpu': cpu, 'calls': calls, 'headline': res.headline}))\n"
    )
    outs = [json.loads(measure([sys.executable, "-c", lib_code], sample_rss=False).stdout) for _ in range(repeats)]
    lib_s = min(o["s"] for o in outs)
    cpu_s = min(o["cpu"] for o in outs)
    headline = str(outs[0]["headline"])
    log(f"   profdb query --stragglers: library call {lib_s:.3f} s ({cpu_s:.3f} s CPU) over {outs[0]['calls']:,} "
        "collective calls")
    log(f"   verdict: {headline}")
    results["stragglers"] = {"library_s": lib_s, "library_cpu_s": cpu_s, "calls": outs[0]["calls"], "rows": n_act,
                             "headline": headline, "planted_rank": slow_rank}
    if not headline.startswith(f"likely straggler: rank {slow_rank} "):
        raise SystemExit(f"--stragglers does not name the planted rank {slow_rank}: {headline}")
    return Row(f"3b. query --stragglers library time ({n_act:,} activity rows, {outs[0]['calls']:,} calls)",
               lib_s, "< 2 s", lib_s < 2.0, f"{lib_s:.3f} s ({cpu_s:.3f} s CPU)", "-",
               f"straggler.stragglers(conn, 'big') on {dbb.name}",
               [f"names the planted rank {slow_rank}: {headline}"])



def bench_rss(b: Bench, ingest1: Measured) -> None:
    """4. Peak memory of ``profdb ingest`` at 4x the input of ``ingest1`` (the long-counters shape)."""
    a, base, profdb, rows, results, s, log = b.a, b.base, b.profdb, b.rows, b.results, b.sizes, b.log
    g1 = json.loads((base / "csv-1x" / generate.META).read_text())
    shape = csv_shapes(s)[0]
    c4, g4 = csv_input(b, shape, 4.0)
    db4 = base / "ingest-4x.db"
    cmd4 = [profdb, "ingest", "--db", str(db4), "--run", "csv-4x", *ranks_of(c4)]
    i4s = []
    for rep in range(max(1, a.repeat)):
        drop_store(db4)
        log(f"4. profdb ingest of the 4x run (run {rep + 1}) ...")
        i4s.append(measure(cmd4))
        drop_store(db4)
    i4 = best(i4s)
    log(f"   {i4.wall_s:.2f} s, {i4.cores:.2f} cores, tree peak PSS {i4.tree_peak_mb:.0f} MB")
    results["ingest_4x"] = asdict(i4) | {"stdout": i4.stdout[-2000:], "stderr": i4.stderr[-2000:]}
    growth = i4.tree_peak_mb / ingest1.tree_peak_mb if ingest1.tree_peak_mb else None
    ok = i4.tree_peak_mb < 300 and (growth is not None and growth < 1.25)
    rows.append(Row(
        f"4. ingest peak RSS 4x / 1x ({g4['bytes'] / 1e6:,.0f} MB vs {g1['bytes'] / 1e6:,.0f} MB of CSV)",
        growth, "< 300 MB at 4x, flat", ok,
        f"4x {i4.tree_peak_mb:.0f} MB tree ({i4.max_rss_mb:.0f} MB max process), {i4.wall_s:.1f} s",
        f"1x {ingest1.tree_peak_mb:.0f} MB tree ({ingest1.max_rss_mb:.0f} MB max process), {ingest1.wall_s:.1f} s",
        f"{' '.join(cmd4[:5])} {c4}/rank*"))
    bench_kineto_rss(b)
    bench_rpd_rss(b)
    bench_files_rss(b)


def _peak(b: Bench, what: str, cmd: list[str], db: Path) -> Measured:
    """``cmd`` (an ingest into ``db``, from an empty store) run ``--repeat`` times: the fastest run, with
    the largest peak memory seen (``best``)."""
    ms = []
    for rep in range(max(1, b.a.repeat)):
        drop_store(db)
        b.log(f"4. profdb ingest of {what} (run {rep + 1}) ...")
        ms.append(measure(cmd))
        drop_store(db)
        b.log(f"   {ms[-1].wall_s:.2f} s, tree peak PSS {ms[-1].tree_peak_mb:.0f} MB "
              f"({ms[-1].max_rss_mb:.0f} MB max process)")
    return best(ms)


def _flat_row(b: Bench, key: str, label: str, one: Measured, four: Measured, command: str) -> None:
    """Benchmark 4's row for an input 4x another: the tree's peak memory at 4x / at 1x, flat (< 1.25)."""
    growth = four.tree_peak_mb / one.tree_peak_mb if one.tree_peak_mb else None
    b.results[key] = {"1x": asdict(one), "4x": asdict(four)}
    b.rows.append(Row(
        label, growth, "flat (< 1.25)", growth is not None and growth < 1.25,
        f"4x {four.tree_peak_mb:.0f} MB tree ({four.max_rss_mb:.0f} MB max process), {four.wall_s:.1f} s",
        f"1x {one.tree_peak_mb:.0f} MB tree ({one.max_rss_mb:.0f} MB max process), {one.wall_s:.1f} s",
        command))


def bench_kineto_rss(b: Bench) -> None:
    """4. Peak memory of ``profdb ingest`` of one Kineto trace 4x as large as another (one rank's long
    profile: what a worker holds until a file's end grows with it, where a job of many files does not)."""
    runs: dict[float, Measured] = {}
    for times in (1.0, 4.0):
        mb = b.sizes.kineto_one_mb * times
        out = b.base / f"kineto-one-{times:g}x"
        trace = out / kineto_input(b, out, 1, mb)["files"][0]
        db = b.base / "ingest-kineto-one.db"
        runs[times] = _peak(b, f"one {mb:,.0f} MB Kineto trace", [
            b.profdb, "ingest", "--db", str(db), "--run", f"kineto-one-{times:g}x", str(trace)], db)
    mb = b.sizes.kineto_one_mb
    _flat_row(b, "ingest_kineto_one", f"4. ingest peak RSS, one Kineto trace 4x / 1x ({4 * mb:,.0f} MB vs "
              f"{mb:,.0f} MB of JSON)", runs[1.0], runs[4.0],
              f"profdb ingest --db DB {trace}  (and the 1x trace beside it)")


def bench_rpd_rss(b: Bench) -> None:
    """4. Peak memory of ``profdb ingest`` of one RPD trace with 4x the ROCTx ranges of another. rpd_tracer
    writes a range when it ends, so an outer range comes after its children: the ranges are not in stack
    order, and self time needs them sorted (at the file's end, a piece at a time)."""
    runs: dict[int, Measured] = {}
    for times in (1, 4):
        copies = b.sizes.rpd_one_copies * times
        out = b.base / f"rpd-one-{times}x"
        gen = ensure(out, dict(format="rpd", ranks=1, copies=copies, version=generate.SQLITE_VERSION),
                     lambda out=out, copies=copies: generate.generate_sqlite(out, "rpd", ranks=1, copies=copies), b.log)
        db = b.base / "ingest-rpd-one.db"
        runs[times] = _peak(b, f"one RPD trace ({gen['bytes'] / 1e6:,.0f} MB)", [
            b.profdb, "ingest", "--db", str(db), "--run", f"rpd-one-{times}x", *ranks_of(out)], db)
    _flat_row(b, "ingest_rpd_one", f"4. ingest peak RSS, one RPD trace 4x / 1x ({4 * b.sizes.rpd_one_copies} vs "
              f"{b.sizes.rpd_one_copies} copies of the sample's tables)", runs[1], runs[4],
              f"profdb ingest --db DB {b.base / 'rpd-one-4x'}/rank*  (and the 1x trace)")


def bench_files_rss(b: Bench) -> None:
    """4. Peak memory of ``profdb ingest`` of 4x as many files of the same size: the ``short-2048-files``
    run (2,048 tiny kernel traces, a large job profiled briefly), and the same job at 8,192 ranks (4x
    the dispatches, the same per file). What the ingest keeps per file (its input, rank, source, the
    hash, the result line) grows with the files; the rows' memory does not."""
    one_shape = next(c for c in csv_shapes(b.sizes) if c.key == "short-2048-files")
    four_shape = replace(one_shape, key="short-4x-files", ranks=4 * one_shape.ranks, hosts=4 * one_shape.hosts,
                         what="short names, no counters, 4x the tiny files")
    runs: dict[float, tuple[Measured, Path, dict[str, Any]]] = {}
    for times, shape in ((1.0, one_shape), (4.0, four_shape)):
        c, g = csv_input(b, shape, times)
        db = b.base / "ingest-files.db"
        cmd = [b.profdb, "ingest", "--db", str(db), "--run", shape.key, *ranks_of(c)]
        runs[times] = (_peak(b, f"{len(g['files']):,} CSV files", cmd, db), c, g)
    (one, _c1, g1), (four, c4, g4) = runs[1.0], runs[4.0]
    _flat_row(b, "ingest_files_rss", f"4. ingest peak RSS, 4x the files / 1x ({len(g4['files']):,} vs "
              f"{len(g1['files']):,} CSV files of ~{g1['bytes'] / len(g1['files']) / 1e3:,.0f} kB)",
              one, four, f"profdb ingest --db DB {c4}/rank*  (and the 1x run's)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="smoke size: seconds, targets not judged")
    p.add_argument("--out", type=Path, default=HERE / "out", help="where inputs and stores go (default benchmarks/out)")
    p.add_argument("--profdb", default=None, help="the profdb command (default: beside this Python, else PATH)")
    p.add_argument("--sqlite3", default=shutil.which("sqlite3") or "sqlite3", help="the sqlite3 CLI (apt-get install sqlite3)")
    p.add_argument("--hta-venv", type=Path, default=Path(os.environ.get("HTA_VENV", HERE / "out" / "hta-venv")),
                   help="virtualenv with holistictraceanalysis (created with pip if missing; $HTA_VENV)")
    p.add_argument("--only", action="append", choices=("ingest", "kineto", "query", "rss", "formats"),
                   help="run only these benchmarks (repeatable)")
    p.add_argument("--shape", action="append", choices=[c.key for c in csv_shapes(FULL)],
                   help="CSV ingest: only these row shapes (repeatable; default all)")
    p.add_argument("--repeat", type=int, default=1, metavar="N",
                   help="run both sides of ratios 1, 2 and 4 N times, interleaved, and keep each side's fastest "
                        "run (peak memory: the largest of the N); use 3 on a machine shared with other work")
    p.add_argument("--rebuild", action="store_true", help="rebuild the 10M-row store even if its input is unchanged")
    p.add_argument("--json", type=Path, default=None, help="also write the results here (default OUT/results[-quick].json)")
    a = p.parse_args(argv)
    sizes = QUICK if a.quick else FULL
    only = set(a.only or ("ingest", "kineto", "query", "rss", "formats"))
    base = a.out / ("quick" if a.quick else "full")
    base.mkdir(parents=True, exist_ok=True)
    beside = Path(sys.executable).with_name("profdb")
    profdb = a.profdb or (str(beside) if beside.exists() else shutil.which("profdb") or "profdb")
    b = Bench(a, sizes, base, profdb, results={"quick": a.quick, "sizes": asdict(sizes),
                                                "machine": {"cpus": os.cpu_count(), "load_at_start": os.getloadavg()}})
    b.log(f"profdb benchmarks ({'quick' if a.quick else 'full'} size) in {base}")
    compile_profdb(b.log)
    t_all = time.perf_counter()
    ingest1: Measured | None = None
    for shape in csv_shapes(sizes):
        if "ingest" in only and (not a.shape or shape.key in a.shape):
            m = bench_csv_ingest(b, shape)
            ingest1 = m if shape.key == "long-counters" else ingest1
    if "kineto" in only:
        bench_kineto(b)
        bench_kineto(b, many=True)
        bench_kineto_real(b)
    if "formats" in only:
        bench_sqlite_formats(b)
    if "query" in only:
        bench_query(b)
    if "rss" in only:
        if ingest1 is None:
            c1, _ = csv_input(b, csv_shapes(sizes)[0])
            db1 = base / "ingest-1x.db"
            drop_store(db1)
            ingest1 = measure([profdb, "ingest", "--db", str(db1), "--run", "csv-1x", *ranks_of(c1)])
            drop_store(db1)
        bench_rss(b, ingest1)
    return report(b, t_all)


def report(b: Bench, t_all: float) -> int:
    a, rows, results = b.a, b.rows, b.results
    results["rows"] = [asdict(r) for r in rows]
    results["total_s"] = time.perf_counter() - t_all
    results["machine"]["load_at_end"] = os.getloadavg()
    out_json = a.json or (a.out / f"results{'-quick' if a.quick else ''}.json")
    out_json.write_text(json.dumps(results, indent=1, default=str) + "\n")
    print(f"\nprofdb benchmarks, {'QUICK (smoke) size: targets not judged' if a.quick else 'full size'}; "
          f"{os.cpu_count()} CPUs; {results['total_s']:.0f} s in all; load average "
          f"{results['machine']['load_at_start'][0]:.1f} at start, {results['machine']['load_at_end'][0]:.1f} at end "
          "(other processes share the machine: wall-clock ratios move with them)")
    for r in rows:
        verdict = "" if r.ok is None or a.quick else ("  [met]" if r.ok else "  [MISSED]")
        print(f"\n{r.what}\n  ratio {fmt_ratio(r.ratio)}  (target {r.target}){verdict}\n"
              f"  profdb:   {r.profdb}\n  baseline: {r.baseline}\n  command:  {r.command}")
        for n in r.notes:
            print(f"  note: {n}")
    print(f"\nresults: {out_json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
