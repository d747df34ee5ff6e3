"""Generate rocprofv3 rocpd SQLite databases (``<pid>_results.db``) for tests.

No public rocpd sample exists, so this writes one following the published schema of
rocprofiler-sdk-rocpd, in ROCm/rocm-systems, projects/rocprofiler-sdk/source/share/rocprofiler-sdk-rocpd/:

- rocpd_tables.sql  ("RocPD schema version 3.0.1", commit 0c5fd9badc20f0050b4bfd42714fbbf3ffa4c68d):
  physical tables named ``<table>_<uuid>`` (columns below are that file's, abridged to the tables
  the views need; JSONB columns are stored as JSON text, as SQLite does without jsonb());
- rocpd_views.sql   (commit 62419af1c186bab087787abda848c17f7dbb5b3c): an un-suffixed view
  ``rocpd_<table>`` = ``SELECT * FROM rocpd_<table>_<uuid>`` for each table;
- data_views.sql    (commit 4afa0d441b936892bd03427677afdd338a7a82c5): the ``kernels``,
  ``memory_copies``, ``regions`` and ``counters_collection`` views, with the same joins (on id
  and guid) and the same output column names.

The DDL text here is written for these tests (same names, types and joins), not copied.
"""

from __future__ import annotations

import json
import sqlite3
import uuid as uuidlib
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Kernel:
    name: str
    start: int
    end: int
    agent: int = 1  # index into the process's agents (0 = CPU, 1.. = GPUs)
    grid: tuple[int, int, int] = (1024, 1, 1)
    workgroup: tuple[int, int, int] = (256, 1, 1)
    counters: dict[str, float] = field(default_factory=dict)


@dataclass
class Copy:
    direction: str  # MEMORY_COPY_HOST_TO_DEVICE ...
    start: int
    end: int
    size: int
    src_agent: int = 0
    dst_agent: int = 1


@dataclass
class Region:
    category: str  # HIP_RUNTIME_API, MARKER_CORE_API ...
    name: str
    start: int
    end: int


@dataclass
class Process:
    pid: int
    env: dict[str, str]
    hostname: str = "node01"
    gpus: int = 2
    kernels: list[Kernel] = field(default_factory=list)
    copies: list[Copy] = field(default_factory=list)
    regions: list[Region] = field(default_factory=list)


