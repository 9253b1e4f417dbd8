"""Exceptions raised by the pg_claim client, mapped from SQLSTATEs.

Every error the extension raises carries a SQLSTATE; :func:`map_error` turns
a psycopg error into the matching class below, keeping the original as
``__cause__`` and its diagnostics (message, detail, hint) as attributes.
"""
from __future__ import annotations

import re
from typing import Any, Dict, Optional, Tuple, Type

import psycopg


class PgClaimError(Exception):
    """Base class of every error raised by this package.

    A subclass names the SQLSTATE it stands for in its header,
    ``class StaleToken(PgClaimError, sqlstate="PC001")``: the class's
    ``sqlstate`` (an instance keeps the server's, when it sent another one
    of the same class). A subclass that names none inherits its base's."""

    sqlstate: Optional[str] = None

    def __init_subclass__(cls, *, sqlstate: Optional[str] = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if sqlstate is not None:
            cls.sqlstate = sqlstate

    def __init__(self, message: str, *, sqlstate: Optional[str] = None,
                 detail: Optional[str] = None, hint: Optional[str] = None) -> None:
        super().__init__(message)
        if sqlstate is not None:
            self.sqlstate = sqlstate
        self.message = message
        self.detail = detail
        self.hint = hint


class StaleToken(PgClaimError, sqlstate="PC001"):
    """PC001: the token is not the live claim (expired, released, re-claimed,
    finished, cancelled or unknown). The outcome of that attempt must be
    discarded; the item is (or will be) delivered again."""


class PermitMismatch(PgClaimError, sqlstate="PC002"):
    """PC002: a lease name already has live holders with another permit count."""


class UnknownQueue(PgClaimError, sqlstate="42704"):
    """42704: the queue (or another named object) does not exist."""


class QueueExists(PgClaimError, sqlstate="42710"):
    """42710: the queue already exists."""


class InvalidName(PgClaimError, sqlstate="42602"):
    """42602: not a valid queue name."""


class InvalidArgument(PgClaimError, sqlstate="22023"):
    """An argument the server refuses: 22023 (out of range, bad shape), 22004
    (NULL where a value is needed), 22007 (not an interval or timestamp),
    22008 (a date out of range), 22P02 (not a number), 22003 (a number out
    of range), or an option the function does not have (the message names
    it)."""


class NullArgument(InvalidArgument, sqlstate="22004"):
    """22004: NULL where a value is required."""


class PermissionDenied(PgClaimError, sqlstate="42501"):
    """42501: the role lacks a privilege the call needs."""


class ReadOnly(PgClaimError, sqlstate="25006"):
    """25006: called on a hot standby or in a read-only transaction."""


class Cancelled(PgClaimError, sqlstate="57014"):
    """57014: a (waiting) call was cancelled or hit statement_timeout."""


class NotSupported(PgClaimError, sqlstate="0A000"):
    """The server's pg_claim lacks a function or argument this call needs
    (an older extension version), or 0A000 feature_not_supported."""


class NotInstalled(PgClaimError, sqlstate="3F000"):
    """3F000 on schema ``claim``: the database has no pg_claim; run
    CREATE EXTENSION pg_claim in it first."""


class BadConnection(PgClaimError, sqlstate=None):
    """The connection settings are wrong, and trying again will not fix them:
    a connection string libpq cannot parse, a database that does not exist
    (3D000), a role that does not exist or may not log in (28000), a wrong
    password (28P01). Workers stop at once and raise it. A host that cannot
    be reached or resolved is :class:`Transient` (a server restarting, DNS
    not ready yet). ``sqlstate`` is the server's when it sent one (psycopg
    before 3.2 passes none on for a failed connection attempt)."""


#: SQLSTATEs of :class:`BadConnection`.
BAD_CONNECTION_SQLSTATES = frozenset({"3D000", "28000", "28P01"})

# libpq's texts for the same, when psycopg gives no SQLSTATE (a failed
# connection attempt has none before psycopg 3.2): the server's FATAL
# message, or libpq's own about the connection string.
_BAD_CONNECTION_TEXT = re.compile(
    r'FATAL:\s+(database "[^"]*" does not exist|role "[^"]*" does not exist'
    r'|password authentication failed|no pg_hba\.conf entry|role "[^"]*" is not permitted to log in)'
    r'|invalid connection option|missing "=" after|in connection info string|invalid URI'
    r'|invalid (integer|port|sslmode) value|unterminated quoted string')


class Transient(PgClaimError):
    """A failure that a later try may not meet: the connection was lost or
    could not be made (class 08, or no SQLSTATE at all), 40001
    serialization failure, 40P01 deadlock, 57P01-57P03 server shutting
    down or starting, 53xxx insufficient resources, 55P03 lock not
    available. Workers retry these with backoff."""


#: SQLSTATEs of :class:`Transient`, besides class 08 and 53.
TRANSIENT_SQLSTATES = frozenset({"40001", "40P01", "57P01", "57P02", "57P03", "55P03"})


_BY_SQLSTATE: Dict[str, Type[PgClaimError]] = {
    "PC001": StaleToken,
    "PC002": PermitMismatch,
    "42704": UnknownQueue,
    "42883": NotSupported,   # undefined_function: the server lacks this form
    "42710": QueueExists,
    "42602": InvalidName,
    "22023": InvalidArgument,
    "22004": NullArgument,
    "22007": InvalidArgument,   # invalid_datetime_format: 'soon'::interval
    "22008": InvalidArgument,   # datetime_field_overflow
    "22P02": InvalidArgument,   # invalid_text_representation
    "22003": InvalidArgument,   # numeric_value_out_of_range
    "3F000": NotInstalled,      # invalid_schema_name: no schema claim
    "42501": PermissionDenied,
    "25006": ReadOnly,
    "57014": Cancelled,
    "0A000": NotSupported,
}


def error_class(sqlstate: Optional[str], message: Optional[str] = None) -> Type[PgClaimError]:
    """The exception class for a SQLSTATE (PgClaimError when none matches);
    ``message`` tells a missing view of schema claim (42P01) apart."""
    if sqlstate is None:
        return PgClaimError
    cls = _BY_SQLSTATE.get(sqlstate)
    if cls is not None:
        return cls
    if sqlstate in BAD_CONNECTION_SQLSTATES:
        return BadConnection
    if sqlstate == "42P01" and message is not None and 'relation "claim.' in message:
        return NotInstalled   # a view of schema claim is missing: no extension
    if sqlstate in TRANSIENT_SQLSTATES or sqlstate[:2] in ("08", "53"):
        return Transient
    return PgClaimError


def classify(exc: BaseException) -> Type[PgClaimError]:
    """The class of any error a call may raise: a PgClaimError's own class;
    for a psycopg error, the class of its SQLSTATE, and :class:`Transient`
    for an OperationalError without one (the connection could not be made
    or was lost); PgClaimError otherwise."""
    if isinstance(exc, PgClaimError):
        return type(exc)
    sqlstate = getattr(exc, "sqlstate", None)
    if sqlstate is None and isinstance(exc, psycopg.Error) and _BAD_CONNECTION_TEXT.search(str(exc)):
        return BadConnection
    if sqlstate is None and isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)):
        return Transient
    diag = getattr(exc, "diag", None)
    return error_class(sqlstate, getattr(diag, "message_primary", None) if diag else None)


