package pgclaim

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgconn"
)

func TestErrorTable(t *testing.T) {
	cases := map[string]error{
		"PC001": ErrStaleToken, "PC002": ErrPermitMismatch, "42704": ErrUnknownQueue,
		"42710": ErrQueueExists, "42602": ErrInvalidName, "22023": ErrInvalidArgument,
		"22004": ErrNullArgument, "22007": ErrInvalidArgument, "22P02": ErrInvalidArgument,
		"42501": ErrPermissionDenied, "25006": ErrReadOnly, "57014": ErrCancelled,
		"42883": ErrNotSupported, "0A000": ErrNotSupported, "3F000": ErrNotInstalled,
		"08006": ErrTransient, "40001": ErrTransient, "40P01": ErrTransient, "57P01": ErrTransient,
		"53300": ErrTransient, "55P03": ErrTransient, "XX000": ErrPgClaim,
		"3D000": ErrBadConnection, "28000": ErrBadConnection, "28P01": ErrBadConnection,
	}
	for state, want := range cases {
		if got := ClassOf(state, ""); got != want {
			t.Errorf("ClassOf(%s) = %v, want %v", state, got, want)
		}
	}
	if ClassOf("42P01", `relation "claim.queue_stats" does not exist`) != ErrNotInstalled {
		t.Error("42P01 on claim.* is not ErrNotInstalled")
	}
	e := &Error{Class: ErrNullArgument}
	if !errors.Is(e, ErrInvalidArgument) || !errors.Is(e, ErrNullArgument) || errors.Is(e, ErrStaleToken) {
		t.Error("ErrNullArgument is an ErrInvalidArgument, and nothing else")
	}
	if !IsFatal(&Error{Class: ErrUnknownQueue}) || IsFatal(&Error{Class: ErrTransient}) || !IsTransient(&Error{Class: ErrTransient}) {
		t.Error("IsFatal / IsTransient")
	}
}

func TestErrorsFromServer(t *testing.T) {
	c, ctx, q := setup(t, nil)
	_, err := c.Enqueue(ctx, name("no_such_queue"), nil, nil)
	var e *Error
	var pg *pgconn.PgError
	if !errors.Is(err, ErrUnknownQueue) || !errors.As(err, &e) || e.SQLState != "42704" || !errors.As(err, &pg) {
		t.Fatalf("unknown queue: %#v", err)
	}
	if err := c.CreateQueue(ctx, q, nil); !errors.Is(err, ErrQueueExists) {
		t.Errorf("queue exists: %v", err)
	}
	if err := c.CreateQueue(ctx, "bad name!", nil); !errors.Is(err, ErrInvalidName) {
		t.Errorf("invalid name: %v", err)
	}
	if err := c.CreateQueue(ctx, name("q"), &QueueOptions{Lease: -time.Second}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("negative lease: %v", err)
	}
	if _, err := c.EnqueueMany(ctx, q, []interface{}{1, 2}, &EnqueueManyOptions{GroupKeys: []string{"one"}}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("group_keys of another length: %v", err)
	}
	err = c.Complete(ctx, 1, nil)
	if !errors.Is(err, ErrStaleToken) || !errors.As(err, &e) || e.Hint == "" {
		t.Errorf("stale token with a hint: %#v", err)
	}
	// A read-only transaction.
	tx, err := c.Conn().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SET TRANSACTION READ ONLY"); err != nil {
		t.Fatal(err)
	}
	if _, err := New(tx).Enqueue(ctx, q, nil, nil); !errors.Is(err, ErrReadOnly) {
		t.Errorf("read only: %v", err)
	}
	_ = tx.Rollback(ctx)
	// A role without rights.
	role := name("pgc_go_norights")
	if _, err := c.Conn().Exec(ctx, "CREATE ROLE "+role+" NOLOGIN"); err != nil {
		t.Fatal(err)
	}
	defer c.Conn().Exec(context.Background(), "DROP ROLE "+role)
	tx, err = c.Conn().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SET LOCAL ROLE "+role); err != nil {
		t.Fatal(err)
	}
	if err := New(tx).CreateQueue(ctx, name("q"), nil); !errors.Is(err, ErrPermissionDenied) {
		t.Errorf("permission denied: %v", err)
	}
	_ = tx.Rollback(ctx)
	// A connection that cannot be made.
	if _, err := Connect(ctx, "host=127.0.0.1 port=1 dbname=x connect_timeout=2"); !errors.Is(err, ErrTransient) {
		t.Errorf("refused connection: %v", err)
	}
}

