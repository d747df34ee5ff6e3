"""Categories (compute / communication / memory / other) of timed activity, derived from kind and name
once, at ingest. Communication is what the imbalance report inverts (long time there is waiting).

Which names are communication is data, not code: named rule sets shipped in ``comm_rules.toml``
(NCCL, RCCL, MSCCL(++), gloo, c10d, DeepEP, NVSHMEM, rocSHMEM, UCC, MPI, oneCCL/HCCL, collective
names), preceded by the user's rules: ``--comm-pattern REGEX`` (ingest), a TOML file named by
``PROFDB_COMM_RULES``, or the ``[classify]`` table of ``./profdb.toml``. A user file has the shipped
file's shape (``[[ruleset]]`` with ``name``, ``patterns``, optional ``category``, ``kinds``) and may
``disable = ["collectives", ...]`` shipped sets by name.

Order: copies (memcpy, memset) are memory; then the first rule whose pattern is found in the name
(user rules first, then the shipped ones in file order) gives the category; else kernels, CPU ops and
annotations are compute and anything else (API calls, python functions) is other.

``Rules`` is frozen and serialises to canonical JSON (``serialise``, ``Rules.from_serialised``) with a
short ``digest``: what a stored run records to say how it was classified, and what re-classifying
needs. ``category`` keeps a per-(kind, name) cache: millions of rows repeat a few thousand names."""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from .errors import InputError
from .records import CATEGORIES

#: environment variable naming a user rules file (TOML)
RULES_ENV = "PROFDB_COMM_RULES"
#: the project config file looked up in the working directory; its [classify] table holds user rules
CONFIG_FILE = "profdb.toml"
#: the active rules' serialisation, exported so ingest workers (forked or spawned) classify alike
ACTIVE_ENV = "PROFDB_CLASSIFY_ACTIVE"

COMMUNICATION = "communication"
_MEMORY_KINDS = frozenset(("memcpy", "memset"))
_COMPUTE_KINDS = frozenset(("kernel", "cpu_op", "gpu_annotation", "annotation"))


@dataclass(frozen=True)
class Rule:
    """One pattern of a rule set: names it is found in get ``category`` (only for ``kinds``, if any)."""

    ruleset: str
    pattern: str
    category: str = COMMUNICATION
    kinds: tuple[str, ...] = ()


@dataclass(frozen=True)
class Rules:
    """An ordered list of rules (first match wins) and where it came from."""

    rules: tuple[Rule, ...]
    #: version of the shipped rules file these were built on (0: none)
    shipped_version: int = 0
    #: shipped rule sets the user disabled
    disabled: tuple[str, ...] = ()
    #: how many of ``rules`` (the first ones) are the user's
    user_rules: int = 0
    _cache: dict[tuple[str, str], str] = field(default_factory=dict, compare=False, hash=False, repr=False)

    @cached_property
    def _compiled(self) -> tuple[tuple[re.Pattern[str], str, frozenset[str]], ...]:
        return tuple((re.compile(r.pattern), r.category, frozenset(r.kinds)) for r in self.rules)

    def category(self, kind: str, name: str) -> str:
        key = (kind, name)
        cat = self._cache.get(key)
        if cat is None:
            cat = self._cache[key] = self._classify(kind, name)
        return cat

    def _classify(self, kind: str, name: str) -> str:
        if kind in _MEMORY_KINDS:
            return "memory"
        for pattern, cat, kinds in self._compiled:
            if (not kinds or kind in kinds) and pattern.search(name) is not None:
                return cat
        return "compute" if kind in _COMPUTE_KINDS else "other"

    def matching(self, kind: str, name: str) -> Rule | None:
        """The rule that decides this name's category (None: the kind's default)."""
        if kind in _MEMORY_KINDS:
            return None
        for rule, (pattern, _cat, kinds) in zip(self.rules, self._compiled):
            if (not kinds or kind in kinds) and pattern.search(name) is not None:
                return rule
        return None

    def serialise(self) -> str:
        """Canonical JSON: equal rules give equal text (what a run records)."""
        return json.dumps(
            {
                "format": 1,
                "shipped_version": self.shipped_version,
                "disabled": list(self.disabled),
                "user_rules": self.user_rules,
                "rules": [[r.ruleset, r.pattern, r.category, list(r.kinds)] for r in self.rules],
            },
            separators=(",", ":"),
            sort_keys=True,
        )

    @cached_property
    def digest(self) -> str:
        """A short fingerprint of ``serialise()`` (16 hex digits of its sha256)."""
        return hashlib.sha256(self.serialise().encode()).hexdigest()[:16]

    @classmethod
    def from_serialised(cls, text: str) -> Rules:
        try:
            d = json.loads(text)
            rules = tuple(Rule(str(s), str(p), str(c), tuple(str(k) for k in kinds)) for s, p, c, kinds in d["rules"])
            return cls(
                _checked(rules, "recorded rules"), int(d["shipped_version"]), tuple(d["disabled"]), int(d["user_rules"])
            )
        except (ValueError, KeyError, TypeError) as e:
            raise InputError(
                f"recorded classification rules are not readable ({e}); re-classify with the current rules"
            ) from e

    def summary(self) -> str:
        sets = list(dict.fromkeys(r.ruleset for r in self.rules[self.user_rules :]))
        user = f"{self.user_rules} user rule(s), then " if self.user_rules else ""
        off = f" (disabled: {', '.join(self.disabled)})" if self.disabled else ""
        return f"communication rules {self.digest}: {user}shipped v{self.shipped_version} " + ", ".join(sets) + off


