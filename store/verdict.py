"""The one straggler verdict, with its confidence, from the collective timeline (store/collectives.py);
per-rank totals only when a run has no collective timeline, and then it says so.

The rule, from ``Analysis`` (a_{i,r}, wait, wait caused as defined in store/collectives.py):

1. **Candidate**: the rank c that caused the most wait. If another rank caused at least
   1/TIE_RATIO (80%) as much, the ranks tie: "no clear straggler", naming the tied ranks (never the
   lowest one).
2. **Material**: the others spent at least MATERIAL (5%) of their profiled time waiting on c
   (wait caused / sum of the other ranks' spans), and c is typically late by at least LATE_SHARE
   (10%) of its window between collectives (``lateness``: a median, so a few stalls do not count).
   Below that, c may be systematically last (launch jitter, a busy core now and then), but nobody
   loses time worth chasing. Measured (tests/test_straggler_calibration.py's jobs, 2 ranks on a
   shared 2-core machine, 14 unplanted runs): the leading rank of unplanted runs -2% to 41% late
   (median 6%), planted late or 3x-compute ranks 34-76%; the real DLRM rank 7 14%. So this gate only
   removes small systematic lateness (one unplanted run: last at 18 of 20, p=0.0004, but 6% late);
   machine noise is removed by 3.
3. **Not chance**, either of:
   a. *the timeline*: under "last arrivals spread evenly" (each participant of instance i is last with
      probability 1/n_i), P(c is last at >= k_c of the instances) times the number of ranks (a
      Bonferroni correction: c was picked as the worst) is at most ALPHA (0.01: with two ranks last
      arrival is a coin flip per instance, and 0.01 keeps false alarms under 1 in 100 unplanted runs);
   b. *the timeline and the work agree*: c entered last more often than any other rank, and it did
      at least COMPUTE_RATIO (1.5x) the peers' work before its collectives (below). With few
      collectives (3 steps of DDP: one all_reduce each) (a) can never pass, and a rank doing half
      again as much work as every peer before the collectives it is last at is the straggler.
4. **Cause**: what most of c's longer time before its collectives is. Per instance (the first left
   out when there are 3 or more: its window starts where the rank's profile does), c's window
   before the collective is its busy time plus its idle time; ``extra_work`` takes the medians of
   c's busy time minus the peers' median busy time (extra work) and of its idle time minus theirs
   (extra idle). "device compute" (or "CPU compute" when the ranks have no device work) when the
   extra work is at least EXPLAINED (half) of the two together: its own work is longer (a rank
   1.2x slower in every step is late by exactly that); else "host side": it sits idle before its
   work (data loading, host code, launches), even when its work is also longer (a rank that sleeps
   before each block and then computes 1.6x slower, seen on CI: 28% of its lateness is its work,
   and a work ratio alone had named "compute"). Only when c's window is not longer than the peers'
   (its lateness is not in its own window) does the work ratio decide: >= COMPUTE_RATIO, or extra
   work at least EXPLAINED of how late it arrives, is compute. The line gives the work ratio (c's
   busy time over the peers' median, ``work_ratio``) and, for host side, the two extras.

Confidence reported with every verdict: k_c of n instances, the p-value of 3a, c's share of all the
wait, the share of the others' time spent waiting on it."""

from __future__ import annotations

import bisect
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

from .collectives import TIE_NS, Analysis, Clocks, RankIdentity, RankResult, StepResult
from .metrics import p_at_least
from .units import fmt_ns

TIE_RATIO = 1.25
MATERIAL = 0.05
LATE_SHARE = 0.10
ALPHA = 0.01
COMPUTE_RATIO = 1.5
EXPLAINED = 0.5


@dataclass(frozen=True)
class Verdict:
    #: the straggler's global rank, None for "no clear straggler"
    rank: int | None
    #: the stderr line: "likely straggler: rank N (host H, local_rank L): ..." or "no clear straggler: ..."
    line: str
    #: "timeline" (collective arrival order) or "totals" (per-rank totals: no collective timeline)
    basis: str
    #: "compute", "host", or None (no rank named, or the totals rule)
    cause: str | None = None
    #: instances the named (or leading) rank entered last, out of ``instances``
    last: int = 0
    instances: int = 0
    #: P(last at >= ``last`` of ``instances``) under "last arrivals spread evenly", Bonferroni-corrected
    p_value: float | None = None
    #: share of all wait caused by the named/leading rank, and share of the others' time spent waiting on it
    wait_share: float | None = None
    time_share: float | None = None
    work_ratio: float | None = None
    #: the rank's typical lateness as a share of its window between collectives (``lateness``)
    lateness: float | None = None


