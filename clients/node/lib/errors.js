'use strict';

/**
 * Errors raised by pg_claim, one class per SQLSTATE that a caller may want to
 * tell apart. Every class keeps the server's SQLSTATE in `.code` and the
 * driver's error in `.cause`.
 */
class PgClaimError extends Error {
  constructor(message, code, cause) {
    super(message);
    this.name = this.constructor.name;
    this.code = code === undefined ? null : code;
    if (cause !== undefined) {
      this.cause = cause;
      if (cause && typeof cause === 'object') {
        if (cause.detail) this.detail = cause.detail;
        if (cause.hint) this.hint = cause.hint;
      }
    }
  }
}

/** PC001: the token is not the live claim (expired, released, re-claimed, finished, cancelled, unknown). */
class StaleTokenError extends PgClaimError {}
/** PC002: a lease name already has live holders with a different permit count. */
class PermitMismatchError extends PgClaimError {}
/** 42704: the queue does not exist. */
class UnknownQueueError extends PgClaimError {}
/** 22023 or 22004: an argument is out of range, malformed or NULL. */
class InvalidArgumentError extends PgClaimError {}
/** 42501: the role may not do this. */
class PermissionDeniedError extends PgClaimError {}
/** 25006: a hot standby or a read-only transaction. */
class ReadOnlyError extends PgClaimError {}
/** 42710: the queue already exists. */
class DuplicateQueueError extends PgClaimError {}
/** 42602: not a valid queue name. */
class InvalidNameError extends PgClaimError {}
/** 57014: a waiting call was cancelled or ran into statement_timeout. */
class QueryCanceledError extends PgClaimError {}
/** The server's pg_claim lacks the function this call needs (an older version). */
class NotSupportedError extends PgClaimError {
  constructor(message, cause) {
    super(message, cause && cause.code ? cause.code : null, cause);
  }
}

/** A handler throws this to have its item retried after `afterMs` milliseconds. */
class RetryError extends Error {
  constructor(afterMs, message) {
    if (typeof afterMs !== 'number' || !Number.isFinite(afterMs) || afterMs < 0) {
      throw new TypeError('RetryError: afterMs must be a finite number >= 0');
    }
    super(message === undefined ? `retry in ${afterMs} ms` : String(message));
    this.name = 'RetryError';
    this.afterMs = afterMs;
  }
}

const BY_CODE = {
  PC001: StaleTokenError,
  PC002: PermitMismatchError,
  '42704': UnknownQueueError,
  '22023': InvalidArgumentError,
  '22004': InvalidArgumentError,
  '42501': PermissionDeniedError,
  '25006': ReadOnlyError,
  '42710': DuplicateQueueError,
  '42602': InvalidNameError,
  '57014': QueryCanceledError,
};

/**
 * Maps a driver error to its pg_claim class by SQLSTATE. Errors without a
 * SQLSTATE (a lost connection, a bug) are returned unchanged; a SQLSTATE with
 * no class of its own gives a PgClaimError.
 */
function mapError(err) {
  if (err instanceof PgClaimError) return err;
  if (!err || typeof err !== 'object' || typeof err.code !== 'string' || !/^[0-9A-Z]{5}$/.test(err.code)) {
    return err;
  }
  const Cls = BY_CODE[err.code] || PgClaimError;
  return new Cls(err.message, err.code, err);
}

function isStale(err) {
  return !!err && (err.code === 'PC001');
}

module.exports = {
  PgClaimError,
  StaleTokenError,
  PermitMismatchError,
  UnknownQueueError,
  InvalidArgumentError,
  PermissionDeniedError,
  ReadOnlyError,
  DuplicateQueueError,
  InvalidNameError,
  QueryCanceledError,
  NotSupportedError,
  RetryError,
  mapError,
  isStale,
};
