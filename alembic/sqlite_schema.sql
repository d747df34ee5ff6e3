-- profdb SQLite store at revision 0014 (generated: python -m profdb.store.db --write-schema)
BEGIN TRANSACTION;
CREATE TABLE "activity" (
	id INTEGER NOT NULL, 
	rank_id INTEGER NOT NULL, 
	source_id INTEGER NOT NULL, 
	kind VARCHAR(20) NOT NULL, 
	category VARCHAR(20) NOT NULL, 
	name_id INTEGER NOT NULL, 
	start_ns BIGINT NOT NULL, 
	duration_ns BIGINT NOT NULL, 
	correlation BIGINT, 
	launch_id INTEGER NOT NULL, 
	origin_id INTEGER NOT NULL, 
	args TEXT, 
	CONSTRAINT pk_activity PRIMARY KEY (id), 
	CONSTRAINT fk_activity_name_id_name FOREIGN KEY(name_id) REFERENCES name (id)
);
CREATE TABLE alembic_version (
	version_num VARCHAR(32) NOT NULL, 
	CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num)
);
INSERT INTO "alembic_version" VALUES('0014');
CREATE TABLE classification_rules (
	id INTEGER NOT NULL, 
	digest VARCHAR(64) NOT NULL, 
	shipped_version INTEGER NOT NULL, 
	rules_json TEXT NOT NULL, 
	created_at DATETIME NOT NULL, 
	CONSTRAINT pk_classification_rules PRIMARY KEY (id), 
	CONSTRAINT uq_classification_rules_digest UNIQUE (digest)
);
CREATE TABLE collective_call (
	rank_id INTEGER NOT NULL, 
	family VARCHAR(20) NOT NULL, 
	group_name VARCHAR(255) NOT NULL, 
	collective VARCHAR(60) NOT NULL, 
	seq INTEGER NOT NULL, 
	run_id INTEGER NOT NULL, 
	start_ns BIGINT NOT NULL, 
	end_ns BIGINT NOT NULL, 
	bytes BIGINT, 
	busy_before_ns BIGINT NOT NULL, 
	window_ns BIGINT NOT NULL, 
	CONSTRAINT pk_collective_call PRIMARY KEY (rank_id, family, group_name, collective, seq), 
	CONSTRAINT fk_collective_call_rank_id_rank FOREIGN KEY(rank_id) REFERENCES rank (id) ON DELETE CASCADE, 
	CONSTRAINT fk_collective_call_run_id_run FOREIGN KEY(run_id) REFERENCES run (id) ON DELETE CASCADE
);
CREATE TABLE "counter" (
	id INTEGER NOT NULL, 
	rank_id INTEGER NOT NULL, 
	source_id INTEGER NOT NULL, 
	kernel_name_id INTEGER NOT NULL, 
	counter_name_id INTEGER NOT NULL, 
	dispatch_id BIGINT, 
	value FLOAT NOT NULL, 
	samples BIGINT NOT NULL, 
	min_value FLOAT, 
	max_value FLOAT, 
	CONSTRAINT pk_counter PRIMARY KEY (id), 
	CONSTRAINT fk_counter_counter_name_id_name FOREIGN KEY(counter_name_id) REFERENCES name (id), 
	CONSTRAINT fk_counter_kernel_name_id_name FOREIGN KEY(kernel_name_id) REFERENCES name (id)
);
CREATE TABLE fact_span (
	id INTEGER NOT NULL, 
	fact VARCHAR(20) NOT NULL, 
	rank_id INTEGER NOT NULL, 
	source_id INTEGER NOT NULL, 
	first_id BIGINT NOT NULL, 
	last_id BIGINT NOT NULL, 
	CONSTRAINT pk_fact_span PRIMARY KEY (id), 
	CONSTRAINT fk_fact_span_source_id_source_file FOREIGN KEY(source_id) REFERENCES source_file (id) ON DELETE CASCADE
);
CREATE TABLE host_clock (
	run_id INTEGER NOT NULL, 
	hostname VARCHAR(255) NOT NULL, 
	offset_ns BIGINT NOT NULL, 
	error_ns BIGINT NOT NULL, 
	samples INTEGER NOT NULL, 
	CONSTRAINT pk_host_clock PRIMARY KEY (run_id, hostname), 
	CONSTRAINT fk_host_clock_run_id_run FOREIGN KEY(run_id) REFERENCES run (id) ON DELETE CASCADE
);
CREATE TABLE "launch" (
	id INTEGER NOT NULL, 
	"key" TEXT NOT NULL, 
	grid_x BIGINT, 
	grid_y BIGINT, 
	grid_z BIGINT, 
	block_x BIGINT, 
	block_y BIGINT, 
	block_z BIGINT, 
	CONSTRAINT pk_launch PRIMARY KEY (id), 
	CONSTRAINT uq_launch_key UNIQUE ("key")
);
CREATE TABLE name (
	id INTEGER NOT NULL, 
	value TEXT NOT NULL, 
	CONSTRAINT pk_name PRIMARY KEY (id), 
	CONSTRAINT uq_name_value UNIQUE (value)
);
CREATE TABLE origin (
	id INTEGER NOT NULL, 
	"key" TEXT NOT NULL, 
	device INTEGER, 
	stream BIGINT, 
	pid INTEGER, 
	tid BIGINT, 
	CONSTRAINT pk_origin PRIMARY KEY (id), 
	CONSTRAINT uq_origin_key UNIQUE ("key")
);
CREATE TABLE rank (
	id INTEGER NOT NULL, 
	run_id INTEGER NOT NULL, 
	global_rank INTEGER NOT NULL, 
	local_rank INTEGER, 
	hostname VARCHAR(255), 
	node_rank INTEGER, 
	pid INTEGER, 
	device INTEGER, exit_code INTEGER, signal INTEGER, started_at DATETIME, ended_at DATETIME, end_status VARCHAR(20), 
	CONSTRAINT pk_rank PRIMARY KEY (id), 
	CONSTRAINT fk_rank_run_id_run FOREIGN KEY(run_id) REFERENCES run (id) ON DELETE CASCADE, 
	CONSTRAINT uq_rank_run_id_global_rank UNIQUE (run_id, global_rank)
);
CREATE TABLE rank_analysis (
	rank_id INTEGER NOT NULL, 
	run_id INTEGER NOT NULL, 
	clock_offset_ns BIGINT, 
	instances INTEGER NOT NULL, 
	entered_last INTEGER NOT NULL, 
	tied_last INTEGER NOT NULL, 
	wait_caused_ns BIGINT NOT NULL, 
	wait_suffered_ns BIGINT NOT NULL, 
	busy_ns BIGINT NOT NULL, 
	idle_ns BIGINT NOT NULL, 
	span_ns BIGINT NOT NULL, 
	comm_ns BIGINT NOT NULL, 
	exposed_comm_ns BIGINT NOT NULL, 
	work_domain VARCHAR(10) NOT NULL, 
	CONSTRAINT pk_rank_analysis PRIMARY KEY (rank_id), 
	CONSTRAINT fk_rank_analysis_rank_id_rank FOREIGN KEY(rank_id) REFERENCES rank (id) ON DELETE CASCADE, 
	CONSTRAINT fk_rank_analysis_run_id_run_analysis FOREIGN KEY(run_id) REFERENCES run_analysis (run_id) ON DELETE CASCADE
);
CREATE TABLE rank_timeline (
	rank_id INTEGER NOT NULL, 
	first_ns BIGINT NOT NULL, 
	last_ns BIGINT NOT NULL, 
	work_domain VARCHAR(10) NOT NULL, 
	busy_ns BIGINT NOT NULL, 
	comm_ns BIGINT NOT NULL, 
	exposed_comm_ns BIGINT NOT NULL, 
	CONSTRAINT pk_rank_timeline PRIMARY KEY (rank_id), 
	CONSTRAINT fk_rank_timeline_rank_id_rank FOREIGN KEY(rank_id) REFERENCES rank (id) ON DELETE CASCADE
);
CREATE TABLE run (
	id INTEGER NOT NULL, 
	name VARCHAR(200) NOT NULL, 
	created_at DATETIME NOT NULL, 
	launcher VARCHAR(40), 
	command TEXT, 
	world_size INTEGER, 
	metadata_json TEXT, 
	CONSTRAINT pk_run PRIMARY KEY (id), 
	CONSTRAINT uq_run_name UNIQUE (name)
);
CREATE TABLE run_analysis (
	run_id INTEGER NOT NULL, 
	fingerprint VARCHAR(64) NOT NULL, 
	computed_at DATETIME NOT NULL, 
	family VARCHAR(20) NOT NULL, 
	instances INTEGER NOT NULL, 
	tied_instances INTEGER NOT NULL, 
	window_first_ns BIGINT, 
	window_last_ns BIGINT, 
	window_ranks_json TEXT, 
	end_spread_ns BIGINT, 
	duration_ns BIGINT, 
	apart TEXT, 
	verdict_rank INTEGER, 
	verdict_line TEXT, 
	verdict_cause VARCHAR(20), 
	verdict_last INTEGER, 
	verdict_instances INTEGER, 
	p_value FLOAT, 
	wait_share FLOAT, 
	time_share FLOAT, 
	work_ratio FLOAT, 
	lateness FLOAT, 
	clocks_json TEXT NOT NULL, 
	notes_json TEXT NOT NULL, 
	CONSTRAINT pk_run_analysis PRIMARY KEY (run_id), 
	CONSTRAINT fk_run_analysis_run_id_run FOREIGN KEY(run_id) REFERENCES run (id) ON DELETE CASCADE
);
CREATE TABLE source_file (
	id INTEGER NOT NULL, 
	run_id INTEGER NOT NULL, 
	rank_id INTEGER NOT NULL, 
	path TEXT NOT NULL, 
	content_hash VARCHAR(64) NOT NULL, 
	size_bytes BIGINT NOT NULL, 
	format VARCHAR(40) NOT NULL, 
	content_kind VARCHAR(60) NOT NULL, 
	rows BIGINT NOT NULL, 
	time_base_ns BIGINT NOT NULL, 
	identity_origin TEXT, 
	ingested_at DATETIME NOT NULL, rules_id INTEGER, unread_json TEXT, 
	CONSTRAINT pk_source_file PRIMARY KEY (id), 
	CONSTRAINT fk_source_file_rank_id_rank FOREIGN KEY(rank_id) REFERENCES rank (id) ON DELETE CASCADE, 
	CONSTRAINT fk_source_file_run_id_run FOREIGN KEY(run_id) REFERENCES run (id) ON DELETE CASCADE, 
	CONSTRAINT uq_source_file_rank_id_sha256 UNIQUE (rank_id, content_hash)
);
CREATE TABLE step (
	rank_id INTEGER NOT NULL, 
	step INTEGER NOT NULL, 
	source_id INTEGER NOT NULL, 
	start_ns BIGINT NOT NULL, 
	duration_ns BIGINT NOT NULL, 
	CONSTRAINT pk_step PRIMARY KEY (rank_id, step), 
	CONSTRAINT fk_step_rank_id_rank FOREIGN KEY(rank_id) REFERENCES rank (id) ON DELETE CASCADE, 
	CONSTRAINT fk_step_source_id_source_file FOREIGN KEY(source_id) REFERENCES source_file (id) ON DELETE CASCADE
);
CREATE TABLE step_analysis (
	rank_id INTEGER NOT NULL, 
	step INTEGER NOT NULL, 
	run_id INTEGER NOT NULL, 
	duration_ns BIGINT NOT NULL, 
	entered_last INTEGER NOT NULL, 
	wait_caused_ns BIGINT NOT NULL, 
	wait_suffered_ns BIGINT NOT NULL, 
	busy_ns BIGINT NOT NULL, 
	idle_ns BIGINT NOT NULL, 
	exposed_comm_ns BIGINT NOT NULL, 
	CONSTRAINT pk_step_analysis PRIMARY KEY (rank_id, step), 
	CONSTRAINT fk_step_analysis_rank_id_rank FOREIGN KEY(rank_id) REFERENCES rank (id) ON DELETE CASCADE, 
	CONSTRAINT fk_step_analysis_run_id_run_analysis FOREIGN KEY(run_id) REFERENCES run_analysis (run_id) ON DELETE CASCADE
);
CREATE TABLE step_timeline (
	rank_id INTEGER NOT NULL, 
	step INTEGER NOT NULL, 
	busy_ns BIGINT NOT NULL, 
	exposed_comm_ns BIGINT NOT NULL, 
	CONSTRAINT pk_step_timeline PRIMARY KEY (rank_id, step), 
	CONSTRAINT fk_step_timeline_rank_id_rank FOREIGN KEY(rank_id) REFERENCES rank (id) ON DELETE CASCADE
);
CREATE TABLE "summary" (
	rank_id INTEGER NOT NULL, 
	name_id INTEGER NOT NULL, 
	kind VARCHAR(20) NOT NULL, 
	category VARCHAR(20) NOT NULL, 
	calls BIGINT NOT NULL, 
	total_ns BIGINT NOT NULL, 
	min_ns BIGINT NOT NULL, 
	max_ns BIGINT NOT NULL, 
	sum_sq_ns FLOAT NOT NULL, 
	self_ns BIGINT, 
	CONSTRAINT pk_summary PRIMARY KEY (rank_id, name_id, kind), 
	CONSTRAINT fk_summary_name_id_name FOREIGN KEY(name_id) REFERENCES name (id), 
	CONSTRAINT fk_summary_rank_id_rank FOREIGN KEY(rank_id) REFERENCES rank (id) ON DELETE CASCADE
)
 WITHOUT ROWID

