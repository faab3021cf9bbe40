"""Errors that name what is wrong and how to fix it.

Every user-facing failure in c3m carries a *fix* so the CLI and later the HTTP API can show it verbatim.
"""
from __future__ import annotations


class C3MError(Exception):
    """Base class: a message plus an optional suggested fix."""

    def __init__(self, message: str, *, fix: str | None = None):
        self.message = message
        self.fix = fix
        super().__init__(message if not fix else f"{message} (fix: {fix})")


class InvalidInput(C3MError, ValueError):
    """A value given by the caller (API, CLI, dataset) is malformed."""

    def __init__(self, field: str, message: str, *, fix: str | None = None, line: int | None = None,
                 source: str | None = None):
        self.field = field
        self.line = line
        self.source = source
        where = ""
        if source:
            where += f"{source}"
        if line is not None:
            where += f":{line}" if where else f"line {line}"
        prefix = f"{where}: " if where else ""
        super().__init__(f"{prefix}field '{field}': {message}", fix=fix)


class SessionConflict(C3MError):
    """A session id is already stored with different content; stored sessions are immutable."""


class StoreError(C3MError):
    """The store cannot be opened or used (wrong schema version, locked, read-only...)."""


class StoreBusy(StoreError):
    """Another writer held the lock longer than the busy timeout; nothing of this call was committed: retry."""


class AppendOnlyViolation(StoreError):
    """Something tried to change or delete an immutable Raw Node."""


class BudgetExceeded(C3MError):
    """A context went over the reader budget, or showed evidence that is not a stored Raw Node, as measured
    by ``c3m.budget`` (never by the method's own report)."""

    def __init__(self, message: str, *, over=(), problems=(), fix: str | None = None):
        self.over, self.problems = tuple(over), tuple(problems)
        super().__init__(message, fix=fix)