# What a worker does with an error of each class: stop at once and raise it
# from run() (nothing will change by trying again), or retry with backoff.
FATAL_CLASSES: Tuple[Type[PgClaimError], ...] = (
    UnknownQueue, InvalidName, InvalidArgument, PermissionDenied, NotInstalled, NotSupported,
    BadConnection)


def is_fatal(exc: BaseException) -> bool:
    """True when no retry can fix the error (see the README's table)."""
    return issubclass(classify(exc), FATAL_CLASSES)


def is_transient(exc: BaseException) -> bool:
    return issubclass(classify(exc), Transient)


def map_error(exc: psycopg.Error) -> PgClaimError:
    """A PgClaimError subclass instance for a psycopg error (not raised)."""
    sqlstate = exc.sqlstate
    diag = exc.diag
    message = diag.message_primary or str(exc).strip()
    cls = classify(exc)
    err = cls(message, sqlstate=sqlstate, detail=diag.message_detail, hint=diag.message_hint)
    err.__cause__ = exc
    return err


__all__ = [
    "PgClaimError", "StaleToken", "PermitMismatch", "UnknownQueue", "QueueExists",
    "InvalidName", "InvalidArgument", "NullArgument", "PermissionDenied", "ReadOnly",
    "Cancelled", "NotSupported", "NotInstalled", "BadConnection", "Transient", "error_class",
    "classify", "BAD_CONNECTION_SQLSTATES",
    "is_fatal", "is_transient", "map_error", "FATAL_CLASSES", "TRANSIENT_SQLSTATES",
]
