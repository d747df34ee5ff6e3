"""The schema, as SQLAlchemy Core tables declared as classes (``Base``). Migrations in alembic/versions must match it
(tests/test_migrations.py checks with autogenerate's compare_metadata).

Tables are singular; units are in column names; every time is an integer in nanoseconds.
Views for sqlite3 users are created by migrations, not here (see alembic/versions)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

from sqlalchemy import (
    BigInteger,
    Column,
    ColumnClause,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# SQLite's INTEGER PRIMARY KEY is the rowid only when declared INTEGER; keep BigInteger elsewhere.
BigId = BigInteger().with_variant(Integer(), "sqlite")


class Base:
    """A table as a class: its columns are class attributes (``Run.id`` is the ``run`` table's
    ``id`` Column, for Core statements), its Table is ``__table__``. SQLAlchemy Core only: the ORM's
    declarative models cost ~0.2 s of imports and class set-up at every command's start
    (``profdb query`` included), and profdb never maps rows to objects."""

    metadata: ClassVar[MetaData] = MetaData(naming_convention=NAMING_CONVENTION)
    __tablename__: ClassVar[str]
    __table__: ClassVar[Table]
    __table_args__: ClassVar[tuple[Any, ...]] = ()
    #: dialect options of the Table (e.g. ``sqlite_with_rowid``)
    __table_kwargs__: ClassVar[dict[str, Any]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        columns = []
        for attr, value in vars(cls).items():
            if isinstance(value, Column):
                value.name = value.key = attr
                columns.append(value)
        cls.__table__ = Table(cls.__tablename__, Base.metadata, *columns, *cls.__table_args__, **cls.__table_kwargs__)

    @classmethod
    def __clause_element__(cls) -> Table:
        """The class stands for its table in statements: ``select(Run)``, ``insert(SourceFile)``, joins."""
        return cls.__table__


class Run(Base):
    """One profiled job."""

    __tablename__ = "run"
    id: ColumnClause[int] = Column(Integer, primary_key=True)
    name: ColumnClause[str] = Column(String(200), unique=True, nullable=False)
    created_at: ColumnClause[datetime] = Column(DateTime, nullable=False)
    launcher: ColumnClause[str | None] = Column(String(40))
    command: ColumnClause[str | None] = Column(Text)
    world_size: ColumnClause[int | None] = Column(Integer)
    #: free-form JSON object text (tags, job ids, config)
    metadata_json: ColumnClause[str | None] = Column(Text)


class Rank(Base):
    """One process of a run, keyed by (run, global_rank), placed by hostname and local_rank."""

    __tablename__ = "rank"
    __table_args__ = (UniqueConstraint("run_id", "global_rank"),)
    id: ColumnClause[int] = Column(Integer, primary_key=True)
    run_id: ColumnClause[int] = Column(Integer, ForeignKey("run.id", ondelete="CASCADE"), index=True, nullable=False)
    global_rank: ColumnClause[int] = Column(Integer, nullable=False)
    local_rank: ColumnClause[int | None] = Column(Integer)
    hostname: ColumnClause[str | None] = Column(String(255))
    node_rank: ColumnClause[int | None] = Column(Integer)
    pid: ColumnClause[int | None] = Column(Integer)
    device: ColumnClause[int | None] = Column(Integer)
    #: how the rank ended, from the manifest `profdb record` wrote (all NULL without one): the
    #: command's exit status (128+N when signal N killed it), that signal, and when it ran (UTC)
    exit_code: ColumnClause[int | None] = Column(Integer)
    signal: ColumnClause[int | None] = Column(Integer)
    started_at: ColumnClause[datetime | None] = Column(DateTime)
    ended_at: ColumnClause[datetime | None] = Column(DateTime)
    #: ok | failed (exit status != 0) | killed (by a signal) | unfinished (started, never ended)
    end_status: ColumnClause[str | None] = Column(String(20))


class ClassificationRules(Base):
    """A communication rule set as used to classify rows (store/classify.py Rules.serialise()):
    one row per distinct set, named by its digest."""

    __tablename__ = "classification_rules"
    id: ColumnClause[int] = Column(Integer, primary_key=True)
    digest: ColumnClause[str] = Column(String(64), unique=True, nullable=False)
    shipped_version: ColumnClause[int] = Column(Integer, nullable=False)
    rules_json: ColumnClause[str] = Column(Text, nullable=False)
    created_at: ColumnClause[datetime] = Column(DateTime, nullable=False)


class SourceFile(Base):
    """Every ingested file. Re-ingesting the same content for the same rank is a no-op (two ranks
    may well write byte-identical small files)."""

    __tablename__ = "source_file"
    # (named as when the column was sha256: migration 0013)
    __table_args__ = (UniqueConstraint("rank_id", "content_hash", name="uq_source_file_rank_id_sha256"),)
    id: ColumnClause[int] = Column(Integer, primary_key=True)
    run_id: ColumnClause[int] = Column(Integer, ForeignKey("run.id", ondelete="CASCADE"), index=True, nullable=False)
    rank_id: ColumnClause[int] = Column(Integer, ForeignKey("rank.id", ondelete="CASCADE"), index=True, nullable=False)
    path: ColumnClause[str] = Column(Text, nullable=False)
    #: the file's digest (``inputs.digest_of``): "blake3:" and 56 hex digits, or 64 hex digits, its
    #: sha256, for a file stored before migration 0013
    content_hash: ColumnClause[str] = Column(String(64), nullable=False)
    size_bytes: ColumnClause[int] = Column(BigInteger, nullable=False)
    format: ColumnClause[str] = Column(String(40), nullable=False)
    content_kind: ColumnClause[str] = Column(String(60), default="", nullable=False)
    rows: ColumnClause[int] = Column(BigInteger, default=0, nullable=False)
    #: add to the file's timestamps for its absolute clock (Kineto baseTimeNanoseconds)
    time_base_ns: ColumnClause[int] = Column(BigInteger, default=0, nullable=False)
    identity_origin: ColumnClause[str | None] = Column(Text)
    ingested_at: ColumnClause[datetime] = Column(DateTime, nullable=False)
    #: the rules its rows were classified with (NULL: stored before they were recorded)
    #: (no foreign key: SQLite could not drop the column again; rules rows are never deleted)
    rules_id: ColumnClause[int | None] = Column(Integer)
    #: the events of the file its reader did not read, by what they are: a JSON object, e.g.
    #: {"events of category mtia_ccp_events (MTIA device events)": 25814} (NULL: none counted; migration 0014)
    unread_json: ColumnClause[str | None] = Column(Text)


class Name(Base):
    """Interned strings: kernel / op / annotation names and counter names."""

    __tablename__ = "name"
    id: ColumnClause[int] = Column(Integer, primary_key=True)
    value: ColumnClause[str] = Column(Text, unique=True, nullable=False)


class Launch(Base):
    """Interned launch shapes: an activity's grid and block sizes, each distinct combination once
    (migrations 0005, 0011). ``key`` is the six values as text, '|'-separated, empty for NULL
    (``bulk.shape_key``). Never deleted."""

    __tablename__ = "launch"
    id: ColumnClause[int] = Column(Integer, primary_key=True)
    key: ColumnClause[str] = Column(Text, unique=True, nullable=False)
    grid_x: ColumnClause[int | None] = Column(BigInteger)
    grid_y: ColumnClause[int | None] = Column(BigInteger)
    grid_z: ColumnClause[int | None] = Column(BigInteger)
    block_x: ColumnClause[int | None] = Column(BigInteger)
    block_y: ColumnClause[int | None] = Column(BigInteger)
    block_z: ColumnClause[int | None] = Column(BigInteger)


class Origin(Base):
    """Interned origins: the device and stream an activity ran on and the process and thread that
    launched it, each distinct combination once (migration 0011: until then part of ``launch``, which
    then held each rank's shapes anew: 2,048 ranks of 68 shapes, 139k rows interned one by one). ``key``
    is the four values as text, '|'-separated, empty for NULL (``bulk.shape_key``). Never deleted."""

    __tablename__ = "origin"
    id: ColumnClause[int] = Column(Integer, primary_key=True)
    key: ColumnClause[str] = Column(Text, unique=True, nullable=False)
    device: ColumnClause[int | None] = Column(Integer)
    stream: ColumnClause[int | None] = Column(BigInteger)
    pid: ColumnClause[int | None] = Column(Integer)
    tid: ColumnClause[int | None] = Column(BigInteger)


# The fact tables' access paths (activity, counter). SQLite (migration 0010_sqlite_fact_spans): no
# secondary index at all. A single writer appends each batch of a source file's rows with consecutive
# ids, and ``fact_span`` keeps each file's id ranges (a handful of rows per file), so a rank's or a
# file's rows are rowid range scans of the table itself; building the two B-trees per table after a
# bulk load was 20-25% of an ingest (1M CSV rows: 2.69 -> 2.15-2.28 s without them; 650k Kineto rows
# 5.45 -> 4.74-4.90 s). Nor foreign keys on rank_id and source_id: SQLite looks up a deleted parent's
# child rows by their key column, a full scan without its index; a trigger on source_file deletes a
# file's rows through its spans instead (and so the rows of a deleted rank or run, whose files cascade).
# PostgreSQL, where a team store holds other runs' rows and several nodes load at once (their ids
# interleave, so spans would not be exact): one BRIN index per fact table on (rank_id, source_id),
# ``ix_activity_rank_source`` / ``ix_counter_rank_source``, no primary-key index, and ``fact_span``
# left empty (migrations 0008_pg_brin_fact_indexes, 0009_pg_lean_fact_indexes; ``id`` is still filled
# by its sequence). A load writes each source file's rows together, so each 128-page block range holds
# one rank's and one file's rows: a BRIN entry per range finds them by rank or by file, at a fraction of
# a B-tree's cost per inserted row (binary COPY, server CPU per row on this machine: 3.3-5.4 us with
# 0008's primary keys and four BRIN indexes, 1.95-2.3 us with 0009's two; ~5-6 us with B-trees).
# ``autosummarize``: ranges filled by a writer other than ingest (which summarizes its own:
# bulk.summarize_fact_ranges) are summarized by autovacuum. The PostgreSQL layout is not declared
# here: a dialect option on any Index makes SQLAlchemy import its whole PostgreSQL dialect when this
# module loads, in every process (~50 ms of a SQLite query's start-up), and Alembic's comparison of
# models and migrations sees neither the access method nor the primary key; tests/test_backends.py
# and tests/test_migrations.py check the PostgreSQL layout. ``store/fact_spans.py`` is the one home of
# reading and writing the spans.


class Activity(Base):
    """The fact table: one timed interval (kernel, memcpy, memset, cpu_op, annotation, api...). Its
    launch shape (grid, block) is in ``launch``, its origin (device, stream, pid, tid) in ``origin``;
    ``activity_v`` joins them in. (``launch_id`` and ``origin_id`` have no foreign key: those rows are
    never deleted, and PostgreSQL would check them on every row.)"""

    __tablename__ = "activity"
    id: ColumnClause[int] = Column(BigId, primary_key=True)
    #: (no foreign keys on rank_id and source_id: see above, and fact_span)
    rank_id: ColumnClause[int] = Column(Integer, nullable=False)
    source_id: ColumnClause[int] = Column(Integer, nullable=False)
    kind: ColumnClause[str] = Column(String(20), nullable=False)
    category: ColumnClause[str] = Column(String(20), nullable=False)
    name_id: ColumnClause[int] = Column(Integer, ForeignKey("name.id"), nullable=False)
    start_ns: ColumnClause[int] = Column(BigInteger, nullable=False)
    duration_ns: ColumnClause[int] = Column(BigInteger, nullable=False)
    correlation: ColumnClause[int | None] = Column(BigInteger)
    launch_id: ColumnClause[int] = Column(Integer, nullable=False)
    origin_id: ColumnClause[int] = Column(Integer, nullable=False)
    args: ColumnClause[str | None] = Column(Text)


class Counter(Base):
    """Counter values: per dispatch (samples = 1) or per (rank, kernel) aggregate (Metrix)."""

    __tablename__ = "counter"
    id: ColumnClause[int] = Column(BigId, primary_key=True)
    rank_id: ColumnClause[int] = Column(Integer, nullable=False)
    source_id: ColumnClause[int] = Column(Integer, nullable=False)
    kernel_name_id: ColumnClause[int] = Column(Integer, ForeignKey("name.id"), nullable=False)
    counter_name_id: ColumnClause[int] = Column(Integer, ForeignKey("name.id"), nullable=False)
    dispatch_id: ColumnClause[int | None] = Column(BigInteger)
    value: ColumnClause[float] = Column(Float, nullable=False)
    samples: ColumnClause[int] = Column(BigInteger, default=1, nullable=False)
    min_value: ColumnClause[float | None] = Column(Float)
    max_value: ColumnClause[float | None] = Column(Float)


class FactSpan(Base):
    """SQLite: the id ranges of each source file's rows in a fact table (``fact``: "activity" or
    "counter"), written by every load (``fact_spans.Spans``); every row of a file lies in exactly one
    of its spans, and a span holds that file's rows only. Reads by rank or by file join it
    (``fact_spans.scoped``); deleting a source_file row deletes its fact rows through it (trigger
    ``source_file_fact_rows``, migration 0010). PostgreSQL: empty (its BRIN index finds the rows)."""

    __tablename__ = "fact_span"
    id: ColumnClause[int] = Column(Integer, primary_key=True)
    fact: ColumnClause[str] = Column(String(20), nullable=False)
    #: (the file's rank; no foreign key of its own: a deleted rank's spans must outlive its files'
    #: trigger, and go with the files: ON DELETE CASCADE from source_file)
    rank_id: ColumnClause[int] = Column(Integer, index=True, nullable=False)
    source_id: ColumnClause[int] = Column(
        Integer, ForeignKey("source_file.id", ondelete="CASCADE"), index=True, nullable=False
    )
    first_id: ColumnClause[int] = Column(BigInteger, nullable=False)
    last_id: ColumnClause[int] = Column(BigInteger, nullable=False)


class Summary(Base):
    """Per (rank, name, kind) totals, maintained at ingest so cross-rank queries never scan
    the fact table. sum_sq_ns is a float (squares of ns overflow 64-bit integers). SQLite keeps it
    WITHOUT ROWID, in its key's B-tree alone (migration 0012)."""

    __tablename__ = "summary"
    __table_kwargs__: ClassVar[dict[str, Any]] = {"sqlite_with_rowid": False}
    rank_id: ColumnClause[int] = Column(Integer, ForeignKey("rank.id", ondelete="CASCADE"), primary_key=True)
    name_id: ColumnClause[int] = Column(Integer, ForeignKey("name.id"), primary_key=True)
    kind: ColumnClause[str] = Column(String(20), primary_key=True)
    category: ColumnClause[str] = Column(String(20), nullable=False)
    calls: ColumnClause[int] = Column(BigInteger, nullable=False)
    total_ns: ColumnClause[int] = Column(BigInteger, nullable=False)
    min_ns: ColumnClause[int] = Column(BigInteger, nullable=False)
    max_ns: ColumnClause[int] = Column(BigInteger, nullable=False)
    sum_sq_ns: ColumnClause[float] = Column(Float, nullable=False)
    #: exclusive time: total_ns less the time in nested children (cpu_op, annotation, gpu_annotation,
    #: python; intervals.self_times); equal to total_ns for other kinds; NULL in stores ingested before 0003
    self_ns: ColumnClause[int | None] = Column(BigInteger)


