package pgclaim

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v4/pgxpool"
)

// 1000 jobs through two workers of 4 slots each: every item done exactly
// once, recorded in a table with a primary key.
func TestWorkersDrainExactlyOnce(t *testing.T) {
	t.Parallel()
	c, ctx, q := setup(t, nil)
	db := conn(t)
	tb := table(t, db)
	payloads := make([]interface{}, 1000)
	for i := range payloads {
		payloads[i] = map[string]int{"n": i}
	}
	if _, err := c.EnqueueMany(ctx, q, payloads, nil); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(testDSN)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.PreferSimpleProtocol, cfg.MaxConns = true, 8
	pool, err := pgxpool.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var wg sync.WaitGroup
	stats := make([]Stats, 2)
	for k := range stats {
		wg.Add(1)
		go func(k int) {
			defer wg.Done()
			w, _ := worker(q, func(ctx context.Context, j *Job) (interface{}, error) {
				var p struct{ N int64 }
				if err := j.Decode(&p); err != nil {
					return nil, err
				}
				_, err := pool.Exec(ctx, fmt.Sprintf("INSERT INTO %s VALUES (%d, %d)", tb, p.N, j.Token))
				return nil, err
			})
			w.Concurrency, w.Burst, w.Name = 4, true, fmt.Sprintf("go-test-%d", k)
			st, err := w.Run(context.Background())
			if err != nil {
				t.Error(err)
			}
			stats[k] = st
		}(k)
	}
	wg.Wait()
	if n := count(t, db, "SELECT count(*) FROM "+tb); n != 1000 {
		t.Errorf("%d rows, want 1000", n)
	}
	if done := stats[0].Completed + stats[1].Completed; done != 1000 || stats[0].Completed == 0 || stats[1].Completed == 0 {
		t.Errorf("completed %d + %d", stats[0].Completed, stats[1].Completed)
	}
}

func TestFailRetryResult(t *testing.T) {
	t.Parallel()
	c, ctx, q := setup(t, &QueueOptions{Retain: time.Hour, MaxAttempts: 3, Backoff: time.Hour})
	fails, _ := c.Enqueue(ctx, q, map[string]string{"do": "fail"}, nil)
	retry, _ := c.Enqueue(ctx, q, map[string]string{"do": "retry"}, nil)
	ok, _ := c.Enqueue(ctx, q, map[string]string{"do": "ok"}, nil)
	panics, _ := c.Enqueue(ctx, q, map[string]string{"do": "panic"}, nil)
	w, lb := worker(q, func(ctx context.Context, j *Job) (interface{}, error) {
		var p struct{ Do string }
		_ = j.Decode(&p)
		switch p.Do {
		case "fail":
			return nil, errors.New("KeyError: 'to'")
		case "panic":
			panic("boom")
		case "retry":
			if j.Attempt == 1 {
				return nil, RetryAfter(100*time.Millisecond, errors.New("later"))
			}
		}
		return map[string]int{"attempt": j.Attempt}, nil
	})
	w.MaxJobs = 5
	st := run(t, w, ctx)
	if st.Completed != 2 || st.Failed != 2 || st.Retried != 1 || st.Claimed != 5 {
		t.Errorf("stats %+v", st)
	}
	if !lb.has(fmt.Sprintf("job %d attempt 1 failed: KeyError: 'to'", fails)) {
		t.Errorf("no failure line in the log: %q", lb.String())
	}
	s, _ := c.ItemState(ctx, q, fails, 0)
	if s.State != "scheduled" || s.Error == nil || *s.Error != "KeyError: 'to'" {
		t.Errorf("failed item: %+v", s)
	}
	s, _ = c.ItemState(ctx, q, retry, 0)
	if s.State != "completed" || string(s.Result) != `{"attempt": 2}` {
		t.Errorf("retried item: %+v %s", s, s.Result)
	}
	if s, _ := c.ItemState(ctx, q, panics, 0); s.Error == nil || *s.Error != "panic: boom" {
		t.Errorf("a handler that panicked: %+v", s)
	}
	s, _ = c.ItemState(ctx, q, ok, 0)
	if s.State != "completed" || string(s.Result) != `{"attempt": 1}` {
		t.Errorf("completed item: %+v %s", s, s.Result)
	}
}

