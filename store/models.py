"""The schema, as SQLAlchemy 2.0 typed models. Migrations in alembic/versions must match it
(tests/test_migrations.py checks with autogenerate's compare_metadata).

Tables are singular; units are in column names; every time is an integer in nanoseconds.
Views for sqlite3 users are created by migrations, not here (see alembic/versions)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# SQLite's INTEGER PRIMARY KEY is the rowid only when declared INTEGER; keep BigInteger elsewhere.
BigId = BigInteger().with_variant(Integer(), "sqlite")


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Run(Base):
    """One profiled job."""

    __tablename__ = "run"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    created_at: Mapped[datetime]
    launcher: Mapped[str | None] = mapped_column(String(40))
    command: Mapped[str | None] = mapped_column(Text)
    world_size: Mapped[int | None]
    #: free-form JSON object text (tags, job ids, config)
    metadata_json: Mapped[str | None] = mapped_column(Text)


class Rank(Base):
    """One process of a run, keyed by (run, global_rank), placed by hostname and local_rank."""

    __tablename__ = "rank"
    __table_args__ = (UniqueConstraint("run_id", "global_rank"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("run.id", ondelete="CASCADE"), index=True)
    global_rank: Mapped[int]
    local_rank: Mapped[int | None]
    hostname: Mapped[str | None] = mapped_column(String(255))
    node_rank: Mapped[int | None]
    pid: Mapped[int | None]
    device: Mapped[int | None]
    #: how the rank ended, from the manifest `profdb record` wrote (all NULL without one): the
    #: command's exit status (128+N when signal N killed it), that signal, and when it ran (UTC)
    exit_code: Mapped[int | None]
    signal: Mapped[int | None]
    started_at: Mapped[datetime | None]
    ended_at: Mapped[datetime | None]
    #: ok | failed (exit status != 0) | killed (by a signal) | unfinished (started, never ended)
    end_status: Mapped[str | None] = mapped_column(String(20))


class ClassificationRules(Base):
    """A communication rule set as used to classify rows (store/classify.py Rules.serialise()):
    one row per distinct set, named by its digest."""

    __tablename__ = "classification_rules"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    digest: Mapped[str] = mapped_column(String(64), unique=True)
    shipped_version: Mapped[int]
    rules_json: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime]


class SourceFile(Base):
    """Every ingested file. Re-ingesting the same content for the same rank is a no-op (two ranks
    may well write byte-identical small files)."""

    __tablename__ = "source_file"
    __table_args__ = (UniqueConstraint("rank_id", "sha256"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("run.id", ondelete="CASCADE"), index=True)
    rank_id: Mapped[int] = mapped_column(ForeignKey("rank.id", ondelete="CASCADE"), index=True)
    path: Mapped[str] = mapped_column(Text)
    sha256: Mapped[str] = mapped_column(String(64))
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    format: Mapped[str] = mapped_column(String(40))
    content_kind: Mapped[str] = mapped_column(String(60), default="")
    rows: Mapped[int] = mapped_column(BigInteger, default=0)
    #: add to the file's timestamps for its absolute clock (Kineto baseTimeNanoseconds)
    time_base_ns: Mapped[int] = mapped_column(BigInteger, default=0)
    identity_origin: Mapped[str | None] = mapped_column(Text)
    ingested_at: Mapped[datetime]
    #: the rules its rows were classified with (NULL: stored before they were recorded)
    #: (no foreign key: SQLite could not drop the column again; rules rows are never deleted)
    rules_id: Mapped[int | None]


class Name(Base):
    """Interned strings: kernel / op / annotation names and counter names."""

    __tablename__ = "name"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    value: Mapped[str] = mapped_column(Text, unique=True)


class Launch(Base):
    """Interned launch shapes: the per-file / per-launch columns of an activity (device, stream,
    process, thread, grid and block sizes), each distinct combination once (migration 0005). ``key``
    is the ten values as text, '|'-separated, empty for NULL (``bulk.launch_key``). Never deleted."""

    __tablename__ = "launch"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    key: Mapped[str] = mapped_column(Text, unique=True)
    device: Mapped[int | None]
    stream: Mapped[int | None] = mapped_column(BigInteger)
    pid: Mapped[int | None]
    tid: Mapped[int | None] = mapped_column(BigInteger)
    grid_x: Mapped[int | None] = mapped_column(BigInteger)
    grid_y: Mapped[int | None] = mapped_column(BigInteger)
    grid_z: Mapped[int | None] = mapped_column(BigInteger)
    block_x: Mapped[int | None] = mapped_column(BigInteger)
    block_y: Mapped[int | None] = mapped_column(BigInteger)
    block_z: Mapped[int | None] = mapped_column(BigInteger)


#: The fact tables' secondary indexes (activity, counter): B-trees on SQLite (built once after a bulk
#: load: bulk.defer_indexes); BRIN on PostgreSQL (migration 0008_pg_brin_fact_indexes), where a team
#: store keeps them through every load. A load writes each source file's rows together, so each
#: 128-page block range holds one rank's and one file's rows: a BRIN entry per range finds them, at
#: a fraction of a B-tree's cost per inserted row (binary COPY of 1M activity rows on this machine,
#: server CPU: ~5-6 us per row with the two B-trees, ~2.5 us with BRIN). ``autosummarize``: ranges
#: filled by a writer other than ingest (which summarizes its own: bulk.summarize_fact_ranges) are
#: summarized by autovacuum.
FACT_INDEX: dict[str, Any] = {"postgresql_using": "brin", "postgresql_with": {"autosummarize": "on"}}

class Activity(Base):
    """The fact table: one timed interval (kernel, memcpy, memset, cpu_op, annotation, api...). Its
    launch shape (device, stream, pid, tid, grid, block) is in ``launch``; ``activity_v`` joins it in.
    (``launch_id`` has no foreign key: launch rows are never deleted, and PostgreSQL would check it
    on every row.)"""

    __tablename__ = "activity"
    __table_args__ = (
        Index("ix_activity_rank_name", "rank_id", "name_id", **FACT_INDEX),
        Index("ix_activity_source_id", "source_id", **FACT_INDEX),
    )
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    rank_id: Mapped[int] = mapped_column(ForeignKey("rank.id", ondelete="CASCADE"))
    source_id: Mapped[int] = mapped_column(ForeignKey("source_file.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(20))
    category: Mapped[str] = mapped_column(String(20))
    name_id: Mapped[int] = mapped_column(ForeignKey("name.id"))
    start_ns: Mapped[int] = mapped_column(BigInteger)
    duration_ns: Mapped[int] = mapped_column(BigInteger)
    correlation: Mapped[int | None] = mapped_column(BigInteger)
    launch_id: Mapped[int] = mapped_column(Integer)
    args: Mapped[str | None] = mapped_column(Text)


class Counter(Base):
    """Counter values: per dispatch (samples = 1) or per (rank, kernel) aggregate (Metrix)."""

    __tablename__ = "counter"
    __table_args__ = (
        Index("ix_counter_rank_id", "rank_id", **FACT_INDEX),
        Index("ix_counter_source_id", "source_id", **FACT_INDEX),
    )
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    rank_id: Mapped[int] = mapped_column(ForeignKey("rank.id", ondelete="CASCADE"))
    source_id: Mapped[int] = mapped_column(ForeignKey("source_file.id", ondelete="CASCADE"))
    kernel_name_id: Mapped[int] = mapped_column(ForeignKey("name.id"))
    counter_name_id: Mapped[int] = mapped_column(ForeignKey("name.id"))
    dispatch_id: Mapped[int | None] = mapped_column(BigInteger)
    value: Mapped[float] = mapped_column(Float)
    samples: Mapped[int] = mapped_column(BigInteger, default=1)
    min_value: Mapped[float | None] = mapped_column(Float)
    max_value: Mapped[float | None] = mapped_column(Float)


class Summary(Base):
    """Per (rank, name, kind) totals, maintained at ingest so cross-rank queries never scan
    the fact table. sum_sq_ns is a float (squares of ns overflow 64-bit integers)."""

    __tablename__ = "summary"
    rank_id: Mapped[int] = mapped_column(ForeignKey("rank.id", ondelete="CASCADE"), primary_key=True)
    name_id: Mapped[int] = mapped_column(ForeignKey("name.id"), primary_key=True)
    kind: Mapped[str] = mapped_column(String(20), primary_key=True)
    category: Mapped[str] = mapped_column(String(20))
    calls: Mapped[int] = mapped_column(BigInteger)
    total_ns: Mapped[int] = mapped_column(BigInteger)
    min_ns: Mapped[int] = mapped_column(BigInteger)
    max_ns: Mapped[int] = mapped_column(BigInteger)
    sum_sq_ns: Mapped[float] = mapped_column(Float)
    #: exclusive time: total_ns less the time in nested children (cpu_op, annotation, gpu_annotation,
    #: python; intervals.self_times); equal to total_ns for other kinds; NULL in stores ingested before 0003
    self_ns: Mapped[int | None] = mapped_column(BigInteger)


class Step(Base):
    """Training steps per rank (ProfilerStep#N annotations), kept at ingest for per-step queries."""

    __tablename__ = "step"
    rank_id: Mapped[int] = mapped_column(ForeignKey("rank.id", ondelete="CASCADE"), primary_key=True)
    step: Mapped[int] = mapped_column(primary_key=True)
    source_id: Mapped[int] = mapped_column(ForeignKey("source_file.id", ondelete="CASCADE"), index=True)
    start_ns: Mapped[int] = mapped_column(BigInteger)
    duration_ns: Mapped[int] = mapped_column(BigInteger)


class CollectiveCall(Base):
    """One rank's call of one collective (store/collectives.py), found at ingest: the k-th call
    (``seq``) of (family, group, collective) on the rank. Times in ns on the rank's own clock (the
    file's time base added); matched across ranks and aligned with ``host_clock`` at query time."""

    __tablename__ = "collective_call"
    __table_args__ = (Index("ix_collective_call_match", "run_id", "family", "collective", "group_name", "seq"),)
    rank_id: Mapped[int] = mapped_column(ForeignKey("rank.id", ondelete="CASCADE"), primary_key=True)
    family: Mapped[str] = mapped_column(String(20), primary_key=True)
    group_name: Mapped[str] = mapped_column(String(255), primary_key=True)
    collective: Mapped[str] = mapped_column(String(60), primary_key=True)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("run.id", ondelete="CASCADE"))
    start_ns: Mapped[int] = mapped_column(BigInteger)
    end_ns: Mapped[int] = mapped_column(BigInteger)
    bytes: Mapped[int | None] = mapped_column(BigInteger)
    #: the rank's work in the window before the call (from its previous call's end), and that window
    busy_before_ns: Mapped[int] = mapped_column(BigInteger)
    window_ns: Mapped[int] = mapped_column(BigInteger)


