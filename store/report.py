"""One run in pictures: a single self-contained HTML report, and the imbalance heatmap alone.

``build_report`` gathers the numbers: the straggler verdict, imbalance, hotspots, steps, the per-rank
split and the host / local-rank roll-ups come from ``queries`` (the same answers as ``profdb query``);
the rank x name matrix of the heatmap and the per-step, per-rank durations come from the ``summary``
and ``step`` tables (never ``activity``); the provenance from ``run``, ``rank`` and ``source_file``.

``render_html`` draws the charts with matplotlib (Agg, no pyplot state) as inline SVG and fills
``templates/report.html``: inline CSS, no script, no external resource, so the file opens offline
and can be mailed or attached to a CI job. matplotlib is the optional extra ``profdb[report]``.

The heatmap: one row per name (the most imbalanced, as in ``profdb query --imbalance``), one column
per rank, each cell the name's time on that rank divided by its mean over ranks (1.0 = its fair
share; 0 where the rank never ran it). A straggler shows as a hot column; in communication rows it
shows cold (it waits least)."""

from __future__ import annotations

import html
import importlib.metadata
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from string import Template
from typing import Any

from sqlalchemy import Connection, select

from . import queries, runs, straggler, timeline
from .collectives import Analysis
from .display import DROP_ORDER, NAME_COLUMNS, fmt_cell, fold_rank_places, is_number, shown_header
from .errors import InputError, ProfdbError
from .identity import rank_ranges
from .metrics import spread
from .models import Rank, Run, SourceFile, Step
from .names import shorten_all
from .scope import RankRef, RunScope, scope_of, with_ranks
from .units import visible

_run = Run.__table__
_rank = Rank.__table__
_step = Step.__table__
_src = SourceFile.__table__

#: heatmap rows (the most imbalanced names)
DEFAULT_TOP = 25
#: beyond this many ranks, per-rank bars become areas and per-rank step lines a min/max band
MANY_RANKS = 64
PLOT_FORMATS = ("png", "svg", "pdf")
#: characters of a name in the report's tables and chart labels (the full name on hover / click)
NAME_WIDTH = 64
#: gids of the heatmap's and the hotspots chart's name labels (``-0``, ``-1``... from the top row)
HEATMAP_LABEL = "heatmap-label"
HOTSPOTS_LABEL = "hotspots-label"


class MissingDependency(ProfdbError):
    """An optional dependency (matplotlib for charts) is not installed."""


# ---------------------------------------------------------------------------------------------
# the numbers


@dataclass
class Heatmap:
    run: str
    #: (kind, name, category), one per row
    names: list[tuple[str, str, str]]
    #: global ranks, one per column
    ranks: list[int]
    #: rows x columns: T_r / mean_r T_r (0 where the rank never ran the name)
    values: list[list[float]]
    #: global rank of the likely straggler, or None
    straggler: int | None
    kinds: tuple[str, ...]


@dataclass
class ReportData:
    run: str
    created_at: datetime
    world_size: int | None
    launcher: str | None
    command: str | None
    metadata: dict[str, Any]
    ranks: list[RankRef]
    missing_ranks: list[int]
    kinds: tuple[str, ...]
    verdict: str
    straggler: int | None
    imbalance: queries.Result
    hotspots: queries.Result
    steps: queries.Result
    rank_split: queries.Result
    #: per rank from the collective timeline (straggler.stragglers) and its analysis (None: a single rank)
    stragglers: queries.Result
    analysis: Analysis | None
    by_host: queries.Result
    by_local_rank: queries.Result
    heatmap: Heatmap
    #: step -> global_rank -> duration_ns
    step_ranks: dict[int, dict[int, int]]
    #: (global_rank, hostname, path, format, content_kind, rows, size_bytes, content_hash, identity_origin)
    sources: list[tuple[Any, ...]]
    notes: list[str] = field(default_factory=list)
    #: digests of the classification rules the run's files were classified with (None: not recorded)
    rule_digests: tuple[str | None, ...] = ()


def heatmap_data(
    conn: Connection, run: str | RunScope | None = None, kind: str | None = None, top: int = DEFAULT_TOP
) -> Heatmap:
    """The rank x name matrix of the most imbalanced names (see the module doc)."""
    scope = with_ranks(scope_of(conn, run))
    imb = queries.imbalance(conn, scope, kind=kind, top=top)
    kinds, _notes = queries.select_kinds(conn, scope, kind, ("kernel",))
    verdict = queries.straggler(conn, scope, kinds)
    return _heatmap(conn, scope, imb, kinds, verdict)