;
CREATE INDEX ix_rank_run_id ON rank (run_id);
CREATE INDEX ix_source_file_rank_id ON source_file (rank_id);
CREATE INDEX ix_source_file_run_id ON source_file (run_id);
CREATE INDEX ix_step_source_id ON step (source_id);
CREATE INDEX ix_collective_call_match ON collective_call (run_id, family, collective, group_name, seq);
CREATE INDEX ix_rank_analysis_run_id ON rank_analysis (run_id);
CREATE INDEX ix_step_analysis_run_id ON step_analysis (run_id);
CREATE INDEX ix_fact_span_rank_id ON fact_span (rank_id);
CREATE INDEX ix_fact_span_source_id ON fact_span (source_id);
CREATE TRIGGER source_file_fact_rows BEFORE DELETE ON source_file
BEGIN
    DELETE FROM activity WHERE id IN (SELECT a.id FROM fact_span s JOIN activity a
        ON a.id BETWEEN s.first_id AND s.last_id AND +a.source_id = OLD.id
        WHERE s.source_id = OLD.id AND s.fact = 'activity');
    DELETE FROM counter WHERE id IN (SELECT c.id FROM fact_span s JOIN counter c
        ON c.id BETWEEN s.first_id AND s.last_id AND +c.source_id = OLD.id
        WHERE s.source_id = OLD.id AND s.fact = 'counter');
