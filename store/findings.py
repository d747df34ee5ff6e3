"""What the analysis of a run's collective timeline found, as a question reads it: the kept rows
(``run_analysis``, ``rank_analysis``, ``step_analysis``, written by ``timeline.store_analysis``) when
the run still has the fingerprint they were computed under, else the analysis computed now; and
from them the run's one straggler verdict (``run_verdict``) and the notes that say which window and
which ranks its figures cover.

Read-only SQL as text (reader.py): a question answered from kept rows on a SQLite store needs no
SQLAlchemy. Only a stale run is analysed (timeline.analyze_run), through the SQLAlchemy connection."""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from . import collectives, verdict
from .collectives import Analysis, ClockOffset, Clocks, RankIdentity
from .identity import rank_ranges
from .reader import Db, connection, first, rows
from .scope import RunScope
from .units import fmt_ns

#: the version of what ``run_analysis`` holds and how it is computed: raise it when either changes (the
#: verdict's thresholds are in the fingerprint already), and every stored row is then stale
ANALYSIS_VERSION = 2  # 2: the cause weighs extra work against extra idle time (store/verdict.py, rule 4)
#: the analysis's tuning, part of the fingerprint: a row computed with other thresholds is stale
_TUNING = (verdict.TIE_RATIO, verdict.MATERIAL, verdict.LATE_SHARE, verdict.ALPHA, verdict.COMPUTE_RATIO,
           verdict.EXPLAINED, collectives.TIE_NS, collectives.END_SPREAD_FLOOR_NS, collectives.END_SPREAD_SHARE,
           collectives.BLOCKING_TOLERANCE_NS, collectives.CLOCK_SAMPLES)

#: rank_analysis's figures, in collectives.RankResult's order after (rank, host, local_rank)
RANK_FIGURES = ("instances", "entered_last", "tied_last", "wait_caused_ns", "wait_suffered_ns", "busy_ns",
                "idle_ns", "span_ns", "comm_ns", "exposed_comm_ns", "work_domain")
#: step_analysis's figures, in collectives.StepRank's order
STEP_FIGURES = ("duration_ns", "entered_last", "wait_caused_ns", "wait_suffered_ns", "busy_ns", "idle_ns",
                "exposed_comm_ns")
_RUN_COLUMNS = ("fingerprint", "family", "instances", "tied_instances", "window_first_ns", "window_last_ns",
                "window_ranks_json", "end_spread_ns", "duration_ns", "apart", "verdict_rank", "verdict_line",
                "verdict_cause", "verdict_last", "verdict_instances", "p_value", "wait_share", "time_share",
                "work_ratio", "lateness", "clocks_json", "notes_json")


def identities(scope: RunScope) -> dict[int, RankIdentity]:
    """Global rank -> (host, local_rank): ranks without a hostname share the host named ''."""
    return {r.global_rank: RankIdentity(r.hostname or "", r.local_rank) for r in scope.ranks}


def fingerprint(db: Db, scope: RunScope) -> str:
    """A digest of everything the run's analysis reads: its ranks (ids, global ranks, hosts, slots:
    the identities the verdict names), its source files and the rules that classified each (every
    timeline row comes from one of them; a new or re-classified file changes it), the analysis
    version and tuning. One small query (the run's files), no scan of the timelines."""
    files = rows(db, "SELECT id, rules_id FROM source_file WHERE run_id = :run ORDER BY id", {"run": scope.id})
    parts = (ANALYSIS_VERSION, _TUNING, scope.id,
             [(r.id, r.global_rank, r.hostname, r.local_rank) for r in scope.ranks],
             [(int(i), None if rules is None else int(rules)) for i, rules in files])
    return hashlib.sha256(json.dumps(parts, separators=(",", ":")).encode()).hexdigest()