def _tables(s: str) -> str:
    return f"""
CREATE TABLE "rocpd_metadata{s}" (id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, tag TEXT NOT NULL, value TEXT NOT NULL);
CREATE TABLE "rocpd_string{s}" (id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, guid TEXT NOT NULL,
    string TEXT NOT NULL UNIQUE ON CONFLICT ABORT);
CREATE TABLE "rocpd_info_node{s}" (id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, guid TEXT NOT NULL,
    hash BIGINT NOT NULL UNIQUE, machine_id TEXT NOT NULL UNIQUE, system_name TEXT, hostname TEXT,
    release TEXT, version TEXT, hardware_name TEXT, domain_name TEXT);
CREATE TABLE "rocpd_info_process{s}" (id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, guid TEXT NOT NULL,
    nid INTEGER NOT NULL, ppid INTEGER, pid INTEGER NOT NULL, init BIGINT, fini BIGINT, start BIGINT,
    "end" BIGINT, command TEXT, environment JSONB DEFAULT "{{}}" NOT NULL, extdata JSONB DEFAULT "{{}}" NOT NULL);
CREATE TABLE "rocpd_info_thread{s}" (id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, guid TEXT NOT NULL,
    nid INTEGER NOT NULL, ppid INTEGER, pid INTEGER NOT NULL, tid INTEGER NOT NULL, name TEXT,
    start BIGINT, "end" BIGINT, extdata JSONB DEFAULT "{{}}" NOT NULL);
CREATE TABLE "rocpd_info_agent{s}" (id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, guid TEXT NOT NULL,
    nid INTEGER NOT NULL, pid INTEGER NOT NULL, type TEXT CHECK (type IN ('CPU', 'GPU', 'NIC')),
    absolute_index INTEGER, logical_index INTEGER, type_index INTEGER, uuid INTEGER, name TEXT,
    model_name TEXT, vendor_name TEXT, product_name TEXT, user_name TEXT, extdata JSONB DEFAULT "{{}}" NOT NULL);
CREATE TABLE "rocpd_info_queue{s}" (id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, guid TEXT NOT NULL,
    nid INTEGER NOT NULL, pid INTEGER NOT NULL, name TEXT, extdata JSONB DEFAULT "{{}}" NOT NULL);
CREATE TABLE "rocpd_info_stream{s}" (id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, guid TEXT NOT NULL,
    nid INTEGER NOT NULL, pid INTEGER NOT NULL, name TEXT, extdata JSONB DEFAULT "{{}}" NOT NULL);
CREATE TABLE "rocpd_info_pmc{s}" (id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, guid TEXT NOT NULL,
    nid INTEGER NOT NULL, pid INTEGER NOT NULL, agent_id INTEGER, target_arch TEXT, event_code INT,
    instance_id INTEGER, name TEXT NOT NULL, symbol TEXT NOT NULL, description TEXT, long_description TEXT,
    component TEXT, units TEXT, value_type TEXT, block TEXT, expression TEXT, is_constant INTEGER,
    is_derived INTEGER, extdata JSONB DEFAULT "{{}}" NOT NULL);
CREATE TABLE "rocpd_info_code_object{s}" (id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, guid TEXT NOT NULL,
    nid INTEGER NOT NULL, pid INTEGER NOT NULL, agent_id INTEGER, uri TEXT, load_base BIGINT,
    load_size BIGINT, load_delta BIGINT, storage_type TEXT, extdata JSONB DEFAULT "{{}}" NOT NULL);
CREATE TABLE "rocpd_info_kernel_symbol{s}" (id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, guid TEXT NOT NULL,
    nid INTEGER NOT NULL, pid INTEGER NOT NULL, code_object_id INTEGER NOT NULL, kernel_name TEXT,
    display_name TEXT, kernel_object INTEGER, kernarg_segment_size INTEGER, kernarg_segment_alignment INTEGER,
    group_segment_size INTEGER, private_segment_size INTEGER, sgpr_count INTEGER, arch_vgpr_count INTEGER,
    accum_vgpr_count INTEGER, extdata JSONB DEFAULT "{{}}" NOT NULL);
CREATE TABLE "rocpd_event{s}" (id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, guid TEXT NOT NULL,
    category_id INTEGER, stack_id INTEGER, parent_stack_id INTEGER, correlation_id INTEGER,
    call_stack JSONB DEFAULT "{{}}" NOT NULL, line_info JSONB DEFAULT "{{}}" NOT NULL, extdata JSONB DEFAULT "{{}}" NOT NULL);
CREATE TABLE "rocpd_pmc_event{s}" (id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, guid TEXT NOT NULL,
    event_id INTEGER, pmc_id INTEGER NOT NULL, value REAL DEFAULT 0.0, extdata JSONB DEFAULT "{{}}");
CREATE TABLE "rocpd_region{s}" (id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, guid TEXT NOT NULL,
    nid INTEGER NOT NULL, pid INTEGER NOT NULL, tid INTEGER NOT NULL, start BIGINT NOT NULL, "end" BIGINT NOT NULL,
    name_id INTEGER NOT NULL, event_id INTEGER, extdata JSONB DEFAULT "{{}}" NOT NULL);
CREATE TABLE "rocpd_kernel_dispatch{s}" (id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, guid TEXT NOT NULL,
    nid INTEGER NOT NULL, pid INTEGER NOT NULL, tid INTEGER, agent_id INTEGER NOT NULL, kernel_id INTEGER NOT NULL,
    dispatch_id INTEGER NOT NULL, queue_id INTEGER NOT NULL, stream_id INTEGER NOT NULL, start BIGINT NOT NULL,
    "end" BIGINT NOT NULL, private_segment_size INTEGER, group_segment_size INTEGER,
    workgroup_size_x INTEGER NOT NULL, workgroup_size_y INTEGER NOT NULL, workgroup_size_z INTEGER NOT NULL,
    grid_size_x INTEGER NOT NULL, grid_size_y INTEGER NOT NULL, grid_size_z INTEGER NOT NULL,
    region_name_id INTEGER, event_id INTEGER, extdata JSONB DEFAULT "{{}}" NOT NULL);
CREATE TABLE "rocpd_memory_copy{s}" (id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, guid TEXT NOT NULL,
    nid INTEGER NOT NULL, pid INTEGER NOT NULL, tid INTEGER, start BIGINT NOT NULL, "end" BIGINT NOT NULL,
    name_id INTEGER NOT NULL, dst_agent_id INTEGER, dst_address INTEGER, src_agent_id INTEGER, src_address INTEGER,
    size INTEGER NOT NULL, queue_id INTEGER, stream_id INTEGER, region_name_id INTEGER, event_id INTEGER,
    extdata JSONB DEFAULT "{{}}" NOT NULL);
"""


