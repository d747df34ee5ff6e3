"""Legacy RPD reader (rpd_tracer / rocm-trace-lite): the two real samples (plain and gzipped), a
rocm-trace-lite style file, and damaged inputs. Expected values come from plain sqlite3 queries."""

from __future__ import annotations

import gzip
import hashlib
import sqlite3
import tempfile
from collections import Counter as Tally
from pathlib import Path

import pytest

from profdb.store import readers
from profdb.store.errors import InputError
from profdb.store.readers import rpd_sqlite
from profdb.store.records import Activity

DATA = Path(__file__).parent / "data" / "legacy_rpd"
MATMUL = DATA / "matmul_result.rpd"
MYTRACE = DATA / "mytrace.rpd.gz"


def _plain(path: Path, tmp_path: Path) -> Path:
    """The database itself (a .gz is decompressed here, independently of the reader)."""
    if path.suffix != ".gz":
        return path
    out = tmp_path / path.stem
    out.write_bytes(gzip.decompress(path.read_bytes()))
    return out


def _expected(db: Path) -> dict[str, tuple[int, int, set[str]]]:
    """kind -> (rows, total duration, distinct names), computed with SQL from the RPD tables."""
    rows: list[tuple[str, str, int]] = []  # kind, name, duration
    conn = sqlite3.connect(db)
    q = (
        "SELECT t.string, d.string, o.end - o.start FROM rocpd_op o "
        "JOIN rocpd_string t ON t.id = o.opType_id JOIN rocpd_string d ON d.id = o.description_id"
    )
    for optype, desc, dur in conn.execute(q):
        if optype in ("KernelExecution", "Task"):
            rows.append(("kernel", desc, dur))
        elif optype.startswith("Copy"):
            rows.append(("memcpy", optype, dur))
        elif optype == "FillBuffer":
            rows.append(("memset", optype, dur))
    q = (
        "SELECT n.string, g.string, a.end - a.start FROM rocpd_api a "
        "JOIN rocpd_string n ON n.id = a.apiName_id JOIN rocpd_string g ON g.id = a.args_id"
    )
    for name, args, dur in conn.execute(q):
        rows.append(("annotation", args, dur) if name == "UserMarker" else ("api", name, dur))
    conn.close()
    out: dict[str, tuple[int, int, set[str]]] = {}
    for kind in {k for k, _, _ in rows}:
        mine = [r for r in rows if r[0] == kind]
        out[kind] = (len(mine), sum(r[2] for r in mine), {r[1] for r in mine})
    return out


def _actual(path: Path) -> dict[str, tuple[int, int, set[str]]]:
    info = rpd_sqlite.inspect(path)
    acc: dict[str, tuple[int, int, set[str]]] = {}
    for r in rpd_sqlite.read(path, info):
        assert isinstance(r, Activity)
        n, total, names = acc.get(r.kind, (0, 0, set()))
        acc[r.kind] = (n + 1, total + r.duration_ns, names | {r.name})
    return acc


@pytest.mark.parametrize("sample", [MATMUL, MYTRACE], ids=["matmul_result.rpd", "mytrace.rpd.gz"])
def test_counts_durations_names_match_sql(sample: Path, tmp_path: Path) -> None:
    assert readers.detect(sample) is rpd_sqlite
    assert _actual(sample) == _expected(_plain(sample, tmp_path))


def test_matmul_details() -> None:
    info = rpd_sqlite.inspect(MATMUL)
    assert info.hint.pid == 1087077 and info.hint.origin == "rocpd_api.pid"
    assert info.hint.global_rank is None and info.hint.hostname is None  # RPD holds neither
    assert info.metadata["schema_version"] == "2"
    recs = [r for r in rpd_sqlite.read(MATMUL, info) if isinstance(r, Activity)]
    kinds = Tally(r.kind for r in recs)
    assert kinds == {"api": 125, "memcpy": 55, "kernel": 29, "memset": 1}
    kernels = [r for r in recs if r.kind == "kernel"]
    assert {r.device for r in kernels} == {2}  # gpuId: an HSA agent index
    # grid/workgroup come from rocpd_kernelapi through rocpd_api_ops
    conn = sqlite3.connect(MATMUL)
    grids = Tally(conn.execute("SELECT gridX FROM kernel").fetchall())
    conn.close()
    assert Tally((r.grid_x,) for r in kernels) == grids
    assert all(r.pid == 1087077 for r in kernels)
    copies = [r for r in recs if r.kind == "memcpy"]
    assert {r.name for r in copies} == {"CopyHostToDevice", "CopyDeviceToHost"}
    assert all(r.args and '"bytes"' in r.args for r in copies)


