"""`profdb ingest` end to end from the CLI, then read back with plain sqlite3 as a user would."""

from __future__ import annotations

import csv
import gzip
import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from click.testing import Result

from conftest import Invoke, file_bytes, sql
from gen_rocprof_run import generate


def test_torchrun_cpu_sample(data: Path, db_path: Path, run_cli: Invoke) -> None:
    r = run_cli("ingest", "--db", db_path, data / "kineto" / "torchrun4_cpu")
    assert "run: torchrun4_cpu (derived" in r.output
    assert "ranks: 4 of world size 4" in r.output
    ranks = sql(db_path, "select global_rank, hostname, local_rank from rank_v order by global_rank")
    assert ranks == [(0, "vm", None), (1, "vm", None), (2, "vm", None), (3, "vm", None)]
    # rows per rank equal the X events of the kinds the reader keeps, counted from the json itself
    for g in range(4):
        doc = json.load(gzip.open(data / "kineto" / "torchrun4_cpu" / f"rank{g}_iter5_7.json.gz"))
        n = sum(1 for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation"))
        assert sql(db_path, "select count(*) from activity_v where global_rank = ?", g) == [(n,)]
    # the summary equals a full scan of the fact table
    assert sql(
        db_path,
        "select rank_id, name_id, kind, count(*), sum(duration_ns), min(duration_ns), max(duration_ns) "
        "from activity group by 1, 2, 3 order by 1, 2, 3",
    ) == sql(db_path, "select rank_id, name_id, kind, calls, total_ns, min_ns, max_ns from summary order by 1, 2, 3")
    steps = sql(db_path, "select global_rank, step from step_v order by 1, 2")
    assert steps == [(g, s) for g in range(4) for s in (4, 5, 6)]
    cats = dict(sql(db_path, "select category, count(*) from activity_v where name = 'gloo:all_reduce' group by 1"))
    assert set(cats) == {"communication"}


def test_reingest_is_a_noop(data: Path, db_path: Path, run_cli: Invoke) -> None:
    src = data / "kineto" / "torchrun4_cpu"
    run_cli("ingest", "--db", db_path, src)
    before = sql(db_path, "select count(*), sum(calls) from activity, summary")
    r = run_cli("ingest", "--db", db_path, src)
    assert "0 ingested, 4 already present (skipped)" in r.output
    assert sql(db_path, "select count(*), sum(calls) from activity, summary") == before


def test_hta_two_rank_set_reports_missing_ranks(data: Path, db_path: Path, run_cli: Invoke) -> None:
    r = run_cli("ingest", "--db", db_path, "--run", "hta", data / "kineto" / "hta_trace_filter_2ranks")
    assert "missing ranks: 126 (2-127)" in r.output
    r = run_cli("ranks", "--db", db_path, "--run", "hta", "--format", "csv")
    lines = r.stdout.strip().splitlines()
    # issue 13: the 126 missing ranks are one row (a range), not 126 lines
    assert len(lines) == 1 + 2 + 1
    assert lines[3].startswith("2-127,") and "MISSING" in lines[3] and lines[1].startswith("0,")
    assert "missing ranks: 126 (2-127)" in r.stderr
    r = run_cli("runs", "--db", db_path, "--format", "json")
    runs = json.loads(r.stdout)
    assert runs[0]["run"] == "hta" and runs[0]["ranks"] == 2 and runs[0]["world_size"] == 128
    assert runs[0]["missing_ranks"] == "126 (2-127)"


def test_rocprof_csv_samples_with_rank_flag(data: Path, db_path: Path, run_cli: Invoke) -> None:
    for layout in ("rocm-systems_2025-08", "rocprofiler-sdk_2024-10"):
        d = data / "rocprofv3_csv" / layout
        run_cli(
            "ingest", "--db", db_path, "--run", layout, "--rank", 0,
            d / "kernel_trace.csv", d / "counter_collection.csv", d / "memory_copy_trace.csv",
        )
        kernels = sql(db_path, "select count(*) from activity_v where run = ? and kind = 'kernel'", layout)
        with open(d / "kernel_trace.csv", newline="") as f:
            assert kernels == [(sum(1 for row in csv.reader(f) if row) - 1,)]
        assert sql(db_path, "select count(*) > 0 from counter_v where run = ?", layout) == [(1,)]


def test_generated_multi_host_run(tmp_path: Path, db_path: Path, run_cli: Invoke) -> None:
    gen = generate(tmp_path / "out", nodes=2, gpus_per_node=4, calls=10)
    r = run_cli("ingest", "--db", db_path, "--run", "gen", *gen.rank_dirs())
    assert "ranks: 8 on 2 hosts (node00, node01)" in r.output
    got = sql(db_path, "select global_rank, hostname from rank_v order by 1")
    assert got == [(g, gen.hosts[g // 4]) for g in range(8)]
    totals = {
        (g, n): (c, t)
        for g, n, c, t in sql(db_path, "select global_rank, name, calls, total_ns from summary_v where kind = 'kernel'")
    }
    assert totals == gen.totals
    # byte-identical files from different ranks are different data, not duplicates
    assert sql(db_path, "select count(*) from activity where kind = 'memcpy'") == [(gen.copies,)] == [(8,)]
    assert sql(db_path, "select count(*) from counter") == [(gen.counters,)]
    pids = sql(db_path, "select global_rank, pid from rank_v order by 1")
    assert pids == [(g, 1000 + g) for g in range(8)]


def test_rank_from_manifest(tmp_path: Path, db_path: Path, run_cli: Invoke, data: Path) -> None:
    from profdb.store.manifest import RankManifest, write_manifest

    out = tmp_path / "job"
    for g in range(2):
        d = out / f"rank{g:04d}"
        write_manifest(d, RankManifest(global_rank=g, local_rank=g, world_size=2, hostname="gpu7", launcher="torchrun", run="job-7"))
        shutil.copy(data / "rocprofv3_csv" / "rocm-systems_2025-08" / "kernel_trace.csv", d / f"{100 + g}_kernel_trace.csv")
    # the copies are identical content: ingest them as two ranks anyway (two files, two manifests)
    (out / "rank0001" / "101_kernel_trace.csv").write_text(
        (out / "rank0001" / "101_kernel_trace.csv").read_text() + "\n"
    )
    r = run_cli("ingest", "--db", db_path, out / "rank0000", out / "rank0001")
    assert "run: job-7" in r.output
    assert sql(db_path, "select run, global_rank, local_rank, hostname from rank_v order by 2") == [
        ("job-7", 0, 0, "gpu7"), ("job-7", 1, 1, "gpu7"),
    ]
    assert sql(db_path, "select launcher, world_size from run") == [("torchrun", 2)]


def test_more_ranks_later_join_the_run(tmp_path: Path, db_path: Path, run_cli: Invoke) -> None:
    gen = generate(tmp_path / "out", nodes=1, gpus_per_node=4, calls=2)
    dirs = gen.rank_dirs()
    run_cli("ingest", "--db", db_path, "--run", "r", *dirs[:2])
    run_cli("ingest", "--db", db_path, "--run", "r", *dirs[2:])
    assert sql(db_path, "select count(*) from rank_v where run = 'r'") == [(4,)]


def test_a_rank_s_files_in_two_ingests_keep_the_timeline_of_one(data: Path, tmp_path: Path, run_cli: Invoke) -> None:
    """A rank created by an ingest has nothing stored, so its timeline is written without reading any
    back; a rank that gets more files later is merged with what it had. Both must give what one ingest
    of all the files gives (real rocprofv3 CSVs of one rank: its kernels, then its RCCL and HIP calls)."""
    src = data / "rocprofv3_csv" / "rocm-systems_2025-08"
    files = [src / f for f in ("kernel_trace.csv", "rccl_trace.csv", "hip_trace.csv", "marker_api_trace.csv")]
    one, two = tmp_path / "one.db", tmp_path / "two.db"
    run_cli("ingest", "--db", one, "--run", "r", "--rank", "0", *files)
    run_cli("ingest", "--db", two, "--run", "r", "--rank", "0", files[0])
    run_cli("ingest", "--db", two, "--run", "r", "--rank", "0", *files[1:])
    queries = [
        "select family, group_name, collective, seq, start_ns, end_ns, bytes, busy_before_ns, window_ns "
        "from collective_call order by 1, 2, 3, 4",
        "select first_ns, last_ns, work_domain, busy_ns, comm_ns, exposed_comm_ns from rank_timeline",
        "select step, busy_ns, exposed_comm_ns from step_timeline order by 1",
    ]
    assert sql(one, "select count(*) from collective_call")[0][0] > 0
    for q in queries:
        assert sql(two, q) == sql(one, q), q


def test_timelines_stored_in_small_batches_are_the_same(
    data: Path, tmp_path: Path, run_cli: Invoke, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Complete ranks' timelines are gathered and written SAVE_CALLS calls at a time: with a batch of a
    few calls (ranks saved together, and inserts cut inside save_timelines) the store is the same as
    with the default (the real torchrun4_cpu job: 4 ranks, gloo calls)."""
    from profdb.store import timeline

    whole, small = tmp_path / "whole.db", tmp_path / "small.db"
    run_cli("ingest", "--db", whole, data / "kineto" / "torchrun4_cpu")
    monkeypatch.setattr(timeline, "SAVE_CALLS", 5)
    run_cli("ingest", "--db", small, data / "kineto" / "torchrun4_cpu")
    queries = ["select * from collective_call order by 1, 2, 3, 4, 5", "select * from rank_timeline order by 1",
               "select * from step_timeline order by 1, 2"]
    assert sql(whole, "select count(*) from collective_call")[0][0] > 2 * 5
    for q in queries:
        assert sql(small, q) == sql(whole, q), q


# ----------------------------------------------------------------- bad input: exit 1, message, store unchanged


@pytest.fixture
def seeded(data: Path, db_path: Path, run_cli: Invoke) -> bytes:
    run_cli("ingest", "--db", db_path, data / "kineto" / "torchrun4_cpu")
    content = file_bytes(db_path)
    assert content is not None
    return content


def _fails(run_cli: Invoke, db_path: Path, before: bytes | None, *args: object, match: str) -> Result:
    r = run_cli("ingest", "--db", db_path, *args, ok=False)
    assert r.exit_code == 1, r.output
    assert match in r.stderr, r.stderr
    assert file_bytes(db_path) == before
    return r


def test_gzip_cut_early_is_named_not_skipped(tmp_path: Path, data: Path, db_path: Path, run_cli: Invoke,
                                             seeded: bytes) -> None:
    """A .gz profile cut within the first bytes its format is told by (an interrupted copy): the
    decompressed part still names the format, so the ingest stops on the reader's error naming the file
    (a truncated stream, re-copy it), even in a folder beside readable ranks. It read as no profiler
    output before: in a folder skipped with a note, the rank missing, exit 0. The same for a Kineto trace
    whose events start past the 16 KiB detection reads first (TraceLens's harness writes 26 KB of metadata
    before them): cut within the first MiB its events are then looked for in, it read as no profiler output
    until session 47; and cut so early that nothing of its content is left, it is named by its name (a
    profile's ending) and its cut stream."""
    rpd = data / "legacy_rpd" / "mytrace.rpd.gz"
    kineto = data / "kineto" / "rank0.json.gz"
    far = data / "kineto" / "tracelens_h100_Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
    for src, cut, fix in ((rpd, 30_000, "decompress it with `gunzip`"), (kineto, 4_000, "decompress what is left"),
                          (far, 20_000, "decompress what is left")):
        job = tmp_path / src.name.split(".")[0]
        good, bad = job / "rank0000" / src.name, job / "rank0001" / src.name
        for f in (good, bad):
            f.parent.mkdir(parents=True)
        good.write_bytes(src.read_bytes())
        bad.write_bytes(src.read_bytes()[:cut])
        for args in ((job,), (bad,)):
            r = _fails(run_cli, db_path, seeded, "--run", "cut", *args,
                       match=f"rank0001/{src.name}: the gzip stream is truncated or corrupt")
            assert fix in r.stderr, r.stderr
    # cut so early that nothing tells the format (31 bytes, an empty content): named by its name and its stream
    bad.write_bytes(kineto.read_bytes()[:31])
    for args in ((job,), (bad,)):
        _fails(run_cli, db_path, seeded, "--run", "cut", *args, match=f"rank0001/{bad.name}: a gzip file cut short or "
               "damaged (0 bytes of content before the damage, too few to tell which profiler wrote it")
    bad.with_name("notes.txt.gz").write_bytes(kineto.read_bytes()[:31])  # (not named like a profile: skipped)
    bad.unlink()
    r = run_cli("ingest", "--db", tmp_path / "ok.db", "--run", "ok", job)
    assert "not profiler outputs profdb reads, skipped (e.g." in r.stderr, r.stderr


@pytest.mark.parametrize("name", ["legacy_rpd/matmul_result.rpd", "nsys_sqlite/saxpy-mpi-cuda_nsys_perlmutter0.sqlite"])
def test_sqlite_profile_cut_short_is_named_not_skipped(tmp_path: Path, data: Path, db_path: Path, run_cli: Invoke,
                                                       seeded: bytes, name: str) -> None:
    """An SQLite profile (RPD, Nsight Systems export) cut short: SQLite calls it malformed, so it read as
    no profiler output (in a folder: skipped with a note, exit 0, its rank missing). Its header says
    SQLite and its first pages name its tables, so it is known by them, and the ingest stops on the
    error that names it and says to re-copy it, the store unchanged."""
    src = data / name
    job = tmp_path / "job"
    good, bad = job / "rank0000" / src.name, job / "rank0001" / src.name
    for f in (good, bad):
        f.parent.mkdir(parents=True)
    good.write_bytes(src.read_bytes())
    bad.write_bytes(src.read_bytes()[: src.stat().st_size // 2])
    for args in ((job,), (bad,)):
        r = _fails(run_cli, db_path, seeded, "--run", "cut", *args, match=f"rank0001/{src.name}: ")
        assert "malformed" in r.stderr and "re-copy" in r.stderr, r.stderr



@pytest.mark.parametrize("name", ["legacy_rpd/matmul_result.rpd", "nsys_sqlite/perlmutter-cloverleaf-cuda.sqlite"])
@pytest.mark.parametrize("gz", [False, True])
def test_sqlite_profile_cut_before_its_tables_is_named_not_skipped(tmp_path: Path, data: Path, db_path: Path,
                                                                   run_cli: Invoke, seeded: bytes, name: str,
                                                                   gz: bool) -> None:
    """Cut to its first 5% (an interrupted copy), an SQLite profile has lost the pages that name its tables,
    so no reader knows it: in a folder it was skipped as "not profiler output", exit 0, its rank missing
    (until session 47). Its header's page count says how long it should be; a .gz copy's stream ends early.
    The ingest stops on an error naming the file, the store unchanged. A whole SQLite file that is no
    profile is still skipped with the note."""
    src = data / name
    whole = src.read_bytes()
    raw = gzip.compress(whole) if gz else whole
    job = tmp_path / "job"
    good, bad = job / "rank0000" / src.name, job / "rank0001" / (src.name + (".gz" if gz else ""))
    for f in (good, bad):
        f.parent.mkdir(parents=True)
    good.write_bytes(whole)
    bad.write_bytes(raw[: len(raw) // 20])
    for args in ((job,), (bad,)):
        r = _fails(run_cli, db_path, seeded, "--run", "cut", *args, match=f"rank0001/{bad.name}: ")
        # (the RPD's tables are named in its first pages: its reader knows it, and says its stream is cut)
        said = "the gzip stream is truncated" if gz and "rpd" in name else "an SQLite database cut short ("
        assert said in r.stderr and "re-copy" in r.stderr, r.stderr
    bad.unlink()
    other = sqlite3.connect(bad.parent / "notes.db")  # (a whole SQLite file, not a profile)
    other.execute("CREATE TABLE t (x)")
    other.commit()
    other.close()
    r = run_cli("ingest", "--db", tmp_path / "ok.db", "--run", "ok", job)
    assert "not profiler outputs profdb reads, skipped (e.g." in r.stderr and "notes.db" in r.stderr, r.stderr

def test_bad_inputs_leave_store_unchanged(tmp_path: Path, data: Path, db_path: Path, run_cli: Invoke, seeded: bytes) -> None:
    _fails(run_cli, db_path, seeded, tmp_path / "nope", match="nope: no such file or folder")
    empty = tmp_path / "empty"
    empty.mkdir()
    _fails(run_cli, db_path, seeded, empty, match="empty: no profiler output profdb can read in this folder")
    readme = tmp_path / "notes.txt"
    readme.write_text("hello")
    _fails(run_cli, db_path, seeded, readme, match="notes.txt: not a profiler output profdb recognises; supported formats:")
    raw = (data / "kineto" / "torchrun4_cpu" / "rank1_iter5_7.json.gz").read_bytes()
    trunc = tmp_path / "rank1_iter5_7.json.gz"
    trunc.write_bytes(raw[:-2000])
    _fails(run_cli, db_path, seeded, "--run", "x", trunc, match="rank1_iter5_7.json.gz: the gzip stream is truncated")
    lines = (data / "rocprofv3_csv" / "rocm-systems_2025-08" / "kernel_trace.csv").read_text().splitlines()
    nocol = tmp_path / "rank0004" / "kernel_trace.csv"
    nocol.parent.mkdir()
    nocol.write_text("\n".join([lines[0].replace('"Kernel_Name",', "")] + lines[1:]))
    _fails(run_cli, db_path, seeded, nocol, match="missing required column(s) Kernel_Name")
    a, b = tmp_path / "a" / "rank0.json.gz", tmp_path / "b" / "rank0.json.gz"
    for dst, src in ((a, "rank0_iter5_7.json.gz"), (b, "rank1_iter5_7.json.gz")):
        dst.parent.mkdir()
        shutil.copy(data / "kineto" / "torchrun4_cpu" / src, dst)
    _fails(run_cli, db_path, seeded, "--run", "y", a, b, match="global_rank = 1 but path (rank0.json.gz) says 0")
    _fails(run_cli, db_path, seeded, "--run", "y", "--rank", "0", a, b, match="both claim rank 0")
    _fails(
        run_cli, db_path, seeded, data / "kineto" / "distributed_info_not_found.json.gz",
        match="distributed_info_not_found.json.gz: cannot tell which rank wrote this file",
    )
    # a file of another job into the same run: world size conflict
    _fails(run_cli, db_path, seeded, "--run", "torchrun4_cpu", data / "kineto" / "nccl_data.json.gz",
           match=f"has world size 4 but these inputs say 2 ({data / 'kineto' / 'nccl_data.json.gz'}); they come from "
           "another job")


def test_outputs_profdb_does_not_read_say_what_to_do(
    tmp_path: Path, data: Path, db_path: Path, run_cli: Invoke, seeded: bytes
) -> None:
    """An Nsight Systems report (binary: profdb reads its SQLite export), an Nsight Compute report, a
    Perfetto or OTF2 trace: the error or note says what the file is and what to ingest instead."""
    reports = tmp_path / "reports"
    reports.mkdir()
    for name in ("report.nsys-rep", "old.qdrep", "kernels.ncu-rep", "1234_results.pftrace", "1234_results.otf2"):
        (reports / name).write_bytes(b"\x00\x01binary, no reader's\x00" * 40)
    rep = reports / "report.nsys-rep"
    _fails(run_cli, db_path, seeded, rep, match=f"report.nsys-rep: an Nsight Systems report: profdb reads its SQLite "
           f"export: run `nsys export --type sqlite -o {reports / 'report'}.sqlite {rep}`, then ingest "
           f"{reports / 'report'}.sqlite")
    _fails(run_cli, db_path, seeded, reports / "old.qdrep", match="old.qdrep: an Nsight Systems report: ")
    _fails(run_cli, db_path, seeded, reports / "kernels.ncu-rep", match="an Nsight Compute report: per-kernel metrics")
    _fails(run_cli, db_path, seeded, reports / "1234_results.pftrace", match="a Perfetto trace: profdb does not read")
    # a folder of them: each kind said, with the count
    r = run_cli("ingest", "--db", db_path, reports, ok=False)
    assert r.exit_code == 1 and file_bytes(db_path) == seeded
    err = " ".join(r.stderr.split())
    assert "no profiler output profdb can read in this folder (5 files looked at; " in err
    assert f"; 2 Nsight Systems reports (e.g. {reports / 'old.qdrep'}): profdb reads its SQLite export: " in err
    assert "an OTF2 trace (" in err and "a Perfetto trace (" in err and "an Nsight Compute report (" in err
    # beside readable outputs: those are ingested, the reports named in a note
    job = tmp_path / "job"
    for rank in (0, 1):
        (job / f"rank{rank}").mkdir(parents=True)
        shutil.copy(data / "kineto" / "torchrun4_cpu" / f"rank{rank}_iter5_7.json.gz", job / f"rank{rank}")
        (job / f"rank{rank}" / "report.nsys-rep").write_bytes(rep.read_bytes())
    r = run_cli("ingest", "--db", tmp_path / "job.db", "--run", "job", job)
    notes = [line for line in r.stderr.splitlines() if "skipped: " in line]
    assert notes == [f"note: skipped: 2 Nsight Systems reports (e.g. {job / 'rank0' / 'report.nsys-rep'}): profdb reads "
                     f"its SQLite export: run `nsys export --type sqlite -o {job / 'rank0' / 'report'}.sqlite "
                     f"{job / 'rank0' / 'report.nsys-rep'}`, then ingest {job / 'rank0' / 'report'}.sqlite (`nsys profile "
                     "--export=sqlite` writes it as it profiles)"], r.stderr
    assert sql(tmp_path / "job.db", "select count(*) from rank") == [(2,)]
    # an Nsight Systems job, one report exported: that rank is read, the other's report named
    nsys = tmp_path / "nsys"
    for rank in (0, 1):
        (nsys / f"rank{rank}").mkdir(parents=True)
        (nsys / f"rank{rank}" / "report.nsys-rep").write_bytes(rep.read_bytes())
    export = nsys / "rank1" / "report.sqlite"
    shutil.copy(data / "nsys_sqlite" / "saxpy-mpi-cuda_nsys_perlmutter0.sqlite", export)
    r = run_cli("ingest", "--db", tmp_path / "nsys.db", "--run", "nsys", "--rank-from-path", r"rank(\d+)", nsys)
    assert [line for line in r.stderr.splitlines() if "skipped: " in line] == [
        f"note: skipped: an Nsight Systems report ({nsys / 'rank0' / 'report.nsys-rep'}): profdb reads its SQLite "
        f"export: run `nsys export --type sqlite -o {nsys / 'rank0' / 'report'}.sqlite "
        f"{nsys / 'rank0' / 'report.nsys-rep'}`, then ingest {nsys / 'rank0' / 'report'}.sqlite (`nsys profile "
        "--export=sqlite` writes it as it profiles)"], r.stderr
    assert sql(tmp_path / "nsys.db", "select global_rank from rank") == [(1,)]
    _fails(run_cli, tmp_path / "nsys.db", file_bytes(tmp_path / "nsys.db"), nsys / "rank1" / "report.nsys-rep",
           match=f"report.nsys-rep: an Nsight Systems report: profdb does not read it; ingest {export}, beside it")
    # a real export named like a report is read as what it is (the name is looked at only when no reader knows it)
    renamed = tmp_path / "rank3" / "export.nsys-rep"
    renamed.parent.mkdir()
    shutil.copy(data / "nsys_sqlite" / "saxpy-mpi-cuda_nsys_perlmutter0.sqlite", renamed)
    r = run_cli("ingest", "--db", tmp_path / "renamed.db", renamed)
    assert sql(tmp_path / "renamed.db", "select format from source_file") == [("nsys",)]



def test_rocprofv3_statistics_summaries_are_named(tmp_path: Path, data: Path, db_path: Path, run_cli: Invoke,
                                                 seeded: bytes) -> None:
    """rocprofv3 --stats writes <pid>_<domain>_stats.csv beside the traces: per-name totals, no timeline.
    Named as what it is (the real sample's hip_api_stats.csv), with the traces to ingest instead; in a
    folder whose trace of that domain is read, only the usual note."""
    sample = data / "rocprofv3_csv" / "rocm-systems_2025-08"
    _fails(run_cli, db_path, seeded, sample / "hip_api_stats.csv",
           match="hip_api_stats.csv: a rocprofv3 statistics summary: per-name totals without a timeline (rocprofv3 "
           "--stats), which profdb does not read")
    job = tmp_path / "rank0"
    job.mkdir()
    for name in ("kernel_trace.csv", "hip_api_stats.csv"):
        shutil.copy(sample / name, job / name)
    r = run_cli("ingest", "--db", tmp_path / "a.db", "--rank", "0", job)
    assert f"note: skipped: a rocprofv3 statistics summary ({job / 'hip_api_stats.csv'}): " in r.stderr, r.stderr
    shutil.copy(sample / "hip_trace.csv", job / "hip_api_trace.csv")  # (its trace beside it: read, nothing to advise)
    r = run_cli("ingest", "--db", tmp_path / "b.db", "--rank", "0", job)
    assert "statistics summary" not in r.stderr and "not profiler outputs profdb reads, skipped" in r.stderr
    assert sql(tmp_path / "b.db", "select count(*) from activity where kind = 'api'") != [(0,)]

def test_no_store_is_created_on_failure(tmp_path: Path, data: Path, run_cli: Invoke) -> None:
    db = tmp_path / "new.db"
    trunc = tmp_path / "rank0.json.gz"
    trunc.write_bytes((data / "kineto" / "torchrun4_cpu" / "rank0_iter5_7.json.gz").read_bytes()[:-500])
    run_cli("ingest", "--db", db, trunc, ok=False)
    assert not db.exists()


def test_failure_midway_rolls_back(tmp_path: Path, data: Path, db_path: Path, run_cli: Invoke, seeded: bytes) -> None:
    """A file whose header is fine but whose rows break is found while loading: rollback."""
    good = data / "rocprofv3_csv" / "rocm-systems_2025-08" / "kernel_trace.csv"
    bad = tmp_path / "rank0001" / "kernel_trace.csv"
    bad.parent.mkdir()
    text = good.read_text().splitlines()
    bad.write_text("\n".join(text + [text[1].replace(",1550151853029637,", ",notanumber,")]) + "\n")
    ok = tmp_path / "rank0000" / "kernel_trace.csv"
    ok.parent.mkdir()
    shutil.copy(good, ok)
    r = run_cli("ingest", "--db", db_path, "--run", "z", ok, bad, ok=False)
    assert r.exit_code == 1 and "kernel_trace.csv: line" in r.stderr
    assert file_bytes(db_path) == seeded


def test_not_a_profdb_database(tmp_path: Path, data: Path, run_cli: Invoke) -> None:
    import sqlite3

    other = tmp_path / "other.db"
    con = sqlite3.connect(other)
    con.execute("create table customers (id integer)")
    con.commit()
    con.close()
    before = other.read_bytes()
    r = run_cli("ingest", "--db", other, data / "kineto" / "torchrun4_cpu", ok=False)
    assert r.exit_code == 1 and "other.db is not a profdb database (it has tables customers)" in r.stderr
    assert other.read_bytes() == before
    text = tmp_path / "text.db"
    text.write_text("not sqlite")
    r = run_cli("runs", "--db", text, ok=False)
    assert r.exit_code == 1 and "text.db is not a profdb database" in r.stderr


def test_env_var_selects_store(tmp_path: Path, data: Path, run_cli: Invoke, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "env.db"
    monkeypatch.setenv("PROFDB_DB", str(db))
    run_cli("ingest", data / "kineto" / "torchrun4_cpu")
    assert sql(db, "select count(*) from rank") == [(4,)]


def test_formats_lists_readers(run_cli: Invoke) -> None:
    r = run_cli("formats", "--format", "csv")
    assert "rocprof-csv," in r.stdout and "kineto," in r.stdout


def test_table_folds_rank_host_slot_but_csv_keeps_them(tmp_path: Path, db_path: Path, run_cli: Invoke) -> None:
    gen = generate(tmp_path / "out", nodes=2, gpus_per_node=4, calls=3)
    run_cli("ingest", "--db", db_path, "--run", "g", *gen.rank_dirs())
    table = run_cli("query", "--imbalance", "--db", db_path, "--top", "1").stdout
    header = table.splitlines()[0].split()
    assert "slowest" in header and "slowest_host" not in header and "slowest_local_rank" not in header
    assert "5 (node01)" in table  # the planted rank, its host; local rank unknown without a manifest
    csv_out = run_cli("query", "--imbalance", "--db", db_path, "--top", "1", "--format", "csv").stdout
    assert "slowest_rank,slowest_host,slowest_local_rank" in csv_out.splitlines()[0]


def test_long_group_and_collective_names_are_cut_to_their_columns(
    data: Path, tmp_path: Path, run_cli: Invoke
) -> None:
    """A process group name past group_name's 255 characters and a collective name past collective's
    60 (the real nccl_data trace, its NCCL kernels' args edited) are stored cut, in the key's order,
    and the run's analysis reads them (PostgreSQL refuses longer values; SQLite stores them as cut)."""
    import gzip
    import json

    trace = json.loads(gzip.decompress((data / "kineto" / "nccl_data.json.gz").read_bytes()))
    kernels = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel"
               and "Process Group Name" in (e.get("args") or {})]
    assert len(kernels) > 10
    for e in kernels:
        e["args"]["Process Group Name"] = "g" * 300
        e["args"]["Collective name"] = "all_reduce_" + "x" * 70
    f = tmp_path / "in" / "nccl_data.json"
    f.parent.mkdir()
    f.write_text(json.dumps(trace))
    db = tmp_path / "s.db"
    run_cli("ingest", "--db", db, f)
    rows = sql(db, "select group_name, collective, seq from collective_call where family = 'kernel' order by rowid")
    assert len(rows) == len(kernels)
    assert {(len(g), len(c)) for g, c, _ in rows} == {(255, 60)}
    assert [s for _, _, s in rows] == list(range(len(kernels)))


def test_the_progress_bar_on_a_terminal_is_redrawn_at_most_every_tenth_of_a_second(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The writer calls the bar once a file; 2,000 files done at once are a few redraws, not 2,000
    (each a write to the terminal from the process every row goes through), and the last file is
    always drawn: the bar ends full, then says the run is being analysed."""
    import io
    import time

    from profdb.cli import ingest as cli_ingest

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    term = Terminal()
    monkeypatch.setattr(cli_ingest.sys, "stderr", term)
    bar = cli_ingest._Bar()
    files, size = 2000, 1000
    t0 = time.monotonic()
    bar("start", "", 0, files * size)
    for i in range(1, files + 1):
        bar("file", f"rank{i}/trace{i}.json", i * size, files * size)
    took = time.monotonic() - t0
    bar("analysis", "job", files * size, files * size)
    bar.close()
    out = term.getvalue()
    drawn = out.count("trace")  # (each redraw shows the file just done, by its name)
    assert 1 <= drawn <= 2 + took / bar.EVERY_S, (drawn, took)
    assert f"trace{files}.json" in out and "100%" in out
    assert "analysing run job" in out


def test_the_terminal_shows_phase_ones_hashing_then_the_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    """While phase 1 waits for large files' hashes ("hash" events: every byte is read, ~10 s for 5 GB not
    in the page cache, before anything was shown), the terminal has a hashing bar; it ends full when the
    parse's bar begins."""
    import io

    from profdb.cli import ingest as cli_ingest

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    term = Terminal()
    monkeypatch.setattr(cli_ingest.sys, "stderr", term)
    monkeypatch.setattr(cli_ingest._Bar, "EVERY_S", 0.0)
    bar = cli_ingest._Bar()
    bar("hash", "rank0/big_kernel_trace.csv", 0, 4000)
    bar("hash", "rank1/big_kernel_trace.csv", 1000, 4000)
    hashing = term.getvalue()
    bar("start", "", 0, 8000)
    bar("file", "rank0/big_kernel_trace.csv", 4000, 8000)
    bar.close()
    out = term.getvalue()
    assert "hashing inputs" in hashing and "hashing big_kernel_trace.csv" in hashing and "25%" in hashing
    after = out[len(hashing):]
    assert "100%" in after.split("ingesting")[0]  # (the hashing bar ends full)
    assert "ingesting" in after and "50%" in after


def test_phase_one_says_how_the_hashing_goes_while_it_waits(
    tmp_path: Path, data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file hashed on a thread (at least INLINE_HASH_BYTES) and not hashed yet when phase 1 needs its
    digest: "hash" events, the bytes hashed growing to the file's size, before the ingest's "start"; the
    digest is the file's own. (The hashing thread is slowed here so that phase 1 waits for it.)"""
    import time

    from profdb.store import ingest, inputs

    src = (data / "rocprofv3_csv" / "rocm-systems_2025-08" / "kernel_trace.csv").read_text().splitlines()
    big = tmp_path / "rank0000" / "host" / "1234_kernel_trace.csv"
    big.parent.mkdir(parents=True)
    body = src[1:] * (3 * inputs.INLINE_HASH_BYTES // len("\n".join(src[1:])) + 1)
    big.write_text("\n".join([src[0], *body]) + "\n")
    real = inputs.digest_of

    def slow(path: Path, algorithm: str = inputs.ALGORITHM, hashed: list[int] | None = None) -> str:
        with open(path, "rb") as f:
            while chunk := f.read(1 << 19):
                time.sleep(0.15)
                if hashed is not None:
                    hashed[0] += len(chunk)
        return real(path, algorithm)

    monkeypatch.setattr(inputs, "digest_of", slow)
    events: list[tuple[str, str, int, int]] = []
    ingest.ingest_paths([big], str(tmp_path / "h.db"), run="h", progress=lambda *e: events.append(e))
    kinds = [e[0] for e in events]
    hashes = [e for e in events[: kinds.index("start")] if e[0] == "hash"]
    size = big.stat().st_size
    assert len(hashes) >= 3 and all(e[1] == str(big) and e[3] == size for e in hashes), hashes
    done = [e[2] for e in hashes]
    assert done == sorted(done) and done[-1] <= size and len(set(done)) >= 2, done
    assert "hash" not in kinds[kinds.index("start"):]
    assert sql(tmp_path / "h.db", "select content_hash from source_file") == [(real(big),)]
    counted = [0]
    assert real(big, inputs.ALGORITHM, counted) == real(big) and counted == [size]  # (the real one counts too)