func TestEnqueueItemStateCancel(t *testing.T) {
	c, ctx, q := setup(t, &QueueOptions{Retain: time.Hour})
	id, err := c.Enqueue(ctx, q, map[string]interface{}{"to": "a@example.com"},
		&EnqueueOptions{Priority: 5, GroupKey: "g", DedupKey: "welcome:42"})
	if err != nil || id <= 0 {
		t.Fatalf("enqueue: %d %v", id, err)
	}
	again, err := c.Enqueue(ctx, q, nil, &EnqueueOptions{DedupKey: "welcome:42"})
	if err != nil || again != id {
		t.Errorf("dedup_key: %d, want %d (%v)", again, id, err)
	}
	later, err := c.Enqueue(ctx, q, nil, &EnqueueOptions{RunAt: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	ids, err := c.EnqueueMany(ctx, q, []interface{}{map[string]int{"n": 1}, nil, json.RawMessage(`[3]`)},
		&EnqueueManyOptions{GroupKeys: []string{"a", "", "b"}})
	if err != nil || len(ids) != 3 || !(ids[0] < ids[1] && ids[1] < ids[2]) {
		t.Fatalf("enqueue_many: %v %v", ids, err)
	}
	st, err := c.ItemState(ctx, q, later, 0)
	if err != nil || st.State != "scheduled" {
		t.Errorf("item_state of a later item: %+v %v", st, err)
	}
	if n, err := c.Cancel(ctx, q, later, ids[1]); err != nil || n != 2 {
		t.Errorf("cancel: %d %v", n, err)
	}
	st, _ = c.ItemState(ctx, q, later, 0)
	if st.State != "cancelled" {
		t.Errorf("cancelled: %+v", st)
	}
	// item_state waits in the server for the outcome.
	go func() {
		time.Sleep(300 * time.Millisecond)
		w, _ := worker(q, func(ctx context.Context, j *Job) (interface{}, error) {
			var p map[string]string
			if err := j.Decode(&p); err != nil {
				return nil, err
			}
			return map[string]string{"sent": p["to"]}, nil
		})
		w.Burst = true
		_, _ = w.Run(context.Background())
	}()
	st, err = c.ItemState(ctx, q, id, 10*time.Second)
	if err != nil || st.State != "completed" || string(st.Result) != `{"sent": "a@example.com"}` || st.FinishedAt == nil {
		t.Errorf("item_state with a wait: %+v (%s) %v", st, st.Result, err)
	}
}

func TestEnqueueInCallersTransaction(t *testing.T) {
	c, ctx, q := setup(t, &QueueOptions{Retain: time.Hour})
	other := conn(t)
	tx, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id, err := New(tx).Enqueue(ctx, q, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = tx.Rollback(ctx)
	if st, err := c.ItemState(ctx, q, id, 0); err == nil && st.State != "" {
		t.Errorf("a rolled back enqueue left an item: %+v", st)
	}
}

func TestKeywordDSN(t *testing.T) {
	need(t)
	if !strings.HasPrefix(testDSN, "postgres") {
		t.Skip("PG_CLAIM_DSN is not a URL")
	}
	u, err := url.Parse(testDSN)
	if err != nil {
		t.Fatal(err)
	}
	kw := "host=" + u.Hostname() + " port=" + u.Port() + " dbname=" + strings.TrimPrefix(u.Path, "/") + " user=" + u.User.Username()
	c, err := Connect(context.Background(), kw)
	if err != nil {
		t.Fatalf("keyword DSN %q: %v", kw, err)
	}
	defer c.Close(context.Background())
	t.Setenv("PG_CLAIM_DSN", kw)
	c2, err := Connect(context.Background(), "")
	if err != nil {
		t.Fatalf("PG_CLAIM_DSN with keywords: %v", err)
	}
	c2.Close(context.Background())
}

func TestLeasesOnceGuard(t *testing.T) {
	c := client(t)
	ctx := ctx5(t)
	n := name("golease")
	l, err := c.AcquireLease(ctx, n, 5*time.Second, &LeaseOptions{Holder: "test"})
	if err != nil || l.Token <= 0 {
		t.Fatalf("acquire: %+v %v", l, err)
	}
	start := time.Now()
	if _, err := c.AcquireLease(ctx, n, 5*time.Second, &LeaseOptions{Wait: 200 * time.Millisecond}); !errors.Is(err, ErrNotAcquired) {
		t.Errorf("second acquire: %v", err)
	}
	if time.Since(start) < 150*time.Millisecond {
		t.Error("the second acquire did not wait")
	}
	if until, err := c.RenewLease(ctx, l, 10*time.Second); err != nil || time.Until(until) < 5*time.Second {
		t.Errorf("renew: %v %v", until, err)
	}
	if err := c.AssertLease(ctx, l); err != nil {
		t.Errorf("assert: %v", err)
	}
	if ok, err := c.ReleaseLease(ctx, l); !ok || err != nil {
		t.Errorf("release: %v %v", ok, err)
	}
	if ok, err := c.ReleaseLease(ctx, l); ok || err != nil {
		t.Errorf("release again: %v %v", ok, err)
	}
	if _, err := c.RenewLease(ctx, l, time.Second); !errors.Is(err, ErrStaleToken) {
		t.Errorf("renew after release: %v", err)
	}
	l2, err := c.AcquireLease(ctx, n, time.Second, nil)
	if err != nil || l2.Token <= l.Token {
		t.Errorf("a new holding has a higher token: %d after %d (%v)", l2.Token, l.Token, err)
	}
	m := name("golease")
	if _, err := c.AcquireLease(ctx, m, 5*time.Second, &LeaseOptions{Permits: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AcquireLease(ctx, m, 5*time.Second, &LeaseOptions{Permits: 3}); !errors.Is(err, ErrPermitMismatch) {
		t.Errorf("permit mismatch: %v", err)
	}

	key := name("goonce")
	if ok, err := c.Once(ctx, key, 0); !ok || err != nil {
		t.Errorf("once: %v %v", ok, err)
	}
	if ok, err := c.Once(ctx, key, 0); ok || err != nil {
		t.Errorf("once again: %v %v", ok, err)
	}

	g := name("goguard")
	calls := 0
	charge := func(ctx context.Context) (interface{}, error) {
		calls++
		if calls == 1 {
			return nil, errors.New("card declined")
		}
		return map[string]string{"charge": "ch_1"}, nil
	}
	if _, ran, err := c.Guard(ctx, g, time.Minute, charge); !ran || err == nil || err.Error() != "card declined" {
		t.Errorf("a failing attempt: %v %v", ran, err)
	}
	r, ran, err := c.Guard(ctx, g, time.Minute, charge)
	if !ran || err != nil || string(r) != `{"charge":"ch_1"}` {
		t.Errorf("a second attempt: %s %v %v", r, ran, err)
	}
	r, ran, err = c.Guard(ctx, g, time.Minute, charge)
	if ran || err != nil || calls != 2 || !strings.Contains(string(r), "ch_1") {
		t.Errorf("a finished key: %s %v %v (calls %d)", r, ran, err, calls)
	}
	busy := name("goguard")
	tok, ok, err := c.GuardBegin(ctx, busy, time.Minute)
	if !ok || err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Guard(ctx, busy, time.Minute, charge); !errors.Is(err, ErrNotAcquired) {
		t.Errorf("a running attempt: %v", err)
	}
	if err := c.GuardFinish(ctx, busy, tok+1, nil); !errors.Is(err, ErrStaleToken) {
		t.Errorf("finish with another token: %v", err)
	}
	if err := c.GuardFinish(ctx, busy, tok, nil); err != nil {
		t.Error(err)
	}
	if r, fin, err := c.GuardResult(ctx, busy); !fin || err != nil || string(r) != "null" {
		t.Errorf("result of a finish without one: %s %v %v", r, fin, err)
	}
}
