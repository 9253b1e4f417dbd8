package pgclaim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v4"
)

// Job is one claimed item, as the handler sees it.
type Job struct {
	Queue    string
	ID       int64
	Token    int64
	Payload  json.RawMessage
	Attempt  int
	GroupKey *string
	Lease    time.Duration // the lease's length when claimed (the heartbeat extends at a third of it)
	// Tx is the job's transaction in transactional mode, already fenced with
	// claim.assert_token; the worker completes the item in it and commits.
	// Nil otherwise.
	Tx pgx.Tx

	lost int32
}

// Decode unmarshals the payload into v.
func (j *Job) Decode(v interface{}) error { return json.Unmarshal(j.Payload, v) }

// Lost is true once the heartbeat found the lease lost (the handler's
// context is then cancelled too; its outcome will be dropped).
func (j *Job) Lost() bool { return atomic.LoadInt32(&j.lost) != 0 }

// Handler works one job. A nil error completes the item with result as its
// result (nil: none); an error fails the attempt (RetryAfter: ready again
// after a delay). ctx ends when the lease is lost or the worker gives up on
// the job at the end of its grace period.
type Handler func(ctx context.Context, job *Job) (result interface{}, err error)

// RetryError fails an attempt and makes the item ready again after After
// instead of the queue's backoff; the attempt still counts.
type RetryError struct {
	After time.Duration
	Err   error
}

func (e *RetryError) Error() string {
	if e.Err == nil {
		return "retry requested"
	}
	return e.Err.Error()
}
func (e *RetryError) Unwrap() error { return e.Err }

// RetryAfter returns a *RetryError (err may be nil).
func RetryAfter(after time.Duration, err error) error { return &RetryError{After: after, Err: err} }

// Stats are a worker's counters.
type Stats struct {
	Claimed, Completed, Failed, Retried, Stale, Released, Extended int64
}

// Worker claims items of one queue and runs a handler on each. Make it with
// NewWorker, set the fields you need, then Run it.
type Worker struct {
	DSN           string        // DefaultDSN's rules: "" is $PG_CLAIM_DSN, else PG*
	Queue         string        //
	Handler       Handler       //
	Transactional bool          // the handler gets Job.Tx; writes and completion commit together
	Concurrency   int           // handlers at once, each slot with its connection (default 1)
	Lease         time.Duration // lease of each claim and extension (0: the queue's)
	Wait          time.Duration // how long a claim waits in the server (default 10 s)
	Grace         time.Duration // how long running handlers get after a stop (default 30 s)
	Name          string        // recorded with each claim (default host:pid)
	Heartbeat     bool          // extend leases while handlers run (default true)
	Burst         bool          // return once a claim finds no work
	MaxJobs       int           // return after this many jobs (0: no limit)
	HandleSignals bool          // SIGTERM/SIGINT stop the worker; a second ends the grace period
	Prepare       bool          // let pgx prepare statements (not behind PgBouncer < 1.21)
	// Pooled: the DSN is a transaction-mode pooler's (PgBouncer). A stop
	// then ends a waiting claim by a read deadline and closes its
	// connection, and past the grace period closes a transactional
	// handler's connection, never sending a cancel request: through a
	// pooler, one that crosses the end of a statement can reach the server
	// connection the pooler has meanwhile given to another client, and
	// cancel its statement (another worker's heartbeat, say).
	Pooled bool
	Logger        *log.Logger   // default: log.Default()
	// ConfigureConn, when set, may change each connection's configuration.
	ConfigureConn func(*pgx.ConnConfig)

	stats    Stats
	mu       sync.Mutex
	slots    []*slot
	stopCh   chan struct{}
	stopOnce sync.Once
	forceCh  chan struct{}
	force    sync.Once
	fatal    error
	tickets  int
	handlers context.Context // cancelled when the grace period ends
	giveUp   context.CancelFunc
	cfg      *pgx.ConnConfig
}

// NewWorker returns a worker with the defaults: concurrency 1, the queue's
// lease, wait 10 s, grace 30 s, heartbeat on.
func NewWorker(dsn, queue string, handler Handler) *Worker {
	return &Worker{DSN: dsn, Queue: queue, Handler: handler, Concurrency: 1,
		Wait: 10 * time.Second, Grace: 30 * time.Second, Heartbeat: true}
}

