package pgclaim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// ---- leases -----------------------------------------------------------------

// Lease is one holding of a named lease: its fencing token.
type Lease struct {
	Name  string
	Token int64
}

// LeaseOptions are lease_acquire's options; zero values are left out.
type LeaseOptions struct {
	Holder  string        // recorded with the holding
	Permits int           // slots of the name (default 1: a mutex)
	Wait    time.Duration // wait in the server for a slot to free
}

// ErrNotAcquired is returned by AcquireLease when no slot freed within the
// wait, and by Guard when another attempt of the key is running.
var ErrNotAcquired = errors.New("pg_claim: not acquired")

// AcquireLease takes one of the permits of name for ttl; ErrNotAcquired
// when none freed within o.Wait.
func (c *Client) AcquireLease(ctx context.Context, name string, ttl time.Duration, o *LeaseOptions) (Lease, error) {
	k := newCall("lease_acquire").arg(name, "::text").arg(Interval(ttl), "::interval")
	if o != nil {
		if o.Holder != "" {
			k.named("holder", o.Holder, "::text")
		}
		if o.Permits != 0 {
			k.named("permits", o.Permits, "::int")
		}
		if o.Wait > 0 {
			k.named("wait", Interval(o.Wait), "::interval")
		}
	}
	var token *int64
	if err := c.row(ctx, k, &token); err != nil {
		return Lease{}, err
	}
	if token == nil {
		return Lease{}, ErrNotAcquired
	}
	return Lease{Name: name, Token: *token}, nil
}

// RenewLease extends a holding to ttl from now; ErrStaleToken when it is lost.
func (c *Client) RenewLease(ctx context.Context, l Lease, ttl time.Duration) (time.Time, error) {
	var until time.Time
	err := c.row(ctx, newCall("lease_renew").arg(l.Name, "::text").arg(l.Token, "::bigint").
		arg(Interval(ttl), "::interval"), &until)
	return until, err
}

// ReleaseLease frees a holding; false when it had already expired or been released.
func (c *Client) ReleaseLease(ctx context.Context, l Lease) (bool, error) {
	var ok bool
	err := c.row(ctx, newCall("lease_release").arg(l.Name, "::text").arg(l.Token, "::bigint"), &ok)
	return ok, err
}

// AssertLease fences the caller's transaction: ErrStaleToken unless the
// token holds the lease; then no one else gets that slot before the
// transaction ends.
func (c *Client) AssertLease(ctx context.Context, l Lease) error {
	return c.exec(ctx, newCall("lease_assert").arg(l.Name, "::text").arg(l.Token, "::bigint"))
}

// ---- once and guards --------------------------------------------------------

// Once takes key: true the first time (in the caller's transaction: a
// rollback frees it again), false after. ttl > 0 frees the key ttl after it
// was taken.
func (c *Client) Once(ctx context.Context, key string, ttl time.Duration) (bool, error) {
	var ok bool
	err := c.row(ctx, newCall("once").arg(key, "::text").arg(optInterval(ttl), "::interval"), &ok)
	return ok, err
}

// GuardBegin starts an attempt of key with a lease; ok is false when the key
// is finished or another attempt is live.
func (c *Client) GuardBegin(ctx context.Context, key string, lease time.Duration) (token int64, ok bool, err error) {
	var t *int64
	if err := c.row(ctx, newCall("guard_begin").arg(key, "::text").arg(Interval(lease), "::interval"), &t); err != nil {
		return 0, false, err
	}
	if t == nil {
		return 0, false, nil
	}
	return *t, true, nil
}

// GuardFinish records the attempt's result for good (nil: JSON null);
// ErrStaleToken when token is not the running attempt.
func (c *Client) GuardFinish(ctx context.Context, key string, token int64, result interface{}) error {
	return c.execResult(ctx, newCall("guard_finish").arg(key, "::text").arg(token, "::bigint"), result)
}

// GuardAbandon frees key for another attempt; ErrStaleToken as GuardFinish.
func (c *Client) GuardAbandon(ctx context.Context, key string, token int64) error {
	return c.exec(ctx, newCall("guard_abandon").arg(key, "::text").arg(token, "::bigint"))
}

// GuardResult is the key's recorded result; finished is false while the key
// is not finished (a finished key without a result gives JSON null).
func (c *Client) GuardResult(ctx context.Context, key string) (result json.RawMessage, finished bool, err error) {
	var r []byte
	if err := c.row(ctx, newCall("guard_result").arg(key, "::text"), &r); err != nil {
		return nil, false, err
	}
	if r == nil {
		return nil, false, nil
	}
	return json.RawMessage(r), true, nil
}

// Guard runs fn at most once for key, to success: it starts an attempt
// (guard_begin with lease), runs fn, and records fn's result
// (guard_finish), or abandons the attempt when fn fails, so that a later
// call tries again. When the key is already finished, fn does not run and
// the recorded result comes back with ran false; while another attempt is
// running, ErrNotAcquired. fn should finish within lease: past it, another
// caller may begin a new attempt, and this one's finish gets ErrStaleToken.
func (c *Client) Guard(ctx context.Context, key string, lease time.Duration,
	fn func(ctx context.Context) (interface{}, error)) (result json.RawMessage, ran bool, err error) {
	token, ok, err := c.GuardBegin(ctx, key, lease)
	if err != nil {
		return nil, false, err
	}
	if !ok {
		r, finished, err := c.GuardResult(ctx, key)
		if err != nil {
			return nil, false, err
		}
		if !finished {
			return nil, false, ErrNotAcquired
		}
		return r, false, nil
	}
	value, ferr := fn(ctx)
	if ferr != nil {
		if aerr := c.GuardAbandon(ctx, key, token); aerr != nil && !isStale(aerr) {
			return nil, true, fmt.Errorf("%w (and its guard_abandon: %v)", ferr, aerr)
		}
		return nil, true, ferr
	}
	if err := c.GuardFinish(ctx, key, token, value); err != nil {
		return nil, true, err
	}
	r, _ := jsonText(value)
	if value == nil {
		r = "null"
	}
	return json.RawMessage(r), true, nil
}