def _heatmap(
    conn: Connection, scope: RunScope, imb: queries.Result, kinds: tuple[str, ...], verdict: queries.Verdict
) -> Heatmap:
    """Rows: the names of ``imb`` (the imbalance table), in its order; T_r from the summary table."""
    h = {name: i for i, name in enumerate(imb.headers)}
    wanted = [(r[h["kind"]], r[h["name"]]) for r in imb.rows]
    all_kinds = sorted({k for k, _n in wanted})
    by_name = {(g.kind, g.name): g for g in queries.name_groups(conn, scope, all_kinds, None)}
    groups = [by_name[w] for w in wanted if w in by_name]
    per_rank = queries.rank_values(conn, scope, groups)
    values = []
    for g in groups:
        row, _present = per_rank[(g.kind, g.name_id)]
        s = spread(row)
        values.append([v * s.n / s.total if s.total else 0.0 for v in row])
    straggler = verdict.rank.global_rank if verdict.rank is not None else None
    return Heatmap(
        scope.name,
        [(g.kind, g.name, g.category) for g in groups],
        [r.global_rank for r in scope.ranks],
        values,
        straggler,
        kinds,
    )


def _step_ranks(conn: Connection, scope: RunScope) -> dict[int, dict[int, int]]:
    out: dict[int, dict[int, int]] = {}
    for step, g, dur in conn.execute(
        select(_step.c.step, _rank.c.global_rank, _step.c.duration_ns)
        .select_from(_step.join(_rank, _rank.c.id == _step.c.rank_id))
        .where(_rank.c.run_id == scope.id)
        .order_by(_step.c.step, _rank.c.global_rank)
    ):
        out.setdefault(int(step), {})[int(g)] = int(dur)
    return out


def _sources(conn: Connection, scope: RunScope) -> list[tuple[Any, ...]]:
    rows = conn.execute(
        select(
            _rank.c.global_rank,
            _rank.c.hostname,
            _src.c.path,
            _src.c.format,
            _src.c.content_kind,
            _src.c.rows,
            _src.c.size_bytes,
            _src.c.content_hash,
            _src.c.identity_origin,
        )
        .select_from(_src.join(_rank, _rank.c.id == _src.c.rank_id))
        .where(_src.c.run_id == scope.id)
        .order_by(_rank.c.global_rank, _src.c.path)
    ).all()
    return [tuple(r) for r in rows]


def build_report(
    conn: Connection, run: str | RunScope | None = None, kind: str | None = None, top: int = DEFAULT_TOP
) -> ReportData:
    """Every number of the report for ``run`` (default: the newest run), resolved once and passed to
    each question as its RunScope."""
    scope = with_ranks(scope_of(conn, run))
    info = runs.run_details(conn, scope)
    kinds, notes = queries.select_kinds(conn, scope, kind, ("kernel",))
    verdict = queries.straggler(conn, scope, kinds)
    imb = queries.imbalance(conn, scope, kind=kind, top=top)
    return ReportData(
        run=scope.name,
        created_at=info.created_at,
        world_size=scope.world_size,
        launcher=info.launcher,
        command=info.command,
        metadata=info.metadata,
        ranks=list(scope.ranks),
        missing_ranks=scope.missing_ranks(),
        kinds=kinds,
        verdict=verdict.line,
        straggler=verdict.rank.global_rank if verdict.rank is not None else None,
        imbalance=imb,
        hotspots=queries.hotspots(conn, scope, kind=kind, top=15),
        steps=queries.steps(conn, scope),
        rank_split=queries.rank_split(conn, scope, kind=kind),
        stragglers=straggler.stragglers(conn, scope),
        # the skew figure plots every instance: the analysis itself (the verdict's findings keep none)
        analysis=timeline.analyze_run(conn, scope) if verdict.detail is not None and verdict.detail.findings.instances
        else None,
        by_host=queries.imbalance(conn, scope, kind=kind, by="host"),
        by_local_rank=queries.imbalance(conn, scope, kind=kind, by="local-rank"),
        heatmap=_heatmap(conn, scope, imb, kinds, verdict),
        step_ranks=_step_ranks(conn, scope),
        sources=_sources(conn, scope),
        rule_digests=scope.rule_digests,
        notes=notes,
    )