// A 1.5 s handler under a 600 ms lease: the heartbeat keeps it (same
// token, attempt 1, no one else claims it). Not parallel: the other tests'
// cleanup drops their queues, and claim.drop_queue's lock on claim.claims
// and claim.items waits behind any open transaction with every claim and
// extend of every queue queued behind it (1.6 s seen in the server's log),
// longer than this lease.
func TestHeartbeatKeepsTheLease(t *testing.T) {
	lease, hold := 600*time.Millisecond, 1500*time.Millisecond
	c, ctx, q := setup(t, &QueueOptions{Lease: lease})
	if _, err := c.Enqueue(ctx, q, nil, nil); err != nil {
		t.Fatal(err)
	}
	var other int32
	started := make(chan struct{})
	go func() { // another worker that would take the item if its lease ended
		<-started
		w, _ := worker(q, func(ctx context.Context, j *Job) (interface{}, error) {
			atomic.AddInt32(&other, 1)
			return nil, nil
		})
		w.Wait = hold - 200*time.Millisecond
		w.Burst = true
		_, _ = w.Run(context.Background())
	}()
	w, lb := worker(q, func(ctx context.Context, j *Job) (interface{}, error) {
		close(started)
		if j.Lease < lease*2/3 || j.Lease > lease*7/6 {
			return nil, fmt.Errorf("lease %v", j.Lease)
		}
		time.Sleep(hold)
		return nil, ctx.Err()
	})
	w.MaxJobs = 1
	st := run(t, w, ctx)
	if st.Completed != 1 || st.Extended < 2 || st.Stale != 0 || atomic.LoadInt32(&other) != 0 {
		t.Errorf("stats %+v, claimed elsewhere %d, log %q", st, other, lb.String())
	}
}

// Someone releases the item under the handler's feet: its completion is
// refused (PC001), one log line, the outcome dropped, the item ready again.
func TestStaleTokenOutcomeDropped(t *testing.T) {
	c, ctx, q := setup(t, nil)
	id, _ := c.Enqueue(ctx, q, nil, nil)
	other := client(t)
	w, lb := worker(q, func(ctx context.Context, j *Job) (interface{}, error) {
		return nil, other.Release(ctx, j.Token)
	})
	w.MaxJobs, w.Heartbeat = 1, false
	st := run(t, w, ctx)
	if st.Completed != 0 || st.Stale != 1 || !lb.has("outcome dropped") {
		t.Errorf("stats %+v, log %q", st, lb.String())
	}
	if s, _ := c.ItemState(ctx, q, id, 0); s.State != "ready" {
		t.Errorf("item %+v", s)
	}
}

// The heartbeat finds the lease lost: the handler's context ends. The
// release, not the lease's end, must lose it: the lease is long, and the
// test is not parallel, as TestHeartbeatKeepsTheLease (another test's
// drop_queue would hold the release and the heartbeat's extend).
func TestLostLeaseCancelsTheHandler(t *testing.T) {
	c, ctx, q := setup(t, &QueueOptions{Lease: 3 * time.Second})
	c.Enqueue(ctx, q, nil, nil)
	other := client(t)
	var seen int32
	w, lb := worker(q, func(ctx context.Context, j *Job) (interface{}, error) {
		if err := other.Release(ctx, j.Token); err != nil {
			return nil, err
		}
		select {
		case <-ctx.Done():
			if !j.Lost() {
				return nil, errors.New("context ended, lease not lost")
			}
			atomic.StoreInt32(&seen, 1)
			return nil, nil
		case <-time.After(10 * time.Second):
			return nil, errors.New("the context did not end")
		}
	})
	w.MaxJobs = 1
	st := run(t, w, ctx)
	if st.Stale != 1 || st.Completed != 0 || st.Failed != 0 || atomic.LoadInt32(&seen) != 1 {
		t.Errorf("stats %+v, the handler saw its context end: %v, log %q", st, seen == 1, lb.String())
	}
}

// A stop while claims wait in the server: Run returns at once.
func TestStopCancelsWaitingClaims(t *testing.T) {
	t.Parallel()
	c := client(t)
	q := queue(t, c, nil)
	w, _ := worker(q, func(ctx context.Context, j *Job) (interface{}, error) { return nil, nil })
	w.Wait, w.Concurrency = 30*time.Second, 3
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(500*time.Millisecond, cancel)
	start := time.Now()
	run(t, w, ctx)
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Run took %v after the stop", d)
	}
}

