"""query views: the cross-rank questions of `profdb query` as SQL views, for sqlite3/psql sessions
(README "Cross-rank questions"). Views only, portable SQL (SQLite >= 3.25 for window functions, PostgreSQL).

    name_rank_v        T_r per (run, kind, name, rank), 0 for ranks that never ran the name
    imbalance_v        per (run, kind, name): mean/max/min over ranks, imbalance, recoverable, slowest/
                       fastest rank with host and local_rank, suspect_rank (fastest for communication)
    kernel_imbalance_v imbalance_v of GPU kernels only
    hotspot_v          per (run, kind, name): total over ranks, share of the kind's time, calls, mean per call
    rank_total_v       per (run, rank, kind, category): names, calls, total_ns
    host_rollup_v      per (run, hostname, kind, category): ranks on the host, total_ns, mean per rank
    local_rank_rollup_v  the same per local_rank (one GPU slot across nodes)
    step_imbalance_v   per (run, step): ranks, mean/max/min, imbalance, slowest/fastest rank

The same figures as profdb.store.queries (tests/test_query_views.py checks that they agree).

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

# Integer ns stay integers: SUM over BIGINT is NUMERIC on PostgreSQL, so it is cast back.
_SUM_T = "CAST(SUM(total_ns) AS BIGINT)"
_F = "DOUBLE PRECISION"

VIEWS = {
    # every name present in a run, crossed with every rank of the run: absent ranks get T_r = 0
    "name_rank_v": """
        SELECT r.name AS run, n.kind, n.category, nm.value AS name,
               k.hostname, k.global_rank, k.local_rank,
               CASE WHEN s.rank_id IS NULL THEN 0 ELSE 1 END AS present,
               COALESCE(s.calls, 0) AS calls, COALESCE(s.total_ns, 0) AS total_ns,
               n.run_id, n.name_id, k.id AS rank_id
        FROM (SELECT k2.run_id, s2.kind, s2.name_id, MIN(s2.category) AS category
              FROM summary s2 JOIN rank k2 ON k2.id = s2.rank_id
              GROUP BY k2.run_id, s2.kind, s2.name_id) n
        JOIN rank k ON k.run_id = n.run_id
        JOIN run r ON r.id = n.run_id
        JOIN name nm ON nm.id = n.name_id
        LEFT JOIN summary s ON s.rank_id = k.id AND s.name_id = n.name_id AND s.kind = n.kind""",
    "imbalance_v": f"""
        SELECT g.*,
               CASE WHEN g.category = 'communication' THEN g.fastest_rank ELSE g.slowest_rank END AS suspect_rank
        FROM (
            SELECT run, kind, category, name,
                   COUNT(*) AS ranks,
                   COUNT(*) - SUM(present) AS absent_ranks,
                   CAST(SUM(calls) AS BIGINT) AS calls,
                   {_SUM_T} AS total_ns,
                   {_SUM_T} / COUNT(*) AS mean_ns,
                   MAX(total_ns) AS max_ns,
                   MIN(total_ns) AS min_ns,
                   CASE WHEN SUM(total_ns) > 0
                        THEN CAST(MAX(total_ns) AS {_F}) * COUNT(*) / CAST(SUM(total_ns) AS {_F}) END AS imbalance,
                   MAX(total_ns) - {_SUM_T} / COUNT(*) AS recoverable_ns,
                   MAX(CASE WHEN slow_pos = 1 THEN global_rank END) AS slowest_rank,
                   MAX(CASE WHEN slow_pos = 1 THEN hostname END) AS slowest_host,
                   MAX(CASE WHEN slow_pos = 1 THEN local_rank END) AS slowest_local_rank,
                   MAX(CASE WHEN fast_pos = 1 THEN global_rank END) AS fastest_rank,
                   MAX(CASE WHEN fast_pos = 1 THEN hostname END) AS fastest_host,
                   MAX(CASE WHEN fast_pos = 1 THEN local_rank END) AS fastest_local_rank,
                   run_id, name_id
            FROM (SELECT v.*,
                         ROW_NUMBER() OVER (PARTITION BY v.run_id, v.kind, v.name_id
                                            ORDER BY v.total_ns DESC, v.global_rank) AS slow_pos,
                         ROW_NUMBER() OVER (PARTITION BY v.run_id, v.kind, v.name_id
                                            ORDER BY v.total_ns ASC, v.global_rank) AS fast_pos
                  FROM name_rank_v v) x
            GROUP BY run_id, run, kind, category, name_id, name
        ) g""",
    "kernel_imbalance_v": "SELECT * FROM imbalance_v WHERE kind = 'kernel'",
    "hotspot_v": f"""
        SELECT v.run, v.kind, v.category, v.name,
               SUM(v.present) AS ranks,
               CAST(SUM(v.calls) AS BIGINT) AS calls,
               CAST(SUM(v.total_ns) AS BIGINT) AS total_ns,
               CAST(100.0 * SUM(v.total_ns) AS {_F}) / CAST(NULLIF(t.kind_total_ns, 0) AS {_F}) AS share_pct,
               CAST(SUM(v.total_ns) AS BIGINT) / NULLIF(CAST(SUM(v.calls) AS BIGINT), 0) AS mean_ns,
               MIN(v.total_ns) AS rank_min_ns,
               MAX(v.total_ns) AS rank_max_ns,
               v.run_id, v.name_id
        FROM name_rank_v v
        JOIN (SELECT k.run_id, s.kind, CAST(SUM(s.total_ns) AS BIGINT) AS kind_total_ns
              FROM summary s JOIN rank k ON k.id = s.rank_id
              GROUP BY k.run_id, s.kind) t ON t.run_id = v.run_id AND t.kind = v.kind
        GROUP BY v.run_id, v.run, v.kind, v.category, v.name_id, v.name, t.kind_total_ns""",
    "rank_total_v": """
        SELECT r.name AS run, k.hostname, k.global_rank, k.local_rank, s.kind, s.category,
               COUNT(*) AS names, CAST(SUM(s.calls) AS BIGINT) AS calls,
               CAST(SUM(s.total_ns) AS BIGINT) AS total_ns,
               k.run_id, k.id AS rank_id
        FROM summary s JOIN rank k ON k.id = s.rank_id JOIN run r ON r.id = k.run_id
        GROUP BY k.run_id, r.name, k.id, k.hostname, k.global_rank, k.local_rank, s.kind, s.category""",
    "host_rollup_v": """
        SELECT r.name AS run, h.hostname, s.kind, s.category, h.ranks,
               CAST(SUM(s.total_ns) AS BIGINT) AS total_ns,
               CAST(SUM(s.total_ns) AS BIGINT) / h.ranks AS mean_rank_ns,
               h.run_id
        FROM summary s
        JOIN rank k ON k.id = s.rank_id
        JOIN (SELECT run_id, hostname, COUNT(*) AS ranks FROM rank GROUP BY run_id, hostname) h
          ON h.run_id = k.run_id AND COALESCE(h.hostname, '') = COALESCE(k.hostname, '')
        JOIN run r ON r.id = k.run_id
        GROUP BY h.run_id, r.name, h.hostname, s.kind, s.category, h.ranks""",
    "local_rank_rollup_v": """
        SELECT r.name AS run, h.local_rank, s.kind, s.category, h.ranks,
               CAST(SUM(s.total_ns) AS BIGINT) AS total_ns,
               CAST(SUM(s.total_ns) AS BIGINT) / h.ranks AS mean_rank_ns,
               h.run_id
        FROM summary s
        JOIN rank k ON k.id = s.rank_id
        JOIN (SELECT run_id, local_rank, COUNT(*) AS ranks FROM rank GROUP BY run_id, local_rank) h
          ON h.run_id = k.run_id AND COALESCE(h.local_rank, -1) = COALESCE(k.local_rank, -1)
        JOIN run r ON r.id = k.run_id
        GROUP BY h.run_id, r.name, h.local_rank, s.kind, s.category, h.ranks""",
    "step_imbalance_v": f"""
        SELECT run, step,
               COUNT(*) AS ranks,
               CAST(SUM(duration_ns) AS BIGINT) / COUNT(*) AS mean_ns,
               MAX(duration_ns) AS max_ns,
               MIN(duration_ns) AS min_ns,
               CASE WHEN SUM(duration_ns) > 0
                    THEN CAST(MAX(duration_ns) AS {_F}) * COUNT(*) / CAST(SUM(duration_ns) AS {_F}) END AS imbalance,
               MAX(duration_ns) - CAST(SUM(duration_ns) AS BIGINT) / COUNT(*) AS recoverable_ns,
               MAX(CASE WHEN slow_pos = 1 THEN global_rank END) AS slowest_rank,
               MAX(CASE WHEN slow_pos = 1 THEN hostname END) AS slowest_host,
               MAX(CASE WHEN slow_pos = 1 THEN local_rank END) AS slowest_local_rank,
               MAX(CASE WHEN fast_pos = 1 THEN global_rank END) AS fastest_rank,
               MAX(CASE WHEN fast_pos = 1 THEN hostname END) AS fastest_host,
               MAX(CASE WHEN fast_pos = 1 THEN local_rank END) AS fastest_local_rank,
               run_id
        FROM (SELECT r.name AS run, k.run_id, k.hostname, k.global_rank, k.local_rank, s.step, s.duration_ns,
                     ROW_NUMBER() OVER (PARTITION BY k.run_id, s.step
                                        ORDER BY s.duration_ns DESC, k.global_rank) AS slow_pos,
                     ROW_NUMBER() OVER (PARTITION BY k.run_id, s.step
                                        ORDER BY s.duration_ns ASC, k.global_rank) AS fast_pos
              FROM step s JOIN rank k ON k.id = s.rank_id JOIN run r ON r.id = k.run_id) x
        GROUP BY run_id, run, step""",
}


def upgrade() -> None:
    for name, sql in VIEWS.items():
        op.execute(f"CREATE VIEW {name} AS {sql}")


def downgrade() -> None:
    for name in reversed(list(VIEWS)):
        op.execute(f"DROP VIEW IF EXISTS {name}")