END;
CREATE VIEW rank_v AS 
        SELECT r.name AS run, k.hostname, k.global_rank, k.local_rank, k.node_rank, k.pid, k.device,
               (SELECT COUNT(*) FROM source_file s WHERE s.rank_id = k.id) AS sources,
               (SELECT COALESCE(SUM(s.rows), 0) FROM source_file s WHERE s.rank_id = k.id) AS rows,
               k.exit_code, k.signal, k.started_at, k.ended_at, k.end_status
        FROM rank k JOIN run r ON r.id = k.run_id;
CREATE VIEW step_v AS 
        SELECT r.name AS run, k.hostname, k.global_rank, k.local_rank, s.step, s.start_ns, s.duration_ns
        FROM step s JOIN rank k ON k.id = s.rank_id JOIN run r ON r.id = k.run_id;
CREATE VIEW run_rules_v AS 
        SELECT r.name AS run, c.digest, c.shipped_version,
               COUNT(*) AS sources, CAST(COALESCE(SUM(s.rows), 0) AS BIGINT) AS rows, c.rules_json
        FROM source_file s JOIN run r ON r.id = s.run_id
        LEFT JOIN classification_rules c ON c.id = s.rules_id
        GROUP BY r.name, c.digest, c.shipped_version, c.rules_json;