def stored_findings(db: Db, scope: RunScope) -> verdict.Findings | None:
    """The run's findings as ``store_analysis`` kept them, when the run still has the fingerprint they
    were computed under (else None: compute them). Rows another writer replaced while they were read
    (PostgreSQL) change the fingerprint read again at the end, and give None too."""
    got = first(db, f"SELECT {', '.join(_RUN_COLUMNS)} FROM run_analysis WHERE run_id = :run", {"run": scope.id})
    if got is None:
        return None
    row = dict(zip(_RUN_COLUMNS, got))
    fp = fingerprint(db, scope)
    if row["fingerprint"] != fp:
        return None
    ids = identities(scope)
    by_id = {r.id: r.global_rank for r in scope.ranks}
    ranks: dict[int, collectives.RankResult] = {}
    for r in rows(db, f"SELECT rank_id, {', '.join(RANK_FIGURES)} FROM rank_analysis WHERE run_id = :run",
                  {"run": scope.id}):
        g = by_id.get(r[0])
        if g is None:  # a rank this scope does not have: rows another writer put there since (PostgreSQL)
            return None
        ident = ids[g]
        ranks[g] = collectives.RankResult(g, ident.host, ident.local_rank, *r[1:])
    per_step: dict[int, dict[int, collectives.StepRank]] = defaultdict(dict)
    for r in rows(db, f"SELECT step, rank_id, {', '.join(STEP_FIGURES)} FROM step_analysis WHERE run_id = :run",
                  {"run": scope.id}):
        if r[1] not in by_id:
            return None
        per_step[int(r[0])][by_id[r[1]]] = collectives.StepRank(*r[2:])
    again = first(db, "SELECT fingerprint FROM run_analysis WHERE run_id = :run", {"run": scope.id})
    if again is None or again[0] != fp:
        return None
    steps = tuple(collectives.step_result(n, dict(sorted(per.items()))) for n, per in sorted(per_step.items()))
    c = json.loads(row["clocks_json"])
    clocks = Clocks(c["reference"], {h: ClockOffset(h, o, e, n) for h, o, e, n in c["offsets"]}, tuple(c["notes"]))
    window = None
    if row["window_first_ns"] is not None:
        window = verdict.Window(row["window_first_ns"], row["window_last_ns"],
                                tuple(json.loads(row["window_ranks_json"])))
    decided = None
    if row["verdict_line"] is not None:
        decided = verdict.Verdict(row["verdict_rank"], row["verdict_line"], "timeline", row["verdict_cause"],
                                  row["verdict_last"] or 0, row["verdict_instances"] or 0, row["p_value"],
                                  row["wait_share"], row["time_share"], row["work_ratio"], row["lateness"])
    return verdict.Findings(row["family"], row["instances"], row["tied_instances"], window, clocks,
                            dict(sorted(ranks.items())), steps, tuple(json.loads(row["notes_json"])),
                            row["end_spread_ns"], row["duration_ns"], row["apart"], decided)


def run_findings(db: Db, scope: RunScope, analysis: Analysis | None = None) -> verdict.Findings:
    """What the run's collective timeline says: as ``store_analysis`` kept it when still current,
    else computed now (never written here: a question may run on a read-only connection), from
    ``analysis`` when the caller has already analysed the run (``timeline.analyze_run``)."""
    found = stored_findings(db, scope)
    if found is not None:
        return found
    if analysis is None:
        from .timeline import analyze_run  # the timeline's SQL: SQLAlchemy is imported only for a stale run

        analysis = analyze_run(connection(db), scope)
    return verdict.findings_of(analysis, identities(scope))


@dataclass(frozen=True)
class RunVerdict:
    findings: verdict.Findings
    verdict: verdict.Verdict
    identities: Mapping[int, RankIdentity]


def run_verdict(db: Db, scope: RunScope, totals: Iterable[verdict.RankTotal] = (),
                analysis: Analysis | None = None) -> RunVerdict:
    """The one verdict of the run (verdict.straggler_verdict): from the collective timeline when the
    run has one, else from ``totals`` (per-rank busy and communication time), saying so. ``analysis``:
    as for run_findings."""
    f = run_findings(db, scope, analysis)
    ids = identities(scope)
    return RunVerdict(f, verdict.straggler_verdict(f, ids, list(totals)), ids)


