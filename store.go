package floodgate

import (
	"context"
	"time"
)

// Store decides requests atomically next to the state: the whole
// read-check-write of one request is one indivisible step, however many
// processes share the store. Implementations: store/memstore (in process)
// and store/redisstore (shared). Every Store must pass
// floodgatetest.Run.
//
// A store keeps one state per key, algorithm and period: two limits on one
// key that differ only in Limit, Burst or options share it (so raising a
// limit keeps the count), while "10 per second" and "1000 per hour" on one
// key are counted apart.
type Store interface {
	// Apply decides r and, if it is admitted (or the limit counts
	// rejections), records it. A denial is a Decision, not an error; an error
	// means the request was invalid or the store failed, and then the
	// request may or may not have been recorded (a timeout cannot tell).
	// A store's own failure wraps ErrStore, which the failure policy
	// answers; an invalid request wraps ErrInvalidRequest or
	// ErrInvalidLimit.
	Apply(ctx context.Context, r Request) (Decision, error)
}

// Resetter is a Store that can forget one key's state under one limit,
// giving the key its whole budget back.
type Resetter interface {
	Reset(ctx context.Context, key string, limit Limit) error
}

// Batcher is a Store that decides several requests in one atomic step, all
// or nothing, for callers that need "10 per second and 1000 per hour"
// without a denial of one consuming the other. If every request is
// admitted, each is applied in order and its decision is as if alone. If
// any is denied, no request's cost is taken (a denied request whose limit
// has CountRejected still counts) and every decision has Allowed false: a
// request that had room reports the unchanged state with RetryAfter 0.
// Combine gives the overall decision.
type Batcher interface {
	ApplyBatch(ctx context.Context, rs []Request) ([]Decision, error)
}

// Closer is a Store that holds resources (connections, goroutines).
type Closer interface {
	Close() error
}

// Clock tells the time. Tests inject floodgatetest.FakeClock.
type Clock interface {
	Now() time.Time
}

// SystemClock is the process clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// Pipeliner is a Store that decides several independent requests in one
// round trip: each request is atomic on its own, but unlike Batcher they are
// not all or nothing, and they may be of different keys and hash slots. The
// service uses it to decide every descriptor of a request at once. The
// result has one Decision and one error per request.
type Pipeliner interface {
	ApplyPipelined(ctx context.Context, rs []Request) ([]Decision, []error)
}

// Pinger is a Store that can tell whether it is reachable, for readiness
// checks.
type Pinger interface {
	Ping(ctx context.Context) error
}

// Raiser is a Store that can rebuild a fixed window's count from a durable
// record of what was used (see Limit.Durable): Raise raises the count of
// r.Key's window that starts at window to at least r.Cost, in one atomic
// step, and never lowers it (algorithm.FixedWindow.Raise says exactly
// what it does). r.Limit must be a FixedWindow, aligned windows starting
// at a multiple of its Period; r.Now is the time, as in Apply. The
// Decision is a peek at the state after. A reconcile's repair and a
// durable quota's rebuild use it where AllowN would race with live
// traffic.
type Raiser interface {
	Raise(ctx context.Context, r Request, window time.Time) (Decision, error)
}

// CheckRaise reports the first problem of a Raise of r at window, for
// stores to call: r valid, a FixedWindow, and window a whole number of
// microseconds, on a multiple of Period when the windows are aligned.
func CheckRaise(r Request, window time.Time) error {
	if err := r.Validate(); err != nil {
		return err
	}
	if r.Limit.EffectiveAlgorithm() != FixedWindow {
		return fieldErr(ErrInvalidLimit, "algorithm", "only a fixed window has a count to raise, not %s", r.Limit.EffectiveAlgorithm())
	}
	us := window.UnixMicro()
	switch {
	case window.IsZero() || us < 0 || us > maxNowMicros:
		return fieldErr(ErrInvalidRequest, "window", "%v is outside %v to %v", window, time.UnixMicro(0).UTC(), time.UnixMicro(maxNowMicros).UTC())
	case r.Limit.Calendar.Unit != "":
		if start, _ := r.Limit.Calendar.Window(window); !start.Equal(window) {
			return fieldErr(ErrInvalidRequest, "window", "%v is not the start of a window of the calendar %q (that is %v)", window, r.Limit.Calendar.String(), start)
		}
	case r.Limit.Window != FirstHit && us%r.Limit.Period.Microseconds() != 0:
		return fieldErr(ErrInvalidRequest, "window", "%v is not the start of an aligned window of %v", window, r.Limit.Period)
	}
	return nil
}
