"""The Kineto fast path (store/readers/kineto_fast.py: msgspec over slices of the events array)
against the reference reader (kineto_json._read_reference: ijson, streamed through the depth guard).

The same records on every real Kineto trace in tests/data, whole and cut into slices of many sizes
(so cuts fall next to kernel names holding braces and inside args), with and without a merged trace's
pid filter; the fast path must have read them itself (no fallback). On damaged or odd copies of a
real trace, ``kineto_json.read`` (fast path, then the reference where it stops) gives the same records
or the same error as the reference alone."""

from __future__ import annotations

import gzip
import json
import random
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from profdb.store.errors import InputError
from profdb.store.readers import kineto_fast, kineto_json
from profdb.store.readers.base import open_binary
from profdb.store.readers.json_guard import MAX_JSON_DEPTH, DepthGuard, nesting
from profdb.store.records import Activity, SourceInfo

DATA = Path(__file__).parent / "data" / "kineto"
REAL = DATA / "deepseek_train_rank0.json.gz"  # a real GPU trace (963 kernels) to damage
#: (SLICE, READ): the shipped sizes (a real sample is one slice), small (many cuts), tiny (an event
#: is often longer than a slice: the cut waits for more bytes)
SIZES = [(kineto_fast.SLICE, kineto_fast.READ), (4096, 1000), (300, 37)]