_BASE_TABLES = (
    "metadata string info_node info_process info_thread info_agent info_queue info_stream info_pmc "
    "info_code_object info_kernel_symbol event pmc_event region kernel_dispatch memory_copy"
).split()


def _views(s: str) -> str:
    simple = "\n".join(f'CREATE VIEW "rocpd_{t}" AS SELECT * FROM "rocpd_{t}{s}";' for t in _BASE_TABLES)
    return (
        simple
        + """
CREATE VIEW kernels AS SELECT
    K.id, K.guid, T.tid,
    (SELECT string FROM rocpd_string RS WHERE RS.id = E.category_id AND RS.guid = E.guid) AS category,
    R.string AS region, S.display_name AS name, K.nid, P.pid,
    A.absolute_index AS agent_abs_index, A.logical_index AS agent_log_index,
    A.type_index AS agent_type_index, A.type AS agent_type, S.code_object_id AS code_object_id,
    K.kernel_id, K.dispatch_id, K.stream_id, K.queue_id, Q.name AS queue, ST.name AS stream,
    K.start, K.end, (K.end - K.start) AS duration,
    K.grid_size_x AS grid_x, K.grid_size_y AS grid_y, K.grid_size_z AS grid_z,
    K.workgroup_size_x AS workgroup_x, K.workgroup_size_y AS workgroup_y, K.workgroup_size_z AS workgroup_z,
    K.group_segment_size AS lds_size, K.private_segment_size AS scratch_size,
    S.arch_vgpr_count AS vgpr_count, S.accum_vgpr_count, S.sgpr_count,
    S.group_segment_size AS static_lds_size, S.private_segment_size AS static_scratch_size,
    E.stack_id, E.parent_stack_id, E.correlation_id AS corr_id
FROM rocpd_kernel_dispatch K
    INNER JOIN rocpd_info_agent A ON A.id = K.agent_id AND A.guid = K.guid
    INNER JOIN rocpd_event E ON E.id = K.event_id AND E.guid = K.guid
    INNER JOIN rocpd_string R ON R.id = K.region_name_id AND R.guid = K.guid
    INNER JOIN rocpd_info_kernel_symbol S ON S.id = K.kernel_id AND S.guid = K.guid
    LEFT JOIN rocpd_info_stream ST ON ST.id = K.stream_id AND ST.guid = K.guid
    LEFT JOIN rocpd_info_queue Q ON Q.id = K.queue_id AND Q.guid = K.guid
    INNER JOIN rocpd_info_process P ON P.id = Q.pid AND P.guid = Q.guid
    INNER JOIN rocpd_info_thread T ON T.id = K.tid AND T.guid = K.guid;

CREATE VIEW regions AS SELECT
    R.id, R.guid,
    (SELECT string FROM rocpd_string RS WHERE RS.id = E.category_id AND RS.guid = E.guid) AS category,
    S.string AS name, R.nid, P.pid, T.tid, R.start, R.end, (R.end - R.start) AS duration, R.event_id,
    E.stack_id, E.parent_stack_id, E.correlation_id AS corr_id, E.extdata, E.call_stack, E.line_info
FROM rocpd_region R
    INNER JOIN rocpd_event E ON E.id = R.event_id AND E.guid = R.guid
    INNER JOIN rocpd_string S ON S.id = R.name_id AND S.guid = R.guid
    INNER JOIN rocpd_info_process P ON P.id = R.pid AND P.guid = R.guid
    INNER JOIN rocpd_info_thread T ON T.id = R.tid AND T.guid = R.guid;

CREATE VIEW memory_copies AS SELECT
    M.id, M.guid,
    (SELECT string FROM rocpd_string RS WHERE RS.id = E.category_id AND RS.guid = E.guid) AS category,
    M.nid, P.pid, T.tid, M.start, M.end, (M.end - M.start) AS duration, S.string AS name,
    R.string AS region_name, M.stream_id, M.queue_id, ST.name AS stream_name, Q.name AS queue_name, M.size,
    dst_agent.name AS dst_device, dst_agent.absolute_index AS dst_agent_abs_index,
    dst_agent.logical_index AS dst_agent_log_index, dst_agent.type_index AS dst_agent_type_index,
    dst_agent.type AS dst_agent_type, M.dst_address,
    src_agent.name AS src_device, src_agent.absolute_index AS src_agent_abs_index,
    src_agent.logical_index AS src_agent_log_index, src_agent.type_index AS src_agent_type_index,
    src_agent.type AS src_agent_type, M.src_address,
    E.stack_id, E.parent_stack_id, E.correlation_id AS corr_id
FROM rocpd_memory_copy M
    INNER JOIN rocpd_string S ON S.id = M.name_id AND S.guid = M.guid
    LEFT JOIN rocpd_string R ON R.id = M.region_name_id AND R.guid = M.guid
    INNER JOIN rocpd_info_agent dst_agent ON dst_agent.id = M.dst_agent_id AND dst_agent.guid = M.guid
    INNER JOIN rocpd_info_agent src_agent ON src_agent.id = M.src_agent_id AND src_agent.guid = M.guid
    LEFT JOIN rocpd_info_queue Q ON Q.id = M.queue_id AND Q.guid = M.guid
    LEFT JOIN rocpd_info_stream ST ON ST.id = M.stream_id AND ST.guid = M.guid
    INNER JOIN rocpd_event E ON E.id = M.event_id AND E.guid = M.guid
    INNER JOIN rocpd_info_process P ON P.id = M.pid AND P.guid = M.guid
    INNER JOIN rocpd_info_thread T ON T.id = M.tid AND T.guid = M.guid;

CREATE VIEW counters_collection AS SELECT
    MIN(PMC_E.id) AS id, PMC_E.guid, K.dispatch_id, K.kernel_id, E.id AS event_id, E.correlation_id,
    E.stack_id, E.parent_stack_id, P.pid, T.tid, K.agent_id, A.absolute_index AS agent_abs_index,
    A.logical_index AS agent_log_index, A.type_index AS agent_type_index, A.type AS agent_type, K.queue_id,
    K.grid_size_x AS grid_size_x, K.grid_size_y AS grid_size_y, K.grid_size_z AS grid_size_z,
    (K.grid_size_x * K.grid_size_y * K.grid_size_z) AS grid_size, S.display_name AS kernel_name,
    K.workgroup_size_x AS workgroup_size_x, K.workgroup_size_y AS workgroup_size_y,
    K.workgroup_size_z AS workgroup_size_z,
    (K.workgroup_size_x * K.workgroup_size_y * K.workgroup_size_z) AS workgroup_size,
    K.group_segment_size AS lds_block_size, K.private_segment_size AS scratch_size,
    S.arch_vgpr_count AS vgpr_count, S.accum_vgpr_count, S.sgpr_count,
    PMC_I.name AS counter_name, PMC_I.symbol AS counter_symbol, PMC_I.component, PMC_I.description,
    PMC_I.block, PMC_I.expression, PMC_I.value_type, PMC_I.id AS counter_id, SUM(PMC_E.value) AS value,
    K.start, K.end, PMC_I.is_constant, PMC_I.is_derived, (K.end - K.start) AS duration, K.nid,
    E.extdata, S.code_object_id
FROM rocpd_pmc_event PMC_E
    INNER JOIN rocpd_info_pmc PMC_I ON PMC_I.id = PMC_E.pmc_id AND PMC_I.guid = PMC_E.guid
    INNER JOIN rocpd_event E ON E.id = PMC_E.event_id AND E.guid = PMC_E.guid
    INNER JOIN rocpd_kernel_dispatch K ON K.event_id = PMC_E.event_id AND K.guid = PMC_E.guid
    INNER JOIN rocpd_info_agent A ON A.id = K.agent_id AND A.guid = K.guid
    INNER JOIN rocpd_info_kernel_symbol S ON S.id = K.kernel_id AND S.guid = K.guid
    INNER JOIN rocpd_info_process P ON P.id = K.pid AND P.guid = K.guid
    INNER JOIN rocpd_info_thread T ON T.id = K.tid AND T.guid = K.guid
GROUP BY PMC_E.guid, K.dispatch_id, PMC_I.name, K.agent_id;
"""
    )