// SIGTERM: handlers in flight finish within the grace period and complete.
func TestSigtermFinishesInFlight(t *testing.T) {
	c, ctx, q := setup(t, nil)
	for i := 0; i < 3; i++ {
		c.Enqueue(ctx, q, nil, nil)
	}
	var started int32
	w, _ := worker(q, func(ctx context.Context, j *Job) (interface{}, error) {
		if atomic.AddInt32(&started, 1) == 3 {
			_ = syscall.Kill(syscall.Getpid(), syscall.SIGTERM)
		}
		time.Sleep(300 * time.Millisecond)
		return nil, nil
	})
	w.Concurrency, w.HandleSignals, w.Wait = 3, true, 5*time.Second
	st := run(t, w, ctx)
	if st.Completed != 3 || st.Released != 0 {
		t.Errorf("stats %+v", st)
	}
}

// Handlers that outlive the grace period: their items are released (ready
// at once, attempt not used) and their outcomes dropped.
func TestStopReleasesWhatOutlivesGrace(t *testing.T) {
	t.Parallel()
	for _, tx := range []bool{false, true} {
		t.Run(fmt.Sprintf("transactional=%v", tx), func(t *testing.T) {
			c, ctx, q := setup(t, nil)
			db := conn(t)
			tb := table(t, db)
			id, _ := c.Enqueue(ctx, q, nil, nil)
			stop := make(chan struct{})
			w, _ := worker(q, func(ctx context.Context, j *Job) (interface{}, error) {
				close(stop)
				if j.Tx != nil {
					if _, err := j.Tx.Exec(ctx, fmt.Sprintf("INSERT INTO %s VALUES (%d, %d)", tb, j.ID, j.Token)); err != nil {
						return nil, err
					}
					_, err := j.Tx.Exec(ctx, "SELECT pg_catalog.pg_sleep(10)")
					return nil, err
				}
				time.Sleep(1500 * time.Millisecond) // ignores its context
				return nil, nil
			})
			w.Transactional, w.Grace = tx, 300*time.Millisecond
			rctx, cancel := context.WithCancel(context.Background())
			go func() { <-stop; cancel() }()
			start := time.Now()
			st := run(t, w, rctx)
			if st.Released != 1 || st.Completed != 0 || time.Since(start) > 5*time.Second {
				t.Errorf("stats %+v after %v", st, time.Since(start))
			}
			s, _ := c.ItemState(ctx, q, id, 0)
			if s.State != "ready" || s.Attempt == nil {
				t.Errorf("item %+v", s)
			}
			if n := count(t, db, "SELECT count(*) FROM "+tb); n != 0 {
				t.Errorf("%d rows of an abandoned job remain", n)
			}
			// Delivered again, attempt 1 again.
			w2, _ := worker(q, func(ctx context.Context, j *Job) (interface{}, error) {
				if j.Attempt != 1 {
					return nil, fmt.Errorf("attempt %d", j.Attempt)
				}
				return nil, nil
			})
			w2.MaxJobs = 1
			if st := run(t, w2, ctx); st.Completed != 1 {
				t.Errorf("again: %+v", st)
			}
		})
	}
	time.Sleep(1200 * time.Millisecond) // the non-transactional handler left behind
}

