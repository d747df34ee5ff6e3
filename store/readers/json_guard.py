"""A bound on the nesting depth of a JSON stream, checked on the bytes before a parser sees them.

ijson builds each trace event as Python objects; a 205-byte .json.gz of nested arrays expands to
millions of levels and ijson would build them all (24 GB and more). ``guarded(f, path)`` wraps a
binary stream: every ``read`` passes the bytes on unchanged after checking that no array or object
is nested more than ``MAX_JSON_DEPTH`` deep; deeper input raises InputError naming the file.

How, at C speed: the text read so far, up to any string still open at its end, has its strings
removed (one regular expression), every other byte but brackets deleted (``bytes.translate``) and
``{}`` folded into ``[]``; then ``[]`` pairs are removed repeatedly, each pass peeling one level
(``bytes.replace``). The passes plus the ``[`` left unmatched bound the depth reached; the unmatched
``[`` are carried to the next read as levels still open. A string still open at the end of a read is
carried as just its opening quote (and a pending backslash), so a huge string costs linear time.

Also here: ``nesting`` (the depth of a complete text, for the fast readers' slices) and what msgspec's
error on a slice cut from an array means (``bad_before_cut``, ``closed_inside``), for both fast readers."""

from __future__ import annotations

import re
from pathlib import Path
from typing import IO

from ..errors import InputError

#: deepest nesting of arrays/objects accepted in a JSON input (profilers write < 10)
MAX_JSON_DEPTH = 64
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
#: the longest prefix made of complete strings and bytes outside strings
_OUTSIDE = re.compile(rb'(?:[^"]+|"[^"\\]*(?:\\.[^"\\]*)*")*', re.DOTALL)
_BRACKETS = bytes.maketrans(b"{}", b"[]")
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_NOT_BRACKETS_OR_QUOTES = bytes(b for b in range(256) if b not in b'[]{}"')


def nesting(text: bytes, limit: int = MAX_JSON_DEPTH) -> int:
    """The nesting depth of a complete JSON text (or a bound on it when its brackets do not balance,
    as DepthGuard counts), found at C speed: for kineto_fast, which decodes whole slices of events.
    Past ``limit`` levels it stops counting and returns ``limit + 1`` (each level is a pass over the
    text: a bomb of a million levels must not cost a million passes).

    Without backslashes, every byte but brackets and quotes is deleted first; a pair of adjacent
    quotes is then deleted (an empty string, or the end of one string and the start of the next:
    either way every other byte keeps the parity of the quotes before it, i.e. whether it lies in a
    string), which leaves few quotes, so splitting at them is cheap. When every run of quotes left has
    an even length (counted: each run of n quotes holds n // 2 pairs), every bracket has an even number
    of quotes before it, so none lies in a string: the quotes are deleted at once (bytes.replace's
    pass over ~100,000 pairs of a 2 MB slice of Kineto events was ~1 of nesting's ~2.7 ms). With
    backslashes, strings are removed by the regular expression, as DepthGuard does."""
    if b"\\" in text:
        end = _OUTSIDE.match(text).end()  # type: ignore[union-attr]  # (matches at least "")
        outside = _STRING.sub(b"", text[:end])
    else:
        kept = text.translate(None, _NOT_BRACKETS_OR_QUOTES)
        if kept.count(b'""') * 2 == kept.count(b'"'):
            outside = kept.translate(None, b'"')  # (every run of quotes even: no bracket in a string)
        else:
            outside = b"".join(kept.replace(b'""', b"").split(b'"')[::2])
    seq = outside.translate(_BRACKETS, _NOT_BRACKETS)
    passes = 0
    while passes <= limit:
        shorter = seq.replace(b"[]", b"")
        if len(shorter) == len(seq):
            return min(passes + seq.count(b"["), limit + 1)
        passes += 1
        seq = shorter
    return limit + 1


class DepthGuard:
    """A read-only binary stream that checks the nesting depth of what passes through it."""

    def __init__(self, f: IO[bytes], path: Path, max_depth: int = MAX_JSON_DEPTH) -> None:
        self.f = f
        self.path = path
        self.max_depth = max_depth
        self.carry = b""  # an open string's quote (and pending backslash) from the previous read
        self.open = 0  # levels open at the end of what was checked

    def read(self, size: int = -1) -> bytes:
        data = self.f.read(size)
        if not data:
            return data
        text = self.carry + data
        if b"\\" not in text:
            # no escapes (the usual case): strings are what lies between two quotes; an odd piece
            # count means every string is closed, an even one that the last piece is an open string
            parts = text.split(b'"')
            self.carry = b'"' if len(parts) % 2 == 0 else b""
            self._check(b"".join(parts[::2]))
            return data
        end = _OUTSIDE.match(text).end()  # type: ignore[union-attr]  # (matches at least "")
        self._check(_STRING.sub(b"", text[:end]))
        rest = text[end:]  # empty, or a string still open: starts with its quote
        if rest:
            backslashes = len(rest) - len(rest.rstrip(b"\\"))
            self.carry = b'"' + b"\\" * (backslashes % 2)
        else:
            self.carry = b""
        return data

    def _check(self, outside: bytes) -> None:
        """``outside``: the next text outside strings."""
        seq = outside.translate(_BRACKETS, _NOT_BRACKETS)
        if not seq:
            return
        seq = b"[" * self.open + seq
        passes = 0
        while True:
            shorter = seq.replace(b"[]", b"")
            if len(shorter) == len(seq):
                break
            passes += 1
            seq = shorter
            if passes > self.max_depth:
                raise self._too_deep()
        # a point's depth counts opens matched later (inside a peeled structure: <= passes) and
        # opens never matched so far (<= those left over)
        self.open = seq.count(b"[")  # (closing brackets left over are the parser's syntax error)
        if passes + self.open > self.max_depth:
            raise self._too_deep()

    def _too_deep(self) -> InputError:
        return InputError(
            f"{self.path}: arrays or objects are nested more than {self.max_depth} levels deep, which no profiler "
            "writes (profdb's limit, to bound memory); the file is damaged or not profiler output"
        )

    def close(self) -> None:
        self.f.close()

    def __enter__(self) -> DepthGuard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def guarded(f: IO[bytes], path: Path) -> DepthGuard:
    return DepthGuard(f, path)


# --------------------------------------------------------------------------- slices cut from an array
# The fast readers (kineto_fast, rocprof_json_fast) decode an array a slice at a time: ``[`` + the text
# up to an item's closing ``}`` + ``]``. What msgspec's error on such a piece says:

_AT_BYTE = re.compile(r"\(byte (\d+)\)")
_TRAILING = re.compile(r"trailing characters \(byte (\d+)\)")


def bad_before_cut(error: Exception, piece: bytes) -> bool:
    """Whether ``error`` lies before ``piece``'s last byte, so the data itself is bad: a wrong cut
    fails at its end (the bracket added) or leaves a string or an object open ("truncated", no byte)."""
    at = _AT_BYTE.search(str(error))
    return at is not None and int(at.group(1)) < len(piece) - 1


def closed_inside(error: Exception) -> int | None:
    """Where the array closed inside the piece (the byte msgspec names, the one after the first
    trailing one), or None when the error is not about trailing characters."""
    closed = _TRAILING.search(str(error))
    return int(closed.group(1)) if closed is not None else None
