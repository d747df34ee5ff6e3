"""Profiler outputs profdb does not read as they are, and what to do with each: a file none of the
readers recognises is looked up here by its name's ending, so that the error (a file named on the
command line, a folder with nothing else) or the note (files skipped in a folder) says what the file
is and how to get what profdb reads, instead of only "not a profiler output".

The commonest case: Nsight Systems writes a binary report (``.nsys-rep``; ``.qdrep`` in older versions),
and profdb reads its SQLite export: ``nsys export --type sqlite -o OUT.sqlite REPORT`` (NVIDIA's exporter
documentation; the advice names ``-o``, so where the export lands is not left to the version's default),
or ``nsys profile --export=sqlite``, which writes it beside the report as it profiles. rocprofv3 can also
write Perfetto (``--output-format pftrace``) and OTF2 traces, which hold no more than its default rocpd
database, which profdb reads. Its ``--stats`` summaries (``*_stats.csv``) are per-name totals of the traces it
writes beside them.

Only the name is looked at, and only for files no reader recognised by their content: a real export
renamed ``.nsys-rep`` is still read as what it is. One kind is told by its content: a PyTorch execution
trace (``ExecutionTraceObserver``, the Chakra schema: ``{"schema": ..., "nodes": [...]}``), a ``.json``
like the Kineto trace it is often written beside, which holds the timings profdb reads.

``damaged`` tells what must not be skipped as "not a profiler output" although no reader recognises it:
an SQLite database cut short (an interrupted copy of an Nsight Systems export, a rocpd or RPD file) whose
table names were in the part lost. In a folder it was skipped with a note and its rank was missing."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .base import SQLITE_MAGIC, display_name, gunzipped, head, is_gzip


@dataclass(frozen=True, slots=True)
class Other:
    """Outputs of one kind that profdb does not read: their name endings (lower case), what they are
    (singular and plural, for notes that count them) and what to do (``{path}``: the file's path,
    ``{stem}``: its path without the ending). ``beside``: the ending of what profdb reads, when the
    producer writes it next to such a file under the same name (then that is what to ingest, and a
    folder that holds both needs no advice)."""

    endings: tuple[str, ...]
    what: str
    whats: str
    todo: str
    beside: str = ""


#: what to do with rocprofv3's own outputs that profdb does not read
_ROCPD_INSTEAD = (
    "with rocprofv3, ingest its default rocpd output (<pid>_results.db) or record with --output-format csv or json"
)

OTHERS = (
    Other(
        (".nsys-rep", ".qdrep"), "an Nsight Systems report", "Nsight Systems reports",
        "profdb reads its SQLite export: run `nsys export --type sqlite -o {stem}.sqlite {path}`, then ingest "
        "{stem}.sqlite (`nsys profile --export=sqlite` writes it as it profiles)", ".sqlite",
    ),
    Other(
        (".ncu-rep",), "an Nsight Compute report", "Nsight Compute reports",
        "per-kernel metrics without a timeline, which profdb does not read; profile the job with Nsight Systems "
        "(`nsys profile`) and ingest its SQLite export",
    ),
    Other((".pftrace", ".perfetto-trace"), "a Perfetto trace", "Perfetto traces",
          f"profdb does not read Perfetto traces; {_ROCPD_INSTEAD}", ".db"),
    Other((".otf2",), "an OTF2 trace", "OTF2 traces", f"profdb does not read OTF2; {_ROCPD_INSTEAD}", ".db"),
    Other(
        ("_stats.csv",), "a rocprofv3 statistics summary", "rocprofv3 statistics summaries",
        "per-name totals without a timeline (rocprofv3 --stats), which profdb does not read: the traces hold "
        "them; ingest the *_trace.csv files rocprofv3 writes beside it", "_trace.csv",
    ),
)  # fmt: skip


#: the top-level keys of a PyTorch execution trace (ExecutionTraceObserver, Chakra schema): a graph of
#: operators, no timed events; a Kineto trace never has them at the top (group 1: the schema's version)
ET_MARK = re.compile(rb'^\s*\{\s*"schema"\s*:\s*"([^"]*)"[^\[]*?"nodes"\s*:\s*\[')
_ET = Other(
    (".json",), "a PyTorch execution trace", "PyTorch execution traces",
    "a graph of operators without timings (torch.profiler.ExecutionTraceObserver), which profdb does not read; "
    "ingest the Kineto trace torch.profiler writes for the same steps (on_trace_ready, export_chrome_trace)",
)


def _other(path: Path) -> tuple[Other, str] | None:
    """The kind of ``path`` by its name's ending (or, for a ``.json``, its content), and that ending, or
    None."""
    name = path.name.lower()
    for other in OTHERS:
        for ending in other.endings:
            if name.endswith(ending) and len(name) > len(ending):
                return other, ending
    if display_name(path).lower().endswith(".json") and ET_MARK.match(head(path, 4096)):
        return _ET, ""
    return None


def _read_beside(other: Other, ending: str, path: Path) -> bool:
    """Whether what profdb reads of ``path`` is beside it (an export already made)."""
    return bool(other.beside) and Path(str(path)[: -len(ending)] + other.beside).is_file()


def _todo(other: Other, ending: str, path: Path) -> str:
    stem = str(path)[: -len(ending)]
    if _read_beside(other, ending, path):
        return f"profdb does not read it; ingest {stem}{other.beside}, beside it"
    return other.todo.format(path=path, stem=stem)


def advice(path: Path) -> str | None:
    """What ``path`` is and what to do with it, or None when its name says nothing profdb knows."""
    found = _other(path)
    if found is None:
        return None
    other, ending = found
    return f"{other.what}: {_todo(other, ending, path)}"


def summary(paths: list[Path]) -> list[str]:
    """One line per kind of output among ``paths`` (files skipped in folders): how many, one of them,
    and what to do, e.g. "2 Nsight Systems reports (e.g. rank0/report.nsys-rep): profdb reads ..."."""
    kinds: dict[Other, list[tuple[Path, str]]] = {}
    for p in paths:
        found = _other(p)
        if found is not None and not _read_beside(*found, p):  # (a folder with both: its export was read)
            kinds.setdefault(found[0], []).append((p, found[1]))
    lines = []
    for other, some in kinds.items():
        first, ending = some[0]
        head = f"{len(some)} {other.whats} (e.g. {first})" if len(some) > 1 else f"{other.what} ({first})"
        lines.append(f"{head}: {_todo(other, ending, first)}")
    return lines


#: the endings (without .gz) of the files profdb reads: a gzip file of one of them cut too early to be told
#: by its content is still a profile cut short, not something else
_PROFILE_ENDINGS = (".json", ".csv", ".sqlite", ".db", ".rpd", ".trace")


def damaged(path: Path) -> str | None:
    """What is wrong with ``path`` and what to do, when no reader recognised it but it is a profile cut
    short: an SQLite database (gzip decompressed) shorter than the page count in its header, or whose
    gzip stream ends before its end; a gzip file named like a profile whose stream ends too early for its
    content to say what it is. None otherwise (not SQLite, or whole). A header whose page count is not
    valid (written by an SQLite older than 3.7.0) says nothing of the length."""
    h = head(path, 100)
    if len(h) < 100 or not h.startswith(SQLITE_MAGIC):
        if display_name(path).endswith(_PROFILE_ENDINGS) and path.name.lower().endswith(".gz") and is_gzip(path):
            _head, size, whole = gunzipped(path, 0, whole=True)
            if not whole:
                return (f"a gzip file cut short or damaged ({size:,} bytes of content before the damage, too few to "
                        "tell which profiler wrote it: an interrupted copy, or a full disk?); re-copy it from the "
                        "profiler's output folder")
        return None
    page = int.from_bytes(h[16:18], "big")
    pages = int.from_bytes(h[28:32], "big") if h[24:28] == h[92:96] else 0
    need = (65536 if page == 1 else page) * pages
    if is_gzip(path):
        _head, size, whole = gunzipped(path, 0, whole=True)
    else:
        size, whole = path.stat().st_size, True
    if whole and size >= need:
        return None
    told = f"{size:,} of the {need:,} bytes its header gives" if need else f"its gzip stream ends after {size:,} bytes"
    return (f"an SQLite database cut short ({told}: an interrupted copy, or a full disk?); profdb cannot tell which "
            "profiler wrote it (Nsight Systems exports, rocpd and RPD files are SQLite): re-copy it from the "
            "profiler's output folder")