class Step(Base):
    """Training steps per rank (ProfilerStep#N annotations), kept at ingest for per-step queries."""

    __tablename__ = "step"
    rank_id: ColumnClause[int] = Column(Integer, ForeignKey("rank.id", ondelete="CASCADE"), primary_key=True)
    step: ColumnClause[int] = Column(Integer, primary_key=True)
    source_id: ColumnClause[int] = Column(
        Integer, ForeignKey("source_file.id", ondelete="CASCADE"), index=True, nullable=False
    )
    start_ns: ColumnClause[int] = Column(BigInteger, nullable=False)
    duration_ns: ColumnClause[int] = Column(BigInteger, nullable=False)


class CollectiveCall(Base):
    """One rank's call of one collective (store/collectives.py), found at ingest: the k-th call
    (``seq``) of (family, group, collective) on the rank. Times in ns on the rank's own clock (the
    file's time base added); matched across ranks and aligned with ``host_clock`` at query time."""

    __tablename__ = "collective_call"
    __table_args__ = (Index("ix_collective_call_match", "run_id", "family", "collective", "group_name", "seq"),)
    rank_id: ColumnClause[int] = Column(Integer, ForeignKey("rank.id", ondelete="CASCADE"), primary_key=True)
    family: ColumnClause[str] = Column(String(20), primary_key=True)
    group_name: ColumnClause[str] = Column(String(255), primary_key=True)
    collective: ColumnClause[str] = Column(String(60), primary_key=True)
    seq: ColumnClause[int] = Column(Integer, primary_key=True)
    run_id: ColumnClause[int] = Column(Integer, ForeignKey("run.id", ondelete="CASCADE"), nullable=False)
    start_ns: ColumnClause[int] = Column(BigInteger, nullable=False)
    end_ns: ColumnClause[int] = Column(BigInteger, nullable=False)
    bytes: ColumnClause[int | None] = Column(BigInteger)
    #: the rank's work in the window before the call (from its previous call's end), and that window
    busy_before_ns: ColumnClause[int] = Column(BigInteger, nullable=False)
    window_ns: ColumnClause[int] = Column(BigInteger, nullable=False)