type slot struct {
	i        int
	conn     *pgx.Conn
	connMu   sync.Mutex // the conn's statements (the slot's and the heartbeat's)
	st       sync.Mutex // what follows
	claiming bool
	cut      bool // a stop set a read deadline on the claim (Pooled)
	job      *Job
	cancel   context.CancelFunc
	done     chan struct{} // closed when the job's handler and rollback are over
	given    bool          // the stop gave up on the job (it releases it)
}

const (
	backoffFirst = 500 * time.Millisecond
	backoffMax   = 30 * time.Second
)

func (w *Worker) logf(format string, args ...interface{}) {
	l := w.Logger
	if l == nil {
		l = log.Default()
	}
	l.Printf("pg_claim worker %s: "+format, append([]interface{}{w.Name}, args...)...)
}

// Stats returns the counters so far.
func (w *Worker) Stats() Stats {
	return Stats{atomic.LoadInt64(&w.stats.Claimed), atomic.LoadInt64(&w.stats.Completed),
		atomic.LoadInt64(&w.stats.Failed), atomic.LoadInt64(&w.stats.Retried),
		atomic.LoadInt64(&w.stats.Stale), atomic.LoadInt64(&w.stats.Released),
		atomic.LoadInt64(&w.stats.Extended)}
}

// Stop stops a running worker (before Run, it does nothing): no more claims (waiting ones are cancelled),
// running handlers get the grace period, then what is still held is
// released. Run returns once that is done. Safe from any goroutine.
func (w *Worker) Stop() {
	w.mu.Lock()
	running := w.stopCh != nil
	w.mu.Unlock()
	if !running { // not started: nothing to stop
		return
	}
	w.stopOnce.Do(func() {
		close(w.stopCh)
		w.mu.Lock()
		slots := append([]*slot(nil), w.slots...)
		w.mu.Unlock()
		for _, s := range slots {
			s.st.Lock()
			if s.claiming && s.conn != nil {
				w.interrupt(s, 5*time.Second)
			}
			s.st.Unlock()
		}
	})
}

// EndGrace ends the grace period of a stop at once.
func (w *Worker) EndGrace() {
	w.mu.Lock()
	running := w.forceCh != nil
	w.mu.Unlock()
	if running {
		w.force.Do(func() { close(w.forceCh) })
	}
}

func (w *Worker) stopping() bool {
	select {
	case <-w.stopCh:
		return true
	default:
		return false
	}
}

func (w *Worker) setFatal(err error) {
	w.mu.Lock()
	first := w.fatal == nil
	if first {
		w.fatal = err
	}
	w.mu.Unlock()
	if first {
		w.logf("%v; stopping", err)
	}
	w.Stop()
}

func (w *Worker) connect(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, w.cfg.Copy())
	return conn, mapError(err)
}