def write_rocpd(path: Path, processes: list[Process], *, views: bool = True, schema_version: str = "3") -> Path:
    """Write a rocpd database holding ``processes`` (one guid for the whole file, one node per
    distinct hostname) and return its path."""
    guid = str(uuidlib.uuid4())
    suffix = "_" + guid.replace("-", "_")
    conn = sqlite3.connect(path)
    conn.executescript(_tables(suffix))
    if views:
        conn.executescript(_views(suffix))
    t = {name: f'"rocpd_{name}{suffix}"' for name in _BASE_TABLES}
    strings: dict[str, int] = {}

    def sid(text: str) -> int:
        if text not in strings:
            cur = conn.execute(f"INSERT INTO {t['string']} (guid, string) VALUES (?, ?)", (guid, text))
            strings[text] = int(cur.lastrowid or 0)
        return strings[text]

    def event(category: str, corr: int) -> int:
        cur = conn.execute(
            f"INSERT INTO {t['event']} (guid, category_id, correlation_id) VALUES (?, ?, ?)", (guid, sid(category), corr)
        )
        return int(cur.lastrowid or 0)

    conn.execute(f"INSERT INTO {t['metadata']} (tag, value) VALUES ('schema_version', ?)", (schema_version,))
    conn.execute(f"INSERT INTO {t['metadata']} (tag, value) VALUES ('uuid', ?)", (suffix,))
    nodes: dict[str, int] = {}
    corr = 0
    dispatch = 0
    for proc in processes:
        if proc.hostname not in nodes:
            cur = conn.execute(
                f"INSERT INTO {t['info_node']} (guid, hash, machine_id, system_name, hostname) VALUES (?, ?, ?, 'Linux', ?)",
                (guid, len(nodes) + 1, f"machine-{proc.hostname}", proc.hostname),
            )
            nodes[proc.hostname] = int(cur.lastrowid or 0)
        nid = nodes[proc.hostname]
        cur = conn.execute(
            f"INSERT INTO {t['info_process']} (guid, nid, ppid, pid, init, fini, start, \"end\", command, environment)"
            " VALUES (?, ?, 1, ?, 0, 0, 0, 0, ?, ?)",
            (guid, nid, proc.pid, "python train.py", json.dumps(proc.env)),
        )
        p_id = int(cur.lastrowid or 0)
        cur = conn.execute(
            f"INSERT INTO {t['info_thread']} (guid, nid, ppid, pid, tid, name) VALUES (?, ?, 1, ?, ?, 'main')",
            (guid, nid, p_id, proc.pid),
        )
        th_id = int(cur.lastrowid or 0)
        agents = []
        for i in range(proc.gpus + 1):
            kind = "CPU" if i == 0 else "GPU"
            cur = conn.execute(
                f"INSERT INTO {t['info_agent']} (guid, nid, pid, type, absolute_index, logical_index, type_index, name)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (guid, nid, p_id, kind, i, i, 0 if i == 0 else i - 1, "AMD EPYC" if i == 0 else "gfx942"),
            )
            agents.append(int(cur.lastrowid or 0))
        q_id = int(conn.execute(f"INSERT INTO {t['info_queue']} (guid, nid, pid, name) VALUES (?, ?, ?, 'q0')", (guid, nid, p_id)).lastrowid or 0)
        st_id = int(conn.execute(f"INSERT INTO {t['info_stream']} (guid, nid, pid, name) VALUES (?, ?, ?, 's0')", (guid, nid, p_id)).lastrowid or 0)
        co_id = int(
            conn.execute(
                f"INSERT INTO {t['info_code_object']} (guid, nid, pid, agent_id, uri, storage_type) VALUES (?, ?, ?, ?, 'file://a.out', 'FILE')",
                (guid, nid, p_id, agents[1] if len(agents) > 1 else agents[0]),
            ).lastrowid
            or 0
        )
        symbols: dict[str, int] = {}
        pmcs: dict[str, int] = {}
        for k in proc.kernels:
            if k.name not in symbols:
                cur = conn.execute(
                    f"INSERT INTO {t['info_kernel_symbol']} (guid, nid, pid, code_object_id, kernel_name, display_name,"
                    " group_segment_size, private_segment_size, sgpr_count, arch_vgpr_count, accum_vgpr_count)"
                    " VALUES (?, ?, ?, ?, ?, ?, 0, 0, 16, 8, 0)",
                    (guid, nid, p_id, co_id, k.name + ".kd", k.name),
                )
                symbols[k.name] = int(cur.lastrowid or 0)
            corr += 1
            dispatch += 1
            ev = event("KERNEL_DISPATCH", corr)
            conn.execute(
                f"INSERT INTO {t['kernel_dispatch']} (guid, nid, pid, tid, agent_id, kernel_id, dispatch_id, queue_id,"
                " stream_id, start, \"end\", private_segment_size, group_segment_size, workgroup_size_x, workgroup_size_y,"
                " workgroup_size_z, grid_size_x, grid_size_y, grid_size_z, region_name_id, event_id)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, 0, ?, ?, ?, ?, ?, ?, ?, ?)",
                (guid, nid, p_id, th_id, agents[k.agent], symbols[k.name], dispatch, q_id, st_id, k.start, k.end,
                 *k.workgroup, *k.grid, sid("hipLaunchKernel"), ev),
            )  # fmt: skip
            for cname, value in k.counters.items():
                if cname not in pmcs:
                    cur = conn.execute(
                        f"INSERT INTO {t['info_pmc']} (guid, nid, pid, agent_id, target_arch, name, symbol, value_type)"
                        " VALUES (?, ?, ?, ?, 'GPU', ?, ?, 'ABS')",
                        (guid, nid, p_id, agents[k.agent], cname, cname),
                    )
                    pmcs[cname] = int(cur.lastrowid or 0)
                conn.execute(
                    f"INSERT INTO {t['pmc_event']} (guid, event_id, pmc_id, value) VALUES (?, ?, ?, ?)",
                    (guid, ev, pmcs[cname], value),
                )
        for c in proc.copies:
            corr += 1
            ev = event("MEMORY_COPY", corr)
            conn.execute(
                f"INSERT INTO {t['memory_copy']} (guid, nid, pid, tid, start, \"end\", name_id, dst_agent_id, src_agent_id,"
                " size, queue_id, stream_id, event_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (guid, nid, p_id, th_id, c.start, c.end, sid(c.direction), agents[c.dst_agent], agents[c.src_agent],
                 c.size, q_id, st_id, ev),
            )  # fmt: skip
        for r in proc.regions:
            corr += 1
            ev = event(r.category, corr)
            conn.execute(
                f"INSERT INTO {t['region']} (guid, nid, pid, tid, start, \"end\", name_id, event_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (guid, nid, p_id, th_id, r.start, r.end, sid(r.name), ev),
            )
    conn.commit()
    conn.close()
    return path