class RankTimeline(Base):
    """Per rank, from one pass over its activity at ingest: span, busy time (interval union, per
    device or thread), communication and the part of it not overlapped by work (exposed)."""

    __tablename__ = "rank_timeline"
    rank_id: Mapped[int] = mapped_column(ForeignKey("rank.id", ondelete="CASCADE"), primary_key=True)
    first_ns: Mapped[int] = mapped_column(BigInteger)
    last_ns: Mapped[int] = mapped_column(BigInteger)
    #: "device" (kernels, copies), "cpu" (CPU ops), "" (neither)
    work_domain: Mapped[str] = mapped_column(String(10))
    busy_ns: Mapped[int] = mapped_column(BigInteger)
    comm_ns: Mapped[int] = mapped_column(BigInteger)
    exposed_comm_ns: Mapped[int] = mapped_column(BigInteger)


class StepTimeline(Base):
    """Per rank and step (ProfilerStep#N): busy time and exposed communication in the step."""

    __tablename__ = "step_timeline"
    rank_id: Mapped[int] = mapped_column(ForeignKey("rank.id", ondelete="CASCADE"), primary_key=True)
    step: Mapped[int] = mapped_column(primary_key=True)
    busy_ns: Mapped[int] = mapped_column(BigInteger)
    exposed_comm_ns: Mapped[int] = mapped_column(BigInteger)