class RankTimeline(Base):
    """Per rank, from one pass over its activity at ingest: span, busy time (interval union, per
    device or thread), communication and the part of it not overlapped by work (exposed)."""

    __tablename__ = "rank_timeline"
    rank_id: ColumnClause[int] = Column(Integer, ForeignKey("rank.id", ondelete="CASCADE"), primary_key=True)
    first_ns: ColumnClause[int] = Column(BigInteger, nullable=False)
    last_ns: ColumnClause[int] = Column(BigInteger, nullable=False)
    #: "device" (kernels, copies), "cpu" (CPU ops), "" (neither)
    work_domain: ColumnClause[str] = Column(String(10), nullable=False)
    busy_ns: ColumnClause[int] = Column(BigInteger, nullable=False)
    comm_ns: ColumnClause[int] = Column(BigInteger, nullable=False)
    exposed_comm_ns: ColumnClause[int] = Column(BigInteger, nullable=False)


class StepTimeline(Base):
    """Per rank and step (ProfilerStep#N): busy time and exposed communication in the step."""

    __tablename__ = "step_timeline"
    rank_id: ColumnClause[int] = Column(Integer, ForeignKey("rank.id", ondelete="CASCADE"), primary_key=True)
    step: ColumnClause[int] = Column(Integer, primary_key=True)
    busy_ns: ColumnClause[int] = Column(BigInteger, nullable=False)
    exposed_comm_ns: ColumnClause[int] = Column(BigInteger, nullable=False)


