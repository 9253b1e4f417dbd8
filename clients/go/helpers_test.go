package pgclaim

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"math/rand"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v4"
)

// The suite runs against the server of PG_CLAIM_DSN (a URL or keywords),
// as test/clients.sh runs it: directly and through PgBouncer in
// transaction mode. Without it every test is skipped.
var testDSN = os.Getenv("PG_CLAIM_DSN")

func TestMain(m *testing.M) {
	rand.Seed(time.Now().UnixNano())
	if testDSN == "" {
		fmt.Println("PG_CLAIM_DSN is not set: no server to test against (every test skipped)")
	}
	os.Exit(m.Run())
}

func need(t *testing.T) {
	t.Helper()
	if testDSN == "" {
		t.Skip("PG_CLAIM_DSN is not set")
	}
}

func ctx5(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// client: the test's own client, closed at its end.
func client(t *testing.T) *Client {
	t.Helper()
	need(t)
	c, err := Connect(context.Background(), testDSN)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// conn: a plain pgx connection (simple protocol, for PgBouncer).
func conn(t *testing.T) *pgx.Conn {
	t.Helper()
	need(t)
	cfg, err := ParseConfig(testDSN, "pg_claim go test", false)
	if err != nil {
		t.Fatal(err)
	}
	c, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func name(prefix string) string { return fmt.Sprintf("%s_%d", prefix, rand.Int63()%1e12) }

// queue: a fresh queue, dropped at the test's end.
func queue(t *testing.T, c *Client, o *QueueOptions) string {
	t.Helper()
	q := name("goq")
	if err := c.CreateQueue(context.Background(), q, o); err != nil {
		t.Fatalf("create_queue: %v", err)
	}
	t.Cleanup(func() { _ = c.DropQueue(context.Background(), q) })
	return q
}

// setup: what most tests start from: the test's client, a context that
// ends with it and a fresh queue with options o.
func setup(t *testing.T, o *QueueOptions) (*Client, context.Context, string) {
	t.Helper()
	c := client(t)
	return c, ctx5(t), queue(t, c, o)
}

// table: a fresh table (id bigint primary key, token bigint), dropped at the end.
func table(t *testing.T, c *pgx.Conn) string {
	t.Helper()
	tb := name("gotab")
	if _, err := c.Exec(context.Background(), "CREATE TABLE "+tb+" (id bigint PRIMARY KEY, token bigint)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = c.Exec(context.Background(), "DROP TABLE "+tb) })
	return tb
}

func count(t *testing.T, c *pgx.Conn, sql string, args ...interface{}) int {
	t.Helper()
	var n int
	if err := c.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// worker: a worker with short waits and its log in a buffer.
func worker(q string, h Handler) (*Worker, *logBuf) {
	w := NewWorker(testDSN, q, h)
	w.Wait = 200 * time.Millisecond
	// Through PgBouncer (clients.sh's second run), as its README says: no
	// cancel requests, which PgBouncer may deliver to another client's statement.
	w.Pooled = viaPgBouncer()
	lb := &logBuf{}
	w.Logger = log.New(lb, "", 0)
	return w, lb
}

type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuf) has(s string) bool { return strings.Contains(l.String(), s) }

func run(t *testing.T, w *Worker, ctx context.Context) Stats {
	t.Helper()
	st, err := w.Run(ctx)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return st
}

// viaPgBouncer: clients.sh sets PG_CLAIM_VIA_PGBOUNCER for the run through
// PgBouncer in transaction mode.
func viaPgBouncer() bool { return os.Getenv("PG_CLAIM_VIA_PGBOUNCER") != "" }
