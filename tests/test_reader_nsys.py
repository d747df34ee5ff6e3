"""Nsight Systems SQLite reader: both real exports (schema 2.9.1 and 3.13.2) and damaged inputs.
Expected values come from plain sqlite3 queries on the nsys tables."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import pytest

from profdb.store import readers
from profdb.store.errors import InputError
from profdb.store.readers import nsys_sqlite
from profdb.store.records import Activity

DATA = Path(__file__).parent / "data" / "nsys_sqlite"
CLOVERLEAF = DATA / "perlmutter-cloverleaf-cuda.sqlite"  # nsys 2024.5, META_DATA_CAPTURE with env rows
SAXPY = DATA / "saxpy-mpi-cuda_nsys_perlmutter0.sqlite"  # nsys 2022.2, EXPORT_META_DATA, no env rows


def _sql(db: Path, query: str) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(query).fetchall()
    finally:
        conn.close()


def _tables(db: Path) -> set[str]:
    return {str(r[0]) for r in _sql(db, "SELECT name FROM sqlite_master WHERE type = 'table'")}


def _expected(db: Path) -> dict[str, tuple[int, int, set[str]]]:
    """kind -> (rows, total duration, distinct names), from the nsys tables."""
    tables = _tables(db)
    out: dict[str, tuple[int, int, set[str]]] = {}
    rows = _sql(db, "SELECT s.value, k.end - k.start FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName")
    out["kernel"] = (len(rows), sum(int(r[1]) for r in rows), {str(r[0]) for r in rows})  # type: ignore[call-overload]
    rows = _sql(db, "SELECT copyKind, end - start FROM CUPTI_ACTIVITY_KIND_MEMCPY")
    labels = {1: "Host-to-Device", 2: "Device-to-Host", 8: "Device-to-Device", 10: "Peer-to-Peer"}
    out["memcpy"] = (len(rows), sum(int(r[1]) for r in rows), {f"[CUDA memcpy {labels[int(r[0])]}]" for r in rows})  # type: ignore[call-overload]
    if "CUPTI_ACTIVITY_KIND_MEMSET" in tables:
        rows = _sql(db, "SELECT end - start FROM CUPTI_ACTIVITY_KIND_MEMSET")
        if rows:
            out["memset"] = (len(rows), sum(int(r[0]) for r in rows), {"[CUDA memset]"})  # type: ignore[call-overload]
    rows = _sql(db, "SELECT s.value, r.end - r.start FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId")
    out["api"] = (len(rows), sum(int(r[1]) for r in rows), {str(r[0]) for r in rows})  # type: ignore[call-overload]
    if "NVTX_EVENTS" in tables:
        rows = _sql(
            db,
            "SELECT coalesce(n.text, s.value), n.end - n.start FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId "
            "WHERE n.eventType IN (59, 60) AND n.end IS NOT NULL",
        )
        out["annotation"] = (len(rows), sum(int(r[1]) for r in rows), {str(r[0]) for r in rows})  # type: ignore[call-overload]
    return {k: v for k, v in out.items() if v[0]}


def _actual(db: Path) -> dict[str, tuple[int, int, set[str]]]:
    acc: dict[str, tuple[int, int, set[str]]] = {}
    for r in nsys_sqlite.read(db, nsys_sqlite.inspect(db)):
        assert isinstance(r, Activity)
        n, total, names = acc.get(r.kind, (0, 0, set()))
        acc[r.kind] = (n + 1, total + r.duration_ns, names | {r.name})
    return acc


@pytest.mark.parametrize("db", [CLOVERLEAF, SAXPY], ids=["schema-3.13", "schema-2.9"])
def test_counts_durations_names_match_sql(db: Path) -> None:
    assert readers.detect(db) is nsys_sqlite
    assert _actual(db) == _expected(db)


def test_cloverleaf_identity_from_capture_env_and_system_hostname() -> None:
    info = nsys_sqlite.inspect(CLOVERLEAF)
    env = {
        str(v).split("=", 1)[0]: str(v).split("=", 1)[1].strip('"')
        for (v,) in _sql(CLOVERLEAF, "SELECT value FROM META_DATA_CAPTURE WHERE name = 'PROCESS_0:ENVIRONMENT_VARIABLE'")
        if "=" in str(v)
    }
    assert info.hint.global_rank == int(env["SLURM_PROCID"]) == int(env["PMI_RANK"]) == 0
    assert info.hint.local_rank == int(env["SLURM_LOCALID"]) == 0
    assert info.hint.world_size == 1
    # The HOSTNAME variable names the login node the job was submitted from, not the compute node.
    assert env["HOSTNAME"] == "login11"
    assert info.hint.hostname == "nid008553"
    assert "META_DATA_CAPTURE" in info.hint.origin and "Hostname" in info.hint.origin
    (base,) = _sql(CLOVERLEAF, "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME")[0]
    assert info.time_base_ns == base == 1696392839587175550
    assert info.hint.pid == 1701896
    assert info.metadata["schema_version"] == "3.13.2"


def test_cloverleaf_devices_are_cuda_ordinals() -> None:
    # deviceId joins TARGET_INFO_GPU.id, which is not the CUDA ordinal (cuDevice)
    mapping = {r[0]: r[1] for r in _sql(CLOVERLEAF, "SELECT id, cuDevice FROM TARGET_INFO_GPU")}
    used = {r[0] for r in _sql(CLOVERLEAF, "SELECT DISTINCT deviceId FROM CUPTI_ACTIVITY_KIND_KERNEL")}
    kernels = [r for r in nsys_sqlite.read(CLOVERLEAF, nsys_sqlite.inspect(CLOVERLEAF)) if isinstance(r, Activity) and r.kind == "kernel"]
    assert {r.device for r in kernels} == {mapping[d] for d in used} == {3}
    first = _sql(CLOVERLEAF, "SELECT gridX, blockX, registersPerThread FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 1")[0]
    assert (kernels[0].grid_x, kernels[0].block_x) == first[:2]
    assert json.loads(kernels[0].args or "{}")["registers per thread"] == first[2]


def test_saxpy_old_schema_has_no_rank_in_file() -> None:
    info = nsys_sqlite.inspect(SAXPY)
    assert info.hint.global_rank is None  # only the file name says rank 0
    assert info.hint.hostname == "nid001608"
    assert info.hint.pid == 1230493
    assert info.metadata["schema_version"] == "2.9.1"
    (base,) = _sql(SAXPY, "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME")[0]
    assert info.time_base_ns == base
    nvtx = [r for r in nsys_sqlite.read(SAXPY, info) if isinstance(r, Activity) and r.kind == "annotation"]
    assert len(nvtx) == 22 and {r.pid for r in nvtx} == {1230493}


def test_inputs_are_not_modified() -> None:
    before = hashlib.sha256(SAXPY.read_bytes()).hexdigest()
    list(nsys_sqlite.read(SAXPY, nsys_sqlite.inspect(SAXPY)))
    assert hashlib.sha256(SAXPY.read_bytes()).hexdigest() == before


def test_sqlite_without_nsys_tables(tmp_path: Path) -> None:
    db = tmp_path / "report.sqlite"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE TARGET_INFO_GPU (id INTEGER)")
    conn.commit()
    conn.close()
    assert not nsys_sqlite.detect(db)
    with pytest.raises(InputError, match=r"report\.sqlite.*Nsight Systems"):
        nsys_sqlite.inspect(db)


def test_truncated_database_is_an_input_error(tmp_path: Path) -> None:
    cut = tmp_path / "cut.sqlite"
    cut.write_bytes(CLOVERLEAF.read_bytes()[: 2154496 // 3])
    with pytest.raises(InputError, match=r"cut\.sqlite"):
        info = nsys_sqlite.inspect(cut)
        list(nsys_sqlite.read(cut, info))


def _edited(sample: Path, tmp_path: Path, *statements: str) -> Path:
    """A copy of a real export with ``statements`` run on it (the edit is the test)."""
    db = tmp_path / "edited.sqlite"
    db.write_bytes(sample.read_bytes())
    conn = sqlite3.connect(db)
    for sql in statements:
        conn.execute(sql)
    conn.commit()
    conn.close()
    return db


def _pid_of(g: object) -> int | None:
    """An nsys GlobalId's process id, as the rules read it (bits 24-47; None for a non-integer)."""
    return (g >> 24) & 0xFFFFFF if isinstance(g, int) else None