def window_notes(a: verdict.Findings, scope: RunScope) -> list[str]:
    """Which window and which ranks the figures cover: the call family matched, the instances, the
    ranks, and the clock offsets used."""
    if a.window is None:
        return []
    notes = [
        f"window: {a.instances} matched collective instances ({a.family} calls) over "
        f"{fmt_ns(a.window.last_ns - a.window.first_ns)} of the common clock, ranks {rank_ranges(a.window.ranks)} "
        f"of {len(scope.ranks)}; {profile_window(a, scope, sorted(a.ranks) != sorted(a.window.ranks))}"
    ]
    hosts = [o for o in sorted(a.clocks.offsets.values(), key=lambda o: o.host) if o.host != a.clocks.reference]
    if not hosts:
        return notes
    head = "clock offsets vs host " + (a.clocks.reference or "''") + ": "
    if len(hosts) <= CLOCK_HOSTS_LISTED:
        notes.append(head + ", ".join(f"{o.host} {fmt_ns(o.offset_ns)} +- {fmt_ns(o.error_ns)} ({o.samples} samples)"
                                      for o in hosts))
        return notes
    notes.append(head + clocks_summed(hosts, scope.name))
    return notes


def profile_window(a: verdict.Findings, scope: RunScope, name_ranks: bool = True) -> str:
    """What each rank's busy, idle and exposed communication time cover, with or without a collective
    window: its whole profile, from its first to its last activity of any kind (a CPU op or a Python
    call before the first kernel counts: idle is the device's too then), and how long that was. Another
    tool's figure over one step's window (TraceLens' GPU timeline) is not this one. ``name_ranks``: say
    which ranks (not when the collective window's note names the same ones)."""
    spans = sorted((r.span_ns, g) for g, r in a.ranks.items())
    if not spans:
        return "busy/idle/exposed: each rank's whole profile"
    (lo, lo_rank), (hi, hi_rank) = spans[0], spans[-1]
    span = fmt_ns(lo) if fmt_ns(lo) == fmt_ns(hi) else f"{fmt_ns(lo)} (rank {lo_rank}) to {fmt_ns(hi)} (rank {hi_rank})"
    which = f", {'rank' if len(spans) == 1 else 'ranks'} {rank_ranges(a.ranks)} of {len(scope.ranks)}"
    return (f"busy/idle/exposed: each rank's whole profile, its first to its last activity of any kind (CPU or "
            f"device): {span}{which if name_ranks else ''}")


def clocks_summed(hosts: list[ClockOffset], run: str) -> str:
    """Past ``CLOCK_HOSTS_LISTED`` hosts (a 256-node job made the list one line of 20 kB): how many, the
    hosts whose offsets are least certain, and the statement that lists them all (the clock note of
    the questions, and ``profdb runs``' column)."""
    worst = sorted(hosts, key=lambda o: (-o.error_ns, o.host))[:CLOCK_HOSTS_LISTED // 2]
    fewest, most = min(o.samples for o in hosts), max(o.samples for o in hosts)
    quoted = run.replace("'", "''")
    return (
        f"{len(hosts)} hosts, {fewest if fewest == most else f'{fewest}-{most}'} samples each; least certain: "
        + ", ".join(f"{o.host} {fmt_ns(o.offset_ns)} +- {fmt_ns(o.error_ns)}" for o in worst)
        + f"; every host: `profdb sql \"select * from host_clock_v where run = '{quoted}'\"`"
    )


#: hosts whose clock offset a note lists one by one; more are summed up (``clocks_summed``: the clock note
#: of the questions, window_notes, and `profdb runs`' clock_offsets column)
CLOCK_HOSTS_LISTED = 8
