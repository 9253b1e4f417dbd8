// Package pgclaim is a Go client of the pg_claim PostgreSQL extension on
// pgx: a Worker (claim with a wait in the server, heartbeat, complete or
// fail, stale tokens, a clean stop, a transactional mode) and a Client with
// the producer, lease, once and guard helpers. See README.md.
package pgclaim

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4"
)

// Querier is what the Client runs its statements on: a *pgx.Conn, a pgx.Tx,
// a *pgxpool.Pool or a Job's Tx.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...interface{}) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...interface{}) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...interface{}) pgx.Row
}

// DefaultDSN returns dsn, else $PG_CLAIM_DSN, else "" (libpq's PG*
// variables and defaults). A DSN is a URL (postgresql://user@host:port/db)
// or keywords (host=... port=... dbname=...).
func DefaultDSN(dsn string) string {
	if dsn != "" {
		return dsn
	}
	return os.Getenv("PG_CLAIM_DSN")
}

// ParseConfig parses a DSN (DefaultDSN's rules) into a pgx configuration.
// Unless prepare is true, statements go in the simple protocol (one round
// trip, nothing prepared: safe behind PgBouncer in transaction mode). An
// application_name is set unless the DSN names one.
func ParseConfig(dsn, appName string, prepare bool) (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(DefaultDSN(dsn))
	if err != nil {
		return nil, &Error{Class: ErrInvalidArgument, Message: err.Error(), Err: err}
	}
	if !prepare {
		cfg.PreferSimpleProtocol = true
		cfg.BuildStatementCache = nil
	}
	if _, ok := cfg.RuntimeParams["application_name"]; !ok && appName != "" {
		if len(appName) > 63 {
			appName = appName[:63]
		}
		cfg.RuntimeParams["application_name"] = appName
	}
	return cfg, nil
}

// Client runs pg_claim's calls on a connection: its own (Connect, closed by
// Close) or the caller's (New: a connection, a pool or an open transaction,
// which the client never commits).
type Client struct {
	q   Querier
	own *pgx.Conn
}

// Connect opens the client's own connection (DefaultDSN's rules).
func Connect(ctx context.Context, dsn string) (*Client, error) {
	cfg, err := ParseConfig(dsn, "", false)
	if err != nil {
		return nil, err
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, mapError(err)
	}
	return &Client{q: conn, own: conn}, nil
}

// New returns a client on the caller's connection, pool or transaction:
// its calls run there, inside the caller's open transaction if any.
func New(q Querier) *Client { return &Client{q: q} }

// Close closes the connection if Connect opened it.
func (c *Client) Close(ctx context.Context) error {
	if c.own != nil {
		return c.own.Close(ctx)
	}
	return nil
}

// Conn is the client's own connection (nil for a client made with New).
func (c *Client) Conn() *pgx.Conn { return c.own }

// Interval writes a duration as a PostgreSQL interval ("1500000 microseconds").
func Interval(d time.Duration) string {
	return strconv.FormatInt(d.Microseconds(), 10) + " microseconds"
}

func jsonText(v interface{}) (string, error) {
	switch t := v.(type) {
	case nil:
		return "{}", nil
	case json.RawMessage:
		return string(t), nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", &Error{Class: ErrInvalidArgument, Message: "payload: " + err.Error(), Err: err}
	}
	return string(b), nil
}

func bigintArray(ids []int64) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.FormatInt(id, 10)
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// call builds "claim.name(p1, p2, k => $n::cast, ...)" with the named
// arguments that are set; the values travel as text with a cast, so the
// statement works in the simple and the extended protocol alike.
type call struct {
	name   string
	params []string
	args   []interface{}
}

func newCall(name string) *call { return &call{name: name} }

func (c *call) arg(v interface{}, cast string) *call {
	c.args = append(c.args, v)
	c.params = append(c.params, fmt.Sprintf("$%d%s", len(c.args), cast))
	return c
}

func (c *call) named(key string, v interface{}, cast string) *call {
	c.args = append(c.args, v)
	c.params = append(c.params, fmt.Sprintf("%s => $%d%s", key, len(c.args), cast))
	return c
}

func (c *call) sql() string { return "claim." + c.name + "(" + strings.Join(c.params, ", ") + ")" }

func (c *Client) row(ctx context.Context, k *call, dest ...interface{}) error {
	return mapError(c.q.QueryRow(ctx, "SELECT "+k.sql(), k.args...).Scan(dest...))
}

func (c *Client) exec(ctx context.Context, k *call) error {
	_, err := c.q.Exec(ctx, "SELECT "+k.sql(), k.args...)
	return mapError(err)
}

