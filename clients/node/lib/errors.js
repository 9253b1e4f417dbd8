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
/**
 * An argument the server refuses: 22023 (out of range, bad shape), 22004
 * (NULL), 22007 (not an interval or timestamp), 22008 (a date out of range),
 * 22P02 (not a number), 22003 (a number out of range), or an option the
 * function does not have (the message names it).
 */
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
/** 3F000 on schema claim (or a missing view of it): the database has no pg_claim. */
class NotInstalledError extends PgClaimError {}
/**
 * The connection settings are wrong and trying again will not fix them: a
 * database that does not exist (3D000), a role that does not exist or may
 * not log in (28000), a wrong password (28P01). Workers stop at once. (A
 * connection string that cannot be parsed is a TypeError, thrown at once; a
 * host that cannot be reached or resolved is a TransientError.)
 */
class BadConnectionError extends PgClaimError {}
/**
 * A failure that a later try may not meet: the connection was lost or could
 * not be made (class 08, or a socket error without a SQLSTATE), 40001
 * serialization failure, 40P01 deadlock, 57P01-57P03 server shutting down or
 * starting, 53xxx insufficient resources, 55P03 lock not available. Workers
 * retry these with backoff. `.code` is the SQLSTATE, or null.
 */
class TransientError extends PgClaimError {}

const TRANSIENT_CODES = new Set(['40001', '40P01', '57P01', '57P02', '57P03', '55P03']);
// Messages of node-postgres for a connection that broke or could not be made.
const CONNECTION_TEXT = /Connection terminated|connection error|timeout exceeded when trying to connect|Client was closed|Connection refused|socket hang up|Query read timeout|Connection timeout/i;

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
  '42883': NotSupportedError,
  '22023': InvalidArgumentError,
  '22004': InvalidArgumentError,
  '22007': InvalidArgumentError,
  '22008': InvalidArgumentError,
  '22P02': InvalidArgumentError,
  '22003': InvalidArgumentError,
  '3F000': NotInstalledError,
  '0A000': NotSupportedError,
  '42501': PermissionDeniedError,
  '25006': ReadOnlyError,
  '42710': DuplicateQueueError,
  '42602': InvalidNameError,
  '57014': QueryCanceledError,
  '3D000': BadConnectionError,
  '28000': BadConnectionError,
  '28P01': BadConnectionError,
};

/** The class of a SQLSTATE (PgClaimError when none matches). */
function errorClass(code, message) {
  if (BY_CODE[code]) return BY_CODE[code];
  if (TRANSIENT_CODES.has(code) || code.startsWith('08') || code.startsWith('53')) return TransientError;
  if (code === '42P01' && typeof message === 'string' && message.includes('relation "claim.')) {
    return NotInstalledError; // a view of schema claim is missing: no extension
  }
  return PgClaimError;
}

/** True for a driver error that says the connection broke or could not be made. */
function isConnectionError(err) {
  if (!err || typeof err !== 'object') return false;
  if (typeof err.code === 'string' && /^E[A-Z]+$/.test(err.code)) return true; // ECONNREFUSED, ECONNRESET, ...
  return typeof err.message === 'string' && CONNECTION_TEXT.test(err.message);
}

/**
 * Maps a driver error to its pg_claim class by SQLSTATE (see the README's
 * table). A lost or refused connection gives a TransientError; other errors
 * without a SQLSTATE (a bug, a TypeError) are returned unchanged; a SQLSTATE
 * with no class of its own gives a PgClaimError.
 */
function mapError(err) {
  if (err instanceof PgClaimError) return err;
  if (!err || typeof err !== 'object') return err;
  if (typeof err.code !== 'string' || !/^[0-9A-Z]{5}$/.test(err.code)) {
    if (isConnectionError(err)) return new TransientError(err.message || String(err.code), null, err);
    return err;
  }
  const Cls = errorClass(err.code, err.message);
  if (Cls === NotSupportedError) {
    const e = new NotSupportedError(err.message, err);
    return e;
  }
  return new Cls(err.message, err.code, err);
}

// What a worker does with each class: stop at once and reject run() (no
// retry will fix it), or retry with backoff.
const FATAL_CLASSES = [UnknownQueueError, InvalidNameError, InvalidArgumentError, PermissionDeniedError,
  NotInstalledError, NotSupportedError, BadConnectionError];

/** True when no retry can fix the error (the README's table). */
function isFatal(err) {
  const mapped = mapError(err);
  return FATAL_CLASSES.some((Cls) => mapped instanceof Cls);
}

/** True for a TransientError (or a driver error that maps to one). */
function isTransient(err) {
  return mapError(err) instanceof TransientError;
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
  NotInstalledError,
  TransientError,
  BadConnectionError,
  RetryError,
  mapError,
  errorClass,
  isFatal,
  isTransient,
  isStale,
};
