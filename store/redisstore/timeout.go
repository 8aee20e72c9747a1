package redisstore

import (
	"context"
	"sync"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// A Limiter's deadline (floodgate.Options.Timeout) on a Redis store counts
// the time of each script's round trip, from the moment the script is
// sent, and not the time a call waited in this process before it: for a
// run of coalesced calls to come back (Options.Coalesce), or for a CPU on
// a saturated host. A deadline counted from the call's start turned that
// local wait into the failure policy: under fail_open, 30 of 30 requests
// admitted against a limit of 5 on a host at load 13, most of them never
// sent. A call waits for the runs ahead of it, each bounded by the
// deadline, and then its own; the caller's own context bounds it all.
// Two more rules keep a saturated host's own slowness out of the
// deadline: a timer that fires late is credited its lateness (see
// lateSlack), and a deadline ends the wait for a reply, never the
// connection (the client pipelines always: see urlConfig.clientOption).
// bench/run-all.sh -saturation measures the curve.

// sendTimeoutKey is the context key of the deadline that the runner
// starts when it sends a script (WithTimeout).
type sendTimeoutKey struct{}

// withSendTimeout is ctx carrying *d as the deadline of each script sent
// for it. d is a pointer to a duration that does not change (a Timed's
// own), so that the value costs no allocation of its own: a Timed adds
// it to the context of every call.
func withSendTimeout(ctx context.Context, d *time.Duration) context.Context {
	return context.WithValue(ctx, sendTimeoutKey{}, d)
}

// sendTimeout is the deadline ctx carries for each script sent for it, or
// 0.
func sendTimeout(ctx context.Context) time.Duration {
	if d := sendTimeoutOf(ctx); d != nil {
		return *d
	}
	return 0
}

// sendTimeoutOf is the value of withSendTimeout that ctx carries, or nil.
func sendTimeoutOf(ctx context.Context) *time.Duration {
	d, _ := ctx.Value(sendTimeoutKey{}).(*time.Duration)
	return d
}

// sendDeadline is ctx bounded, from now, by the deadline it carries for
// each script sent, if any: the runner calls it as it sends.
func sendDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if d := sendTimeout(ctx); d > 0 {
		return startDeadline(ctx, d, time.Now, afterFunc)
	}
	return ctx, func() {}
}

// A script's deadline counts the time this process was running to see
// its reply. Its timer, like every goroutine of the process, waits for a
// CPU on a saturated host: when it fires late, the reply may have come
// within the deadline and be waiting for rueidis's reader, which waits
// for a CPU as the timer did. So a timer that fires more than lateSlack
// after its time is set again for as long as it was late, and the
// deadline passes only when it fires on time, or when the credit, one
// more timeout in all, is spent: a call waits at most twice the timeout
// for its reply (and what the process takes to run at all), and a store
// that truly answers late fails as before (TestDeadlineCredit).

// lateSlack is how late a deadline's timer may fire before its lateness
// is credited: more than a timer's jitter on a host with a CPU free.
const lateSlack = time.Millisecond

// stoppableTimer is the timer a deadline sets (time.AfterFunc's).
type stoppableTimer interface {
	Stop() bool
	Reset(d time.Duration) bool
}

// afterFunc is time.AfterFunc for startDeadline.
func afterFunc(d time.Duration, f func()) stoppableTimer { return time.AfterFunc(d, f) }

// deadline is the context of one script: its parent's, canceled with the
// cause context.DeadlineExceeded when the deadline passes.
type deadline struct {
	context.Context
	cancel context.CancelCauseFunc
	now    func() time.Time
	end    time.Time // the latest it passes: the timeout twice from the send

	mu     sync.Mutex
	due    time.Time     // when it passes, unless the timer fires late
	credit time.Duration // lateness that may still be credited
	timer  stoppableTimer
}

// startDeadline returns parent bounded by a deadline of timeout from now
// (see the comment above lateSlack), with the clock and the timers of now
// and after.
func startDeadline(parent context.Context, timeout time.Duration, now func() time.Time,
	after func(time.Duration, func()) stoppableTimer) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	t0 := now()
	dl := &deadline{Context: ctx, cancel: cancel, now: now, due: t0.Add(timeout), end: t0.Add(2 * timeout), credit: timeout}
	dl.mu.Lock()
	dl.timer = after(timeout, dl.fire)
	dl.mu.Unlock()
	return dl, func() {
		dl.mu.Lock()
		dl.timer.Stop()
		dl.mu.Unlock()
		cancel(context.Canceled)
	}
}

