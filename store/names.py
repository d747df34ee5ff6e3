"""Long kernel and operator names made readable in a narrow column (terminal tables, report labels).

Real names are C++ signatures of 200 to 1,500 characters (``void at::native::elementwise_kernel<128, 4,
at::native::gpu_kernel_impl<...>>(at::TensorIteratorBase&, ...)``, CUTLASS and NCCL templates): cut at a
width, they all read ``void at::native::elementwise_ker…``. ``shorten`` folds what is inside template
arguments and parameter lists (``elementwise_kernel<…>(…)``), keeps the identifier, and cuts the middle
when the identifier itself is too long. ``shorten_all`` shortens a column's names so that two different
names never read the same: it shows more of the folded parts of those that collide and, as a last resort,
appends a disambiguator taken from the full name's hash. Pure functions; the full name stays in csv/json."""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from collections.abc import Sequence

ELLIPSIS = "…"
#: a column narrower than this would show nothing readable; names get at least this width
MIN_WIDTH = 12
_OPEN = {"<": ">", "(": ")", "[": "]", "{": "}"}
_CLOSE = {v: k for k, v in _OPEN.items()}
#: return types of kernel signatures (Kineto writes ``void kernel<...>(...)``): not the distinguishing part
_RETURN_TYPES = ("void ",)


def fold(name: str, keep_depth: int = 0) -> str:
    """``name`` with the contents of brackets (``<>``, ``()``, ``[]``, ``{}``) nested deeper than
    ``keep_depth`` replaced by ``…``: ``fold("f<int, g<x>>(a, b)")`` is ``f<…>(…)``, with
    ``keep_depth=1`` it is ``f<int, g<…>>(a, b)``. Empty brackets stay (``f()``). A name whose
    brackets do not balance (``operator<``, ``a->b``) is returned as it is."""
    if not _balanced(name):
        return name
    out: list[str] = []
    depth = 0
    hidden = False  # the … of the current folded group is written
    for ch in name:
        is_open, is_close = ch in _OPEN, ch in _CLOSE
        if is_close:  # a bracket belongs to the level that holds its group
            depth -= 1
        if depth <= keep_depth:
            out.append(ch)
            hidden = False
        elif not hidden:
            out.append(ELLIPSIS)
            hidden = True
        if is_open:
            depth += 1
    return "".join(out)


def _balanced(name: str) -> bool:
    stack: list[str] = []
    for ch in name:
        if ch in _OPEN:
            stack.append(ch)
        elif ch in _CLOSE:
            if not stack or stack.pop() != _CLOSE[ch]:
                return False
    return not stack


def _max_depth(name: str) -> int:
    depth = best = 0
    for ch in name:
        if ch in _OPEN:
            depth += 1
            best = max(best, depth)
        elif ch in _CLOSE:
            depth -= 1
    return best


def _drop_return_type(name: str) -> str:
    for prefix in _RETURN_TYPES:
        if name.startswith(prefix) and len(name) > len(prefix):
            return name[len(prefix) :]
    return name


def _drop_namespaces(name: str) -> str:
    """``at::native::elementwise_kernel<…>(…)`` -> ``elementwise_kernel<…>(…)``: the qualifiers of the
    identifier before its first bracket (those inside brackets stay)."""
    cut = len(name)
    for i, ch in enumerate(name):
        if ch in _OPEN:
            cut = i
            break
    head = name[:cut]
    if "::" not in head:
        return name
    return head.rsplit("::", 1)[1] + name[cut:]


def cut_middle(text: str, width: int) -> str:
    """``text`` in ``width`` characters: its head (two thirds) and its tail around ``…``."""
    if len(text) <= width:
        return text
    if width <= 1:
        return ELLIPSIS[:width]
    keep = width - 1
    head = (keep * 2 + 2) // 3
    tail = keep - head
    return text[:head] + ELLIPSIS + (text[len(text) - tail :] if tail else "")


_QUALIFIER = re.compile(r"(?<![\w:])(?:[A-Za-z_]\w*::)+(?=[A-Za-z_~{(])|\(anonymous namespace\)::")


def compact(name: str) -> str:
    """``name`` without its ``void`` return type and without namespace qualifiers anywhere
    (``at::native::``, ``c10::``, ``cute::``): ``void at::native::f<c10::Half>(int)`` -> ``f<Half>(int)``."""
    return _QUALIFIER.sub("", _drop_return_type(name))