// ---- queues -----------------------------------------------------------------

// QueueOptions are create_queue's options; zero values keep the server's defaults.
type QueueOptions struct {
	Lease       time.Duration // default 30 s
	MaxAttempts int           // default 5
	Backoff     time.Duration // default 1 s
	Retain      time.Duration // default 0: finished items are not kept
}

// CreateQueue creates a queue (ErrQueueExists if it exists).
func (c *Client) CreateQueue(ctx context.Context, queue string, o *QueueOptions) error {
	k := newCall("create_queue").arg(queue, "::text")
	if o != nil {
		if o.Lease != 0 {
			k.named("lease", Interval(o.Lease), "::interval")
		}
		if o.MaxAttempts != 0 {
			k.named("max_attempts", o.MaxAttempts, "::int")
		}
		if o.Backoff != 0 {
			k.named("backoff", Interval(o.Backoff), "::interval")
		}
		if o.Retain != 0 {
			k.named("retain", Interval(o.Retain), "::interval")
		}
	}
	return c.exec(ctx, k)
}

// DropQueue drops a queue and its items.
func (c *Client) DropQueue(ctx context.Context, queue string) error {
	return c.exec(ctx, newCall("drop_queue").arg(queue, "::text"))
}

// Pause stops a queue's claims until Resume.
func (c *Client) Pause(ctx context.Context, queue string) error {
	return c.exec(ctx, newCall("pause").arg(queue, "::text"))
}

// Resume lets a paused queue's claims go on.
func (c *Client) Resume(ctx context.Context, queue string) error {
	return c.exec(ctx, newCall("resume").arg(queue, "::text"))
}

// ---- producers --------------------------------------------------------------

// EnqueueOptions are enqueue's options; zero values are left out.
type EnqueueOptions struct {
	GroupKey string
	RunAt    time.Time
	Priority int
	DedupKey string
	After    []int64 // ids that must finish first
	FairKey  string
}

// Enqueue adds one item and returns its id. payload is marshalled to JSON
// (nil: {}; a json.RawMessage goes as it is).
func (c *Client) Enqueue(ctx context.Context, queue string, payload interface{}, o *EnqueueOptions) (int64, error) {
	p, err := jsonText(payload)
	if err != nil {
		return 0, err
	}
	k := newCall("enqueue").arg(queue, "::text").arg(p, "::jsonb")
	if o != nil {
		if o.GroupKey != "" {
			k.named("group_key", o.GroupKey, "::text")
		}
		if !o.RunAt.IsZero() {
			k.named("run_at", o.RunAt.UTC().Format(time.RFC3339Nano), "::timestamptz")
		}
		if o.Priority != 0 {
			k.named("priority", o.Priority, "::int")
		}
		if o.DedupKey != "" {
			k.named("dedup_key", o.DedupKey, "::text")
		}
		if o.After != nil {
			k.named("after", bigintArray(o.After), "::bigint[]")
		}
		if o.FairKey != "" {
			k.named("fair_key", o.FairKey, "::text")
		}
	}
	var id int64
	err = c.row(ctx, k, &id)
	return id, err
}

// EnqueueManyOptions are enqueue_many's options; zero values are left out.
type EnqueueManyOptions struct {
	GroupKeys []string // one per payload ("" for none)
	RunAt     time.Time
	Priority  int
	After     []int64
	FairKey   string
}