def label(rank: int, ident: RankIdentity | None) -> str:
    """``rank N (host H, local_rank L)``; ``?`` for what is unknown."""
    if ident is None:
        return f"rank {rank}"
    lr = "?" if ident.local_rank is None else str(ident.local_rank)
    return f"rank {rank} (host {ident.host or '?'}, local_rank {lr})"


def _others_median(values: Sequence[int], skip: int) -> float:
    """The median of ``values`` without the entry at ``skip`` (``values`` need not be sorted)."""
    rest = list(values)
    del rest[skip]
    return _median(rest)


def _sorted_median_without(values: Sequence[int], skip: int) -> float:
    """``_others_median`` of values sorted ascending, without copying them: the middle of the rest."""
    n = len(values) - 1
    mid = n // 2

    def at(k: int) -> int:
        return values[k if k < skip else k + 1]

    return float(at(mid)) if n % 2 else (at(mid - 1) + at(mid)) / 2


class Seen(NamedTuple):
    """One rank in one instance it took part in, beside the other participants (their medians)."""

    busy: int
    peers_busy: float
    arrival: int
    peers_arrival: float
    window: int
    #: the median of the others' idle time in their windows (window minus busy)
    peers_idle: float


def rank_view(analysis: Analysis, rank: int) -> list[Seen]:
    """``rank`` in each instance it took part in, in instance order (the ``view`` argument of the
    functions below: ``decide`` computes it once for its candidate)."""
    out = []
    for p, times, busy, window in analysis.instances.of_rank(rank):
        arrived = sorted(times)
        mine = times[p]
        # without one arrival equal to the rank's (which one does not change the median)
        idle = sorted(map(operator.sub, window, busy))
        out.append(Seen(busy[p], _others_median(busy, p), mine,
                        _sorted_median_without(arrived, bisect.bisect_left(arrived, mine)), window[p],
                        _sorted_median_without(idle, bisect.bisect_left(idle, window[p] - busy[p]))))
    return out


def _skip_first(view: list[Seen]) -> list[Seen]:
    """The first instance left out when there are 3 or more: its window starts where the rank's
    profile does."""
    return view[1:] if len(view) >= 3 else view


def work_ratio(analysis: Analysis, rank: int, view: list[Seen] | None = None) -> float | None:
    """The median over instances of: c's busy time in the window before the collective, over the
    median of the peers' busy time in theirs (the first instance left out when there are 3 or more:
    its window starts where the rank's profile does; instances where the peers did no work are left
    out). A median, not a ratio of sums: a planted slow rank is slower at every collective, a rank
    that lost its core to another process for a moment only at a few. None when unknown."""
    ratios = [x.busy / x.peers_busy for x in _skip_first(rank_view(analysis, rank) if view is None else view)
              if x.peers_busy > 0]
    return _median(ratios) if ratios else None


class Extra(NamedTuple):
    """A rank against the others before its collectives (``extra_work``), medians over instances."""

    #: its busy time in the window before the collective minus the others' median
    work: float
    #: its idle time in that window (window minus busy) minus the others' median
    idle: float
    #: its arrival minus the others' median arrival
    late: float

    def work_explains(self) -> bool | None:
        """Whether the extra work is at least EXPLAINED of the extra window (extra work plus extra
        idle); None when the window is not longer (the lateness is not in the rank's own window)."""
        longer = self.work + self.idle
        return self.work >= EXPLAINED * longer if longer > 0 else None

    def work_explains_lateness(self) -> bool:
        """Whether it arrives late and the extra work is at least EXPLAINED of how late."""
        return self.late > 0 and self.work >= EXPLAINED * self.late


def extra_work(analysis: Analysis, rank: int, view: list[Seen] | None = None) -> Extra | None:
    """How much more ``rank`` works and idles before its collectives than the others, and how late it
    arrives (``Extra``: medians over instances, in ns); the first instance left out when there are 3
    or more (as ``work_ratio``). None when unknown."""
    seen = _skip_first(rank_view(analysis, rank) if view is None else view)
    if not seen:
        return None
    return Extra(_median([x.busy - x.peers_busy for x in seen]),
                 _median([x.window - x.busy - x.peers_idle for x in seen]),
                 _median([x.arrival - x.peers_arrival for x in seen]))


