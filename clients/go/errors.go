package pgclaim

import (
	"context"
	"errors"
	"net"
	"strings"

	"github.com/jackc/pgconn"
)

// The classes of pg_claim's errors, the same as the Python and Node clients'
// (see README.md, Errors). Every error this package returns for a server
// error is an *Error whose Class is one of these; test with errors.Is:
//
//	if errors.Is(err, pgclaim.ErrStaleToken) { ... }
var (
	// ErrStaleToken: PC001, the token is not the live claim (expired,
	// released, re-claimed, finished, cancelled or unknown). Drop the
	// attempt's outcome; the item is (or will be) delivered again.
	ErrStaleToken = errors.New("pg_claim: stale token")
	// ErrPermitMismatch: PC002, a lease name is held with another permit count.
	ErrPermitMismatch = errors.New("pg_claim: permit mismatch")
	// ErrUnknownQueue: 42704, the queue does not exist (or was dropped).
	ErrUnknownQueue = errors.New("pg_claim: unknown queue")
	// ErrQueueExists: 42710, the queue already exists.
	ErrQueueExists = errors.New("pg_claim: queue exists")
	// ErrInvalidName: 42602, not a valid queue name.
	ErrInvalidName = errors.New("pg_claim: invalid name")
	// ErrInvalidArgument: 22023, 22004, 22007, 22008, 22P02, 22003: a value
	// the server refuses (out of range, NULL, not an interval).
	ErrInvalidArgument = errors.New("pg_claim: invalid argument")
	// ErrNullArgument: 22004, NULL where a value is required. An error of
	// this class is also an ErrInvalidArgument.
	ErrNullArgument = errors.New("pg_claim: null argument")
	// ErrPermissionDenied: 42501, the role lacks a grant.
	ErrPermissionDenied = errors.New("pg_claim: permission denied")
	// ErrReadOnly: 25006, a hot standby or a read-only transaction.
	ErrReadOnly = errors.New("pg_claim: read only")
	// ErrCancelled: 57014, a (waiting) call was cancelled or hit statement_timeout.
	ErrCancelled = errors.New("pg_claim: cancelled")
	// ErrNotSupported: 42883, 0A000: the server's pg_claim lacks this
	// function or form.
	ErrNotSupported = errors.New("pg_claim: not supported")
	// ErrNotInstalled: 3F000 (42P01 on a relation of schema claim): the
	// database has no pg_claim.
	ErrNotInstalled = errors.New("pg_claim: not installed")
	// ErrBadConnection: 3D000, 28000, 28P01: the connection settings are
	// wrong (an unknown database or role, a wrong password) and trying
	// again will not fix them; a Worker stops at once. A connection string
	// that cannot be parsed is returned by Connect as it is; a host that
	// cannot be reached or resolved is an ErrTransient.
	ErrBadConnection = errors.New("pg_claim: bad connection settings")
	// ErrTransient: class 08 or no SQLSTATE (the connection was lost or
	// could not be made), 40001, 40P01, 57P01-57P03, class 53, 55P03: a later
	// try may not meet it. A Worker retries these with backoff.
	ErrTransient = errors.New("pg_claim: transient")
	// ErrPgClaim: any other error of the server.
	ErrPgClaim = errors.New("pg_claim: error")
)

var bySQLState = map[string]error{
	"PC001": ErrStaleToken,
	"PC002": ErrPermitMismatch,
	"42704": ErrUnknownQueue,
	"42883": ErrNotSupported,
	"42710": ErrQueueExists,
	"42602": ErrInvalidName,
	"22023": ErrInvalidArgument,
	"22004": ErrNullArgument,
	"22007": ErrInvalidArgument,
	"22008": ErrInvalidArgument,
	"22P02": ErrInvalidArgument,
	"22003": ErrInvalidArgument,
	"3F000": ErrNotInstalled,
	"42501": ErrPermissionDenied,
	"25006": ErrReadOnly,
	"57014": ErrCancelled,
	"0A000": ErrNotSupported,
	"40001": ErrTransient,
	"40P01": ErrTransient,
	"57P01": ErrTransient,
	"57P02": ErrTransient,
	"57P03": ErrTransient,
	"55P03": ErrTransient,
	"3D000": ErrBadConnection,
	"28000": ErrBadConnection,
	"28P01": ErrBadConnection,
}

// Error is a server error (or a lost connection) with its class.
type Error struct {
	Class    error  // one of the Err* values above
	SQLState string // "" when there is none (a connection error)
	Message  string
	Detail   string
	Hint     string
	Err      error // the driver's error
}

func (e *Error) Error() string {
	s := e.Message
	if e.SQLState != "" {
		s += " (SQLSTATE " + e.SQLState + ")"
	}
	return "pg_claim: " + s
}

// Unwrap gives the driver's error (a *pgconn.PgError for a server error).
func (e *Error) Unwrap() error { return e.Err }

// Is matches the error's class: errors.Is(err, ErrStaleToken). An
// ErrNullArgument is also an ErrInvalidArgument.
func (e *Error) Is(target error) bool {
	if target == e.Class {
		return true
	}
	return target == ErrInvalidArgument && e.Class == ErrNullArgument
}

// ClassOf returns the class of a SQLSTATE (ErrPgClaim when none matches);
// message tells a missing relation of schema claim (42P01) apart.
func ClassOf(sqlstate, message string) error {
	if c, ok := bySQLState[sqlstate]; ok {
		return c
	}
	switch {
	case sqlstate == "42P01" && strings.Contains(message, `relation "claim.`):
		return ErrNotInstalled
	case strings.HasPrefix(sqlstate, "08"), strings.HasPrefix(sqlstate, "53"):
		return ErrTransient
	}
	return ErrPgClaim
}

// Classify returns the class of any error a call may return: the class of
// an *Error or of a *pgconn.PgError's SQLSTATE, ErrTransient for a network
// or connection error without one, ErrCancelled for a context's end, and
// ErrPgClaim otherwise (nil for nil).
func Classify(err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Class
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return ClassOf(pg.Code, pg.Message)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return ErrCancelled
	}
	var ne net.Error
	text := err.Error()
	if errors.As(err, &ne) || pgconn.SafeToRetry(err) || strings.Contains(text, "conn closed") ||
		strings.Contains(text, "EOF") || strings.Contains(text, "failed to connect") ||
		strings.Contains(text, "broken pipe") || strings.Contains(text, "connection reset") {
		return ErrTransient
	}
	return ErrPgClaim
}

// IsFatal is true for the classes no retry can fix: a Worker stops on them.
func IsFatal(err error) bool {
	switch Classify(err) {
	case ErrUnknownQueue, ErrInvalidName, ErrInvalidArgument, ErrNullArgument,
		ErrPermissionDenied, ErrNotInstalled, ErrNotSupported, ErrBadConnection:
		return true
	}
	return false
}

// IsTransient is true for the class ErrTransient.
func IsTransient(err error) bool { return Classify(err) == ErrTransient }

// mapError turns a driver error into an *Error (nil stays nil; an *Error
// stays as it is).
func mapError(err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	out := &Error{Class: Classify(err), Message: err.Error(), Err: err}
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		out.SQLState, out.Message, out.Detail, out.Hint = pg.Code, pg.Message, pg.Detail, pg.Hint
	}
	return out
}

func sqlstate(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.SQLState
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return pg.Code
	}
	return ""
}

func isStale(err error) bool { return sqlstate(err) == "PC001" }