@pytest.fixture(scope="module")
def samples(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    out = tmp_path_factory.mktemp("dlrm")
    with tarfile.open(DATA / "dlrm_8rank" / "dlrm_kineto.tar.gz") as tar:
        tar.extractall(out, filter="data")
    found = sorted(DATA.rglob("*.json.gz")) + sorted((out / "dlrm_kineto").glob("*.json"))
    assert len(found) >= 20
    return found


def _fast(path: Path, pid: int | None = None, unread: dict[str, int] | None = None) -> list[Activity]:
    """The fast path alone (raises Fallback if it cannot read the file itself)."""
    with open_binary(path) as f:
        return [a for batch in kineto_fast.activities(f, kineto_json._CATS, pid, {} if unread is None else unread)
                for a in batch]


def _sized(monkeypatch: pytest.MonkeyPatch, size: tuple[int, int]) -> None:
    monkeypatch.setattr(kineto_fast, "SLICE", size[0])
    monkeypatch.setattr(kineto_fast, "READ", size[1])


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"slice{s[0]}")
def test_same_records_as_the_reference_on_every_real_trace(
    samples: list[Path], size: tuple[int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    _sized(monkeypatch, size)
    kinds: set[str] = set()
    for path in samples:
        ref = list(kineto_json._read_reference(path, None))
        assert ref, path
        assert _fast(path) == ref, path
        kinds |= {a.kind for a in ref}
    # every kind the reader knows was compared (python functions: the TraceLens MI300 trace's)
    assert kinds == set(kineto_json._CATS.values())


def test_a_pid_filter_reads_the_same_events(samples: list[Path]) -> None:
    """read_rank of a merged trace keeps the events of one process: the host's, then a GPU's."""
    for path in samples[:6]:
        pids = {a.pid for a in kineto_json._read_reference(path, None)}
        for pid in sorted(p for p in pids if p is not None)[:2]:
            ref = list(kineto_json._read_reference(path, pid))
            assert ref and {a.pid for a in ref} == {pid}
            assert _fast(path, pid) == ref


def _edited(tmp_path: Path, edit: Callable[[dict[str, Any]], None] | None = None, text: bytes | None = None) -> Path:
    trace = json.loads(gzip.decompress(REAL.read_bytes()))
    if edit is not None:
        edit(trace)
    out = tmp_path / "trace.json"
    out.write_bytes(text if text is not None else json.dumps(trace, indent=1).encode())
    return out


def _kernels(trace: dict[str, Any]) -> Iterator[dict[str, Any]]:
    return (e for e in trace["traceEvents"] if e.get("cat") == "kernel")


def _tricky(trace: dict[str, Any]) -> None:
    """Names and args that hold what a cut looks for: '},' and '}, {', nested objects, escapes; and
    python function events (CPU ops relabelled) beside the kernels' odd names."""
    for i, e in enumerate(e for e in trace["traceEvents"] if e.get("cat") == "cpu_op"):
        if i % 4 == 0:
            e["cat"] = "python_function"
    for i, e in enumerate(_kernels(trace)):
        if i % 3 == 0:
            e["name"] = e["name"] + ' }, {"ph": "X"}, \\"} ,'
        if i % 5 == 0:
            e["args"]["nested"] = {"a": {"b": [1, {"c": "},"}]}, "d": "}"}
        if i % 7 == 0:
            e["args"]["Collective name"] = "all}, {reduce"
            e["args"]["Process Group Ranks"] = [0, 1]  # a list: not cached by value


@pytest.mark.parametrize("size", SIZES[1:], ids=lambda s: f"slice{s[0]}")
def test_cuts_inside_strings_and_args_are_tried_and_rejected(
    tmp_path: Path, size: tuple[int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    _sized(monkeypatch, size)
    path = _edited(tmp_path, _tricky)
    ref = list(kineto_json._read_reference(path, None))
    assert sum('}, {"ph"' in a.name for a in ref) > 10 and sum(a.kind == "python" for a in ref) > 10
    assert _fast(path) == ref


def _outcome(read: Callable[[], Iterator[Any]]) -> tuple[str, Any]:
    try:
        return "rows", list(read())
    except InputError as e:
        return "error", str(e)


def _set_first_kernel(**fields: Any) -> Callable[[dict[str, Any]], None]:
    def edit(trace: dict[str, Any]) -> None:
        next(_kernels(trace)).update(fields)

    return edit


def _deep(levels: int) -> Callable[[dict[str, Any]], None]:
    def edit(trace: dict[str, Any]) -> None:
        value: Any = 1
        for _ in range(levels):
            value = [value]
        next(_kernels(trace))["args"]["deep"] = value

    return edit


class TextEdit(NamedTuple):
    """An edit of the trace's text (the real trace written with indent=1), not of the parsed trace."""

    change: Callable[[bytes], bytes]


#: (case, edit of the parsed trace or of its text, what the reference makes of it)
CASES: list[tuple[str, Callable[[dict[str, Any]], None] | TextEdit, str]] = [
    ("ts is a string", _set_first_kernel(ts="12.5"), "error"),
    ("dur is true", _set_first_kernel(dur=True), "error"),
    ("dur is false (read as 0)", _set_first_kernel(dur=False), "rows"),
    ("args is a list", _set_first_kernel(args=[1, 2]), "error"),
    ("args is an empty list (read as no args)", _set_first_kernel(args=[]), "rows"),
    ("cat is a list (not a kind profdb reads)", _set_first_kernel(cat=["kernel"]), "rows"),
    ("pid is a bool (validate rejects it later)", _set_first_kernel(pid=True), "rows"),
    ("grid is too short", _set_first_kernel(args={"grid": [1]}), "crash"),
    ("an entry is a number", lambda t: t["traceEvents"].insert(3, 7), "error"),
    # (integers beyond 64 bits are read, as json.load reads them: yajl refuses them, ijson's Python
    # parser reads on from there; validate refuses one profdb keeps, test_an_integer_beyond_64_bits...)
    ("ts past 64 bits", _set_first_kernel(ts=10**20), "rows"),
    # (a float that is infinite once in nanoseconds: named, where round() raised OverflowError)
    ("ts infinite in ns", _set_first_kernel(ts=1.7e308), "error"),
    ("dur infinite in ns", _set_first_kernel(dur=1e308), "error"),
    ("an arg past 64 bits", _set_first_kernel(args={"x": -(10**19)}), "rows"),
    ("a uint64 sentinel in an arg", _set_first_kernel(args={"External id": 2**64 - 1, "bytes": 2**64 - 1}), "rows"),
    ("19 digits inside 64 bits", _set_first_kernel(args={"x": 9 * 10**18, "bytes": 10**18}), "rows"),
    # (the trace, its events, an event, its args: 4 levels; json_guard bounds the depth from above
    # across reads, so the reference may refuse a file a level or two under the limit)
    ("args nested under the limit", _deep(MAX_JSON_DEPTH - 8), "rows"),
    ("args nested one level over the limit", _deep(MAX_JSON_DEPTH - 3), "error"),
    ("args nested 2000 levels", TextEdit(lambda b: b.replace(b'"args": {', b'"args": {"d": ' + b"[" * 2000 + b"]" * 2000
                                                           + b", ", 1)), "error"),
    ("a nesting bomb in args", TextEdit(lambda b: b.replace(b'"args": {', b'"args": {"d": ' + b"[" * 10**5
                                                        + b"]" * 10**5 + b", ", 1)), "error"),
    ("a lone surrogate in a name", TextEdit(lambda b: b.replace(b'"name": "', b'"name": "\\ud800', 1)), "rows"),
    ("traceEvents twice", TextEdit(lambda b: b[: b.rindex(b"}")] + b', "traceEvents": [{"ph": "X"}]}'), "rows"),
    ("garbage after the trace", TextEdit(lambda b: b + b"]"), "error"),
    ("cut in the middle", TextEdit(lambda b: b[: len(b) // 2]), "error"),
    ("cut before the last brace", TextEdit(lambda b: b[: b.rindex(b"}")]), "error"),
    ("a bad header", TextEdit(lambda b: b.replace(b"{", b'{"x": [}, ', 1)), "error"),
]


@pytest.mark.parametrize("size", SIZES[:2], ids=lambda s: f"slice{s[0]}")
@pytest.mark.parametrize(("case", "edit", "expected"), CASES, ids=[c[0] for c in CASES])
def test_damaged_or_odd_copies_give_what_the_reference_gives(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    size: tuple[int, int],
    case: str,
    edit: Callable[[dict[str, Any]], None] | TextEdit,
    expected: str,
) -> None:
    _sized(monkeypatch, size)
    if isinstance(edit, TextEdit):
        path = _edited(tmp_path, text=edit.change(_edited(tmp_path).read_bytes()))
    else:
        path = _edited(tmp_path, edit)
    if expected == "crash":  # what the reference raises, the fast path hands over to it
        with pytest.raises(IndexError):
            list(kineto_json._read_reference(path, None))
        with pytest.raises(IndexError):
            list(kineto_json._read(path, None))
        return
    ref = _outcome(lambda: kineto_json._read_reference(path, None))
    assert ref[0] == expected, ref[1] if ref[0] == "error" else case
    if expected == "error":
        assert str(path) in ref[1]
    assert _outcome(lambda: kineto_json._read(path, None)) == ref
    # the lists the ingest's workers take whole: the same records, in lists of Activity records only
    batches = _outcome(lambda: kineto_json.activity_batches(path, _NO_INFO, None))
    if ref[0] == "rows":
        assert all({type(a) for a in b} <= {Activity} for b in batches[1]), case
        batches = ("rows", [a for b in batches[1] for a in b])
    assert batches == ref


_NO_INFO = SourceInfo(format="kineto", kind="trace")  # (activity_batches reads no info without a rank section)


def _depth(text: bytes) -> int:
    """Nesting depth by walking the characters (the definition nesting() must match)."""
    depth = top = 0
    in_string = escaped = False
    for c in text.decode():
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "[{":
            depth += 1
            top = max(top, depth)
        elif c in "]}":
            depth -= 1
    return top


@pytest.mark.parametrize(
    "value",
    [
        ["]]]", "}}", "\\\\", "[[[[", 'a\\"[[[', ""],
        [[[{"a": ['"', '""', '"""[']}]], "x"],
        {"k": ["", "", "[", "", "]]"], "v": [[[[[]]]]]},
        ['a"b', "[", '"', "{", "\\", "}"],
    ],
)
def test_nesting_counts_levels_outside_strings(value: Any) -> None:
    text = json.dumps(value).encode()
    assert nesting(text) == _depth(text)
    compact = json.dumps(value, separators=(",", ":")).encode()
    assert nesting(compact) == _depth(compact)


def _random_json(rng: random.Random, depth: int) -> Any:
    """A value of up to ``depth`` levels whose strings hold brackets, quotes, backslashes or nothing."""
    pick = rng.random()
    if depth <= 0 or pick < 0.35:
        return "".join(rng.choice(['"', "[", "]", "{", "}", "\\", "a", ""]) for _ in range(rng.randrange(4)))
    if pick < 0.45:
        return rng.randrange(-5, 5)
    if pick < 0.75:
        return [_random_json(rng, depth - 1) for _ in range(rng.randrange(4))]
    return {f"k{i}": _random_json(rng, depth - 1) for i in range(rng.randrange(4))}


def test_nesting_matches_a_walk_on_random_json() -> None:
    """Both ways nesting() reads strings (every run of quotes even: quotes dropped at once; else the
    pairs removed and the rest split) count what the character walk counts."""
    rng = random.Random(15)
    paths = set()
    for _ in range(3000):
        value = _random_json(rng, rng.randrange(1, 8))
        for text in (json.dumps(value).encode(), json.dumps(value, separators=(",", ":")).encode()):
            assert nesting(text) == _depth(text), text
            if b"\\" not in text:  # (with backslashes, strings are removed by a regular expression)
                kept = text.translate(None, bytes(b for b in range(256) if b not in b'[]{}"'))
                paths.add(kept.count(b'""') * 2 == kept.count(b'"'))
    assert paths == {True, False}  # (both ways were taken)


def test_nesting_agrees_with_the_depth_guard_on_the_real_samples(samples: list[Path]) -> None:
    for path in samples[:8]:
        with open_binary(path) as f:
            text = f.read()
        assert nesting(text) == _depth(text) < MAX_JSON_DEPTH
        guard = DepthGuard(open_binary(path), path, max_depth=nesting(text) - 1)
        with pytest.raises(InputError, match="nested more than"):
            while guard.read(65536):
                pass
        guard.close()


def test_nesting_stops_counting_past_its_limit() -> None:
    """A million levels cost a bounded number of passes (one per level counted), not a million."""
    bomb = b"[" * 10**6 + b"]" * 10**6
    assert nesting(bomb) == MAX_JSON_DEPTH + 1
    assert nesting(bomb, limit=3) == 4
    assert nesting(b"[[[]]]", limit=3) == 3


def _beyond_64_bits(trace: dict[str, Any]) -> None:
    """Integers past 64 bits where real traces could hold them: a uint64 sentinel in an arg profdb does
    not read (every 50th CPU op, from the 200th on), in a kept arg (a kernel's bytes), a flow id."""
    for i, e in enumerate(e for e in trace["traceEvents"] if e.get("cat") == "cpu_op"):
        if i >= 200 and i % 50 == 0:
            e.setdefault("args", {})["Record function id"] = 2**64 - 1
    next(_kernels(trace))["args"]["bytes"] = 2**64 + 7
    trace["traceEvents"].append({"ph": "f", "id": 2**70, "pid": 1, "tid": 1, "ts": 1, "cat": "ac2g", "name": "f"})


@pytest.mark.parametrize("size", SIZES[:2], ids=lambda s: f"slice{s[0]}")
def test_integers_beyond_64_bits_are_read_as_json_reads_them(
    tmp_path: Path, size: tuple[int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trace holding integers beyond 64 bits is valid JSON (json.load, HTA and Perfetto read it): the
    fast path reads it itself, and the reference, which yajl stops at the first such integer ("integer
    overflow"), reads on from that entry with ijson's Python parser. Both give the records json.load's
    events give (the same as without those integers, but the kept arg)."""
    _sized(monkeypatch, size)
    (tmp_path / "plain").mkdir()
    plain = list(kineto_json._read_reference(_edited(tmp_path / "plain"), None))
    path = _edited(tmp_path, _beyond_64_bits)
    calls: list[tuple[int, bool]] = []
    events = kineto_json._reference_events

    def spy(path: Path, pid: int | None, skip: int, parser: Any, unread: dict[str, int]) -> Iterator[Activity]:
        calls.append((skip, parser is kineto_json._PYTHON_PARSER))
        return events(path, pid, skip, parser, unread)

    monkeypatch.setattr(kineto_json, "_reference_events", spy)
    ref = list(kineto_json._read_reference(path, None))
    entries = json.loads(path.read_bytes())["traceEvents"]
    first = next(i for i, e in enumerate(entries) if e.get("args", {}).get("bytes") == 2**64 + 7
                 or e.get("args", {}).get("Record function id") == 2**64 - 1)
    assert calls == [(0, False), (first, True)]  # (yajl up to that entry, then the Python parser from it)
    calls.clear()
    assert _fast(path) == ref and not calls  # (the fast path read it all itself)
    assert len(ref) == len(plain)
    changed = [(a, b) for a, b in zip(ref, plain) if a != b]
    assert len(changed) == 1 and json.loads(changed[0][0].args)["bytes"] == 2**64 + 7