CREATE VIEW rank_end_v AS 
        SELECT r.name AS run, k.hostname, k.global_rank, k.local_rank, k.end_status, k.exit_code, k.signal, k.started_at, k.ended_at
        FROM rank k JOIN run r ON r.id = k.run_id
        WHERE k.end_status IS NOT NULL;
CREATE VIEW name_rank_v AS 
        SELECT r.name AS run, n.kind, n.category, nm.value AS name,
               k.hostname, k.global_rank, k.local_rank,
               CASE WHEN s.rank_id IS NULL THEN 0 ELSE 1 END AS present,
               COALESCE(s.calls, 0) AS calls, COALESCE(s.self_ns, s.total_ns, 0) AS total_ns,
               n.run_id, n.name_id, k.id AS rank_id, COALESCE(s.total_ns, 0) AS inclusive_ns
        FROM (SELECT k2.run_id, s2.kind, s2.name_id, MIN(s2.category) AS category
              FROM summary s2 JOIN rank k2 ON k2.id = s2.rank_id
              GROUP BY k2.run_id, s2.kind, s2.name_id) n
        JOIN rank k ON k.run_id = n.run_id
        JOIN run r ON r.id = n.run_id
        JOIN name nm ON nm.id = n.name_id
        LEFT JOIN summary s ON s.rank_id = k.id AND s.name_id = n.name_id AND s.kind = n.kind;