def test_gzipped_trace_temp_copy_is_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    info = rpd_sqlite.inspect(MYTRACE)
    assert info.metadata["session_count"] == "2"
    assert info.hint.pid == 1560
    it = rpd_sqlite.read(MYTRACE, info)
    next(it)
    assert len(list(scratch.iterdir())) == 1  # the decompressed copy, while reading
    it.close()
    assert list(scratch.iterdir()) == []


def test_inputs_are_not_modified() -> None:
    before = hashlib.sha256(MATMUL.read_bytes()).hexdigest()
    list(rpd_sqlite.read(MATMUL, rpd_sqlite.inspect(MATMUL)))
    assert hashlib.sha256(MATMUL.read_bytes()).hexdigest() == before


def test_rocm_trace_lite_layout(tmp_path: Path) -> None:
    """rtl: rocpd_kernelapi keyed by api_id, ROCTx as UserMarker ops (gpuId -1), copy bytes in the
    description, the pid in rocpd_metadata."""
    db = tmp_path / "trace_4242.db"
    conn = sqlite3.connect(db)
    conn.executescript(
        """
        CREATE TABLE rocpd_string (id INTEGER PRIMARY KEY, string TEXT UNIQUE);
        CREATE TABLE rocpd_op (id INTEGER PRIMARY KEY, gpuId INTEGER, queueId INTEGER, sequenceId INTEGER,
            completionSignal TEXT, start INTEGER, end INTEGER, description_id INTEGER, opType_id INTEGER, roctxId INTEGER);
        CREATE TABLE rocpd_api (id INTEGER PRIMARY KEY, pid INTEGER, tid INTEGER, start INTEGER, end INTEGER,
            apiName_id INTEGER, args_id INTEGER);
        CREATE TABLE rocpd_api_ops (id INTEGER PRIMARY KEY, api_id INTEGER, op_id INTEGER);
        CREATE TABLE rocpd_kernelapi (api_id INTEGER PRIMARY KEY, stream TEXT, gridX INTEGER, gridY INTEGER,
            gridZ INTEGER, workgroupX INTEGER, workgroupY INTEGER, workgroupZ INTEGER, groupSegmentSize INTEGER,
            privateSegmentSize INTEGER, kernelName_id INTEGER);
        CREATE TABLE rocpd_metadata (id INTEGER PRIMARY KEY, tag TEXT, value TEXT);
        INSERT INTO rocpd_string VALUES (1, ''), (2, 'KernelExecution'), (3, 'gemm'), (4, 'CopyDeviceToDevice'),
            (5, 'CopyDeviceToDevice:65536'), (6, 'UserMarker'), (7, 'step 1'), (8, 'hipLaunchKernel');
        INSERT INTO rocpd_op VALUES (1, 0, 7, 0, NULL, 100, 300, 3, 2, NULL), (2, 0, 0, 0, NULL, 400, 450, 5, 4, NULL),
            (3, -1, 0, 0, NULL, 50, 500, 7, 6, 1);
        INSERT INTO rocpd_api VALUES (1, 4242, 4243, 90, 95, 8, 1);
        INSERT INTO rocpd_api_ops VALUES (1, 1, 1);
        INSERT INTO rocpd_kernelapi VALUES (1, '0x0', 64, 1, 1, 256, 1, 1, 0, 0, 3);
        INSERT INTO rocpd_metadata (tag, value) VALUES ('pid', '4242');
        """
    )
    conn.commit()
    conn.close()
    assert readers.detect(db) is rpd_sqlite
    info = rpd_sqlite.inspect(db)
    assert info.hint.pid == 4242 and info.hint.origin == "rocpd_metadata pid"
    recs = [r for r in rpd_sqlite.read(db, info) if isinstance(r, Activity)]
    by_kind = {r.kind: r for r in recs}
    assert sorted(by_kind) == ["annotation", "api", "kernel", "memcpy"]
    assert (by_kind["kernel"].name, by_kind["kernel"].duration_ns, by_kind["kernel"].grid_x) == ("gemm", 200, 64)
    assert by_kind["kernel"].pid == 4242 and by_kind["kernel"].stream == 7
    assert by_kind["memcpy"].args == '{"bytes": 65536}'
    assert (by_kind["annotation"].name, by_kind["annotation"].duration_ns) == ("step 1", 450)