def _checked(rules: Iterable[Rule], where: str) -> tuple[Rule, ...]:
    out = []
    for r in rules:
        if r.category not in CATEGORIES:
            raise InputError(
                f"{where}: rule set {r.ruleset!r} has category {r.category!r}; use one of {', '.join(CATEGORIES)}"
            )
        try:
            re.compile(r.pattern)
        except re.error as e:
            raise InputError(
                f"{where}: rule set {r.ruleset!r}: {r.pattern!r} is not a valid regular expression ({e})"
            ) from e
        out.append(r)
    return tuple(out)


def _rulesets(table: dict[str, Any], where: str) -> tuple[Rule, ...]:
    """The ``[[ruleset]]`` entries of a parsed TOML table."""
    sets = table.get("ruleset", [])
    if not isinstance(sets, list):
        raise InputError(f"{where}: 'ruleset' must be an array of tables ([[ruleset]])")
    rules: list[Rule] = []
    for i, s in enumerate(sets):
        if not isinstance(s, dict) or not isinstance(s.get("patterns"), list) or not s["patterns"]:
            raise InputError(f"{where}: ruleset #{i + 1} needs a non-empty 'patterns' list of regular expressions")
        name = str(s.get("name") or f"ruleset{i + 1}")
        kinds = s.get("kinds", [])
        if not isinstance(kinds, list):
            raise InputError(f"{where}: ruleset {name!r}: 'kinds' must be a list of activity kinds")
        for p in s["patterns"]:
            rules.append(Rule(name, str(p), str(s.get("category", COMMUNICATION)), tuple(str(k) for k in kinds)))
    return _checked(rules, where)


def _load_toml(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as e:
        raise InputError(f"{path}: cannot read the classification rules ({e.strerror})") from e
    except tomllib.TOMLDecodeError as e:
        raise InputError(f"{path}: not valid TOML ({e}); fix the file (see README, 'Communication rules')") from e


def shipped() -> tuple[int, tuple[Rule, ...]]:
    """The shipped rules file: its version and rules, in order."""
    text = resources.files(__package__).joinpath("comm_rules.toml").read_text(encoding="utf-8")
    table = tomllib.loads(text)
    return int(table["version"]), _rulesets(table, "comm_rules.toml")


def user_tables(cwd: Path | None = None) -> list[tuple[str, dict[str, Any]]]:
    """The user's rule tables, strongest first: ``$PROFDB_COMM_RULES``, then ``./profdb.toml [classify]``."""
    found: list[tuple[str, dict[str, Any]]] = []
    env = os.environ.get(RULES_ENV)
    if env:
        found.append((env, _load_toml(Path(env))))
    cfg = (cwd or Path.cwd()) / CONFIG_FILE
    if cfg.is_file():
        table = _load_toml(cfg).get("classify")
        if isinstance(table, dict):
            found.append((f"{cfg} [classify]", table))
    return found


def load_rules(comm_patterns: Iterable[str] = (), cwd: Path | None = None) -> Rules:
    """The rules ingest uses: ``--comm-pattern`` patterns, then the user's files, then the shipped
    sets minus those the user disabled."""
    user: list[Rule] = list(_checked((Rule("--comm-pattern", p) for p in comm_patterns), "--comm-pattern"))
    disabled: list[str] = []
    for where, table in user_tables(cwd):
        user.extend(_rulesets(table, where))
        off = table.get("disable", [])
        if not isinstance(off, list):
            raise InputError(f"{where}: 'disable' must be a list of shipped rule set names")
        disabled.extend(str(x) for x in off)
    version, ship = shipped()
    unknown = set(disabled) - {r.ruleset for r in ship}
    if unknown:
        raise InputError(
            f"cannot disable unknown rule set(s) {', '.join(sorted(unknown))}; shipped sets: "
            + ", ".join(dict.fromkeys(r.ruleset for r in ship))
        )
    rules = tuple(user) + tuple(r for r in ship if r.ruleset not in disabled)
    return Rules(rules, version, tuple(dict.fromkeys(disabled)), len(user))


_active: Rules | None = None


def active() -> Rules:
    """The rules ``category`` applies: set by ``activate``, else inherited from the parent process
    (``PROFDB_CLASSIFY_ACTIVE``), else ``load_rules()``."""
    global _active
    if _active is None:
        text = os.environ.get(ACTIVE_ENV)
        _active = Rules.from_serialised(text) if text else load_rules()
    return _active


def activate(rules: Rules) -> Rules:
    """Make ``rules`` the ones ``category`` applies, here and in worker processes started after."""
    global _active
    _active = rules
    os.environ[ACTIVE_ENV] = rules.serialise()
    return rules


@contextmanager
def using(rules: Rules) -> Iterator[Rules]:
    """``activate(rules)`` for the duration of a block (one ingest), then restore what was active."""
    global _active
    saved, saved_env = _active, os.environ.get(ACTIVE_ENV)
    activate(rules)
    try:
        yield rules
    finally:
        _active = saved
        if saved_env is None:
            os.environ.pop(ACTIVE_ENV, None)
        else:
            os.environ[ACTIVE_ENV] = saved_env


def category(kind: str, name: str) -> str:
    return active().category(kind, name)


def is_communication(name: str) -> bool:
    return active().category("kernel", name) == COMMUNICATION
