"""The HTML report stays readable with real 200-character C++ names (issue 17): checked on the rendered
page in headless Chromium, at a laptop's width and a narrow window, for the real HTA 2-rank set and the
DeepSeek rank-0 trace. A copy of the report gets a measuring script (the report itself has none) whose
findings --dump-dom returns: no table wider than its box, no page scrolling sideways, every number cell
inside the window, names shortened so that no two read the same with the full name on hover, distinct
heatmap labels with the full name as their SVG title; and the numbers are those of the raw traces."""

from __future__ import annotations

import csv
import gzip
import io
import json
from collections import defaultdict
from pathlib import Path

import pytest
from conftest import DATA, Invoke
from test_report import Dom, run_chromium

from profdb.store.units import fmt_ns

pytest.importorskip("matplotlib", reason="the report needs matplotlib: pip install 'profdb[report]'")

HTA = DATA / "kineto" / "hta_trace_filter_2ranks"
DEEPSEEK = DATA / "kineto" / "deepseek_train_rank0.json.gz"

MEASURE = """
<script>
(function () {
  const vw = document.documentElement.clientWidth;
  const shown = (el) => el.getClientRects().length > 0;
  const out = {vw: vw, page_width: document.documentElement.scrollWidth, boxes: [], nums: 0, nums_out: [],
               tables: {}, labels: {}};
  for (const box of document.querySelectorAll(".scroll")) {
    out.boxes.push({table: box.firstElementChild.className, scroll: box.scrollWidth, client: box.clientWidth});
  }
  for (const td of document.querySelectorAll("td.num")) {
    if (!shown(td)) continue;
    out.nums += 1;
    const r = td.getBoundingClientRect();
    const box = (td.closest(".scroll") || td.closest("section")).getBoundingClientRect();
    if (r.left < 0 || r.right > vw + 0.5 || r.right > box.right + 0.5) out.nums_out.push(td.textContent);
  }
  for (const table of document.querySelectorAll("table.named")) {
    const heads = [...table.querySelectorAll("thead th")].filter(shown).map((th) => th.textContent);
    const rows = [...table.querySelectorAll("tbody tr")].map((tr) => [...tr.children].filter(shown).map((td) => {
      const s = td.querySelector("summary");
      return s ? {text: s.textContent, full: s.title, width: td.getBoundingClientRect().width} : {text: td.textContent};
    }));
    out.tables[table.classList[0]] = {heads: heads, rows: rows};
  }
  for (const prefix of ["heatmap-label", "hotspots-label"]) {
    out.labels[prefix] = [...document.querySelectorAll(`g[id^="${prefix}-"]`)].map((g) => ({
      text: g.querySelector("text").textContent, title: (g.querySelector("title") || {}).textContent}));
  }
  const pre = document.createElement("pre");
  pre.id = "measure";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>
"""


def measure(report: Path, width: int, tmp_path: Path) -> dict:  # type: ignore[type-arg]
    page = tmp_path / f"{report.stem}-{width}.html"
    page.write_text(report.read_text(encoding="utf-8").replace("</body>", MEASURE + "</body>"), encoding="utf-8")
    done = run_chromium(page, "--dump-dom", f"--window-size={width},1600", "--enable-logging=stderr")
    assert done.returncode == 0, done.stderr[-2000:]
    dom = Dom()
    dom.feed(done.stdout)
    errors = [line for line in done.stderr.splitlines() if "CONSOLE" in line]
    assert "measure" in dom.text, errors  # the measuring script failed
    return json.loads(dom.text["measure"])  # type: ignore[no-any-return]


def cli_rows(run_cli: Invoke, *args: object) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(run_cli(*args, "--format", "csv").stdout)))


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Path]]:
    from click.testing import CliRunner

    from profdb.cli.main import cli

    root = tmp_path_factory.mktemp("layout")
    db = root / "s.db"
    out = {}
    for run, src in (("hta", HTA), ("deepseek", DEEPSEEK)):
        r = CliRunner().invoke(cli, ["ingest", "--db", str(db), "--run", run, str(src)], catch_exceptions=False)
        assert r.exit_code == 0, r.output + r.stderr
        out[run] = root / f"{run}.html"
        args = ["report", "--db", str(db), "--run", run, "-o", str(out[run])]
        r = CliRunner().invoke(cli, args, catch_exceptions=False)
        assert r.exit_code == 0, r.output + r.stderr
    return db, out


