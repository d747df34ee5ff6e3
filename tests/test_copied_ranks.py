"""One process's profile stored for two ranks (a file copied into the wrong rank folder): the ingest and
every question say so, naming the files, since every cross-rank figure then counts that process's work
twice. Inputs: the real rocprofv3 CSV sample (2025 layout) and the real torchrun4_cpu traces."""

from __future__ import annotations

import shutil
from pathlib import Path

from conftest import Invoke
from fixtures_metrix import rank_block, sample_stats, write_json

CSV = Path(__file__).parent / "data" / "rocprofv3_csv" / "rocm-systems_2025-08" / "kernel_trace.csv"
KINETO = Path(__file__).parent / "data" / "kineto" / "torchrun4_cpu"


def _rank_folders(root: Path, content: dict[int, Path]) -> list[Path]:
    """rank<NNNN>/1234_kernel_trace.csv with ``content[rank]`` copied in."""
    out = []
    for rank, src in content.items():
        folder = root / f"rank{rank:04d}"
        folder.mkdir(parents=True)
        shutil.copy(src, folder / "1234_kernel_trace.csv")
        out.append(folder)
    return out


def test_a_copied_file_is_named_by_the_ingest_and_the_questions(tmp_path: Path, db_path: Path,
                                                                run_cli: Invoke) -> None:
    folders = _rank_folders(tmp_path / "job", {0: CSV, 1: CSV})
    r = run_cli("ingest", "--db", db_path, "--run", "job", *folders)
    a, b = (f / "1234_kernel_trace.csv" for f in folders)
    said = f"run 'job' stores byte-identical files for different ranks (ranks 0, 1: {a} and {b})"
    assert f"note: {said}" in r.output, r.output
    for question in ("--imbalance", "--hotspots"):
        q = run_cli("query", "--db", db_path, "--run", "job", question)
        assert said in q.stderr and "count its work twice" in q.stderr, q.stderr


def test_a_copy_ingested_later_is_named_too(tmp_path: Path, db_path: Path, run_cli: Invoke) -> None:
    """The copy meets the file stored by an earlier ingest of the run."""
    first, second = _rank_folders(tmp_path / "a", {0: CSV}) + _rank_folders(tmp_path / "b", {1: CSV})
    r = run_cli("ingest", "--db", db_path, "--run", "job", first)
    assert "byte-identical" not in r.output
    r = run_cli("ingest", "--db", db_path, "--run", "job", second)
    assert "ranks 0, 1: " in r.output and str(second / "1234_kernel_trace.csv") in r.output, r.output


def test_distinct_profiles_header_only_copies_and_rank_sections_are_not_copies(
    tmp_path: Path, db_path: Path, run_cli: Invoke
) -> None:
    """Four real ranks; two header-only kernel traces (a rank that ran no kernel: alike by nature, and no
    rows); one merged Metrix file of two ranks' sections (one path, several ranks)."""
    r = run_cli("ingest", "--db", db_path, "--run", "real", KINETO)
    header = tmp_path / "header.csv"
    header.write_text(CSV.read_text().splitlines()[0] + "\n")
    r2 = run_cli("ingest", "--db", db_path, "--run", "empty", *_rank_folders(tmp_path / "e", {0: header, 1: header}))
    (tmp_path / "m").mkdir()
    merged = write_json(tmp_path / "m" / "results.json", sample_stats(0) + sample_stats(1, slow=1.5),
                        rank_block(0, 2, "h"))
    r3 = run_cli("ingest", "--db", db_path, "--run", "merged", merged)
    assert "ranks: 2" in r3.output, r3.output
    for out in (r.output, r2.output, r3.output):
        assert "byte-identical" not in out, out
    for run in ("real", "merged"):
        assert "byte-identical" not in run_cli("query", "--db", db_path, "--run", run, "--imbalance").stderr
