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
