"""A merged rocm-trace-lite trace (issue 13): ``rtl trace -o trace.db torchrun --nproc_per_node=N`` merges
the per-process files into one .db: the largest file is copied whole, then only the ``rocpd_op`` rows,
strings and metadata of the others are appended (rocm-trace-lite ``cmd_trace._merge_traces``). The
merged file here is built that way from the real RPD sample (tests/data/legacy_rpd/matmul_result.rpd,
rpd_tracer's schema: one process, its ops on gpuId 2, 125 HIP API rows) as the base, plus the ops of two
more "processes" on gpuIds 3 and 5 and a ROCTx marker op (gpuId -1)."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from profdb.cli.main import cli
from profdb.store.errors import RankIdentityError
from profdb.store.identity import IdentityFlags
from profdb.store.readers import rpd_sqlite

EXTRA_GPUS = {3: 11111, 5: 22222}  # gpuId -> pid of the merged-in process


def _merged(data: Path, tmp_path: Path) -> Path:
    out = tmp_path / "trace.db"
    shutil.copyfile(data / "legacy_rpd" / "matmul_result.rpd", out)
    conn = sqlite3.connect(out)
    ops = conn.execute("SELECT gpuId, queueId, sequenceId, start, end, description_id, opType_id FROM rocpd_op").fetchall()
    for gpu, pid in EXTRA_GPUS.items():
        # what rtl's merge inserts for another process: its ops (gpuId kept), its strings, its pid metadata
        conn.executemany(
            "INSERT INTO rocpd_op (gpuId, queueId, sequenceId, completionSignal, start, end, description_id, opType_id) "
            "VALUES (?, ?, ?, '', ?, ?, ?, ?)",
            [(gpu, q, s, a + gpu, b + gpu * 2, d, t) for _g, q, s, a, b, d, t in ops],
        )
        conn.execute("INSERT INTO rocpd_metadata (tag, value) VALUES ('pid', ?)", (str(pid),))
    conn.execute("INSERT INTO rocpd_string (string) VALUES ('UserMarker'), ('step 1')")
    conn.execute(
        "INSERT INTO rocpd_op (gpuId, queueId, sequenceId, completionSignal, start, end, description_id, opType_id) "
        "VALUES (-1, 0, 0, '', 1, 2, (SELECT id FROM rocpd_string WHERE string = 'step 1'), "
        "(SELECT id FROM rocpd_string WHERE string = 'UserMarker'))"
    )
    conn.commit()
    conn.close()
    return out


def _ingest(db: Path, *args: str) -> tuple[int, str]:
    r = CliRunner().invoke(cli, ["ingest", "--db", str(db), *args])
    return r.exit_code, r.output


def test_merged_trace_is_one_rank_unless_asked(data: Path, tmp_path: Path) -> None:
    merged = _merged(data, tmp_path)
    code, out = _ingest(tmp_path / "a.db", "--rank", "0", str(merged))
    assert code == 0, out
    with sqlite3.connect(tmp_path / "a.db") as conn:
        assert conn.execute("select count(*) from rank").fetchone() == (1,)


def test_rank_by_gpu_splits_per_gpu_and_says_how(data: Path, tmp_path: Path) -> None:
    merged = _merged(data, tmp_path)
    # the base process alone, ingested as one rank: what rank 0 of the split must hold
    code, out = _ingest(tmp_path / "base.db", "--rank", "0", str(data / "legacy_rpd" / "matmul_result.rpd"))
    assert code == 0, out
    with sqlite3.connect(tmp_path / "base.db") as conn:
        base = dict(conn.execute("select kind, count(*) from activity group by kind").fetchall())
    with sqlite3.connect(merged) as raw:
        per_gpu = dict(
            raw.execute(
                "select o.gpuId, count(*) from rocpd_op o join rocpd_string t on t.id = o.opType_id "
                "where t.string not like 'Barrier%' and t.string not like 'Marker%' and o.gpuId >= 0 group by o.gpuId"
            ).fetchall()
        )
    assert sorted(per_gpu) == [2, 3, 5]

    db = tmp_path / "p.db"
    code, out = _ingest(db, "--rank-by", "gpu", "--hostname", "node7", str(merged))
    assert code == 0, out
    assert "--rank-by gpu: gpuId 2 -> rank 0, gpuId 3 -> rank 1, gpuId 5 -> rank 2" in out
    assert "1 ROCTx marker op(s) (gpuId -1, no GPU) not read" in out
    assert "125 API row(s) (pid " in out and "go to the rank of gpuId 2" in out
    with sqlite3.connect(db) as conn:
        ranks = conn.execute("select global_rank, hostname, local_rank, device from rank order by global_rank").fetchall()
        rows = conn.execute(
            "select r.global_rank, a.kind, count(*) from activity a join rank r on r.id = a.rank_id group by 1, 2"
        ).fetchall()
        origins = [o for (o,) in conn.execute("select identity_origin from source_file order by rank_id")]
    # devices are the gpuIds; no local rank is made up from them
    assert ranks == [(0, "node7", None, 2), (1, "node7", None, 3), (2, "node7", None, 5)]
    got: dict[int, dict[str, int]] = {}
    for g, kind, n in rows:
        got.setdefault(g, {})[kind] = n
    assert got[0] == base
    assert {g: sum(k.values()) for g, k in got.items() if g} == {1: per_gpu[3], 2: per_gpu[5]}
    assert sum(got[0][k] for k in got[0] if k != "api") == per_gpu[2]
    assert "gpuId 3" in origins[1] and "hostname from --hostname" in origins[1]


def test_rank_by_needs_a_hostname_and_a_splittable_file(data: Path, tmp_path: Path) -> None:
    merged = _merged(data, tmp_path)
    code, out = _ingest(tmp_path / "p.db", "--rank-by", "gpu", str(merged))
    assert code == 2 and "--hostname" in out
    with pytest.raises(RankIdentityError, match="--hostname"):
        IdentityFlags(rank_by="gpu")
    kineto = data / "kineto" / "torchrun4_cpu" / "rank0_iter5_7.json.gz"
    code, out = _ingest(tmp_path / "p.db", "--rank-by", "gpu", "--hostname", "n", str(kineto))
    assert code == 1 and "--rank-by gpu does not apply to kineto files (only to: rpd)" in out


def test_split_without_gpu_ops_is_a_clear_error(tmp_path: Path) -> None:
    db = tmp_path / "markers.db"
    conn = sqlite3.connect(db)
    conn.executescript(
        "CREATE TABLE rocpd_string (id INTEGER PRIMARY KEY, string TEXT);"
        "CREATE TABLE rocpd_op (id INTEGER PRIMARY KEY, gpuId INTEGER, queueId INTEGER, sequenceId INTEGER,"
        " completionSignal TEXT, start INTEGER, end INTEGER, description_id INTEGER, opType_id INTEGER);"
        "INSERT INTO rocpd_string VALUES (1, 'UserMarker'), (2, 'x');"
        "INSERT INTO rocpd_op VALUES (1, -1, 0, 0, '', 1, 2, 2, 1);"
    )
    conn.commit()
    conn.close()
    code, out = _ingest(tmp_path / "p.db", "--rank-by", "gpu", "--hostname", "n", str(db))
    assert code == 1 and "no GPU ops" in out and "Traceback" not in out
    assert rpd_sqlite.inspect(db).ranks == []


RTL_SCHEMA = """
CREATE TABLE rocpd_string (id INTEGER PRIMARY KEY, string TEXT UNIQUE);
CREATE TABLE rocpd_op (id INTEGER PRIMARY KEY, gpuId INTEGER, queueId INTEGER, sequenceId INTEGER,
    completionSignal TEXT, start INTEGER, end INTEGER, description_id INTEGER, opType_id INTEGER);
