"""The JSON nesting-depth guard (store/readers/json_guard.py): exact on strings holding brackets,
quotes and escapes, whatever the read sizes; linear on a huge string; the real samples pass."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import ijson
import pytest
from profdb.store.errors import InputError
from profdb.store.readers.json_guard import MAX_JSON_DEPTH, DepthGuard

SAMPLES = sorted((Path(__file__).parent / "data").rglob("*.json.gz"))


def _read_all(blob: bytes, size: int) -> bytes:
    g = DepthGuard(io.BytesIO(blob), Path("x.json"))
    out = b""
    while True:
        chunk = g.read(size)
        if not chunk:
            return out
        out += chunk


def _nested(depth: int, inner: str = "1") -> str:
    return "[" * (depth - 1) + '{"a": ' + inner + "}" + "]" * (depth - 1)


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, 65536])
def test_depth_exactly_at_the_limit_passes_and_one_more_fails(size: int) -> None:
    tricky = json.dumps(['"]]]]\\', "}}}}", "\\\\", "[[[[" * 20, 'a\\"[[[[[[[['])
    ok = _nested(MAX_JSON_DEPTH - 1, tricky).encode()  # the list of tricky strings is the last level
    assert _read_all(ok, size) == ok  # bytes pass unchanged
    with pytest.raises(InputError, match="x.json: arrays or objects are nested more than 64 levels"):
        _read_all(_nested(MAX_JSON_DEPTH, tricky).encode(), size)


@pytest.mark.parametrize("size", [1, 5, 4096])
def test_closing_brackets_inside_strings_do_not_hide_depth(size: int) -> None:
    hide = json.dumps("]" * 200) + ","
    blob = ("[" + hide) * (MAX_JSON_DEPTH + 1) + "1" + "]" * (MAX_JSON_DEPTH + 1)
    with pytest.raises(InputError):
        _read_all(blob.encode(), size)


def test_a_huge_string_is_read_in_linear_steps() -> None:
    """An open string is carried as its quote only (with a pending backslash), not re-scanned."""
    blob = b'{"name": "' + b"a\\\\" * (1 << 20) + b'\\"]]]]", "x": [[[1]]]}'
    assert _read_all(blob, 4096) == blob


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.name)
def test_real_samples_pass_unchanged(sample: Path) -> None:
    raw = gzip.decompress(sample.read_bytes())
    plain = sum(1 for _ in ijson.parse(io.BytesIO(raw)))
    assert sum(1 for _ in ijson.parse(DepthGuard(io.BytesIO(raw), sample))) == plain