class HostClock(Base):
    """Per (run, host): its clock minus the reference host's (the host of the lowest rank), estimated
    from the ends of blocking collectives, with a bound on its error; rewritten after every ingest
    or transfer into the run. A host missing here has no estimate (see ``profdb ranks``)."""

    __tablename__ = "host_clock"
    run_id: ColumnClause[int] = Column(Integer, ForeignKey("run.id", ondelete="CASCADE"), primary_key=True)
    hostname: ColumnClause[str] = Column(String(255), primary_key=True)
    offset_ns: ColumnClause[int] = Column(BigInteger, nullable=False)
    error_ns: ColumnClause[int] = Column(BigInteger, nullable=False)
    samples: ColumnClause[int] = Column(Integer, nullable=False)


class RunAnalysis(Base):
    """Per run, what its collective timeline says (verdict.Findings), computed once when the run's
    data changes (ingest, transfer, reclassify: store/timeline.py ``store_analysis``) instead of at
    every question. ``fingerprint`` is a digest of what the analysis read (the run's ranks and their
    identities, its source files and their rules, findings.ANALYSIS_VERSION and the verdict's
    thresholds): a question uses the row only when the run still has that fingerprint, else it
    computes the analysis (and says the same)."""

    __tablename__ = "run_analysis"
    run_id: ColumnClause[int] = Column(Integer, ForeignKey("run.id", ondelete="CASCADE"), primary_key=True)
    fingerprint: ColumnClause[str] = Column(String(64), nullable=False)
    computed_at: ColumnClause[datetime] = Column(DateTime, nullable=False)
    #: the call family matched ("" when none), matched instances and how many ended in a tie
    family: ColumnClause[str] = Column(String(20), nullable=False)
    instances: ColumnClause[int] = Column(Integer, nullable=False)
    tied_instances: ColumnClause[int] = Column(Integer, nullable=False)
    #: the instances' first and latest arrival (common clock) and the ranks in any of them (JSON list)
    window_first_ns: ColumnClause[int | None] = Column(BigInteger)
    window_last_ns: ColumnClause[int | None] = Column(BigInteger)
    window_ranks_json: ColumnClause[str | None] = Column(Text)
    end_spread_ns: ColumnClause[int | None] = Column(BigInteger)
    duration_ns: ColumnClause[int | None] = Column(BigInteger)
    #: why the collective ends do not line up (no rank is named), else NULL
    apart: ColumnClause[str | None] = Column(Text)
    #: the timeline's verdict (verdict.decide; NULL without a timeline): the rank named (NULL: none)
    verdict_rank: ColumnClause[int | None] = Column(Integer)
    verdict_line: ColumnClause[str | None] = Column(Text)
    verdict_cause: ColumnClause[str | None] = Column(String(20))
    verdict_last: ColumnClause[int | None] = Column(Integer)
    verdict_instances: ColumnClause[int | None] = Column(Integer)
    p_value: ColumnClause[float | None] = Column(Float)
    wait_share: ColumnClause[float | None] = Column(Float)
    time_share: ColumnClause[float | None] = Column(Float)
    work_ratio: ColumnClause[float | None] = Column(Float)
    lateness: ColumnClause[float | None] = Column(Float)
    #: {"reference": host, "offsets": [[host, offset_ns, error_ns, samples], ...], "notes": [...]}
    clocks_json: ColumnClause[str] = Column(Text, nullable=False)
    #: the analysis's notes (JSON list of strings)
    notes_json: ColumnClause[str] = Column(Text, nullable=False)