CREATE TABLE rocpd_api (id INTEGER PRIMARY KEY, pid INTEGER, tid INTEGER, start INTEGER, end INTEGER,
    apiName_id INTEGER, args_id INTEGER);
CREATE TABLE rocpd_api_ops (id INTEGER PRIMARY KEY, api_id INTEGER, op_id INTEGER);
CREATE TABLE rocpd_kernelapi (api_id INTEGER PRIMARY KEY, stream TEXT, gridX INTEGER, gridY INTEGER, gridZ INTEGER,
    workgroupX INTEGER, workgroupY INTEGER, workgroupZ INTEGER, groupSegmentSize INTEGER, privateSegmentSize INTEGER,
    kernelName_id INTEGER);
CREATE TABLE rocpd_metadata (id INTEGER PRIMARY KEY, tag TEXT, value TEXT);
"""


#: the processes' clock at their first record (rtl writes unsigned ns, as rpd_tracer does: a time before
#: zero is damage to the ingest, validate.activities)
T0 = 1_000_000


def _rtl_process(path: Path, pid: int, gpu: int, kernels: int) -> None:
    """One process's trace_<pid>.db as rtl writes it (HSA-intercepted kernels, a ROCTx range, its pid)."""
    conn = sqlite3.connect(path)
    conn.executescript(RTL_SCHEMA)
    strings = ["KernelExecution", "UserMarker", f"gemm_{gpu}", "allreduce_kernel", "step", "hipLaunchKernel"]
    conn.executemany("INSERT INTO rocpd_string (string) VALUES (?)", [(s,) for s in strings])
    sid = dict(conn.execute("SELECT string, id FROM rocpd_string").fetchall())
    for i in range(kernels):
        name = f"gemm_{gpu}" if i % 2 else "allreduce_kernel"
        conn.execute(
            "INSERT INTO rocpd_op (gpuId, queueId, sequenceId, start, end, description_id, opType_id) VALUES (?, 1, 0, ?, ?, ?, ?)",
            (gpu, T0 + 1000 * i, T0 + 1000 * i + 100 + gpu, sid[name], sid["KernelExecution"]),
        )
        conn.execute("INSERT INTO rocpd_api (pid, tid, start, end, apiName_id, args_id) VALUES (?, ?, ?, ?, ?, 1)",
                     (pid, pid, T0 + 1000 * i - 50, T0 + 1000 * i - 40, sid["hipLaunchKernel"]))
        conn.execute("INSERT INTO rocpd_api_ops (api_id, op_id) VALUES (?, ?)", (i + 1, i + 1))
    conn.execute("INSERT INTO rocpd_op (gpuId, queueId, sequenceId, start, end, description_id, opType_id) "
                 "VALUES (-1, 0, 0, ?, ?, ?, ?)", (T0, T0 + 50000, sid["step"], sid["UserMarker"]))
    conn.execute("INSERT INTO rocpd_metadata (tag, value) VALUES ('pid', ?)", (str(pid),))
    conn.commit()
    conn.close()