# ---------------------------------------------------------------------------------------------
# charts (matplotlib, Agg, no pyplot)


def _matplotlib() -> Any:
    try:
        import matplotlib
    except ImportError as e:
        raise MissingDependency(
            "charts need matplotlib, which is not installed: pip install 'profdb[report]' "
            "(or pip install 'matplotlib>=3.7')"
        ) from e
    matplotlib.use("Agg")
    matplotlib.rcParams.update(
        {
            "svg.fonttype": "none",  # text stays text: small, searchable, selectable
            "svg.hashsalt": "profdb",  # stable ids, so the same data gives the same file
            "font.size": 9,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "text.parse_math": False,  # names are text: 'exp_$SLURM_JOB_ID_$USER' is not mathtext
        }
    )
    return matplotlib


def _figure(width: float, height: float) -> Any:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def _svg_document(fig: Any, titles: Sequence[tuple[str, str]] = ()) -> str:
    """The figure as an SVG document; ``titles`` (gid, text): a hover text (``<title>``) for the
    element drawn with that gid (the full name behind a shortened label)."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None, "Creator": None})
    text = buf.getvalue()
    for gid, title in titles:
        anchor = f'<g id="{gid}">'
        text = text.replace(anchor, f"{anchor}<title>{html.escape(visible(title))}</title>", 1)
    return text


def _svg(fig: Any, titles: Sequence[tuple[str, str]] = ()) -> str:
    """The figure as an SVG element to inline in the report."""
    text = _svg_document(fig, titles)
    return text[text.index("<svg") :]


def _label_names(ticks: Any, prefix: str, names: Sequence[str]) -> list[tuple[str, str]]:
    """Give the tick labels ``ticks`` the gids ``prefix-0``, ``prefix-1``... and return (gid, full
    name) for ``_svg``'s hover texts."""
    out = []
    for i, (tick, name) in enumerate(zip(ticks, names)):
        tick.set_gid(f"{prefix}-{i}")
        out.append((f"{prefix}-{i}", name))
    return out