class RankAnalysis(Base):
    """Per rank of ``run_analysis`` (collectives.RankResult): collectives entered last (alone, tied),
    the wait it caused the others and suffered, busy/idle/span, communication and exposed
    communication, and its host's clock offset."""

    __tablename__ = "rank_analysis"
    rank_id: ColumnClause[int] = Column(Integer, ForeignKey("rank.id", ondelete="CASCADE"), primary_key=True)
    run_id: ColumnClause[int] = Column(
        Integer, ForeignKey("run_analysis.run_id", ondelete="CASCADE"), index=True, nullable=False
    )
    clock_offset_ns: ColumnClause[int | None] = Column(BigInteger)
    instances: ColumnClause[int] = Column(Integer, nullable=False)
    entered_last: ColumnClause[int] = Column(Integer, nullable=False)
    tied_last: ColumnClause[int] = Column(Integer, nullable=False)
    wait_caused_ns: ColumnClause[int] = Column(BigInteger, nullable=False)
    wait_suffered_ns: ColumnClause[int] = Column(BigInteger, nullable=False)
    busy_ns: ColumnClause[int] = Column(BigInteger, nullable=False)
    idle_ns: ColumnClause[int] = Column(BigInteger, nullable=False)
    span_ns: ColumnClause[int] = Column(BigInteger, nullable=False)
    comm_ns: ColumnClause[int] = Column(BigInteger, nullable=False)
    exposed_comm_ns: ColumnClause[int] = Column(BigInteger, nullable=False)
    work_domain: ColumnClause[str] = Column(String(10), nullable=False)


class StepAnalysis(Base):
    """Per rank and step of ``run_analysis`` (collectives.StepRank), for steps seen on two ranks or more."""

    __tablename__ = "step_analysis"
    rank_id: ColumnClause[int] = Column(Integer, ForeignKey("rank.id", ondelete="CASCADE"), primary_key=True)
    step: ColumnClause[int] = Column(Integer, primary_key=True)
    run_id: ColumnClause[int] = Column(
        Integer, ForeignKey("run_analysis.run_id", ondelete="CASCADE"), index=True, nullable=False
    )
    duration_ns: ColumnClause[int] = Column(BigInteger, nullable=False)
    entered_last: ColumnClause[int] = Column(Integer, nullable=False)
    wait_caused_ns: ColumnClause[int] = Column(BigInteger, nullable=False)
    wait_suffered_ns: ColumnClause[int] = Column(BigInteger, nullable=False)
    busy_ns: ColumnClause[int] = Column(BigInteger, nullable=False)
    idle_ns: ColumnClause[int] = Column(BigInteger, nullable=False)
    exposed_comm_ns: ColumnClause[int] = Column(BigInteger, nullable=False)
