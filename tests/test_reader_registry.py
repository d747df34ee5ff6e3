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


def test_remembered_heads_answer_as_the_file_would(tmp_path: Path) -> None:
    """While heads are remembered (``base.remembered_heads``, ingest's phase 1), ``head`` gives the
    bytes it gives without: any size, shorter and longer than one read, plain and gzip, and a file
    shorter than the size asked; outside, nothing is remembered (a rewritten file reads anew)."""
    import gzip

    from profdb.store.readers import base

    big = tmp_path / "big.bin"
    big.write_bytes(bytes(range(256)) * 5000)  # 1.28 MB: longer than one remembered read
    small = tmp_path / "small.csv"
    small.write_bytes(b"a,b\n1,2\n")
    packed = tmp_path / "packed.gz"
    packed.write_bytes(gzip.compress(bytes(range(256)) * 600))
    sizes = [1, 100, 8192, base.HEAD_READ, base.HEAD_READ + 1, 1 << 20, 2 << 20, 16]
    want = {(p, n): base.head(p, n) for p in (big, small, packed) for n in sizes}
    assert len(want[(big, 1 << 20)]) == 1 << 20 and want[(small, 100)] == b"a,b\n1,2\n"
    with base.remembered_heads():
        for _ in range(2):
            for p in (big, small, packed):
                for n in sizes:
                    assert base.head(p, n) == want[(p, n)], (p.name, n)
    small.write_bytes(b"x,y\n3,4\n")
    assert base.head(small, 100) == b"x,y\n3,4\n"


def test_detecting_a_file_reads_its_head_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Phase 1 asks every reader whether it knows each file: with heads remembered, each file is
    opened for its head at most twice (detection, then inspection), not once per reader asked."""
    from profdb.store import inputs
    from profdb.store.identity import IdentityFlags
    from profdb.store.readers import base

    src = DATA / "rocprofv3_csv" / "rocm-systems_2025-08" / "kernel_trace.csv"
    for r in range(6):
        d = tmp_path / "run" / f"rank{r:04d}"
        d.mkdir(parents=True)
        shutil.copy(src, d / "kernel_trace.csv")
    opened: list[str] = []
    real = base.open_binary

    def counting(path: Path) -> object:
        opened.append(str(path))
        return real(path)

    monkeypatch.setattr(base, "open_binary", counting)
    files, _unknown, plan = inputs.prepare([tmp_path / "run"], IdentityFlags())
    assert len(files) == 6 and sorted(plan.ranks) == list(range(6))
    per_file = {p: opened.count(p) for p in set(opened)}
    assert len(per_file) == 6 and max(per_file.values()) <= 2, per_file