def _rtl_merge(files: list[Path], out: Path) -> None:
    """What rocm-trace-lite's merge does: copy the largest file, append the others' ops, strings, metadata."""
    files = sorted(files, key=lambda f: f.stat().st_size, reverse=True)
    shutil.copyfile(files[0], out)
    dst = sqlite3.connect(out)
    for f in files[1:]:
        src = sqlite3.connect(f)
        strings = src.execute("SELECT string FROM rocpd_string").fetchall()
        ops = src.execute(
            "SELECT o.gpuId, o.queueId, o.sequenceId, o.start, o.end, s.string, t.string FROM rocpd_op o "
            "JOIN rocpd_string s ON o.description_id = s.id JOIN rocpd_string t ON o.opType_id = t.id"
        ).fetchall()
        meta = src.execute("SELECT tag, value FROM rocpd_metadata").fetchall()
        src.close()
        dst.executemany("INSERT OR IGNORE INTO rocpd_string (string) VALUES (?)", strings)
        ids = dict(dst.execute("SELECT string, id FROM rocpd_string").fetchall())
        dst.executemany(
            "INSERT INTO rocpd_op (gpuId, queueId, sequenceId, start, end, description_id, opType_id) VALUES (?,?,?,?,?,?,?)",
            [(g, q, s, a, b, ids[d], ids[t]) for g, q, s, a, b, d, t in ops],
        )
        dst.executemany("INSERT INTO rocpd_metadata (tag, value) VALUES (?, ?)", meta)
    dst.commit()
    dst.close()


def test_rtl_schema_merge_of_four_processes(tmp_path: Path) -> None:
    procs = {0: (700, 12), 1: (701, 10), 2: (702, 10), 3: (703, 10)}  # gpu -> (pid, kernels); gpu 0 is the largest
    files = []
    for gpu, (pid, n) in procs.items():
        files.append(tmp_path / f"trace_{pid}.db")
        _rtl_process(files[-1], pid, gpu, n)
    merged = tmp_path / "trace.db"
    _rtl_merge(files, merged)
    db = tmp_path / "p.db"
    code, out = _ingest(db, "--rank-by", "gpu", "--hostname", "mi300-01", str(merged))
    assert code == 0, out
    assert "gpuId 0 -> rank 0, gpuId 1 -> rank 1, gpuId 2 -> rank 2, gpuId 3 -> rank 3" in out
    assert "4 ROCTx marker op(s)" in out and "12 API row(s) (pid 700) go to the rank of gpuId 0" in out
    with sqlite3.connect(db) as conn:
        got = conn.execute(
            "select r.global_rank, r.device, r.pid, a.kind, count(*), sum(a.duration_ns) from activity a "
            "join rank r on r.id = a.rank_id group by 1, 4 order by 1, 4"
        ).fetchall()
        comm = conn.execute(
            "select r.global_rank, count(*) from activity a join rank r on r.id = a.rank_id "
            "where a.category = 'communication' group by 1"
        ).fetchall()
    expected = [(0, 0, 700, "api", 12, 12 * 10)]
    for gpu, (pid, n) in procs.items():
        durs = [100 + gpu] * n
        expected.append((gpu, gpu, pid if gpu == 0 else None, "kernel", n, sum(durs)))
    assert sorted(got) == sorted(expected)
    assert comm == [(g, (n + 1) // 2) for g, (_p, n) in procs.items()]  # allreduce_kernel, every other op