@pytest.mark.parametrize("run", ["hta", "deepseek"])
@pytest.mark.parametrize("width", [1280, 1024])
def test_report_fits_the_window_with_long_names(
    reports: tuple[Path, dict[str, Path]], run: str, width: int, run_cli: Invoke, tmp_path: Path
) -> None:
    db, pages = reports
    m = measure(pages[run], width, tmp_path)
    assert m["vw"] == width
    # nothing scrolls sideways: not the page, not a table in its box; every number inside the window
    assert m["page_width"] <= m["vw"], m["page_width"]
    wide = [b for b in m["boxes"] if b["scroll"] > b["client"] + 1]
    assert not wide, wide
    assert m["nums"] > 50 and not m["nums_out"], m["nums_out"][:10]
    # the tables' names: shortened, distinct, the full name (from the CLI's csv) on hover
    imbalance = cli_rows(run_cli, "query", "--imbalance", "--db", db, "--run", run, "--top", "25")
    full = [r["name"] for r in imbalance]
    assert max(len(n) for n in full) > 200  # real C++ names, the case this is about
    table = m["tables"]["imbalance"]
    assert table["heads"][0] == "name" and "mean_per_rank" in table["heads"] and "suspect_rank" in table["heads"]
    names = [row[0] for row in table["rows"]]
    assert [n.get("full") or n["text"] for n in names] == full
    texts = [n["text"] for n in names]
    assert len(set(texts)) == len(texts)
    assert all(len(t) <= 64 for t in texts)
    shortened = [n for n in names if "full" in n]
    assert shortened and all(n["width"] < m["vw"] / 2 for n in shortened)
    # durations read as everywhere else (units.fmt_ns of the csv's exact ns)
    col = table["heads"].index("mean_per_rank")
    assert [row[col]["text"] for row in table["rows"]] == [fmt_ns(int(r["mean_per_rank_ns"])) for r in imbalance]
    hot = m["tables"]["hotspots"]
    hot_names = [row[0] for row in hot["rows"]]
    assert len({n["text"] for n in hot_names}) == len(hot_names)
    # the heatmap: one distinct label per name of the imbalance table, in its order, the full name as title
    labels = m["labels"]["heatmap-label"]
    assert [lab["title"] for lab in labels] == full
    shown = [lab["text"].removesuffix("  [comm]") for lab in labels]
    assert len(set(shown)) == len(shown) == len(full)
    assert shown == texts  # the heatmap and the table read the same
    bars = m["labels"]["hotspots-label"]
    assert len(bars) == min(10, len(hot_names))
    assert [b["title"] for b in bars] == [n.get("full") or n["text"] for n in hot_names][: len(bars)][::-1]


def test_report_numbers_are_the_raw_traces(reports: tuple[Path, dict[str, Path]], tmp_path: Path) -> None:
    """The top imbalanced kernel of the HTA pair: its time per rank and slowest rank, summed here from
    the two raw trace files (Kineto: dur in microseconds), are what the rendered report shows."""
    _db, pages = reports
    m = measure(pages["hta"], 1280, tmp_path)
    table = m["tables"]["imbalance"]
    top = table["rows"][0]
    name = top[0].get("full") or top[0]["text"]
    per_rank: dict[int, int] = defaultdict(int)
    for rank, path in enumerate(sorted(HTA.glob("*.json.gz"))):
        trace = json.loads(gzip.decompress(path.read_bytes()))
        assert trace["distributedInfo"]["rank"] == rank
        for e in trace["traceEvents"]:
            if e.get("cat") == "kernel" and e.get("name") == name and e.get("ph") == "X":
                per_rank[rank] += round(float(e["dur"]) * 1000)
    assert set(per_rank) == {0, 1}
    h = table["heads"]
    row = {head: cell["text"] for head, cell in zip(h, top)}
    assert row["mean_per_rank"] == fmt_ns((per_rank[0] + per_rank[1]) / 2)
    assert row["max"] == fmt_ns(max(per_rank.values()))
    assert row["suspect_rank"] == str(max(per_rank, key=lambda g: per_rank[g]))


def test_report_screenshot_with_long_names(reports: tuple[Path, dict[str, Path]], tmp_path: Path) -> None:
    _db, pages = reports
    shot = tmp_path / "hta.png"
    done = run_chromium(pages["hta"], f"--screenshot={shot}", "--window-size=1280,2400")
    assert done.returncode == 0, done.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 50_000