// Run works the queue until ctx ends, Stop is called, a signal comes
// (HandleSignals), an error no retry can fix (returned: see IsFatal), or
// with Burst or MaxJobs until the work is done. It returns the counters.
func (w *Worker) Run(ctx context.Context) (Stats, error) {
	if w.Concurrency < 1 {
		return Stats{}, &Error{Class: ErrInvalidArgument, Message: "Concurrency must be at least 1"}
	}
	if w.Handler == nil || w.Queue == "" {
		return Stats{}, &Error{Class: ErrInvalidArgument, Message: "a Worker needs a Queue and a Handler"}
	}
	if w.Name == "" {
		host, _ := os.Hostname()
		w.Name = fmt.Sprintf("%s:%d", host, os.Getpid())
	}
	cfg, err := ParseConfig(w.DSN, "pg_claim worker "+w.Name, w.Prepare)
	if err != nil {
		return Stats{}, err
	}
	if w.ConfigureConn != nil {
		w.ConfigureConn(cfg)
	}
	w.cfg = cfg
	slots := make([]*slot, w.Concurrency)
	for i := range slots {
		s := &slot{i: i}
		if s.conn, err = w.connect(ctx); err != nil {
			for _, o := range slots[:i] {
				o.conn.Close(context.Background())
			}
			return Stats{}, err
		}
		slots[i] = s
	}
	w.mu.Lock()
	w.stopCh, w.forceCh = make(chan struct{}), make(chan struct{})
	w.stopOnce, w.force = sync.Once{}, sync.Once{}
	w.fatal, w.tickets, w.slots = nil, 0, slots
	w.handlers, w.giveUp = context.WithCancel(context.Background())
	w.mu.Unlock()
	defer w.giveUp()
	if w.HandleSignals {
		sig := make(chan os.Signal, 2)
		signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
		defer signal.Stop(sig)
		go func() {
			select {
			case <-sig:
				w.logf("signal: stopping (a second signal ends the grace period)")
				w.Stop()
			case <-w.stopCh:
			}
			select {
			case <-sig:
				w.EndGrace()
			case <-w.forceCh:
			}
		}()
	}
	ended := make(chan struct{})
	defer close(ended)
	go func() {
		select {
		case <-ctx.Done():
			w.Stop()
		case <-ended:
		}
	}()
	var wg sync.WaitGroup
	for _, s := range w.slots {
		wg.Add(1)
		go func(s *slot) { defer wg.Done(); w.runSlot(s) }(s)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-w.stopCh:
		timer := time.NewTimer(w.Grace)
		select {
		case <-done:
		case <-timer.C:
			w.abandon(done)
		case <-w.forceCh:
			w.abandon(done)
		}
		timer.Stop()
	}
	w.mu.Lock()
	err = w.fatal
	w.mu.Unlock()
	return w.Stats(), err
}

// abandon gives up on the jobs still running after the grace period:
// their contexts are cancelled (a transactional job's statement too, and
// its connection closed if it does not roll back within a second), and the
// items are released from a connection of its own.
func (w *Worker) abandon(done chan struct{}) {
	type held struct {
		s    *slot
		job  *Job
		done chan struct{}
	}
	var hs []held
	for _, s := range w.slots {
		s.st.Lock()
		if s.job != nil {
			s.given = true
			s.cancel()
			hs = append(hs, held{s, s.job, s.done})
		} else if s.claiming && s.conn != nil {
			w.interrupt(s, time.Second)
		}
		s.st.Unlock()
	}
	if w.Transactional {
		for _, h := range hs {
			select {
			case <-h.done:
			case <-time.After(time.Second):
				if !w.Pooled {
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					_ = h.s.conn.PgConn().CancelRequest(ctx)
					cancel()
				}
				_ = h.s.conn.PgConn().Conn().Close()
			}
		}
	}
	if len(hs) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		conn, err := w.connect(ctx)
		for _, h := range hs {
			if err != nil {
				w.logf("could not release job %d (%v); it returns when its lease ends", h.job.ID, err)
				continue
			}
			_, err2 := conn.Exec(ctx, "SELECT claim.release($1::bigint)", h.job.Token)
			switch {
			case err2 == nil:
				atomic.AddInt64(&w.stats.Released, 1)
				w.logf("job %d still running after the grace period: released (its outcome will be dropped)", h.job.ID)
			case isStale(err2): // its lease had ended, or it finished meanwhile
			default:
				w.logf("could not release job %d (%v); it returns when its lease ends", h.job.ID, mapError(err2))
			}
		}
		if conn != nil {
			conn.Close(context.Background())
		}
		cancel()
	}
	select { // handlers that ignore their context are left behind
	case <-done:
	case <-time.After(time.Second):
	}
}

func (w *Worker) takeTicket() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.MaxJobs > 0 && w.tickets >= w.MaxJobs {
		return false
	}
	w.tickets++
	return true
}

func (w *Worker) returnTicket() {
	w.mu.Lock()
	w.tickets--
	w.mu.Unlock()
}

// sleep waits d or until the stop; false when stopped.
func (w *Worker) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-w.stopCh:
		return false
	}
}