class HostClock(Base):
    """Per (run, host): its clock minus the reference host's (the host of the lowest rank), estimated
    from the ends of blocking collectives, with a bound on its error; rewritten after every ingest
    or transfer into the run. A host missing here has no estimate (see ``profdb ranks``)."""

    __tablename__ = "host_clock"
    run_id: Mapped[int] = mapped_column(ForeignKey("run.id", ondelete="CASCADE"), primary_key=True)
    hostname: Mapped[str] = mapped_column(String(255), primary_key=True)
    offset_ns: Mapped[int] = mapped_column(BigInteger)
    error_ns: Mapped[int] = mapped_column(BigInteger)
    samples: Mapped[int]


class RunAnalysis(Base):
    """Per run, what its collective timeline says (verdict.Findings), computed once when the run's
    data changes (ingest, transfer, reclassify: store/timeline.py ``store_analysis``) instead of at
    every question. ``fingerprint`` is a digest of what the analysis read (the run's ranks and their
    identities, its source files and their rules, timeline.ANALYSIS_VERSION and the verdict's
    thresholds): a question uses the row only when the run still has that fingerprint, else it
    computes the analysis (and says the same)."""

    __tablename__ = "run_analysis"
    run_id: Mapped[int] = mapped_column(ForeignKey("run.id", ondelete="CASCADE"), primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(64))
    computed_at: Mapped[datetime]
    #: the call family matched ("" when none), matched instances and how many ended in a tie
    family: Mapped[str] = mapped_column(String(20))
    instances: Mapped[int]
    tied_instances: Mapped[int]
    #: the instances' first and latest arrival (common clock) and the ranks in any of them (JSON list)
    window_first_ns: Mapped[int | None] = mapped_column(BigInteger)
    window_last_ns: Mapped[int | None] = mapped_column(BigInteger)
    window_ranks_json: Mapped[str | None] = mapped_column(Text)
    end_spread_ns: Mapped[int | None] = mapped_column(BigInteger)
    duration_ns: Mapped[int | None] = mapped_column(BigInteger)
    #: why the collective ends do not line up (no rank is named), else NULL
    apart: Mapped[str | None] = mapped_column(Text)
    #: the timeline's verdict (verdict.decide; NULL without a timeline): the rank named (NULL: none)
    verdict_rank: Mapped[int | None]
    verdict_line: Mapped[str | None] = mapped_column(Text)
    verdict_cause: Mapped[str | None] = mapped_column(String(20))
    verdict_last: Mapped[int | None]
    verdict_instances: Mapped[int | None]
    p_value: Mapped[float | None] = mapped_column(Float)
    wait_share: Mapped[float | None] = mapped_column(Float)
    time_share: Mapped[float | None] = mapped_column(Float)
    work_ratio: Mapped[float | None] = mapped_column(Float)
    lateness: Mapped[float | None] = mapped_column(Float)
    #: {"reference": host, "offsets": [[host, offset_ns, error_ns, samples], ...], "notes": [...]}
    clocks_json: Mapped[str] = mapped_column(Text)
    #: the analysis's notes (JSON list of strings)
    notes_json: Mapped[str] = mapped_column(Text)


