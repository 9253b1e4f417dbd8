package pgclaim

import (
	"context"
	"errors"
	"sync"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4"
)

// lockedTx is the pgx.Tx a transactional handler gets: each statement holds
// a mutex until its result is read, so that the heartbeat's claim.extend
// runs in the same transaction between the handler's statements (a
// pgx.Conn serves one statement at a time).
type lockedTx struct {
	tx  pgx.Tx
	mu  *sync.Mutex
	top bool // the job's own transaction: the worker commits it
}

var errWorkerCommits = errors.New("pg_claim: the worker commits or rolls back the job's transaction (return from the handler)")

func unlocker(mu *sync.Mutex) func() {
	var once sync.Once
	return func() { once.Do(mu.Unlock) }
}

func (t *lockedTx) Begin(ctx context.Context) (pgx.Tx, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tx, err := t.tx.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &lockedTx{tx: tx, mu: t.mu}, nil
}

func (t *lockedTx) BeginFunc(ctx context.Context, f func(pgx.Tx) error) error {
	tx, err := t.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if err := f(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

func (t *lockedTx) Commit(ctx context.Context) error { return t.end(ctx, pgx.Tx.Commit) }

func (t *lockedTx) Rollback(ctx context.Context) error { return t.end(ctx, pgx.Tx.Rollback) }

// end runs Commit or Rollback under the lock; the worker's own (top)
// transaction is not the handler's to end.
func (t *lockedTx) end(ctx context.Context, f func(pgx.Tx, context.Context) error) error {
	if t.top {
		return errWorkerCommits
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return f(t.tx, ctx)
}

func (t *lockedTx) CopyFrom(ctx context.Context, table pgx.Identifier, cols []string, src pgx.CopyFromSource) (int64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.tx.CopyFrom(ctx, table, cols, src)
}

type lockedBatch struct {
	pgx.BatchResults
	unlock func()
}

func (b *lockedBatch) Close() error {
	defer b.unlock()
	return b.BatchResults.Close()
}

func (t *lockedTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	t.mu.Lock()
	return &lockedBatch{BatchResults: t.tx.SendBatch(ctx, b), unlock: unlocker(t.mu)}
}

// LargeObjects is not serialised with the heartbeat: use it with the
// heartbeat off, or not at all.
func (t *lockedTx) LargeObjects() pgx.LargeObjects { return t.tx.LargeObjects() }

func (t *lockedTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.tx.Prepare(ctx, name, sql)
}

func (t *lockedTx) Exec(ctx context.Context, sql string, args ...interface{}) (pgconn.CommandTag, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.tx.Exec(ctx, sql, args...)
}

type lockedRows struct {
	pgx.Rows
	unlock func()
}

func (r *lockedRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.unlock()
	return false
}

func (r *lockedRows) Close() {
	r.Rows.Close()
	r.unlock()
}

func (t *lockedTx) Query(ctx context.Context, sql string, args ...interface{}) (pgx.Rows, error) {
	t.mu.Lock()
	rows, err := t.tx.Query(ctx, sql, args...)
	if err != nil {
		if rows != nil {
			rows.Close()
		}
		t.mu.Unlock()
		return rows, err
	}
	return &lockedRows{Rows: rows, unlock: unlocker(t.mu)}, nil
}

type lockedRow struct {
	row    pgx.Row
	unlock func()
}

func (r *lockedRow) Scan(dest ...interface{}) error {
	defer r.unlock()
	return r.row.Scan(dest...)
}

// QueryRow: the statement holds the transaction until Scan is called.
func (t *lockedTx) QueryRow(ctx context.Context, sql string, args ...interface{}) pgx.Row {
	t.mu.Lock()
	return &lockedRow{row: t.tx.QueryRow(ctx, sql, args...), unlock: unlocker(t.mu)}
}

func (t *lockedTx) QueryFunc(ctx context.Context, sql string, args []interface{}, scans []interface{},
	f func(pgx.QueryFuncRow) error) (pgconn.CommandTag, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.tx.QueryFunc(ctx, sql, args, scans, f)
}

// Conn is the underlying connection; statements run on it directly are not
// serialised with the heartbeat.
func (t *lockedTx) Conn() *pgx.Conn { return t.tx.Conn() }

// exec runs a statement of the worker's own in the transaction.
func (t *lockedTx) exec(ctx context.Context, sql string, args ...interface{}) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, err := t.tx.Exec(ctx, sql, args...)
	return err
}