def _tid_of(g: object) -> int | None:
    """An nsys GlobalId's thread id (bits 0-23; None for a non-integer)."""
    return g & 0xFFFFFF if isinstance(g, int) else None


def test_kernel_and_runtime_rows_read_as_row_by_row_rules_read_them(tmp_path: Path) -> None:
    """The kernel and runtime records equal those the row-by-row rules make from plain queries (a
    globalPid/globalTid's pid is bits 24-47, its tid bits 0-23, None when it is no integer; a kernel's
    args are its registers and its static + dynamic shared memory): on the real cloverleaf export with
    globalTid made text, REAL, NULL and negative on some rows and the kernels' registers and shared
    memory varied, and names missing from StringIds on some rows (a kernel then has its short name, a
    call none): the reader computes pid/tid in SQL, makes each args text once and looks the names up
    by id instead of joining."""
    db = _edited(
        CLOVERLEAF, tmp_path,
        "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET globalTid = 'abc' WHERE rowid % 7 = 0",
        "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET globalTid = NULL WHERE rowid % 11 = 0",
        "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET globalTid = 123456789012.5 WHERE rowid % 13 = 0",
        "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET globalTid = -globalTid WHERE rowid % 17 = 0",
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET registersPerThread = rowid % 5 + 30, "
        "staticSharedMemory = rowid % 4, dynamicSharedMemory = rowid % 3 * 16",
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET globalPid = 'x' WHERE rowid % 9 = 0",
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName = 999999999 WHERE rowid % 6 = 0",
        "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET nameId = 999999999 WHERE rowid % 19 = 0",
        "UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET globalPid = 'x' WHERE rowid % 3 = 0",
    )
    devices = {i: c for i, c in _sql(db, "SELECT id, cuDevice FROM TARGET_INFO_GPU") if isinstance(c, int)}
    kernels = [
        Activity("kernel", str(r[6] or ""), r[0], r[1] - r[0], None, devices.get(r[2], r[2]), r[3], r[4],  # type: ignore[operator, arg-type]
                 _pid_of(r[5]), None, *r[7:13],  # type: ignore[arg-type]
                 args=json.dumps({"registers per thread": r[13], "shared memory": (r[14] or 0) + (r[15] or 0)}))  # type: ignore[operator]
        for r in _sql(db, "SELECT k.start, k.end, k.deviceId, k.streamId, k.correlationId, k.globalPid, "
                          "coalesce(d.value, s.value), k.gridX, k.gridY, k.gridZ, k.blockX, k.blockY, k.blockZ, "
                          "k.registersPerThread, k.staticSharedMemory, k.dynamicSharedMemory "
                          "FROM CUPTI_ACTIVITY_KIND_KERNEL k LEFT JOIN StringIds d ON d.id = k.demangledName "
                          "LEFT JOIN StringIds s ON s.id = k.shortName")
    ]
    runtime = [
        Activity("api", str(name or ""), start, end - start, None, None, None, corr, _pid_of(g), _tid_of(g))  # type: ignore[operator, arg-type]
        for start, end, corr, g, name in _sql(db, "SELECT r.start, r.end, r.correlationId, r.globalTid, s.value "
                                                  "FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
                                                  "LEFT JOIN StringIds s ON s.id = r.nameId")
    ]
    assert len({a.args for a in kernels}) > 5 and {a.pid for a in runtime} >= {None}
    assert any(a.pid is not None and a.tid is not None for a in runtime)
    records = [r for r in nsys_sqlite.read(db, nsys_sqlite.inspect(db)) if isinstance(r, Activity)]
    assert [r for r in records if r.kind == "kernel"] == kernels
    pids = [_pid_of(g) for (g,) in _sql(db, "SELECT globalPid FROM CUPTI_ACTIVITY_KIND_MEMCPY")]
    assert None in pids and len(set(pids)) > 1
    assert [r.pid for r in records if r.kind == "memcpy"] == pids
    assert [r for r in records if r.kind == "api"] == runtime
    assert all(type(r) is Activity for r in records)