class RankAnalysis(Base):
    """Per rank of ``run_analysis`` (collectives.RankResult): collectives entered last (alone, tied),
    the wait it caused the others and suffered, busy/idle/span, communication and exposed
    communication, and its host's clock offset."""

    __tablename__ = "rank_analysis"
    rank_id: Mapped[int] = mapped_column(ForeignKey("rank.id", ondelete="CASCADE"), primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("run_analysis.run_id", ondelete="CASCADE"), index=True)
    clock_offset_ns: Mapped[int | None] = mapped_column(BigInteger)
    instances: Mapped[int]
    entered_last: Mapped[int]
    tied_last: Mapped[int]
    wait_caused_ns: Mapped[int] = mapped_column(BigInteger)
    wait_suffered_ns: Mapped[int] = mapped_column(BigInteger)
    busy_ns: Mapped[int] = mapped_column(BigInteger)
    idle_ns: Mapped[int] = mapped_column(BigInteger)
    span_ns: Mapped[int] = mapped_column(BigInteger)
    comm_ns: Mapped[int] = mapped_column(BigInteger)
    exposed_comm_ns: Mapped[int] = mapped_column(BigInteger)
    work_domain: Mapped[str] = mapped_column(String(10))


class StepAnalysis(Base):
    """Per rank and step of ``run_analysis`` (collectives.StepRank), for steps seen on two ranks or more."""

    __tablename__ = "step_analysis"
    rank_id: Mapped[int] = mapped_column(ForeignKey("rank.id", ondelete="CASCADE"), primary_key=True)
    step: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("run_analysis.run_id", ondelete="CASCADE"), index=True)
    duration_ns: Mapped[int] = mapped_column(BigInteger)
    entered_last: Mapped[int]
    wait_caused_ns: Mapped[int] = mapped_column(BigInteger)
    wait_suffered_ns: Mapped[int] = mapped_column(BigInteger)
    busy_ns: Mapped[int] = mapped_column(BigInteger)
    idle_ns: Mapped[int] = mapped_column(BigInteger)
    exposed_comm_ns: Mapped[int] = mapped_column(BigInteger)