def _median(values: list[float] | list[int]) -> float:
    """The median of a non-empty list (sorts it in place; statistics.median is slower per call)."""
    values.sort()
    n = len(values)
    mid = n // 2
    return float(values[mid]) if n % 2 else (values[mid - 1] + values[mid]) / 2


def lateness(analysis: Analysis, rank: int, view: list[Seen] | None = None) -> float | None:
    """How late ``rank`` typically is: the median over instances of its arrival minus the median
    arrival of the other participants, as a share of its median window between collectives (the
    time it had to get there). Robust to a few instances where the machine stalled one rank."""
    seen = rank_view(analysis, rank) if view is None else view
    if not seen:
        return None
    window = _median([x.window for x in seen])
    if window <= 0:
        return None
    return _median([x.arrival - x.peers_arrival for x in seen]) / window


def times(ratio: float) -> str:
    """A work ratio as the lines say it: ``0.50x``, ``2.42x``, ``12.3x``, ``123x``, ``5,000,000x``
    (never an exponent: others who barely work before their collectives make it huge)."""
    if ratio < 9.995:
        return f"{ratio:.2f}x"
    if ratio < 999.5:
        return f"{ratio:#.3g}".rstrip(".") + "x"
    return f"{ratio:,.0f}x"


def decide(analysis: Analysis, identities: Mapping[int, RankIdentity]) -> Verdict:
    """The verdict from the collective timeline (module doc). ``analysis`` must have instances;
    use ``decide_from_totals`` otherwise."""
    ranks = analysis.ranks
    n = len(analysis.instances) - analysis.instances.ties()
    total_wait = sum(r.wait_caused_ns for r in ranks.values())
    ident = identities.get
    if n == 0 or total_wait == 0:
        ties = len(analysis.instances) - n
        return Verdict(None, f"no clear straggler: no collective had a single last rank ({ties} of "
                       f"{len(analysis.instances)} ended in a tie)", "timeline", instances=len(analysis.instances))
    order = sorted(ranks.values(), key=lambda r: (-r.wait_caused_ns, r.rank))
    c = order[0]
    probs = [1 / n for n in analysis.instances.sizes_with_last()]
    p = min(1.0, p_at_least(c.last, probs) * len(ranks))
    wait_share = c.wait_caused_ns / total_wait
    others_time = sum(r.span_ns for r in ranks.values() if r.rank != c.rank)
    time_share = c.wait_caused_ns / others_time if others_time else None
    view = rank_view(analysis, c.rank)
    ratio = work_ratio(analysis, c.rank, view)
    base = Verdict(None, "", "timeline", last=c.last, instances=n, p_value=p, wait_share=wait_share,
                   time_share=time_share, work_ratio=ratio, lateness=lateness(analysis, c.rank, view))
    counts = sorted((r.last for r in ranks.values() if r.last), reverse=True)
    spread = (f"last arrivals spread over {len(counts)} rank(s), {counts[-1]}-{counts[0]} of {n} each"
              if counts else "")
    if len(order) > 1 and order[1].wait_caused_ns * TIE_RATIO >= c.wait_caused_ns:
        tied = [r.rank for r in order if r.wait_caused_ns * TIE_RATIO >= c.wait_caused_ns]
        return replace(base, line="no clear straggler: ranks " + ", ".join(map(str, tied)) + " tie: the others waited "
                       + ", ".join(fmt_ns(ranks[r].wait_caused_ns) for r in tied) + f" on each ({spread})")
    evidence = (f"entered last at {c.last} of {n} collectives (p={p:.2g} that last arrivals are spread evenly); "
                f"the others waited {fmt_ns(c.wait_caused_ns)} on it ({wait_share:.0%} of all the wait"
                + (f", {time_share:.1%} of their profiled time)" if time_share is not None else ")"))
    late = base.lateness
    if (time_share is not None and time_share < MATERIAL) or (late is not None and late < LATE_SHARE):
        typical = f"it is typically late by {late:.0%} of its time between collectives" if late is not None else (
            "the wait is a small share of the others' time")
        return replace(base, line=f"no clear straggler: {label(c.rank, ident(c.rank))} {evidence}, but {typical} "
                       f"(a straggler worth chasing: at least {LATE_SHARE:.0%} late and {MATERIAL:.0%} of the "
                       "others' time)")
    plurality = len(counts) >= 1 and c.last == counts[0] and (len(counts) == 1 or counts[1] < c.last)
    compute = ratio is not None and ratio >= COMPUTE_RATIO
    if not (p <= ALPHA or (plurality and compute)):
        return replace(base, line=f"no clear straggler: {spread}; rank {c.rank} entered last at {c.last} of {n} and "
                       "caused the most wait, but "
                       f"p={p:.2g} (> {ALPHA}) and its work before collectives is "
                       + (f"{times(ratio)} the others'" if ratio is not None else
                          "not comparable: the others did none"))
    domain = c.work_domain or "device"
    what = "device" if domain == "device" else "CPU"
    extra = extra_work(analysis, c.rank, view)
    explains = extra.work_explains() if extra is not None else None
    if explains is None:  # its window is not longer than the others': the work ratio and the lateness
        explains = compute or (extra is not None and extra.work_explains_lateness())
    if explains:
        cause = "compute"
        why = f"cause: {what} compute: it did " + (
            f"{times(ratio)} the others' {what} work before its collectives" if ratio is not None else
            f"{what} work before its collectives where the others did none")
        if extra is not None and not compute and extra.work_explains_lateness():
            why += (f" ({fmt_ns(extra.work)} more per collective, against {fmt_ns(extra.late)} late: the extra "
                    "work explains the lateness)")
        elif extra is not None and not compute:
            why += (f" ({fmt_ns(extra.work)} more per collective, against {fmt_ns(max(extra.idle, 0))} more idle: "
                    "the extra work is most of its longer time before them)")
    elif extra is not None and extra.work + extra.idle > 0:
        cause = "host"
        more = f"against {fmt_ns(extra.work)} more" if extra.work > 0 else "with no more"
        why = (f"cause: host side: before each collective it is idle {fmt_ns(extra.idle)} longer than the others, "
               f"{more} {what} work ({times(ratio) + ' theirs' if ratio is not None else 'the others did none'}); "
               "it reaches them late (data loading, host code, launches)")
    else:
        cause = "host"
        why = (f"cause: host side: no longer {what} work on this rank ("
               + (f"{times(ratio)} the others'" if ratio is not None else "the others did none") +
               " before its collectives); it reaches them late (data loading, host code, launches)")
    return replace(base, rank=c.rank, line=f"likely straggler: {label(c.rank, ident(c.rank))}: {evidence}; {why}",
                   cause=cause)