CREATE VIEW imbalance_v AS 
        SELECT g.*,
               CASE WHEN g.category = 'communication' THEN g.fastest_rank ELSE g.slowest_rank END AS suspect_rank
        FROM (
            SELECT run, kind, category, name,
                   COUNT(*) AS ranks,
                   COUNT(*) - SUM(present) AS absent_ranks,
                   CAST(SUM(calls) AS BIGINT) AS calls,
                   CAST(SUM(total_ns) AS BIGINT) AS total_ns,
                   CAST(SUM(total_ns) AS BIGINT) / COUNT(*) AS mean_ns,
                   MAX(total_ns) AS max_ns,
                   MIN(total_ns) AS min_ns,
                   CASE WHEN SUM(total_ns) > 0
                        THEN CAST(MAX(total_ns) AS DOUBLE PRECISION) * COUNT(*) / CAST(SUM(total_ns) AS DOUBLE PRECISION) END AS imbalance,
                   MAX(total_ns) - CAST(SUM(total_ns) AS BIGINT) / COUNT(*) AS recoverable_ns,
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
        ) g;
CREATE VIEW kernel_imbalance_v AS SELECT * FROM imbalance_v WHERE kind = 'kernel';
CREATE VIEW hotspot_v AS 
        SELECT v.run, v.kind, v.category, v.name,
               SUM(v.present) AS ranks,
               CAST(SUM(v.calls) AS BIGINT) AS calls,
               CAST(SUM(v.total_ns) AS BIGINT) AS total_ns,
               CAST(100.0 * SUM(v.total_ns) AS DOUBLE PRECISION) / CAST(NULLIF(t.kind_total_ns, 0) AS DOUBLE PRECISION) AS share_pct,
               CAST(SUM(v.total_ns) AS BIGINT) / NULLIF(CAST(SUM(v.calls) AS BIGINT), 0) AS mean_ns,
               MIN(v.total_ns) AS rank_min_ns,
               MAX(v.total_ns) AS rank_max_ns,
               v.run_id, v.name_id,
               CAST(SUM(v.inclusive_ns) AS BIGINT) AS inclusive_ns
        FROM name_rank_v v
        JOIN (SELECT k.run_id, s.kind, CAST(SUM(COALESCE(s.self_ns, s.total_ns)) AS BIGINT) AS kind_total_ns
              FROM summary s JOIN rank k ON k.id = s.rank_id
              GROUP BY k.run_id, s.kind) t ON t.run_id = v.run_id AND t.kind = v.kind
        GROUP BY v.run_id, v.run, v.kind, v.category, v.name_id, v.name, t.kind_total_ns;
CREATE VIEW rank_total_v AS 
        SELECT r.name AS run, k.hostname, k.global_rank, k.local_rank, s.kind, s.category,
               COUNT(*) AS names, CAST(SUM(s.calls) AS BIGINT) AS calls,
               CAST(SUM(COALESCE(s.self_ns, s.total_ns)) AS BIGINT) AS total_ns,
               k.run_id, k.id AS rank_id
        FROM summary s JOIN rank k ON k.id = s.rank_id JOIN run r ON r.id = k.run_id
        GROUP BY k.run_id, r.name, k.id, k.hostname, k.global_rank, k.local_rank, s.kind, s.category;