// fire is the deadline's timer: it passes the deadline, or, if it fired
// late and credit is left, sets itself again for its lateness.
func (dl *deadline) fire() {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	now := dl.now()
	if late := now.Sub(dl.due); late > lateSlack && dl.credit > 0 {
		late = min(late, dl.credit)
		dl.credit -= late
		dl.due = now.Add(late)
		dl.timer.Reset(late)
		return
	}
	dl.cancel(context.DeadlineExceeded)
}

// Deadline is the latest the deadline can pass.
func (dl *deadline) Deadline() (time.Time, bool) {
	if d, ok := dl.Context.Deadline(); ok && d.Before(dl.end) {
		return d, true
	}
	return dl.end, true
}

// Err is context.DeadlineExceeded once the deadline passed, else the
// parent's error or context.Canceled.
func (dl *deadline) Err() error {
	err := dl.Context.Err()
	if err != nil && context.Cause(dl.Context) == context.DeadlineExceeded {
		return context.DeadlineExceeded
	}
	return err
}

// WithTimeout returns s with timeout as the deadline of each script's
// round trip, counted from the moment it is sent to Redis, on top of the
// caller's context (see the comment at the top of timeout.go): a
// floodgate.Limiter calls it with its Options.Timeout. Ping, Reset and
// the other commands get the deadline from the call's start, as they
// never wait in this process. The Store returned has every method of s;
// a type that embeds *Store and overrides some of its methods must
// define WithTimeout too, or the Limiter decides through s.
func (s *Store) WithTimeout(timeout time.Duration) floodgate.Store {
	return &Timed{Store: s, timeout: timeout}
}

// Timed is a Store whose calls carry a Limiter's deadline to the moment
// each script is sent (Store.WithTimeout). It is safe for concurrent use.
type Timed struct {
	*Store
	timeout time.Duration // never changed: its calls' contexts point to it
}

var (
	_ floodgate.Store     = (*Timed)(nil)
	_ floodgate.Resetter  = (*Timed)(nil)
	_ floodgate.Batcher   = (*Timed)(nil)
	_ floodgate.Pipeliner = (*Timed)(nil)
	_ floodgate.Reserver  = (*Timed)(nil)
	_ floodgate.Raiser    = (*Timed)(nil)
	_ floodgate.Pinger    = (*Timed)(nil)
)

func (t *Timed) ctx(ctx context.Context) context.Context { return withSendTimeout(ctx, &t.timeout) }

// Apply is Store.Apply, each script bounded by the deadline from its send.
func (t *Timed) Apply(ctx context.Context, r floodgate.Request) (floodgate.Decision, error) {
	return t.Store.Apply(t.ctx(ctx), r)
}

// ApplyBatch is Store.ApplyBatch, each script bounded by the deadline
// from its send.
func (t *Timed) ApplyBatch(ctx context.Context, rs []floodgate.Request) ([]floodgate.Decision, error) {
	return t.Store.ApplyBatch(t.ctx(ctx), rs)
}

// ApplyPipelined is Store.ApplyPipelined, each script bounded by the
// deadline from its send.
func (t *Timed) ApplyPipelined(ctx context.Context, rs []floodgate.Request) ([]floodgate.Decision, []error) {
	return t.Store.ApplyPipelined(t.ctx(ctx), rs)
}

// Reserve is Store.Reserve, each script bounded by the deadline from its
// send.
func (t *Timed) Reserve(ctx context.Context, r floodgate.HoldRequest) (floodgate.HoldResult, error) {
	return t.Store.Reserve(t.ctx(ctx), r)
}

// Settle is Store.Settle, each script bounded by the deadline from its
// send.
func (t *Timed) Settle(ctx context.Context, r floodgate.SettleRequest) ([]floodgate.Settlement, error) {
	return t.Store.Settle(t.ctx(ctx), r)
}

// Raise is Store.Raise, its script bounded by the deadline from its send.
func (t *Timed) Raise(ctx context.Context, r floodgate.Request, window time.Time) (floodgate.Decision, error) {
	return t.Store.Raise(t.ctx(ctx), r, window)
}

// Reset is Store.Reset under the deadline.
func (t *Timed) Reset(ctx context.Context, key string, limit floodgate.Limit) error {
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	return t.Store.Reset(ctx, key, limit)
}

// Ping is Store.Ping under the deadline.
func (t *Timed) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	return t.Store.Ping(ctx)
}

// WithTimeout is the Store's, with timeout in place of t's.
func (t *Timed) WithTimeout(timeout time.Duration) floodgate.Store {
	return t.Store.WithTimeout(timeout)
}