func (w *Worker) runSlot(s *slot) {
	defer func() {
		if s.conn != nil {
			s.conn.Close(context.Background())
		}
	}()
	backoff := backoffFirst
	for !w.stopping() {
		if s.conn == nil || s.conn.IsClosed() {
			conn, err := w.connect(context.Background())
			if err != nil {
				if IsFatal(err) {
					w.setFatal(err)
					return
				}
				w.logf("slot %d: reconnect failed (%v); next try in %v", s.i, err, backoff)
				if !w.sleep(backoff) {
					return
				}
				backoff = minDur(2*backoff, backoffMax)
				continue
			}
			s.st.Lock()
			s.conn = conn
			s.st.Unlock()
		}
		if !w.takeTicket() {
			return
		}
		job, err := w.claim(s)
		if err != nil {
			w.returnTicket()
			if errors.Is(err, ErrCancelled) {
				if w.stopping() {
					return
				}
				w.logf("slot %d: claim cancelled (%v)", s.i, err)
				continue
			}
			if IsFatal(err) {
				w.setFatal(err)
				return
			}
			if !s.conn.IsClosed() {
				w.logf("slot %d: %v; retrying in %v", s.i, err, backoff)
			} else {
				w.logf("slot %d lost its connection (%v); reconnecting in %v", s.i, err, backoff)
			}
			if !w.sleep(backoff) {
				return
			}
			backoff = minDur(2*backoff, backoffMax)
			continue
		}
		backoff = backoffFirst
		if job == nil {
			w.returnTicket()
			if w.Burst {
				return
			}
			continue
		}
		atomic.AddInt64(&w.stats.Claimed, 1)
		if w.stopping() { // claimed as the stop began: give it back unstarted
			w.releaseUnstarted(s, job)
			return
		}
		if w.Transactional {
			w.workTx(s, job)
		} else {
			w.work(s, job)
		}
	}
}

func minDur(a, b time.Duration) time.Duration {
	if a < b {
		return a
	}
	return b
}

const claimSQL = "SELECT id, token, payload, group_key, attempt, " +
	"pg_catalog.date_part('epoch', lease_until OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp()) " +
	"FROM claim.claim_next($1::text, 1, $2::interval, $3::interval, $4::text)"

// claim claims one item (nil: none within the wait).
func (w *Worker) claim(s *slot) (*Job, error) {
	s.st.Lock()
	if w.stopping() {
		s.st.Unlock()
		return nil, &Error{Class: ErrCancelled, Message: "stopping"}
	}
	s.claiming = true
	s.st.Unlock()
	var err error
	defer func() {
		s.st.Lock()
		s.claiming = false
		if s.cut { // a stop set a read deadline (Pooled)
			s.cut = false
			if err != nil { // it cut the claim short: the connection is mid-statement
				s.conn.Close(context.Background())
			} else { // the claim had ended: the connection is fine
				_ = s.conn.PgConn().Conn().SetReadDeadline(time.Time{})
			}
		}
		s.st.Unlock()
	}()
	var wait interface{} = Interval(w.Wait)
	job, err := w.claimRows(s, wait)
	return job, err
}

func (w *Worker) claimRows(s *slot, wait interface{}) (*Job, error) {
	rows, err := s.conn.Query(context.Background(), claimSQL, w.Queue, optInterval(w.Lease), wait, w.Name)
	if err != nil {
		return nil, mapError(err)
	}
	defer rows.Close()
	var job *Job
	for rows.Next() {
		j := &Job{Queue: w.Queue}
		var secs float64
		var attempt int32
		if err := rows.Scan(&j.ID, &j.Token, &j.Payload, &j.GroupKey, &attempt, &secs); err != nil {
			return nil, mapError(err)
		}
		j.Attempt = int(attempt)
		j.Lease = time.Duration(secs * float64(time.Second))
		if w.Lease > 0 {
			j.Lease = w.Lease
		}
		job = j
	}
	if err := rows.Err(); err != nil {
		return nil, mapError(err)
	}
	return job, nil
}