CREATE VIEW host_rollup_v AS 
        SELECT r.name AS run, h.hostname, s.kind, s.category, h.ranks,
               CAST(SUM(COALESCE(s.self_ns, s.total_ns)) AS BIGINT) AS total_ns,
               CAST(SUM(COALESCE(s.self_ns, s.total_ns)) AS BIGINT) / h.ranks AS mean_rank_ns,
               h.run_id
        FROM summary s
        JOIN rank k ON k.id = s.rank_id
        JOIN (SELECT run_id, hostname, COUNT(*) AS ranks FROM rank GROUP BY run_id, hostname) h
          ON h.run_id = k.run_id AND COALESCE(h.hostname, '') = COALESCE(k.hostname, '')
        JOIN run r ON r.id = k.run_id
        GROUP BY h.run_id, r.name, h.hostname, s.kind, s.category, h.ranks;
CREATE VIEW local_rank_rollup_v AS 
        SELECT r.name AS run, h.local_rank, s.kind, s.category, h.ranks,
               CAST(SUM(COALESCE(s.self_ns, s.total_ns)) AS BIGINT) AS total_ns,
               CAST(SUM(COALESCE(s.self_ns, s.total_ns)) AS BIGINT) / h.ranks AS mean_rank_ns,
               h.run_id
        FROM summary s
        JOIN rank k ON k.id = s.rank_id
        JOIN (SELECT run_id, local_rank, COUNT(*) AS ranks FROM rank GROUP BY run_id, local_rank) h
          ON h.run_id = k.run_id AND COALESCE(h.local_rank, -1) = COALESCE(k.local_rank, -1)
        JOIN run r ON r.id = k.run_id
        GROUP BY h.run_id, r.name, h.local_rank, s.kind, s.category, h.ranks;
CREATE VIEW step_imbalance_v AS 
        SELECT run, step,
               COUNT(*) AS ranks,
               CAST(SUM(duration_ns) AS BIGINT) / COUNT(*) AS mean_ns,
               MAX(duration_ns) AS max_ns,
               MIN(duration_ns) AS min_ns,
               CASE WHEN SUM(duration_ns) > 0
                    THEN CAST(MAX(duration_ns) AS DOUBLE PRECISION) * COUNT(*) / CAST(SUM(duration_ns) AS DOUBLE PRECISION) END AS imbalance,
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
        GROUP BY run_id, run, step;
CREATE VIEW host_clock_v AS 
        SELECT r.name AS run, h.hostname, h.offset_ns, h.error_ns, h.samples, h.run_id
        FROM host_clock h JOIN run r ON r.id = h.run_id;
CREATE VIEW collective_call_v AS 
        SELECT r.name AS run, k.hostname, k.global_rank, k.local_rank, c.family, c.group_name, c.collective, c.seq,
               c.start_ns, c.end_ns, c.end_ns - c.start_ns AS duration_ns, c.bytes,
               c.start_ns - hc.offset_ns AS arrival_ns, hc.error_ns AS clock_error_ns,
               c.busy_before_ns, c.window_ns, c.run_id, c.rank_id
        FROM collective_call c JOIN rank k ON k.id = c.rank_id JOIN run r ON r.id = k.run_id LEFT JOIN host_clock hc ON hc.run_id = k.run_id AND hc.hostname = COALESCE(k.hostname, '');
CREATE VIEW collective_arrival_v AS 
        SELECT x.*, x.last_arrival_ns - x.arrival_ns AS wait_ns,
               x.last_arrival_ns - x.first_arrival_ns AS skew_ns,
               CASE WHEN x.arrival_ns = x.last_arrival_ns THEN 1 ELSE 0 END AS is_last
        FROM (SELECT v.*,
                     MAX(v.arrival_ns) OVER (PARTITION BY v.run_id, v.family, v.group_name, v.collective, v.seq)
                         AS last_arrival_ns,
                     MIN(v.arrival_ns) OVER (PARTITION BY v.run_id, v.family, v.group_name, v.collective, v.seq)
                         AS first_arrival_ns,
                     COUNT(*) OVER (PARTITION BY v.run_id, v.family, v.group_name, v.collective, v.seq) AS ranks
              FROM collective_call_v v WHERE v.arrival_ns IS NOT NULL) x
        WHERE x.ranks >= 2;