class RankTotal(NamedTuple):
    """Per-rank totals for runs without a collective timeline (Metrix aggregates, no collectives)."""

    rank: int
    #: busy time in the kinds asked about (e.g. kernels)
    busy_ns: int
    #: time in communication (collective kernels/annotations), None when the run has none
    comm_ns: int | None = None


#: per-rank totals within this share of the mean count as equal (today's rule, queries.straggler)
BALANCED = 0.02


def decide_from_totals(
    totals: Sequence[RankTotal], identities: Mapping[int, RankIdentity], why_no_timeline: str
) -> Verdict:
    """Today's totals rule, kept for runs without a collective timeline, and saying so: the rank that
    waits least in collectives (communication time inverts: long is waiting), else the busiest rank.
    Equal extremes are ties, never the lowest rank."""
    note = f" (from per-rank totals: {why_no_timeline})"
    if len(totals) < 2:
        return Verdict(None, f"no clear straggler: {len(totals)} rank, nothing to compare{note}", "totals")
    comm = [t for t in totals if t.comm_ns]
    if len(comm) >= 2:
        values = [t.comm_ns or 0 for t in comm]
        lo, mean = min(values), sum(values) / len(values)
        if max(values) - lo > BALANCED * max(mean, 1):
            least = [t.rank for t in comm if t.comm_ns == lo]
            return _extreme(least, identities, "the least time in collectives", "waits least in collectives",
                            lo, mean, note)
    values = [t.busy_ns for t in totals]
    hi, mean = max(values), sum(values) / len(values)
    if hi - min(values) <= BALANCED * max(mean, 1):
        return Verdict(None, f"no clear straggler: ranks within {BALANCED:.0%} in busy time{note}", "totals")
    top = [t.rank for t in totals if t.busy_ns == hi]
    return _extreme(top, identities, "the most busy time", "the most busy time", hi, mean, note)