def test_sqlite_without_rpd_tables(tmp_path: Path) -> None:
    db = tmp_path / "other.rpd"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE something (x INTEGER)")
    conn.commit()
    conn.close()
    assert not rpd_sqlite.detect(db)
    assert readers.detect(db) is None
    with pytest.raises(InputError, match=r"other\.rpd.*rocpd_op"):
        rpd_sqlite.inspect(db)


def test_truncated_gzip_is_an_input_error(tmp_path: Path) -> None:
    cut = tmp_path / "mytrace.rpd.gz"
    cut.write_bytes(MYTRACE.read_bytes()[:400_000])
    with pytest.raises(InputError, match=r"mytrace\.rpd\.gz.*(truncated|corrupt)"):
        rpd_sqlite.inspect(cut)


def test_ops_and_apis_read_as_the_joins_read_them(tmp_path: Path) -> None:
    """The reader looks the names up by id (``sqlite_common.strings``) instead of joining rocpd_string
    into every row, and reads args texts for markers only: its records equal those of the joins'
    rules (the reader's query before) on the real mytrace sample with descriptions, kernel names and
    marker args missing from rocpd_string on some rows, and a second 'UserMarker' string in use."""
    db = _plain(MYTRACE, tmp_path)
    conn = sqlite3.connect(db)
    conn.execute("UPDATE rocpd_op SET description_id = 999999999 WHERE id % 7 = 0")
    conn.execute("UPDATE rocpd_kernelapi SET kernelName_id = 999999998 WHERE api_ptr_id % 3 = 0")
    marker = conn.execute("SELECT id FROM rocpd_string WHERE string = 'UserMarker'").fetchone()[0]
    conn.execute("UPDATE rocpd_api SET args_id = 999999997 WHERE apiName_id = ? AND id % 5 = 0", (marker,))
    other = conn.execute("INSERT INTO rocpd_string (string) VALUES ('UserMarker')").lastrowid
    conn.execute("UPDATE rocpd_api SET apiName_id = ? WHERE apiName_id = ? AND id % 11 = 0", (other, marker))
    conn.commit()
    ops = conn.execute(
        "SELECT o.start, o.end, o.gpuId, o.queueId, d.string, t.string, L.api_id, a.pid, a.tid, k.gridX, k.gridY, "
        "k.gridZ, k.workgroupX, k.workgroupY, k.workgroupZ, ks.string, c.size FROM rocpd_op o "
        "LEFT JOIN rocpd_string d ON d.id = o.description_id LEFT JOIN rocpd_string t ON t.id = o.opType_id "
        "LEFT JOIN (SELECT op_id, min(api_id) AS api_id FROM rocpd_api_ops GROUP BY op_id) L ON L.op_id = o.id "
        "LEFT JOIN rocpd_api a ON a.id = L.api_id LEFT JOIN rocpd_kernelapi k ON k.api_ptr_id = L.api_id "
        "LEFT JOIN rocpd_string ks ON ks.id = k.kernelName_id LEFT JOIN rocpd_copyapi c ON c.api_ptr_id = L.api_id"
    ).fetchall()
    apis = conn.execute(
        "SELECT a.id, a.pid, a.tid, a.start, a.end, n.string, g.string FROM rocpd_api a "
        "LEFT JOIN rocpd_string n ON n.id = a.apiName_id LEFT JOIN rocpd_string g ON g.id = a.args_id"
    ).fetchall()
    conn.close()
    kernels = [(r[4] or r[15] or r[5], r[0], r[1] - r[0], r[6], r[9], r[14]) for r in ops
               if r[5] in ("KernelExecution", "Task") and r[9] is not None]
    calls = [("annotation", (a or n), s, e - s, i) if n == "UserMarker" else ("api", n or "", s, e - s, i)
             for i, _p, _t, s, e, n, a in apis]
    assert len({k[0] for k in kernels}) > 3 and ("annotation", "UserMarker") in {c[:2] for c in calls}
    records = [r for r in rpd_sqlite.read(db, rpd_sqlite.inspect(db)) if isinstance(r, Activity)]
    from_ops, from_apis = records[: len(records) - len(apis)], records[len(records) - len(apis) :]
    assert [(r.name, r.start_ns, r.duration_ns, r.correlation, r.grid_x, r.block_z)
            for r in from_ops if r.kind == "kernel" and r.grid_x is not None] == kernels
    assert [(r.kind, r.name, r.start_ns, r.duration_ns, r.correlation) for r in from_apis] == calls