CREATE VIEW rank_timeline_v AS 
        SELECT r.name AS run, k.hostname, k.global_rank, k.local_rank, t.work_domain, t.first_ns, t.last_ns, t.last_ns - t.first_ns AS span_ns,
               t.busy_ns, t.last_ns - t.first_ns - t.busy_ns AS idle_ns, t.comm_ns, t.exposed_comm_ns,
               hc.offset_ns AS clock_offset_ns, hc.error_ns AS clock_error_ns, k.run_id, t.rank_id
        FROM rank_timeline t JOIN rank k ON k.id = t.rank_id JOIN run r ON r.id = k.run_id LEFT JOIN host_clock hc ON hc.run_id = k.run_id AND hc.hostname = COALESCE(k.hostname, '');
CREATE VIEW step_timeline_v AS 
        SELECT r.name AS run, k.hostname, k.global_rank, k.local_rank, s.step, s.start_ns, s.duration_ns, t.busy_ns,
               s.duration_ns - t.busy_ns AS idle_ns, t.exposed_comm_ns, k.run_id, s.rank_id
        FROM step s JOIN rank k ON k.id = s.rank_id JOIN run r ON r.id = k.run_id
        LEFT JOIN step_timeline t ON t.rank_id = s.rank_id AND t.step = s.step;
CREATE VIEW summary_v AS 
        SELECT r.name AS run, k.hostname, k.global_rank, k.local_rank, m.kind, m.category, n.value AS name,
               m.calls, m.total_ns, m.total_ns / m.calls AS mean_ns, m.min_ns, m.max_ns,
               COALESCE(m.self_ns, m.total_ns) AS self_ns,
               m.rank_id, m.name_id
        FROM summary m JOIN rank k ON k.id = m.rank_id JOIN run r ON r.id = k.run_id JOIN name n ON n.id = m.name_id;
CREATE VIEW rank_analysis_v AS 
        SELECT r.name AS run, k.hostname, k.global_rank, k.local_rank, a.clock_offset_ns, a.instances,
               a.entered_last, a.tied_last, a.wait_caused_ns, a.wait_suffered_ns, a.busy_ns, a.idle_ns,
               a.span_ns, a.comm_ns, a.exposed_comm_ns, a.work_domain, a.run_id, a.rank_id
        FROM rank_analysis a JOIN rank k ON k.id = a.rank_id JOIN run r ON r.id = a.run_id;
CREATE VIEW counter_v AS 
        SELECT r.name AS run, k.hostname, k.global_rank, k.local_rank, kn.value AS kernel, cn.value AS counter,
               c.value, c.dispatch_id, c.samples, c.min_value, c.max_value
        FROM run r CROSS JOIN rank k ON k.run_id = r.id
        CROSS JOIN fact_span s ON s.rank_id = k.id AND s.fact = 'counter'
        CROSS JOIN counter c ON c.id BETWEEN s.first_id AND s.last_id AND +c.source_id = s.source_id
        CROSS JOIN name kn ON kn.id = c.kernel_name_id CROSS JOIN name cn ON cn.id = c.counter_name_id;
CREATE VIEW activity_v AS SELECT r.name AS run, k.hostname, k.global_rank, k.local_rank, a.kind, a.category, n.value AS name,
               a.start_ns, a.start_ns + a.duration_ns AS end_ns, a.duration_ns,
               o.device, o.stream, a.correlation, o.pid, o.tid,
               l.grid_x, l.grid_y, l.grid_z, l.block_x, l.block_y, l.block_z, a.args,
               a.rank_id, a.source_id
        FROM run r CROSS JOIN rank k ON k.run_id = r.id
        CROSS JOIN fact_span s ON s.rank_id = k.id AND s.fact = 'activity'
        CROSS JOIN activity a ON a.id BETWEEN s.first_id AND s.last_id AND +a.source_id = s.source_id
        CROSS JOIN name n ON n.id = a.name_id CROSS JOIN launch l ON l.id = a.launch_id CROSS JOIN origin o ON o.id = a.origin_id;
CREATE VIEW source_v AS 
        SELECT r.name AS run, k.hostname, k.global_rank, k.local_rank, s.path, s.format, s.content_kind, s.rows, s.size_bytes, s.content_hash,
               s.identity_origin, s.ingested_at
        FROM source_file s JOIN rank k ON k.id = s.rank_id JOIN run r ON r.id = k.run_id;
COMMIT;