// interrupt ends the slot's waiting claim (the caller holds s.st): a
// cancel request, or with Pooled a read deadline in the past (the claim
// then fails at once on this side, and claim closes the connection; the
// server rolls the claim back when it sees the client gone).
func (w *Worker) interrupt(s *slot, timeout time.Duration) {
	if w.Pooled {
		s.cut = true
		_ = s.conn.PgConn().Conn().SetReadDeadline(time.Unix(1, 0))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	_ = s.conn.PgConn().CancelRequest(ctx)
	cancel()
}

// exec runs a statement of the worker on the slot's connection; a
// cancellation (a stop's cancel request that came late) is tried once more.
func (w *Worker) exec(s *slot, sql string, args ...interface{}) error {
	s.connMu.Lock()
	defer s.connMu.Unlock()
	_, err := s.conn.Exec(context.Background(), sql, args...)
	if err != nil && sqlstate(err) == "57014" && !s.conn.IsClosed() {
		_, err = s.conn.Exec(context.Background(), sql, args...)
	}
	return mapError(err)
}

func (w *Worker) releaseUnstarted(s *slot, job *Job) {
	if err := w.exec(s, "SELECT claim.release($1::bigint)", job.Token); err != nil {
		w.logf("could not release job %d (%v); it returns when its lease ends", job.ID, err)
		return
	}
	atomic.AddInt64(&w.stats.Released, 1)
}

// begin records the slot's job; its context ends on a lost lease or when
// the stop gives up on it.
func (w *Worker) begin(s *slot, job *Job) context.Context {
	ctx, cancel := context.WithCancel(w.handlers)
	s.st.Lock()
	s.job, s.cancel, s.given, s.done = job, cancel, false, make(chan struct{})
	s.st.Unlock()
	return ctx
}

// end clears the slot's job: true when the stop gave up on it (it was or
// will be released there; the outcome is dropped).
func (w *Worker) end(s *slot) bool {
	s.st.Lock()
	defer s.st.Unlock()
	given := s.given
	s.job = nil
	s.cancel()
	close(s.done)
	return given
}

// heartbeat extends the job's lease at a third of its length until stop is
// closed; extend runs the statement (on the slot's connection, or in the
// job's transaction).
func (w *Worker) heartbeat(job *Job, cancel func(), extend func() error) (stop func()) {
	if !w.Heartbeat || job.Lease <= 0 {
		return func() {}
	}
	quit, over := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(over)
		period := job.Lease / 3
		if period < 20*time.Millisecond {
			period = 20 * time.Millisecond
		}
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
			}
			select { // the job may have ended while the ticker fired
			case <-quit:
				return
			default:
			}
			err := extend()
			switch {
			case err == nil:
				atomic.AddInt64(&w.stats.Extended, 1)
			case isStale(err):
				atomic.StoreInt32(&job.lost, 1)
				w.logf("job %d attempt %d lost its lease (%v); its outcome will be dropped", job.ID, job.Attempt, err)
				cancel()
				return
			default:
				w.logf("heartbeat of job %d failed (%v); trying again", job.ID, err)
			}
		}
	}()
	return func() { close(quit); <-over }
}

func (w *Worker) call(ctx context.Context, job *Job) (result interface{}, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return w.Handler(ctx, job)
}

func errorText(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	return strings.TrimSpace(err.Error())
}

func (w *Worker) logFailure(job *Job, err error) {
	w.logf("job %d attempt %d failed: %s", job.ID, job.Attempt, strings.SplitN(errorText(err), "\n", 2)[0])
}

// fail fails the attempt on the slot's connection (after a rollback in
// transactional mode).
func (w *Worker) fail(s *slot, job *Job, herr error) {
	var retry interface{}
	var re *RetryError
	if errors.As(herr, &re) {
		retry = Interval(re.After)
	} else {
		w.logFailure(job, herr)
	}
	err := w.exec(s, "SELECT claim.fail($1::bigint, $2::text, $3::interval)", job.Token, errorText(herr), retry)
	done := &w.stats.Failed
	if retry != nil {
		done = &w.stats.Retried
	}
	w.settled(job, "fail", err, done)
}

// settled counts what the statement that completed or failed job (verb:
// "complete", "fail") came to: done when it went through, Stale when the
// token was no longer live (the outcome is dropped), else a log line (the
// item returns when its lease ends).
func (w *Worker) settled(job *Job, verb string, err error, done *int64) {
	switch {
	case err == nil:
		atomic.AddInt64(done, 1)
	case isStale(err):
		atomic.AddInt64(&w.stats.Stale, 1)
		w.logf("stale token for job %d at %s (%v); outcome dropped", job.ID, verb, err)
	default:
		w.logf("could not %s job %d (%v); it returns when its lease ends", verb, job.ID, err)
	}
}

