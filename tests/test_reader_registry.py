"""The reader registry: every format registered, and each input recognised by exactly one reader,
by content (SQLite tables, JSON/CSV head), whatever its name."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from fixtures_metrix import rank_block, sample_stats, write_csv, write_json
from fixtures_rocpd import sample_process, write_rocpd

from profdb.store import readers

DATA = Path(__file__).parent / "data"

SAMPLES = {
    "rocprof_json/908_results.json.gz": "rocprof-json",
    "legacy_rpd/matmul_result.rpd": "rpd",
    "legacy_rpd/mytrace.rpd.gz": "rpd",
    "nsys_sqlite/perlmutter-cloverleaf-cuda.sqlite": "nsys",
    "nsys_sqlite/saxpy-mpi-cuda_nsys_perlmutter0.sqlite": "nsys",
}


def test_all_formats_registered() -> None:
    names = [n for n, _ in readers.formats()]
    assert {"rocpd", "rpd", "nsys", "rocprof-json", "metrix", "rocprof-csv", "kineto"} <= set(names)
    assert len(names) == len(set(names))
    # SQLite formats are detected before any name-based guess
    assert names.index("rocpd") < names.index("rocprof-csv") and names.index("nsys") < names.index("kineto")


@pytest.mark.parametrize(("rel", "fmt"), sorted(SAMPLES.items()))
def test_each_sample_is_claimed_by_one_reader(rel: str, fmt: str) -> None:
    path = DATA / rel
    claims = [r.NAME for r in readers.READERS if r.detect(path)]
    assert claims == [fmt]


@pytest.mark.parametrize(("rel", "fmt"), sorted(SAMPLES.items()))
def test_detection_ignores_the_file_name(rel: str, fmt: str, tmp_path: Path) -> None:
    renamed = tmp_path / ("input.gz" if rel.endswith(".gz") else "input.bin")
    shutil.copyfile(DATA / rel, renamed)
    reader = readers.detect(renamed)
    assert reader is not None and reader.NAME == fmt


def test_generated_inputs_are_claimed_by_one_reader(tmp_path: Path) -> None:
    rocpd = write_rocpd(tmp_path / "7_results.db", [sample_process(7, {"RANK": "0"}, n=3)])
    mj = write_json(tmp_path / "results.json", sample_stats(0), rank_block(0, 1, "h"))
    mc = write_csv(tmp_path / "results.csv", sample_stats(0), {0: (0, 1, "h")})
    for path, fmt in ((rocpd, "rocpd"), (mj, "metrix"), (mc, "metrix")):
        assert [r.NAME for r in readers.READERS if r.detect(path)] == [fmt]
