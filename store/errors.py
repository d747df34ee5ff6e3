"""Errors the library raises. Every message names the file and says what to do next."""

from __future__ import annotations


class ProfdbError(Exception):
    """Base class: the CLI turns these into a one-line error and a non-zero exit."""


class InputError(ProfdbError):
    """A path or a file that cannot be read as profiler output."""


class RankIdentityError(ProfdbError):
    """A rank cannot be determined, or two sources disagree about it."""


class StoreError(ProfdbError):
    """The database cannot be opened, is not profdb's, or is locked."""


class QueryError(ProfdbError):
    """A query cannot be answered (unknown run, bad filter, bad SQL)."""


#: the attribute ``mark_committed`` sets on an exception raised after a write's commit
_COMMITTED = "profdb_committed"


def mark_committed(e: BaseException, what: str) -> None:
    """Says on ``e`` (an interrupt, an error) that it came after ``what`` was committed, so that its
    message does not say that nothing was written (the CLI's ``committed``)."""
    setattr(e, _COMMITTED, what)


def committed(e: BaseException) -> str | None:
    """What ``mark_committed`` said was committed before ``e``, if anything."""
    got = getattr(e, _COMMITTED, None)
    return got if isinstance(got, str) else None