def _extreme(ranks: Sequence[int], identities: Mapping[int, RankIdentity], tie_what: str, why: str,
             value: float, mean: float, note: str) -> Verdict:
    """The totals rule's answer for the ranks at the extreme ``value``: several are a tie (never the
    lowest rank), one is the likely straggler."""
    if len(ranks) > 1:
        return Verdict(None, "no clear straggler: ranks " + ", ".join(map(str, ranks))
                       + f" tie for {tie_what} ({fmt_ns(value)}){note}", "totals")
    r = ranks[0]
    return Verdict(r, f"likely straggler: {label(r, identities.get(r))}: {why} ({fmt_ns(value)} vs mean "
                   f"{fmt_ns(mean)}){note}", "totals")


class Window(NamedTuple):
    """Where the matched instances are: the first arrival and the latest arrival (common clock), and
    the ranks that took part in any of them."""

    first_ns: int
    last_ns: int
    ranks: tuple[int, ...]


@dataclass(frozen=True)
class Findings:
    """What a run's collective timeline says (``collectives.Analysis``) without its per-instance rows:
    all that the verdict and the questions but ``--collectives`` read. ``findings_of`` makes it from an
    Analysis; the store keeps it per run (store/timeline.py ``store_analysis``, table ``run_analysis``),
    so a question does not match and attribute every collective again."""

    family: str
    #: matched instances, and how many of them ended in a tie (no single last rank)
    instances: int
    tied: int
    window: Window | None
    clocks: Clocks
    ranks: Mapping[int, RankResult]
    steps: tuple[StepResult, ...]
    notes: tuple[str, ...]
    end_spread_ns: int | None
    duration_ns: int | None
    apart: str | None
    #: ``decide``'s verdict when the run has a timeline whose ends line up, else None
    decided: Verdict | None

    @property
    def has_timeline(self) -> bool:
        return self.instances > 0


def findings_of(analysis: Analysis, identities: Mapping[int, RankIdentity]) -> Findings:
    """The findings of ``analysis`` (``decide`` run once, with ``identities`` for its labels)."""
    insts = analysis.instances
    window = None
    if insts:
        window = Window(insts.first_ns(), insts.latest_ns(), insts.ranks())
    decided = decide(analysis, identities) if insts and analysis.apart is None else None
    return Findings(analysis.family, len(insts), insts.ties(), window,
                    analysis.clocks, analysis.ranks, analysis.steps, analysis.notes, analysis.end_spread_ns,
                    analysis.duration_ns, analysis.apart, decided)


def straggler_verdict(analysis: Analysis | Findings | None, identities: Mapping[int, RankIdentity],
                      totals: Sequence[RankTotal] = ()) -> Verdict:
    """The one verdict: from the timeline when there is one (``analysis``, or its findings), else from
    ``totals``, saying why. A timeline in which every collective ended in a tie (all ranks arrived
    within the tie margin, as in generated traces) says nothing of arrival order: with ``totals`` the
    totals rule decides, saying so.

    A timeline whose collective ends do not line up (``Analysis.apart``: its clocks are not comparable
    or its calls did not block, store/collectives.py ``ends_line_up``) names no rank at all, not even
    from ``totals``: the run was expected to have a timeline and it is broken, so anything named would
    rest on evidence the run cannot give; the line says why, for the user to fix the clocks."""
    f = findings_of(analysis, identities) if isinstance(analysis, Analysis) else analysis
    if f is not None and f.has_timeline and f.apart is not None:
        return Verdict(None, f"no clear straggler: {f.apart}; no rank named", "timeline", instances=f.instances)
    if f is not None and f.has_timeline:
        if f.tied < f.instances or not totals:
            assert f.decided is not None
            return f.decided
        why = (f"every one of the {f.tied} matched collectives ended in a tie (the last arrivals within "
               f"{fmt_ns(TIE_NS)} or the clock error): the timeline does not say who is late")
        return decide_from_totals(totals, identities, why)
    why = "; ".join(f.notes) if f is not None and f.notes else "no collective timeline"
    return decide_from_totals(totals, identities, why)
