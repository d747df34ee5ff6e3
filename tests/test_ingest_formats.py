"""Every format through `profdb ingest` into one store, read back with sqlite3; mixed formats per rank;
merged multi-rank files split into their ranks."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from conftest import Invoke, sql
from fixtures_metrix import rank_block, sample_stats, write_json
from fixtures_rocpd import sample_process, write_rocpd


def _nsys_kernels(path: Path) -> tuple[int, int]:
    con = sqlite3.connect(path)
    try:
        return con.execute('select count(*), sum("end" - start) from CUPTI_ACTIVITY_KIND_KERNEL').fetchone()
    finally:
        con.close()


@pytest.mark.parametrize(
    "name, args, rank, host",
    [
        ("perlmutter-cloverleaf-cuda.sqlite", [], 0, "nid008553"),
        ("saxpy-mpi-cuda_nsys_perlmutter0.sqlite", ["--rank-from-path", r"perlmutter(\d+)\.sqlite"], 0, "nid001608"),
    ],
)
def test_nsys_samples(data: Path, db_path: Path, run_cli: Invoke, name: str, args: list[str], rank: int, host: str) -> None:
    path = data / "nsys_sqlite" / name
    run_cli("ingest", "--db", db_path, "--run", "n", *args, path)
    n, total = _nsys_kernels(path)
    assert sql(db_path, "select count(*), sum(duration_ns) from activity_v where kind = 'kernel'") == [(n, total)]
    assert sql(db_path, "select global_rank, hostname from rank_v") == [(rank, host)]


def test_rocprof_json_sample(data: Path, db_path: Path, run_cli: Invoke) -> None:
    path = data / "rocprof_json" / "908_results.json.gz"
    r = run_cli("ingest", "--db", db_path, "--run", "j", "--rank", 0, path)
    assert "kernel 43,915" in r.output
    assert sql(db_path, "select hostname, pid from rank_v") == [("smci350-zts-gtu-c6-25", 908)]


def test_legacy_rpd_samples(data: Path, db_path: Path, run_cli: Invoke) -> None:
    for i, name in enumerate(("matmul_result.rpd", "mytrace.rpd.gz")):
        run_cli("ingest", "--db", db_path, "--run", f"rpd{i}", "--rank", 0, data / "legacy_rpd" / name)
    got = dict(sql(db_path, "select run, count(*) from activity_v group by run"))
    assert got["rpd0"] > 0 and got["rpd1"] > 0


def test_mixed_formats_for_one_rank(tmp_path: Path, data: Path, db_path: Path, run_cli: Invoke) -> None:
    """A rocpd .db and a Kineto trace from the same rank land under that rank as two sources."""
    rank_dir = tmp_path / "job" / "rank0001"
    rank_dir.mkdir(parents=True)
    write_rocpd(rank_dir / "4242_results.db", [sample_process(4242, {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "4"}, "vm")])
    shutil.copy(data / "kineto" / "torchrun4_cpu" / "rank1_iter5_7.json.gz", rank_dir / "trace.json.gz")
    run_cli("ingest", "--db", db_path, "--run", "mixed", rank_dir)
    assert sql(db_path, "select global_rank, local_rank, hostname, sources from rank_v") == [(1, 1, "vm", 2)]
    assert sorted(f for (f,) in sql(db_path, "select format from source_v")) == ["kineto", "rocpd"]


def test_merged_metrix_file_splits_into_ranks(tmp_path: Path, db_path: Path, run_cli: Invoke) -> None:
    stats = [s for r in range(4) for s in sample_stats(r, slow=3.0 if r == 2 else 1.0)]
    path = write_json(tmp_path / "results.json", stats, rank_block(0, 1, "node07"))
    run_cli("ingest", "--db", db_path, "--run", "mx", path)
    assert [g for (g,) in sql(db_path, "select global_rank from rank_v order by 1")] == [0, 1, 2, 3]
    totals = dict(sql(db_path, "select global_rank, sum(total_ns) from summary_v group by 1"))
    assert totals[2] == pytest.approx(3 * totals[0], rel=1e-6)
    r = run_cli("ingest", "--db", db_path, "--run", "mx2", "--rank", 0, path, ok=False)
    assert r.exit_code == 1 and "holds 4 ranks" in r.stderr


def test_metrix_rank_suffixed_files(tmp_path: Path, db_path: Path, run_cli: Invoke) -> None:
    for r in range(2):
        write_json(tmp_path / f"results.rank{r:04d}.json", sample_stats(None), rank_block(r, 2, f"h{r}", local_rank=r))
    run_cli("ingest", "--db", db_path, "--run", "m", tmp_path)
    assert sql(db_path, "select global_rank, local_rank, hostname from rank_v order by 1") == [(0, 0, "h0"), (1, 1, "h1")]
    assert sql(db_path, "select count(*) > 0 from counter_v") == [(1,)]
