"""What a ``profdb query`` process imports (issue 15: the whole process under 0.3 s on a 10M-row store,
most of which was imports): not numpy, pyarrow, the readers, the ingest code, matplotlib or the other
subcommands. Checked in a fresh interpreter (``sys.modules`` after the command), so an import added at
the top of a module on the query's path shows here."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import tempfile
import sys
from pathlib import Path
from typing import Any

import pytest

DATA = Path(__file__).parent / "data"

#: modules (and packages) a query must not load
HEAVY = ("numpy", "pyarrow", "matplotlib", "pandas", "profdb.store.readers", "profdb.store.ingest",
         "profdb.store.ingest_workers", "profdb.store.columnar", "profdb.store.report", "profdb.store.record",
         "profdb.store.transfer", "profdb.store.compare", "profdb.cli.ingest", "profdb.cli.report",
         "profdb.cli.record", "profdb.cli.compare", "profdb.cli.transfer", "profdb.cli.timeline",
         "profdb.cli.browse",
         # a SQLite store's query needs only SQLAlchemy's SQLite dialect (an Index with a postgresql_*
         # option in the models imported the PostgreSQL one, ~50 ms)
         "sqlalchemy.dialects.postgresql")

_PROBE = """
import json, sys
from click.testing import CliRunner
from profdb.cli.main import cli
r = CliRunner().invoke(cli, sys.argv[1:], catch_exceptions=False)
print(json.dumps({"exit": r.exit_code, "out": r.stdout, "err": r.stderr, "modules": sorted(sys.modules)}))
"""


def probe(*args: str) -> dict[str, Any]:
    """``profdb ARGS`` run in a fresh interpreter: exit status, stdout, stderr and the modules loaded."""
    p = subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, check=True)
    got: dict[str, Any] = json.loads(p.stdout.splitlines()[-1])
    return got


def loaded_by(*args: str) -> tuple[int, set[str]]:
    """(exit status, the heavy modules loaded) of ``profdb ARGS`` run in a fresh interpreter."""
    got = probe(*args)
    heavy = {m for m in got["modules"] if any(m == h or m.startswith(h + ".") for h in HEAVY)}
    return int(got["exit"]), heavy


def test_importing_the_query_command_loads_nothing_heavy() -> None:
    code = "import sys, profdb, profdb.cli.main, profdb.cli.query; print(' '.join(sorted(sys.modules)))"
    mods = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              check=True).stdout.split())
    assert not {m for m in mods if any(m == h or m.startswith(h + ".") for h in HEAVY)}
    assert "profdb.cli.query" in mods  # the probe is real: the module was imported
    # `import profdb` alone (the package every profdb import runs first) loads no SQLAlchemy
    code = "import sys, profdb; print(' '.join(sorted(sys.modules)))"
    mods = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split())
    assert "sqlalchemy" not in mods and "profdb.store.queries" not in mods


@pytest.fixture(scope="module")
def dlrm_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import tarfile

    from click.testing import CliRunner

    from profdb.cli.main import cli

    tmp = tmp_path_factory.mktemp("dlrm")
    with tarfile.open(DATA / "kineto/dlrm_8rank/dlrm_kineto.tar.gz") as tar:
        tar.extractall(tmp, filter="data")
    db = tmp / "s.db"
    files = [str(p) for p in sorted((tmp / "dlrm_kineto").glob("worker*.json"))]
    r = CliRunner().invoke(cli, ["ingest", "--db", str(db), "--run", "dlrm", *files], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return db


@pytest.mark.parametrize("question", ["--imbalance", "--stragglers", "--steps", "--ranks", "--hotspots"])
def test_query_process_loads_nothing_heavy(question: str, dlrm_store: Path) -> None:
    """The questions answered on a real store (the 8-rank DLRM job's kept analysis, no numpy for it)."""
    status, heavy = loaded_by("query", question, "--db", str(dlrm_store), "--format", "csv")
    assert status == 0 and not heavy, heavy
    status, heavy = loaded_by("query", "--help")
    assert status == 0 and not heavy, heavy
    # and the probe sees an import when there is one: ingest loads the readers
    status, heavy = loaded_by("formats")
    assert status == 0 and "profdb.store.readers" in heavy


#: (question, whether it gives the run's verdict, which needs the analysis)
QUESTIONS = [("--imbalance", True), ("--imbalance --by host", False), ("--stragglers", True), ("--steps", True),
             ("--ranks", True), ("--hotspots --inclusive", False)]


@pytest.mark.parametrize(("question", "verdict"), QUESTIONS)
def test_sqlite_question_reads_kept_rows_without_sqlalchemy(
    question: str, verdict: bool, dlrm_store: Path, tmp_path: Path
) -> None:
    """A question on an SQLite store whose analysis is kept reads it with the sqlite3 module alone
    (db.open_raw_sqlite): importing SQLAlchemy was ~0.25 s of the query process (issue 15). Without
    the kept rows (stale), the question computes the analysis through SQLAlchemy, on the same
    snapshot, and answers the same, byte for byte."""
    kept = probe("query", *question.split(), "--db", str(dlrm_store), "--format", "csv")
    assert kept["exit"] == 0, kept["err"]
    assert "sqlalchemy" not in kept["modules"] and "profdb.store.models" not in kept["modules"]
    assert "profdb.store.queries" in kept["modules"]  # the probe is real: the question ran
    stale = tmp_path / "stale.db"
    shutil.copy(dlrm_store, stale)
    with sqlite3.connect(stale) as con:
        con.executescript("delete from step_analysis; delete from rank_analysis; delete from run_analysis;")
    con.close()
    computed = probe("query", *question.split(), "--db", str(stale), "--format", "csv")
    # it analysed the run's timelines for the verdict
    assert ("sqlalchemy" in computed["modules"]) == verdict
    assert (computed["exit"], computed["out"], computed["err"]) == (kept["exit"], kept["out"], kept["err"])
    assert kept["out"].count("\n") >= 2  # a header and rows


def test_sql_reads_a_sqlite_store_without_sqlalchemy(dlrm_store: Path) -> None:
    """``profdb sql`` (read-only, the default) on an SQLite file runs through sqlite3 alone too, with
    SQLAlchemy's column names and messages; ``--write`` still goes through SQLAlchemy."""
    got = probe("sql", "select name, world_size from run", "--db", str(dlrm_store), "--format", "csv")
    assert (got["exit"], got["out"]) == (0, "name,world_size\ndlrm,8\n")
    assert "sqlalchemy" not in got["modules"]
    got = probe("sql", "delete from run", "--db", str(dlrm_store))
    assert got["exit"] == 1 and "opened read-only by this command" in got["err"] and "--write" in got["err"]
    assert "sqlalchemy" not in got["modules"]


def test_ingest_loads_numpy_and_pyarrow_only_for_what_it_reads_as_columns(tmp_path: Path) -> None:
    """numpy and pyarrow (~0.1-0.2 s of start-up in each worker) are loaded by an ingest that reads
    rocprofv3 kernel or counter CSV as columns, not by the ingest of any other format; pyarrow's
    compute functions (~75 ms more) only when a column has an odd cell."""
    examples = Path(__file__).parent.parent / "examples"
    kineto = sorted(str(p) for p in (examples / "torchrun4_cpu").glob("rank*.json.gz"))
    got = probe("ingest", "--db", str(tmp_path / "k.db"), "--run", "k", *kineto)
    assert got["exit"] == 0, got["err"]
    assert "profdb.store.readers.kineto_json" in got["modules"]  # the probe is real: it read them
    assert not {m for m in got["modules"] if m.split(".")[0] in ("numpy", "pyarrow")}
    csv = examples / "rocprof-8ranks" / "rank0000" / "node00" / "1000_kernel_trace.csv"
    got = probe("ingest", "--db", str(tmp_path / "c.db"), "--run", "c", "--rank", "0", str(csv))
    assert got["exit"] == 0, got["err"]
    assert {"numpy", "pyarrow.csv", "profdb.store.ingest_columns"} <= set(got["modules"])
    assert "pyarrow.compute" not in got["modules"]
    first, second, rest = csv.read_text().split("\n", 2)
    # (an integer written as a float, "1.0", in the first row's last column: the column is then
    # converted by pyarrow's compute functions)
    odd = tmp_path / "odd" / "1000_kernel_trace.csv"
    odd.parent.mkdir()
    odd.write_text("\n".join([first, second.rsplit(",", 1)[0] + ',"1.0"', rest]))
    got = probe("ingest", "--db", str(tmp_path / "o.db"), "--run", "o", "--rank", "0", str(odd))
    assert got["exit"] == 0, got["err"]
    assert "pyarrow.compute" in got["modules"]


_SCAN_PROBE = """
import json, sys
from click.testing import CliRunner
from profdb.store import inputs
seen = []
init = inputs.Scan.__init__
def recording(self, *a, **k):
    seen.append(sorted(m for m in ("sqlalchemy", "numpy", "pyarrow", "profdb.store.ingest") if m in sys.modules))
    init(self, *a, **k)
inputs.Scan.__init__ = recording
from profdb.cli.main import cli
r = CliRunner().invoke(cli, sys.argv[1:], catch_exceptions=False)
print(json.dumps({"exit": r.exit_code, "err": r.stderr, "seen": seen, "modules": sorted(sys.modules)}))
"""


def test_ingest_begins_hashing_its_inputs_before_importing_the_store() -> None:
    """``profdb ingest`` looks through its inputs and starts hashing them (``inputs.Scan``) before it
    imports SQLAlchemy, numpy, pyarrow and the ingest code, so the hashes are computed on the other
    core while those imports run; importing the ingest command loads none of them."""
    code = "import sys, profdb.cli.main, profdb.cli.ingest; print(' '.join(sorted(sys.modules)))"
    mods = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              check=True).stdout.split())
    assert "profdb.cli.ingest" in mods and "profdb.store.inputs" in mods
    assert not {m for m in mods if m.split(".")[0] in ("sqlalchemy", "numpy", "pyarrow")}
    assert "profdb.store.ingest" not in mods
    examples = Path(__file__).parent.parent / "examples"
    csv = examples / "rocprof-8ranks" / "rank0000" / "node00" / "1000_kernel_trace.csv"
    with tempfile.TemporaryDirectory() as tmp:
        p = subprocess.run([sys.executable, "-c", _SCAN_PROBE, "ingest", "--db", f"{tmp}/s.db", "--rank", "0",
                            str(csv)], capture_output=True, text=True, check=True)
    got = json.loads(p.stdout.splitlines()[-1])
    assert got["exit"] == 0, got["err"]
    assert got["seen"] == [[]]  # one scan, before any of them was imported
    assert {"sqlalchemy", "pyarrow", "profdb.store.ingest"} <= set(got["modules"])  # (then they were)