def test_nvtx_ranges_read_as_the_join_reads_them(tmp_path: Path) -> None:
    """NVTX ranges (the real saxpy export: texts inline and registered): a range's own text, else its
    textId's string looked up by id (not joined into every row), pid/tid from its globalTid in SQL;
    equal to the join's rules with some textIds missing from StringIds, some texts inline, and the
    globalTid made text or NULL on some rows."""
    db = _edited(
        SAXPY, tmp_path,
        "UPDATE NVTX_EVENTS SET textId = 999999999 WHERE rowid % 4 = 0 AND text IS NULL",
        "UPDATE NVTX_EVENTS SET text = 'own ' || rowid WHERE rowid % 5 = 0",
        "UPDATE NVTX_EVENTS SET globalTid = 'x' WHERE rowid % 6 = 0",
        "UPDATE NVTX_EVENTS SET globalTid = NULL WHERE rowid % 7 = 0",
    )
    want = [
        Activity("annotation", str(name or ""), start, end - start, None, None, None, None, _pid_of(g), _tid_of(g))  # type: ignore[operator, arg-type]
        for start, end, g, name in _sql(db, "SELECT n.start, n.end, n.globalTid, coalesce(n.text, s.value) "
                                            "FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId "
                                            f"WHERE n.eventType IN ({', '.join(map(str, nsys_sqlite._NVTX_RANGES))}) "
                                            "AND n.end IS NOT NULL")
    ]
    assert len(want) > 10 and "" in {a.name for a in want} and any(a.name.startswith("own ") for a in want)
    got = [r for r in nsys_sqlite.read(db, nsys_sqlite.inspect(db)) if isinstance(r, Activity) and r.kind == "annotation"]
    assert got == want