// Not parallel, as TestHeartbeatKeepsTheLease.
func TestTransactionalCommitsWithCompletion(t *testing.T) {
	c, ctx, q := setup(t, &QueueOptions{Lease: 600 * time.Millisecond, Retain: time.Hour})
	db := conn(t)
	tb := table(t, db)
	other := conn(t)
	released := make(chan error, 1)
	var ids []int64
	for i := 0; i < 3; i++ {
		id, _ := c.Enqueue(ctx, q, map[string]int{"i": i}, nil)
		ids = append(ids, id)
	}
	w, _ := worker(q, func(ctx context.Context, j *Job) (interface{}, error) {
		var p struct{ I int }
		_ = j.Decode(&p)
		if _, err := j.Tx.Exec(ctx, fmt.Sprintf("INSERT INTO %s VALUES (%d, %d)", tb, j.ID, j.Token)); err != nil {
			return nil, err
		}
		if err := j.Tx.Commit(ctx); err == nil {
			return nil, errors.New("the handler could commit")
		}
		switch p.I {
		case 0: // 1.5 s of statements under a 600 ms lease: the heartbeat extends in between
			for k := 0; k < 15; k++ {
				var one int
				if err := j.Tx.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
					return nil, err
				}
				time.Sleep(100 * time.Millisecond)
			}
			return "done", nil
		case 1:
			return nil, errors.New("no")
		}
		// Another connection's release waits for this transaction
		// (assert_token holds the item), then finds the item finished.
		go func() { released <- New(other).Release(context.Background(), j.Token) }()
		time.Sleep(200 * time.Millisecond)
		return nil, nil
	})
	w.Transactional, w.MaxJobs, w.Concurrency = true, 3, 3
	st := run(t, w, ctx)
	if err := <-released; !errors.Is(err, ErrStaleToken) {
		t.Errorf("a release from another connection during the transaction: %v", err)
	}
	if st.Completed != 2 || st.Failed != 1 || st.Extended < 2 {
		t.Errorf("stats %+v", st)
	}
	if n := count(t, db, "SELECT count(*) FROM "+tb); n != 2 {
		t.Errorf("%d rows, want those of the 2 completed jobs", n)
	}
	if s, _ := c.ItemState(ctx, q, ids[0], 0); s.State != "completed" || string(s.Result) != `"done"` {
		t.Errorf("item 0: %+v", s)
	}
	if s, _ := c.ItemState(ctx, q, ids[1], 0); s.State != "scheduled" && s.State != "ready" {
		t.Errorf("item 1: %+v", s)
	}
}

// The lease runs out during a transactional handler (heartbeat off) and
// the item is claimed by another worker: complete is refused, none of the
// handler's writes remain; the other worker's do.
func TestTransactionalLeaseLostLeavesNoWrites(t *testing.T) {
	t.Parallel()
	c, ctx, q := setup(t, &QueueOptions{Lease: 300 * time.Millisecond})
	db := conn(t)
	tb := name("gotab")
	db.Exec(ctx, "CREATE TABLE "+tb+" (id bigint, token bigint PRIMARY KEY)")
	defer db.Exec(context.Background(), "DROP TABLE "+tb)
	c.Enqueue(ctx, q, nil, nil)
	insert := func(ctx context.Context, j *Job) error {
		_, err := j.Tx.Exec(ctx, fmt.Sprintf("INSERT INTO %s VALUES (%d, %d)", tb, j.ID, j.Token))
		return err
	}
	started := make(chan struct{})
	first, _ := worker(q, func(ctx context.Context, j *Job) (interface{}, error) {
		if err := insert(ctx, j); err != nil {
			return nil, err
		}
		close(started)
		time.Sleep(800 * time.Millisecond)
		return nil, nil
	})
	first.Transactional, first.Heartbeat, first.MaxJobs = true, false, 1
	var st1 Stats
	done := make(chan struct{})
	go func() { st1, _ = first.Run(context.Background()); close(done) }()
	<-started
	time.Sleep(350 * time.Millisecond) // the 300 ms lease has ended
	// assert_token does not hold the item against expiry: claim it again.
	second, _ := worker(q, func(ctx context.Context, j *Job) (interface{}, error) {
		return nil, insert(ctx, j)
	})
	second.Transactional, second.MaxJobs, second.Wait = true, 1, 2*time.Second
	st2 := run(t, second, ctx)
	<-done
	if st1.Stale != 1 || st1.Completed != 0 || st2.Completed != 1 {
		t.Errorf("first %+v, second %+v", st1, st2)
	}
	if n := count(t, db, "SELECT count(*) FROM "+tb); n != 1 {
		t.Errorf("%d rows, want the second worker's only", n)
	}
}

// An item cancelled between its claim and the fence: assert_token refuses
// it (PC001), so a transactional handler would not run.
func TestAssertTokenOfCancelledItem(t *testing.T) {
	c, ctx, q := setup(t, nil)
	id, _ := c.Enqueue(ctx, q, nil, nil)
	var token int64
	if err := c.Conn().QueryRow(ctx, "SELECT token FROM claim.claim_next($1::text)", q).Scan(&token); err != nil {
		t.Fatal(err)
	}
	if err := c.AssertToken(ctx, token); err != nil {
		t.Errorf("assert_token of a live claim: %v", err)
	}
	if n, err := c.Cancel(ctx, q, id); n != 1 || err != nil {
		t.Fatalf("cancel: %d %v", n, err)
	}
	if err := c.AssertToken(ctx, token); !errors.Is(err, ErrStaleToken) {
		t.Errorf("assert_token of a cancelled item: %v", err)
	}
}