def _rank_ticks(ax: Any, ranks: Sequence[int], axis: str = "x") -> None:
    step = max(1, len(ranks) // 32)
    pos = list(range(0, len(ranks), step))
    labels = [str(ranks[i]) for i in pos]
    if axis == "x":
        ax.set_xticks(pos, labels, fontsize=7, rotation=90 if len(ranks) > 16 else 0)
    else:
        ax.set_yticks(pos, labels, fontsize=7)


def heatmap_figure(hm: Heatmap) -> Any:
    """The rank x name heatmap as a matplotlib Figure."""
    _matplotlib()
    from matplotlib.colors import TwoSlopeNorm

    n_names, n_ranks = len(hm.names), len(hm.ranks)
    width = min(18.0, max(7.0, 4.5 + 0.28 * n_ranks))
    height = min(14.0, max(2.8, 1.5 + 0.26 * n_names))
    fig = _figure(width, height)
    ax = fig.add_subplot()
    if not n_names:
        ax.text(0.5, 0.5, "no names to show", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return fig
    top = max(1.5, max(max(row) for row in hm.values))
    im = ax.imshow(
        hm.values,
        aspect="auto",
        cmap="RdBu_r",
        norm=TwoSlopeNorm(vmin=0.0, vcenter=1.0, vmax=top),
        interpolation="nearest",
    )
    _rank_ticks(ax, hm.ranks)
    labels = short_names([n for _k, n, _c in hm.names])
    ax.set_yticks(
        range(n_names),
        [label + ("  [comm]" if c == queries.COMM else "") for label, (_k, _n, c) in zip(labels, hm.names)],
        fontsize=7,
    )
    _label_names(ax.get_yticklabels(), HEATMAP_LABEL, [n for _k, n, _c in hm.names])  # titles: heatmap_titles
    fig.suptitle(
        f"run {visible(hm.run)}: each name's time on each rank / its mean over ranks ({'/'.join(hm.kinds)})", fontsize=9
    )
    xlabel = "global rank"
    if hm.straggler is not None and hm.straggler in hm.ranks:
        col = hm.ranks.index(hm.straggler)
        ax.axvline(col - 0.5, color="black", linewidth=1.0)
        ax.axvline(col + 0.5, color="black", linewidth=1.0)
        for tick in ax.get_xticklabels():
            if tick.get_text() == str(hm.straggler):
                tick.set_color("#b2182b")
                tick.set_fontweight("bold")
        xlabel += f" (outlined: the likely straggler, rank {hm.straggler})"
    ax.set_xlabel(xlabel)
    cb = fig.colorbar(im, ax=ax, shrink=0.9, pad=0.01)
    cb.set_label("x mean (1 = fair share)")
    return fig


def heatmap_titles(hm: Heatmap) -> list[tuple[str, str]]:
    """(gid, full name) of the heatmap's row labels (as ``heatmap_figure`` set them), for hover texts."""
    return [(f"{HEATMAP_LABEL}-{i}", n) for i, (_k, n, _c) in enumerate(hm.names)]


def _rank_split_svg(data: ReportData) -> str:
    res = data.rank_split
    h = {k: i for i, k in enumerate(res.headers)}
    ranks = [r[h["global_rank"]] for r in res.rows]
    series = [
        ("compute", [r[h["compute_ns"]] / 1e6 for r in res.rows], "#d95f02"),
        ("communication", [r[h["communication_ns"]] / 1e6 for r in res.rows], "#7570b3"),
        ("memory", [r[h["memory_ns"]] / 1e6 for r in res.rows], "#1b9e77"),
    ]
    fig = _figure(min(16.0, max(6.0, 3 + 0.25 * len(ranks))), 3.0)
    ax = fig.add_subplot()
    x = list(range(len(ranks)))
    bottom = [0.0] * len(ranks)
    for label, ys, color in series:
        if not any(ys):
            continue
        if len(ranks) <= MANY_RANKS:
            ax.bar(x, ys, bottom=bottom, label=label, color=color, width=0.8)
        else:
            ax.fill_between(x, bottom, [b + y for b, y in zip(bottom, ys)], label=label, color=color, step="mid")
        bottom = [b + y for b, y in zip(bottom, ys)]
    # the three are durations added up: where communication runs beside compute their stack is taller than
    # the time the rank had anything running (busy + exposed communication, unions: ``queries.rank_split``)
    active = [None if r[h["busy_ns"]] is None else (r[h["busy_ns"]] + r[h["exposed_comm_ns"]]) / 1e6 for r in res.rows]
    if any(a is not None for a in active):
        shown = [(i, a) for i, a in enumerate(active) if a is not None]
        label = "any of them running (busy + exposed comm)"
        if len(ranks) <= MANY_RANKS:
            ax.scatter([i for i, _ in shown], [a for _, a in shown], marker="_", s=300, color="black", label=label,
                       zorder=3)
        else:
            ax.plot([i for i, _ in shown], [a for _, a in shown], color="black", linewidth=0.8, label=label)
    _rank_ticks(ax, ranks)
    if data.straggler is not None and data.straggler in ranks:
        i = ranks.index(data.straggler)
        ax.annotate("straggler", xy=(i, bottom[i]), xytext=(0, 3), textcoords="offset points", ha="center", fontsize=8)
    ax.set_xlabel("global rank")
    ax.set_ylabel("ms")
    ax.set_title(f"time per rank ({'/'.join(data.kinds)}; communication is mostly waiting)", fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    return _svg(fig)


def skew_figure(a: Analysis, straggler_rank: int | None) -> Any:
    """The evidence chart: arrival skew of each matched collective instance in time order, colored
    where the named rank was the last to arrive; beside it, per rank, the wait it caused the others
    and the wait it suffered."""
    _matplotlib()
    fig = _figure(11.0, 3.2)
    left, right = fig.subplots(1, 2, width_ratios=[3, 2])
    inst = a.instances
    colors = ["#b2182b" if i.last_rank is not None and i.last_rank == straggler_rank
              else ("#999999" if i.last_rank is None else "#4575b4") for i in inst]
    left.bar(range(len(inst)), [i.skew_ns / 1e6 for i in inst], color=colors, width=0.85)
    left.set_xlabel("collective instance, in time order" + (
        f" (red: rank {straggler_rank} arrived last; grey: tie)" if straggler_rank is not None else " (grey: tie)"))
    left.set_ylabel("arrival skew, ms")
    left.set_title(f"arrival skew per {a.family} collective (last arrival - first)", fontsize=9)
    ranks = sorted(a.ranks)
    x = list(range(len(ranks)))
    right.bar([i - 0.2 for i in x], [a.ranks[r].wait_caused_ns / 1e6 for r in ranks], width=0.4,
              label="wait caused (others waited on it)", color="#d95f02")
    right.bar([i + 0.2 for i in x], [a.ranks[r].wait_suffered_ns / 1e6 for r in ranks], width=0.4,
              label="wait suffered", color="#7570b3")
    _rank_ticks(right, ranks)
    right.set_xlabel("global rank")
    right.set_ylabel("ms")
    right.set_title("wait per rank", fontsize=9)
    right.legend(fontsize=7, frameon=False)
    return fig


def _steps_svg(data: ReportData) -> str | None:
    if not data.step_ranks:
        return None
    steps = sorted(data.step_ranks)
    ranks = sorted({g for per in data.step_ranks.values() for g in per})
    fig = _figure(7.5, 3.2)
    ax = fig.add_subplot()
    if len(ranks) <= 16:
        for g in ranks:
            xs = [s for s in steps if g in data.step_ranks[s]]
            ax.plot(
                xs, [data.step_ranks[s][g] / 1e6 for s in xs], marker="o", markersize=3, linewidth=1, label=f"rank {g}"
            )
        ax.legend(fontsize=7, ncols=min(4, len(ranks)), frameon=False)
    else:
        lo = [min(data.step_ranks[s].values()) / 1e6 for s in steps]
        hi = [max(data.step_ranks[s].values()) / 1e6 for s in steps]
        mean = [sum(data.step_ranks[s].values()) / len(data.step_ranks[s]) / 1e6 for s in steps]
        ax.fill_between(steps, lo, hi, alpha=0.3, label="fastest..slowest rank")
        ax.plot(steps, mean, label="mean over ranks")
        ax.legend(fontsize=7, frameon=False)
    for s in steps:
        per = data.step_ranks[s]
        if len(per) < 2:
            continue
        g = max(sorted(per), key=lambda r: per[r])
        ax.annotate(
            f"{g}",
            xy=(s, per[g] / 1e6),
            xytext=(0, 4),
            textcoords="offset points",
            ha="center",
            fontsize=7,
            color="#b2182b",
        )
    ax.set_xlabel("step (label: the slowest rank)")
    ax.set_ylabel("ms")
    ax.set_xticks(steps if len(steps) <= 30 else steps[:: max(1, len(steps) // 30)])
    ax.set_title("step time per rank", fontsize=9)
    return _svg(fig)


def _group_svg(res: queries.Result, label: str) -> str | None:
    if len(res.rows) < 2:
        return None
    h = {k: i for i, k in enumerate(res.headers)}
    keys = [visible(str(r[0])) for r in res.rows]
    fig = _figure(min(12.0, max(4.0, 2 + 0.5 * len(keys))), 2.8)
    ax = fig.add_subplot()
    x = list(range(len(keys)))
    ax.bar(
        [i - 0.2 for i in x],
        [r[h["compute_vs_mean"]] or 0 for r in res.rows],
        width=0.4,
        label="compute",
        color="#d95f02",
    )
    comm = [r[h["communication_vs_mean"]] for r in res.rows]
    if any(c is not None for c in comm):
        ax.bar([i + 0.2 for i in x], [c or 0 for c in comm], width=0.4, label="communication", color="#7570b3")
    ax.axhline(1.0, color="black", linewidth=0.6)
    ax.set_xticks(x, keys, fontsize=7, rotation=90 if len(keys) > 12 else 0)
    ax.set_ylabel("x mean over ranks")
    ax.set_xlabel(label)
    ax.legend(fontsize=7, frameon=False)
    return _svg(fig)


def _hotspots_svg(res: queries.Result) -> str | None:
    if not res.rows:
        return None
    h = {k: i for i, k in enumerate(res.headers)}
    names = [str(r[h["name"]]) for r in res.rows]
    labels = short_names(names)  # as the hotspots table below shows them
    top = min(10, len(names))
    fig = _figure(7.5, max(2.0, 0.8 + 0.25 * top))
    ax = fig.add_subplot()
    ax.barh(range(top), [r[h["share_pct"]] or 0 for r in res.rows[:top]][::-1], color="#4575b4")
    ax.set_yticks(range(top), labels[:top][::-1], fontsize=7)
    titles = _label_names(ax.get_yticklabels(), HOTSPOTS_LABEL, names[:top][::-1])
    ax.set_xlabel("% of the run's time")
    return _svg(fig, titles)


# ---------------------------------------------------------------------------------------------
# HTML


#: DROP_ORDER's columns fall in tiers of this many (the rest in tier 3): the template hides tier 1 on
#: a window narrower than a wide screen, then tier 2, then tier 3 (CSS media queries, no script), as a
#: terminal leaves columns out (cli/output.py); the least needed first
DROP_TIER = 5
#: text longer than this (a path, a command) may break anywhere; shorter words stay whole
LONG_TEXT = 24


def _drop_class(shown: str) -> str:
    return f"drop{min(3, 1 + DROP_ORDER.index(shown) // DROP_TIER)}" if shown in DROP_ORDER else ""


def _classes(*names: str) -> str:
    joined = " ".join(n for n in names if n)
    return f' class="{joined}"' if joined else ""


def _header_html(header: str) -> str:
    """A column header that may break after its underscores (``mean_per_<wbr>rank``) on a narrow page."""
    return "_<wbr>".join(html.escape(part) for part in shown_header(header).split("_"))


def short_names(names: Sequence[str], width: int = NAME_WIDTH) -> list[str]:
    """Names as a table column or chart shows them: control characters escaped, shortened to ``width``
    (``names.shorten_all``: two different names never read the same)."""
    return shorten_all([visible(n) for n in names], width)


def _name_html(full: str, short: str) -> str:
    """A name cell: the short name, the full one on hover (title) and on click (<details>, no script)."""
    shown = visible(full)
    if short == shown:
        return html.escape(shown)
    return (
        f'<details><summary title="{html.escape(shown)}">{html.escape(short)}</summary>'
        f'<div class="full">{html.escape(shown)}</div></details>'
    )


def html_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[Any]],
    cls: str = "",
    highlight: int | None = None,
    rank_col: str | None = None,
) -> str:
    """An HTML table whose cells read as in a terminal table (``display``: *_ns columns in readable
    units under a header without the suffix, rank / host / local rank folded into one column), every
    cell escaped; names (``display.NAME_COLUMNS``) shortened so that no two read the same, the full
    name on hover and on click; the row whose ``rank_col`` equals ``highlight`` is marked (the
    straggler). Text may wrap, numbers never do, so a table fits the page and its numbers stay in view."""
    ri = list(headers).index(rank_col) if rank_col is not None and rank_col in headers else None
    marks = [ri is not None and highlight is not None and r[ri] == highlight for r in rows]
    shown_headers, shown_rows = fold_rank_places(headers, rows)
    short = {
        i: short_names([str(r[i]) if r[i] is not None else "" for r in shown_rows])
        for i, h in enumerate(shown_headers)
        if h in NAME_COLUMNS
    }
    drop = [_drop_class(shown_header(h)) for h in shown_headers]
    out = [
        f'<table class="{cls}{" named" if short else ""}"><thead><tr>'
        + "".join(
            f"<th{_classes('name' if i in short else '', drop[i])}>{_header_html(h)}</th>"
            for i, h in enumerate(shown_headers)
        )
        + "</tr></thead><tbody>"
    ]
    for n, (r, mark) in enumerate(zip(shown_rows, marks)):
        cells = []
        for i, (hdr, v) in enumerate(zip(shown_headers, r)):
            if i in short and v is not None:
                cells.append(f"<td{_classes('name', drop[i])}>{_name_html(str(v), short[i][n])}</td>")
            else:
                text = fmt_cell(hdr, v)
                kind = "num" if is_number(v) else ("long" if len(text) > LONG_TEXT else "")
                cells.append(f"<td{_classes(kind, drop[i])}>{html.escape(text)}</td>")
        out.append(("<tr class=\"straggler\">" if mark else "<tr>") + "".join(cells) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _notes(lines: Sequence[str]) -> str:
    if not lines:
        return ""
    return '<ul class="notes">' + "".join(f"<li>{html.escape(n)}</li>" for n in lines) + "</ul>"


def _figure_html(svg: str | None, ident: str, caption: str, empty: str) -> str:
    if svg is None:
        return f'<p class="empty" id="{ident}-empty">{html.escape(empty)}</p>'
    return f'<figure id="{ident}">{svg}<figcaption>{html.escape(caption)}</figcaption></figure>'


def _template() -> Template:
    text = resources.files("profdb.store").joinpath("templates", "report.html").read_text(encoding="utf-8")
    return Template(text)


def _run_imbalance(data: ReportData) -> float | None:
    h = {k: i for i, k in enumerate(data.rank_split.headers)}
    compute = [int(r[h["compute_ns"]]) + int(r[h["memory_ns"]]) for r in data.rank_split.rows]
    return spread(compute).imbalance if compute else None


def render_html(data: ReportData, store: str = "") -> str:
    """The report as one HTML document (charts inline as SVG; no script, no external resource)."""
    _matplotlib()
    hm_fig = heatmap_figure(data.heatmap)
    heat_svg = _svg(hm_fig, heatmap_titles(data.heatmap))
    try:
        version = importlib.metadata.version("profdb")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - running from a checkout
        version = "dev"
    imb = _run_imbalance(data)
    hosts = sorted({r.hostname for r in data.ranks if r.hostname is not None})
    cards = [
        ("ranks", f"{len(data.ranks)}" + (f" of {data.world_size}" if data.world_size else "")),
        (
            "missing ranks",
            f"{len(data.missing_ranks)} ({rank_ranges(data.missing_ranks)})" if data.missing_ranks else "none",
        ),
        ("hosts", str(len(hosts)) if hosts else "unknown"),
        ("kinds", "/".join(data.kinds)),
        ("run imbalance", f"{imb:.3f}" if imb else "n/a"),
        ("steps", str(len(data.step_ranks))),
    ]
    cards_html = "".join(
        f'<div class="card"><div class="k">{html.escape(k)}</div><div class="v">{html.escape(v)}</div></div>'
        for k, v in cards
    )
    meta_rows = [
        ("run", data.run),
        ("created_at", data.created_at.isoformat(sep=" ", timespec="seconds")),
        ("world_size", data.world_size),
        ("launcher", data.launcher),
        ("command", data.command),
        ("classification rules", ", ".join(d or "not recorded" for d in data.rule_digests) or None),
    ] + [(f"tag {k}", v if isinstance(v, str) else json.dumps(v)) for k, v in sorted(data.metadata.items())]
    missing = (
        f'<p class="warn" id="missing-ranks">missing ranks (no profile ingested): {len(data.missing_ranks)} '
        f"of {data.world_size}: {html.escape(rank_ranges(data.missing_ranks))}</p>"
        if data.missing_ranks
        else '<p id="missing-ranks">no missing ranks</p>'
    )
    bad = [r for r in data.ranks if r.ended_abnormally()]
    if bad:
        missing += (
            f'<p class="warn" id="rank-ends">{len(bad)} rank(s) did not end well, their profiles may be cut '
            "short: " + html.escape("; ".join(f"rank {r.global_rank} {r.end()}" for r in bad)) + "</p>"
        )
    if len(data.rule_digests) > 1:
        missing += (
            '<p class="warn" id="rule-digests">the run\'s files were classified with '
            f"{len(data.rule_digests)} rule sets: communication vs compute may differ between them "
            f"(profdb reclassify --run {html.escape(data.run)})</p>"
        )
    src_headers = [
        "global_rank",
        "hostname",
        "path",
        "format",
        "content_kind",
        "rows",
        "size_bytes",
        "content_hash",
        "identity_origin",
    ]
    # (the digest's first 12 hex digits, after its algorithm's prefix: "blake3:0123456789ab")
    sources = [tuple(r[:7]) + (str(r[7])[: str(r[7]).find(":") + 13],) + tuple(r[8:]) for r in data.sources]
    values = {
        "title": html.escape(f"profdb report: {data.run}"),
        "run": html.escape(data.run),
        "subtitle": html.escape(
            f"created {data.created_at.isoformat(sep=' ', timespec='seconds')} UTC · "
            f"{len(data.ranks)} ranks · {'/'.join(data.kinds)}"
        ),
        "verdict": html.escape(data.verdict),
        "evidence_notes": _notes(data.stragglers.notes),
        "skew_chart": _figure_html(
            _svg(skew_figure(data.analysis, data.straggler))
            if data.analysis is not None and data.analysis.instances else None,
            "skew",
            "Left: how far apart the ranks arrived at each collective. Right: the time the other ranks waited "
            "for each rank (it arrived last) and the time it waited for them.",
            "no collective timeline in this run: the verdict above comes from per-rank totals",
        ),
        "stragglers_table": html_table(
            data.stragglers.headers, data.stragglers.rows, "stragglers", data.straggler, "global_rank"
        ),
        "notes": _notes(data.notes),
        "cards": cards_html,
        "heatmap": _figure_html(
            heat_svg,
            "heatmap",
            "Each cell: the name's time on that rank / its mean over ranks. A straggler is a hot column "
            "(cold in [comm] rows: it waits least).",
            "",
        ),
        "ranks_chart": _figure_html(_rank_split_svg(data), "rank-split", data.rank_split.headline or "", ""),
        "ranks_table": html_table(
            data.rank_split.headers, data.rank_split.rows, "ranks", data.straggler, "global_rank"
        ),
        # the imbalance headline is the verdict already shown at the top
        "imbalance_headline": html.escape(
            (data.imbalance.headline or "") if data.imbalance.headline != data.verdict else ""
        ),
        "imbalance_table": html_table(
            data.imbalance.headers, data.imbalance.rows, "imbalance", data.straggler, "suspect_rank"
        ),
        "imbalance_notes": _notes(data.imbalance.notes),
        "host_headline": html.escape(data.by_host.headline or ""),
        "host_chart": _figure_html(
            _group_svg(data.by_host, "hostname"),
            "by-host",
            "per host, against the mean rank",
            "one host only: nothing to compare",
        ),
        "host_table": html_table(data.by_host.headers, data.by_host.rows, "rollup"),
        "local_headline": html.escape(data.by_local_rank.headline or ""),
        "local_chart": _figure_html(
            _group_svg(data.by_local_rank, "local_rank"),
            "by-local-rank",
            "per GPU slot, against the mean rank",
            "one local rank only: nothing to compare",
        ),
        "local_table": html_table(data.by_local_rank.headers, data.by_local_rank.rows, "rollup"),
        "steps_headline": html.escape(data.steps.headline or ""),
        "steps_chart": _figure_html(
            _steps_svg(data),
            "steps-chart",
            "duration of each step on each rank; the label over a step is its slowest rank",
            "no steps in this run (ProfilerStep#N annotations)",
        ),
        "steps_table": html_table(data.steps.headers, data.steps.rows, "steps"),
        "hotspots_headline": html.escape(data.hotspots.headline or ""),
        "hotspots_chart": _figure_html(
            _hotspots_svg(data.hotspots), "hotspots-chart", "top names by share of the run's time", "no activity"
        ),
        "hotspots_table": html_table(data.hotspots.headers, data.hotspots.rows, "hotspots"),
        "meta_table": html_table(["field", "value"], meta_rows, "meta"),
        "missing": missing,
        "sources_table": html_table(src_headers, sources, "sources"),
        "generated": html.escape(
            f"generated by profdb {version} on {datetime.now(timezone.utc).isoformat(sep=' ', timespec='seconds')}"
            + (f" from {store}" if store else "")
        ),
    }
    return _template().substitute(values)


def write_report(
    conn: Connection,
    out: Path,
    run: str | None = None,
    kind: str | None = None,
    top: int = DEFAULT_TOP,
    store: str = "",
) -> ReportData:
    """Build and write the HTML report of ``run`` to ``out``; returns its numbers."""
    _matplotlib()  # fail before any work when charts cannot be drawn
    _check_out(out, (".html", ".htm"))
    data = build_report(conn, run, kind, top)
    text = render_html(data, store)
    out.write_text(text, encoding="utf-8")
    return data


def plot_heatmap(
    conn: Connection, out: Path, run: str | None = None, kind: str | None = None, top: int = DEFAULT_TOP
) -> Heatmap:
    """Write the imbalance heatmap alone; the format follows the suffix (.png, .svg, .pdf)."""
    _matplotlib()
    _check_out(out, tuple(f".{f}" for f in PLOT_FORMATS))
    hm = heatmap_data(conn, run, kind, top)
    fig = heatmap_figure(hm)
    if out.suffix.lower() == ".svg":  # with the full names on hover
        out.write_text(_svg_document(fig, heatmap_titles(hm)), encoding="utf-8")
    else:
        fig.savefig(out, dpi=150, bbox_inches="tight")
    return hm


def _check_out(out: Path, suffixes: tuple[str, ...]) -> None:
    if out.suffix.lower() not in suffixes:
        raise InputError(f"{out}: the output must end in {' / '.join(suffixes)}")
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise InputError(f"{out}: folder {parent} does not exist; create it or choose another -o path")