def test_a_scan_gives_what_looking_through_the_paths_gives(tmp_path: Path) -> None:
    """``prepare`` over a ``Scan`` begun earlier gives the files, hashes, identities and plan that
    ``prepare`` over the paths gives; its hashing threads are finished when it returns (the ingest's
    workers fork after it), and a scan left unused stops them too."""
    import blake3
    import threading

    from profdb.store import inputs
    from profdb.store.identity import IdentityFlags

    run = Path(__file__).parent.parent / "examples" / "rocprof-8ranks"
    before = threading.active_count()
    direct = inputs.prepare([run], IdentityFlags())
    with inputs.Scan([run]) as scan:
        assert len(scan.files) == len(scan.hashes) > 8
        scanned = inputs.prepare(scan, IdentityFlags())
        assert threading.active_count() == before
    assert [(i.path, i.digest, i.claim) for i in scanned[0]] == [(i.path, i.digest, i.claim) for i in direct[0]]
    assert scanned[1:] == direct[1:]
    assert all(i.digest == "blake3:" + blake3.blake3(i.path.read_bytes()).hexdigest()[:56] for i in scanned[0])
    with inputs.Scan([run]):
        pass
    assert threading.active_count() == before


def test_a_scan_hashes_small_files_itself_and_large_ones_on_its_threads(tmp_path: Path) -> None:
    """``Scan`` hashes a file of at most ``INLINE_HASH_BYTES`` on the calling thread as it finds it
    (from the bytes its readability check read, the whole file, when they are not gzip's: a gzip file
    is read again), a larger one on a hashing thread; every digest is the BLAKE3 of the file's own
    bytes."""
    import gzip
    import blake3
    import threading
    from itertools import cycle

    from profdb.store import inputs
    from profdb.store.readers.base import HEAD_READ

    src = Path(__file__).parent.parent / "examples" / "rocprof-8ranks" / "rank0000" / "node00" / "1000_kernel_trace.csv"
    header, *rows = src.read_bytes().splitlines(keepends=True)

    def trace(rank: int, size: int, gz: bool = False) -> Path:
        """A kernel trace of at least ``size`` bytes (whole rows)."""
        parts, n = [header], len(header)
        for row in cycle(rows):
            if n >= size:
                break
            parts.append(row)
            n += len(row)
        data = b"".join(parts)
        folder = tmp_path / f"rank{rank:04d}"
        folder.mkdir()
        path = folder / ("1000_kernel_trace.csv" + (".gz" if gz else ""))
        path.write_bytes(gzip.compress(data) if gz else data)
        return path

    small, middle, large = trace(0, HEAD_READ // 2), trace(1, HEAD_READ * 4), trace(2, inputs.INLINE_HASH_BYTES)
    packed = trace(3, HEAD_READ // 2, gz=True)
    assert small.stat().st_size < HEAD_READ < middle.stat().st_size < inputs.INLINE_HASH_BYTES < large.stat().st_size
    hashed: dict[Path, bool] = {}  # path -> hashed on the calling thread
    plain = inputs.digest_of

    def recording(path: Path, algorithm: str = inputs.ALGORITHM, counted: list[int] | None = None) -> str:
        hashed[path] = threading.current_thread() is threading.main_thread()
        return plain(path, algorithm, counted)

    inputs.digest_of = recording  # type: ignore[assignment]
    try:
        with inputs.Scan([tmp_path]) as scan:
            # (known at once, or a future: the large file's)
            got = {path: h if isinstance(h, str) else h.result() for (path, _reader), h in zip(scan.files, scan.hashes)}
            assert [p for (p, _reader), h in zip(scan.files, scan.hashes) if not isinstance(h, str)] == [large]
    finally:
        inputs.digest_of = plain  # type: ignore[assignment]
    assert got == {p: "blake3:" + blake3.blake3(p.read_bytes()).hexdigest()[:56] for p in (small, middle, large, packed)}
    # (small and middle: from the bytes read to check them, no second read)
    assert hashed == {packed: True, large: False}


def test_a_hash_that_fails_raises_where_prepare_takes_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file hashed at once by ``Scan`` (from the bytes its check read, or read again: a gzip file)
    whose hashing fails (e.g. the file went away meanwhile) raises that error in ``prepare``, where the
    digest is taken, in the files' order, as a hashing thread's error would."""
    import gzip

    from profdb.store import inputs
    from profdb.store.identity import IdentityFlags

    src = Path(__file__).parent.parent / "examples" / "rocprof-8ranks" / "rank0000" / "node00" / "1000_kernel_trace.csv"
    for rank, gz in ((0, False), (1, True)):
        folder = tmp_path / f"rank{rank:04d}"
        folder.mkdir()
        data = src.read_bytes()
        (folder / ("1000_kernel_trace.csv" + (".gz" if gz else ""))).write_bytes(gzip.compress(data) if gz else data)
    for name in ("digest_of_bytes", "digest_of"):
        def failing(*a: object, _name: str = name) -> str:
            raise OSError(f"{_name}: gone")

        with monkeypatch.context() as m:
            m.setattr(inputs, name, failing)
            scan = inputs.Scan([tmp_path])
            with pytest.raises(OSError, match=f"{name}: gone"):
                inputs.prepare(scan, IdentityFlags())


_EXIT_PROBE = """
import atexit, gc, os, sys
from profdb.cli import main as cli_main
# (registered first, so it runs last: after the command, its freeze and every exit handler of profdb's)
atexit.register(lambda: os.write(1, f"frozen {gc.get_freeze_count()}\\n".encode()))
sys.argv = ["profdb", *sys.argv[1:]]
cli_main.main()
"""


@pytest.mark.parametrize("fails", [False, True], ids=["ingest", "failed-ingest"])
def test_a_command_leaves_its_objects_to_the_exit_and_closes_the_store_itself(tmp_path: Path, fails: bool) -> None:
    """``main`` freezes what the command made (``gc.freeze``) so that the interpreter's collections at
    exit do not walk it (~0.07 s after an ingest), after a failure too; exit handlers still run, and
    the store is whole and closed by the command, not by those collections: no journal or WAL left
    beside it, every row of the run there (or, after a failure, the store as it was)."""
    examples = Path(__file__).parent.parent / "examples"
    kineto = sorted(str(p) for p in (examples / "torchrun4_cpu").glob("rank*.json.gz"))
    db = tmp_path / "k.db"
    if fails:
        first = subprocess.run([sys.executable, "-c", _EXIT_PROBE, "ingest", "--db", str(db), "--run", "a",
                                kineto[0]], capture_output=True, text=True)
        assert first.returncode == 0, first.stderr
        before = db.read_bytes()
        bad = tmp_path / "rank9.json"
        bad.write_text('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": -5}]}')
        paths = [str(bad)]
    else:
        paths = kineto
    p = subprocess.run([sys.executable, "-c", _EXIT_PROBE, "ingest", "--db", str(db), "--run", "k", *paths],
                       capture_output=True, text=True)
    frozen = [line for line in p.stdout.splitlines() if line.startswith("frozen ")]
    assert len(frozen) == 1 and int(frozen[0].split()[1]) > 10_000, p.stdout  # (the exit handler ran last)
    assert sorted(x.name for x in tmp_path.iterdir() if x.name.startswith("k.db")) == ["k.db"]
    if fails:
        assert p.returncode == 1 and "negative duration" in p.stderr, p.stderr
        assert db.read_bytes() == before
        return
    assert p.returncode == 0, p.stderr
    con = sqlite3.connect(db)
    try:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert con.execute("SELECT count(*) FROM rank JOIN run ON run.id = rank.run_id WHERE run.name = 'k'"
                           ).fetchone()[0] == len(kineto)
    finally:
        con.close()