func TestFatalErrorsStopTheWorker(t *testing.T) {
	need(t)
	w, lb := worker(name("no_such_queue"), func(ctx context.Context, j *Job) (interface{}, error) { return nil, nil })
	w.Concurrency = 2
	start := time.Now()
	_, err := w.Run(context.Background())
	if !errors.Is(err, ErrUnknownQueue) || time.Since(start) > 3*time.Second || !lb.has("stopping") {
		t.Errorf("unknown queue: %v after %v, log %q", err, time.Since(start), lb.String())
	}
	c := client(t)
	q := queue(t, c, nil)
	w, _ = worker(q, func(ctx context.Context, j *Job) (interface{}, error) { return nil, nil })
	w.Wait = -time.Second
	if _, err := w.Run(context.Background()); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("negative wait: %v", err)
	}
	// The queue dropped under a waiting worker.
	w, _ = worker(q, func(ctx context.Context, j *Job) (interface{}, error) { return nil, nil })
	time.AfterFunc(300*time.Millisecond, func() { _ = c.DropQueue(context.Background(), q) })
	if _, err := w.Run(context.Background()); !errors.Is(err, ErrUnknownQueue) {
		t.Errorf("dropped queue: %v", err)
	}
	// A connection that cannot be made when Run starts.
	w, _ = worker(q, func(ctx context.Context, j *Job) (interface{}, error) { return nil, nil })
	w.DSN = "postgresql://127.0.0.1:1/x?connect_timeout=2"
	if _, err := w.Run(context.Background()); !errors.Is(err, ErrTransient) {
		t.Errorf("refused connection: %v", err)
	}
	// Settings no retry can fix: an unknown database, an unknown role.
	// The server itself, also when PG_CLAIM_DSN is a pooler's.
	var host string
	var port int
	if err := conn(t).QueryRow(context.Background(), "SELECT host(inet_server_addr()), inet_server_port()").Scan(&host, &port); err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(testDSN)
	u.Host = fmt.Sprintf("%s:%d", host, port)
	noDB, noRole := *u, *u
	noDB.Path = "/" + name("no_such_db")
	noRole.User = url.User(name("no_such_role"))
	for _, bad := range []string{noDB.String(), noRole.String()} {
		w, _ = worker(q, func(ctx context.Context, j *Job) (interface{}, error) { return nil, nil })
		w.DSN = bad
		start := time.Now()
		if _, err := w.Run(context.Background()); !errors.Is(err, ErrBadConnection) || errors.Is(err, ErrTransient) ||
			time.Since(start) > 5*time.Second {
			t.Errorf("%s: %v after %v", bad, err, time.Since(start))
		}
	}
}

// The server ends the worker's connections: the slots reconnect and go on.
func TestReconnects(t *testing.T) {
	t.Parallel()
	c, ctx, q := setup(t, nil)
	admin := conn(t)
	var n int32
	w, lb := worker(q, func(ctx context.Context, j *Job) (interface{}, error) {
		atomic.AddInt32(&n, 1)
		return nil, nil
	})
	w.Name = name("go-reconnect")
	w.MaxJobs = 2
	fin := make(chan struct{})
	go func() {
		defer close(fin)
		c.Enqueue(ctx, q, nil, nil)
		for w.Stats().Completed < 1 && ctx.Err() == nil { // the slot then waits in a claim
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(100 * time.Millisecond)
		admin.Exec(ctx, "SELECT pg_catalog.pg_terminate_backend(pid) FROM pg_catalog.pg_stat_activity WHERE application_name = $1", "pg_claim worker "+w.Name)
		time.Sleep(1200 * time.Millisecond)
		c.Enqueue(ctx, q, nil, nil)
	}()
	st := run(t, w, ctx)
	<-fin
	if st.Completed != 2 || !lb.has("lost its connection") {
		t.Errorf("stats %+v, log %q", st, lb.String())
	}
}

// Stop and EndGrace before Run do nothing; Run after them works.
func TestStopBeforeRun(t *testing.T) {
	c := client(t)
	q := queue(t, c, nil)
	w, _ := worker(q, func(ctx context.Context, j *Job) (interface{}, error) { return nil, nil })
	w.Stop()
	w.EndGrace()
	c.Enqueue(context.Background(), q, nil, nil)
	w.Burst = true
	if st := run(t, w, ctx5(t)); st.Completed != 1 {
		t.Errorf("stats %+v", st)
	}
}