def sample_process(pid: int, env: dict[str, str], hostname: str = "node01", seed: int = 0, n: int = 40) -> Process:
    """A process with ``n`` kernels of three names (two with counters), two copies, an API call and a
    ROCTx range; ``seed`` shifts the durations so that ranks differ."""
    names = ["gemm_kernel(float*, int)", "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)", "elementwise<float>"]
    kernels = []
    t = 1_000_000_000 + seed * 10_000
    for i in range(n):
        name = names[i % 3]
        dur = 1000 + (i * 37 + seed * 101) % 5000
        counters = {"SQ_WAVES": float(64 + i), "GRBM_GUI_ACTIVE": float(1000 + dur)} if i % 3 != 1 else {}
        kernels.append(Kernel(name, t, t + dur, agent=1 + (i % 2), counters=counters))
        t += dur + 500
    copies = [
        Copy("MEMORY_COPY_HOST_TO_DEVICE", t, t + 7000, 1 << 20, 0, 1),
        Copy("MEMORY_COPY_DEVICE_TO_HOST", t + 8000, t + 9000, 4096, 1, 0),
    ]
    regions = [
        Region("HIP_RUNTIME_API", "hipMemcpy", t, t + 7500),
        Region("MARKER_CORE_API", "ProfilerStep#1", 999_000_000, t + 10_000),
    ]
    return Process(pid, env, hostname, 2, kernels, copies, regions)
