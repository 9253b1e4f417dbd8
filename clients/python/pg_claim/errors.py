"""Exceptions raised by the pg_claim client, mapped from SQLSTATEs.

Every error the extension raises carries a SQLSTATE; :func:`map_error` turns
a psycopg error into the matching class below, keeping the original as
``__cause__`` and its diagnostics (message, detail, hint) as attributes.
"""
from __future__ import annotations

from typing import Dict, Optional, Type

import psycopg


class PgClaimError(Exception):
    """Base class of every error raised by this package."""

    sqlstate: Optional[str] = None

    def __init__(self, message: str, *, sqlstate: Optional[str] = None,
                 detail: Optional[str] = None, hint: Optional[str] = None) -> None:
        super().__init__(message)
        if sqlstate is not None:
            self.sqlstate = sqlstate
        self.message = message
        self.detail = detail
        self.hint = hint


class StaleToken(PgClaimError):
    """PC001: the token is not the live claim (expired, released, re-claimed,
    finished, cancelled or unknown). The outcome of that attempt must be
    discarded; the item is (or will be) delivered again."""

    sqlstate = "PC001"


class PermitMismatch(PgClaimError):
    """PC002: a lease name already has live holders with another permit count."""

    sqlstate = "PC002"


class UnknownQueue(PgClaimError):
    """42704: the queue (or another named object) does not exist."""

    sqlstate = "42704"


class QueueExists(PgClaimError):
    """42710: the queue already exists."""

    sqlstate = "42710"


class InvalidName(PgClaimError):
    """42602: not a valid queue name."""

    sqlstate = "42602"


class InvalidArgument(PgClaimError):
    """22023 (out of range, bad shape) or 22004 (NULL where a value is needed)."""

    sqlstate = "22023"


class NullArgument(InvalidArgument):
    """22004: NULL where a value is required."""

    sqlstate = "22004"


class PermissionDenied(PgClaimError):
    """42501: the role lacks a privilege the call needs."""

    sqlstate = "42501"


class ReadOnly(PgClaimError):
    """25006: called on a hot standby or in a read-only transaction."""

    sqlstate = "25006"


class Cancelled(PgClaimError):
    """57014: a (waiting) call was cancelled or hit statement_timeout."""

    sqlstate = "57014"


class NotSupported(PgClaimError):
    """The server's pg_claim lacks a function or argument this call needs
    (an older extension version), or 0A000 feature_not_supported."""

    sqlstate = "0A000"


class NotInstalled(PgClaimError):
    """The database has no schema ``claim``: CREATE EXTENSION pg_claim first."""


_BY_SQLSTATE: Dict[str, Type[PgClaimError]] = {
    "PC001": StaleToken,
    "PC002": PermitMismatch,
    "42704": UnknownQueue,
    "42883": NotSupported,   # undefined_function: the server lacks this form
    "42710": QueueExists,
    "42602": InvalidName,
    "22023": InvalidArgument,
    "22004": NullArgument,
    "42501": PermissionDenied,
    "25006": ReadOnly,
    "57014": Cancelled,
    "0A000": NotSupported,
}


def error_class(sqlstate: Optional[str]) -> Type[PgClaimError]:
    """The exception class for a SQLSTATE (PgClaimError when none matches)."""
    if sqlstate is None:
        return PgClaimError
    return _BY_SQLSTATE.get(sqlstate, PgClaimError)


def map_error(exc: psycopg.Error) -> PgClaimError:
    """A PgClaimError subclass instance for a psycopg error (not raised)."""
    sqlstate = exc.sqlstate
    diag = exc.diag
    message = diag.message_primary or str(exc).strip()
    cls = error_class(sqlstate)
    err = cls(message, sqlstate=sqlstate, detail=diag.message_detail, hint=diag.message_hint)
    err.__cause__ = exc
    return err


__all__ = [
    "PgClaimError", "StaleToken", "PermitMismatch", "UnknownQueue", "QueueExists",
    "InvalidName", "InvalidArgument", "NullArgument", "PermissionDenied", "ReadOnly",
    "Cancelled", "NotSupported", "NotInstalled", "error_class", "map_error",
]