func (w *Worker) completeArgs(job *Job, result interface{}) (string, []interface{}, error) {
	if result == nil {
		return "SELECT claim.complete($1::bigint)", []interface{}{job.Token}, nil
	}
	r, err := jsonText(result)
	if err != nil {
		return "", nil, err
	}
	return "SELECT claim.complete($1::bigint, $2::jsonb)", []interface{}{job.Token, r}, nil
}

func (w *Worker) work(s *slot, job *Job) {
	ctx := w.begin(s, job)
	stop := w.heartbeat(job, func() { s.st.Lock(); s.cancel(); s.st.Unlock() }, func() error {
		return w.exec(s, "SELECT claim.extend($1::bigint, $2::interval)", job.Token, optInterval(w.Lease))
	})
	result, herr := w.call(ctx, job)
	stop()
	if w.end(s) {
		return
	}
	if job.Lost() {
		atomic.AddInt64(&w.stats.Stale, 1)
		return
	}
	if herr != nil {
		w.fail(s, job, herr)
		return
	}
	sql, args, err := w.completeArgs(job, result)
	if err != nil {
		w.fail(s, job, err)
		return
	}
	w.settled(job, "complete", w.exec(s, sql, args...), &w.stats.Completed)
}

// workTx runs a job in transactional mode: assert_token, the handler's
// statements and the heartbeat's extends, complete, commit: one transaction.
func (w *Worker) workTx(s *slot, job *Job) {
	bg := context.Background()
	ctx := w.begin(s, job)
	defer w.end(s)
	tx, err := s.conn.Begin(bg)
	if err != nil {
		w.logf("job %d: begin failed (%v); it returns when its lease ends", job.ID, mapError(err))
		return
	}
	lt := &lockedTx{tx: tx, mu: &s.connMu, top: true}
	rollback := func() { s.connMu.Lock(); _ = tx.Rollback(bg); s.connMu.Unlock() }
	if err := lt.exec(bg, "SELECT claim.assert_token($1::bigint)", job.Token); err != nil {
		rollback()
		if isStale(err) {
			atomic.AddInt64(&w.stats.Stale, 1)
			w.logf("job %d attempt %d: token is stale before the handler ran (%v)", job.ID, job.Attempt, mapError(err))
		} else {
			w.logf("job %d: assert_token failed (%v)", job.ID, mapError(err))
		}
		return
	}
	job.Tx = lt
	stop := w.heartbeat(job, func() { s.st.Lock(); s.cancel(); s.st.Unlock() }, func() error {
		return mapError(lt.exec(bg, "SELECT claim.extend($1::bigint, $2::interval)", job.Token, optInterval(w.Lease)))
	})
	result, herr := w.call(ctx, job)
	stop()
	s.st.Lock()
	abandoned := s.given
	s.st.Unlock()
	if abandoned { // the stop releases the item once this rolls back
		rollback()
		return
	}
	if herr == nil && !job.Lost() {
		sql, args, cerr := w.completeArgs(job, result)
		if cerr == nil {
			cerr = mapError(lt.exec(bg, sql, args...))
		}
		if cerr == nil {
			s.connMu.Lock()
			cerr = mapError(tx.Commit(bg))
			s.connMu.Unlock()
			if cerr == nil {
				atomic.AddInt64(&w.stats.Completed, 1)
				return
			}
		}
		herr = cerr
	}
	rollback()
	if job.Lost() || isStale(herr) {
		atomic.AddInt64(&w.stats.Stale, 1)
		if !job.Lost() {
			w.logf("job %d attempt %d: token is stale, its writes were rolled back (%v)", job.ID, job.Attempt, herr)
		}
		return
	}
	if s.conn.IsClosed() {
		w.logf("job %d: connection lost (%v); it returns when its lease ends", job.ID, herr)
		return
	}
	w.fail(s, job, herr)
}