// EnqueueMany adds many items in one statement; ids in the order of payloads.
func (c *Client) EnqueueMany(ctx context.Context, queue string, payloads []interface{}, o *EnqueueManyOptions) ([]int64, error) {
	docs := make([]json.RawMessage, len(payloads))
	for i, p := range payloads {
		t, err := jsonText(p)
		if err != nil {
			return nil, err
		}
		docs[i] = json.RawMessage(t)
	}
	all, _ := json.Marshal(docs)
	k := newCall("enqueue_many").arg(queue, "::text")
	k.args = append(k.args, string(all))
	k.params = append(k.params, fmt.Sprintf(
		"ARRAY(SELECT e FROM pg_catalog.jsonb_array_elements($%d::jsonb) WITH ORDINALITY AS t(e, n) ORDER BY n)", len(k.args)))
	if o != nil {
		if o.GroupKeys != nil {
			keys := make([]*string, len(o.GroupKeys))
			for i := range o.GroupKeys {
				if o.GroupKeys[i] != "" {
					keys[i] = &o.GroupKeys[i]
				}
			}
			b, _ := json.Marshal(keys)
			k.args = append(k.args, string(b))
			k.params = append(k.params, fmt.Sprintf(
				"group_keys => ARRAY(SELECT e FROM pg_catalog.jsonb_array_elements_text($%d::jsonb) WITH ORDINALITY AS t(e, n) ORDER BY n)", len(k.args)))
		}
		if !o.RunAt.IsZero() {
			k.named("run_at", o.RunAt.UTC().Format(time.RFC3339Nano), "::timestamptz")
		}
		if o.Priority != 0 {
			k.named("priority", o.Priority, "::int")
		}
		if o.After != nil {
			k.named("after", bigintArray(o.After), "::bigint[]")
		}
		if o.FairKey != "" {
			k.named("fair_key", o.FairKey, "::text")
		}
	}
	rows, err := c.q.Query(ctx, "SELECT * FROM "+k.sql(), k.args...)
	if err != nil {
		return nil, mapError(err)
	}
	defer rows.Close()
	ids := make([]int64, 0, len(payloads))
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, mapError(err)
		}
		ids = append(ids, id)
	}
	return ids, mapError(rows.Err())
}

// Cancel cancels items of a queue that are not finished; returns how many.
func (c *Client) Cancel(ctx context.Context, queue string, ids ...int64) (int, error) {
	var n int
	err := c.row(ctx, newCall("cancel_many").arg(queue, "::text").arg(bigintArray(ids), "::bigint[]"), &n)
	return n, err
}

// ItemState is what claim.item_state says about one item.
type ItemState struct {
	State      string // waiting scheduled ready claimed completed dead cancelled
	Attempt    *int
	Result     json.RawMessage // nil: none
	Error      *string
	FinishedAt *time.Time
}

// ItemState reads an item's state; with wait > 0 it waits in the server up
// to wait for the item to finish.
func (c *Client) ItemState(ctx context.Context, queue string, id int64, wait time.Duration) (ItemState, error) {
	var s ItemState
	var state *string
	k := newCall("item_state").arg(queue, "::text").arg(id, "::bigint").arg(Interval(wait), "::interval")
	err := mapError(c.q.QueryRow(ctx, "SELECT state, attempt, result, error, finished_at FROM "+k.sql(), k.args...).
		Scan(&state, &s.Attempt, &s.Result, &s.Error, &s.FinishedAt))
	if state != nil {
		s.State = *state
	}
	return s, err
}

// ---- outcomes by token ------------------------------------------------------

// Complete finishes a claim (result: nil for none); ErrStaleToken when the
// token is not the live claim.
func (c *Client) Complete(ctx context.Context, token int64, result interface{}) error {
	return c.execResult(ctx, newCall("complete").arg(token, "::bigint"), result)
}

// execResult runs k with result appended as its last ::jsonb argument when
// result is not nil (the outcome calls: complete, guard_finish).
func (c *Client) execResult(ctx context.Context, k *call, result interface{}) error {
	if result != nil {
		r, err := jsonText(result)
		if err != nil {
			return err
		}
		k.arg(r, "::jsonb")
	}
	return c.exec(ctx, k)
}

// Fail fails a claim's attempt with a message; retryIn > 0 makes it ready
// again after that instead of the queue's backoff.
func (c *Client) Fail(ctx context.Context, token int64, message string, retryIn time.Duration) error {
	var retry interface{}
	if retryIn > 0 {
		retry = Interval(retryIn)
	}
	return c.exec(ctx, newCall("fail").arg(token, "::bigint").arg(message, "::text").arg(retry, "::interval"))
}

// Extend extends a claim's lease by lease (0: the queue's lease); returns
// the new end of the lease.
func (c *Client) Extend(ctx context.Context, token int64, lease time.Duration) (time.Time, error) {
	var until time.Time
	err := c.row(ctx, newCall("extend").arg(token, "::bigint").arg(optInterval(lease), "::interval"), &until)
	return until, err
}

// Release gives a claim back: the item is ready at once, the attempt unused.
func (c *Client) Release(ctx context.Context, token int64) error {
	return c.exec(ctx, newCall("release").arg(token, "::bigint"))
}

// AssertToken fences the caller's transaction: ErrStaleToken unless token
// is the live claim; then the item is held until the transaction ends.
func (c *Client) AssertToken(ctx context.Context, token int64) error {
	return c.exec(ctx, newCall("assert_token").arg(token, "::bigint"))
}

func optInterval(d time.Duration) interface{} {
	if d <= 0 {
		return nil
	}
	return Interval(d)
}