def _levels(name: str) -> int:
    return _max_depth(compact(name)) if _balanced(name) else 0


def shorten(name: str, width: int, detail: int = 0) -> str:
    """``name`` in at most ``width`` characters (at least ``MIN_WIDTH``), readable: unchanged when it
    fits; else, in this order until it fits: without its ``void`` return type and the identifier's
    namespaces, with template arguments and parameter lists folded (``gemm_bf16_tn<…>(…)``); without
    namespaces inside either; cut in the middle (identifier start and name end kept). ``detail`` k > 0
    folds only below depth k, without namespaces, and cuts the end: ``shorten_all`` raises it for names
    that would otherwise read the same (their template arguments tell them apart)."""
    width = max(width, MIN_WIDTH)
    if len(name) <= width:
        return name
    base = _drop_return_type(name)
    if not _balanced(base):
        return cut_middle(base, width)
    if detail == 0:
        folded = fold(compact(name), 0)
        return folded if len(folded) <= width else cut_middle(folded, width)
    text = fold(compact(name), detail)
    return text if len(text) <= width else text[: width - 1] + ELLIPSIS


def _window(name: str, at: int, width: int) -> str:
    """The identifier and, after ``…``, the part of the name (without return type) from about ``at``
    on: where it differs from the names that otherwise read the same."""
    c = _drop_return_type(name)
    head = fold(compact(name), 0).split("<", 1)[0].split("(", 1)[0][: max(width // 3, 4)]
    start = max(len(head), at - 4)
    rest = width - len(head) - 1
    tail = c[start : start + rest]
    if start + rest < len(c):
        tail = tail[:-1] + ELLIPSIS
    return head + ELLIPSIS + tail


def _tag(name: str) -> str:
    return "~" + hashlib.sha1(name.encode("utf-8", "surrogatepass")).hexdigest()[:4]


def shorten_all(names: Sequence[str], width: int) -> list[str]:
    """``shorten`` for a column of names: the same width for all, and two different names never
    shortened to the same text. Names that collide are shown with more detail (template arguments
    folded one level deeper, then the next...); any still alike show the part where they differ from
    the others (``vectorized_elementwise_kernel…FillFunctor<float>…``); the last resort is ``~`` and four
    hex digits of the name's hash (stable across runs)."""
    width = max(width, MIN_WIDTH)
    distinct = list(dict.fromkeys(names))
    detail = dict.fromkeys(distinct, 0)
    limit = {n: _levels(n) for n in distinct}
    shown = {n: shorten(n, width, 0) for n in distinct}
    while True:
        raise_ = [n for n in _clashing(distinct, shown) if detail[n] < limit[n]]
        if not raise_:
            break
        for n in raise_:
            detail[n] += 1
            shown[n] = shorten(n, width, detail[n])
    by_text: dict[str, list[str]] = defaultdict(list)
    for n in _clashing(distinct, shown):
        by_text[shown[n]].append(n)
    for group in by_text.values():
        bases = [_drop_return_type(n) for n in group]
        for n, b in zip(group, bases):
            at = max(len(_common_prefix(b, o)) for o in bases if o is not b)
            shown[n] = _window(n, at, width)
    for n in _clashing(distinct, shown):
        tag = _tag(n)
        shown[n] = cut_middle(shown[n], width - len(tag)) + tag
    taken: set[str] = set()
    for n in distinct:  # tags that clash too (or equal another name): number them
        text = shown[n]
        i = 1
        while text in taken:
            i += 1
            text = f"{cut_middle(shown[n], width - len(str(i)) - 1)}#{i}"
        shown[n] = text
        taken.add(text)
    return [shown[n] for n in names]


def _clashing(distinct: Sequence[str], shown: dict[str, str]) -> list[str]:
    by_text: dict[str, list[str]] = defaultdict(list)
    for n in distinct:
        by_text[shown[n]].append(n)
    return [n for group in by_text.values() if len(group) > 1 for n in group]


def _common_prefix(a: str, b: str) -> str:
    i = 0
    while i < min(len(a), len(b)) and a[i] == b[i]:
        i += 1
    return a[:i]
