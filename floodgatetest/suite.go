package floodgatetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// Options configure Run. The zero value suits a store that decides every
// request at its Request.Now when it is set, as every store must.
type Options struct {
	// ServerTime makes Run send every request with a zero Now, so that the
	// store decides by its own clock (the Redis server's TIME, a memstore's
	// Clock). Run then skips the cases that move time, stretches every
	// period so that no window ends and no token is refilled while a case
	// runs, and checks of each duration only that it is zero, Never, or
	// positive and at most twice the period. The differential test still
	// compares every decision with the model, at the time the store reports
	// in Decision.Now.
	ServerTime bool
}

// Run tests a floodgate.Store against the contract written in the
// floodgate and algorithm package docs, the way testing/slogtest tests a
// slog.Handler. Call it from a test in the store's package:
//
//	func TestConformance(t *testing.T) {
//		floodgatetest.Run(t, func(t *testing.T) floodgate.Store {
//			s := mystore.New(…)
//			t.Cleanup(func() { s.Close() })
//			return s
//		})
//	}
//
// Run calls newStore once, and runs its cases as parallel subtests on that
// one store, each on keys of its own under a random prefix, so a store
// shared with other tests (one Redis server) is fine. The cases are:
//
//   - tables: exact decisions step by step for every algorithm (window
//     boundaries of both alignments, burst, cost 0, cost above capacity,
//     limit 0, count_rejected, leases), and that state is kept per key,
//     algorithm and period;
//   - keys: keys that differ in any byte (":", "{", "}", NUL, invalid
//     UTF-8, MaxKeyLen bytes) never share state;
//   - reset, if the store is a floodgate.Resetter;
//   - batch, if the store is a floodgate.Batcher: all or nothing;
//   - reserve, if the store is a floodgate.Reserver: reserve, commit and
//     cancel with their idempotency (a retry gets the first answer, another
//     step with the same ID is a conflict), excess charged or short, all
//     or nothing across keys, ten clients reserving the last five units
//     get five holds, ten concurrent retries of one refund give back once,
//     expiry charging or releasing the units, and bad input;
//   - raise, if the store is a floodgate.Raiser: a lost counter rebuilt,
//     one behind raised, one ahead never lowered, bad input;
//   - race: ten goroutines racing for the last five allowances of a limit
//     get exactly five, for every algorithm, many times;
//   - differential: random operation sequences give, at every step, the
//     decision of the algorithm package's Step (the sequential model);
//   - many_keys: many goroutines on many keys never admit more than the
//     model allows;
//   - invalid: invalid requests and limits return errors wrapping
//     floodgate.ErrInvalidRequest or floodgate.ErrInvalidLimit from Apply,
//     ApplyBatch and Reset, and never panic;
//   - context: a cancelled or expired context is an error wrapping
//     context.Canceled or context.DeadlineExceeded;
//   - calendar: calendar windows (floodgate.Calendar) reset at local
//     midnight of their anchor day in America/New_York across both
//     changes of daylight saving time, with ResetAfter the true end of the
//     window by Go's time package, and agree with the model on random
//     instants near midnights.
//
// Unless opts says ServerTime, every request carries an explicit Now, so
// the outcome does not depend on the machine's clock or speed. Run takes
// at most one Options. With -short it runs fewer rounds.
func Run(t *testing.T, newStore func(t *testing.T) floodgate.Store, opts ...Options) {
	t.Helper()
	var o Options
	switch len(opts) {
	case 0:
	case 1:
		o = opts[0]
	default:
		t.Fatalf("floodgatetest.Run: %d Options, want at most 1", len(opts))
	}
	store := newStore(t)
	if store == nil {
		t.Fatal("floodgatetest.Run: newStore returned nil")
	}
	s := &suite{store: store, opts: o, prefix: "floodgatetest:" + randomHex(4) + ":"}
	t.Run("tables", s.testTables)
	t.Run("keys", s.testKeys)
	t.Run("reset", s.testReset)
	t.Run("batch", s.testBatch)
	t.Run("reserve", s.testReserve)
	t.Run("raise", s.testRaise)
	t.Run("race", s.testRace)
	t.Run("differential", s.testDifferential)
	t.Run("many_keys", s.testManyKeys)
	t.Run("invalid", s.testInvalid)
	t.Run("context", s.testContext)
	t.Run("calendar", s.testCalendar)
}

// base is the fake time every case starts at, unless ServerTime: a whole
// hour (so aligned windows of a second, a minute or an hour start there),
// in the past, so a store that sweeps expired state by its own clock must
// not drop state whose requests are stamped earlier.
var base = time.Unix(1_699_999_200, 0) // 2023-11-14 22:00:00 UTC

type suite struct {
	store  floodgate.Store
	opts   Options
	prefix string
}

// key is a key of the test's own: the run's random prefix, the test's name
// and name.
func (s *suite) key(t *testing.T, name string) string {
	return s.prefix + t.Name() + "|" + name
}

// at is the Now of a request made at offset d into a case: base+d, or the
// zero time with ServerTime.
func (s *suite) at(d time.Duration) time.Time {
	if s.opts.ServerTime {
		return time.Time{}
	}
	return base.Add(d)
}

// limit is l as the suite sends it. With ServerTime, periods are stretched
// so that nothing depends on when the case runs: aligned windows last
// MaxPeriod minus the period (about 8.9 years, the current window ending
// in 2032; distinct periods stay distinct; half that for sliding windows),
// the rest a day plus the period.
func (s *suite) limit(t *testing.T, l floodgate.Limit) floodgate.Limit {
	t.Helper()
	if !s.opts.ServerTime {
		return l
	}
	switch {
	case l.Algorithm == floodgate.SlidingWindow:
		// A sliding window keeps a key for two periods, so its period is at
		// most MaxPeriod/2 (about 4.5 years; the current window ends in
		// 2027).
		l.Period = floodgate.MaxPeriod/2 - l.Period
	case (l.Algorithm == "" || l.Algorithm == floodgate.FixedWindow) && l.Window != floodgate.FirstHit:
		l.Period = floodgate.MaxPeriod - l.Period
	default:
		l.Period = 24*time.Hour + l.Period
	}
	if err := l.Validate(); err != nil {
		t.Fatalf("floodgatetest: case limit is invalid with ServerTime (use a smaller limit): %v", err)
	}
	return l
}

// errPanic marks an error made from a panic of the store.
var errPanic = errors.New("store panicked")

// tryApply calls Apply, turning a panic into an error wrapping errPanic.
func (s *suite) tryApply(ctx context.Context, r floodgate.Request) (d floodgate.Decision, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v", errPanic, p)
		}
	}()
	return s.store.Apply(ctx, r)
}

func (s *suite) tryBatch(ctx context.Context, b floodgate.Batcher, rs []floodgate.Request) (ds []floodgate.Decision, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v", errPanic, p)
		}
	}()
	return b.ApplyBatch(ctx, rs)
}

func (s *suite) tryReset(ctx context.Context, rs floodgate.Resetter, key string, l floodgate.Limit) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v", errPanic, p)
		}
	}()
	return rs.Reset(ctx, key, l)
}

// apply applies r, failing the test on an error, and checks Decision.Now.
func (s *suite) apply(t *testing.T, r floodgate.Request) floodgate.Decision {
	t.Helper()
	d, err := s.tryApply(t.Context(), r)
	if err != nil {
		t.Fatalf("Apply(%s): %v", describe(r), err)
	}
	if msg := s.checkNow(r, d); msg != "" {
		t.Errorf("Apply(%s): %s", describe(r), msg)
	}
	return d
}

// checkNow says what is wrong with d.Now, or "".
func (s *suite) checkNow(r floodgate.Request, d floodgate.Decision) string {
	switch {
	case !r.Now.IsZero() && !d.Now.Equal(r.Now):
		return fmt.Sprintf("Decision.Now = %v, want Request.Now %v", d.Now, r.Now)
	case r.Now.IsZero() && d.Now.UnixMicro() <= 0:
		return fmt.Sprintf("Decision.Now = %v, want the store's time", d.Now)
	}
	return ""
}

// want is the expected decision of one step. The Decision's Limit is the
// limit's capacity and its Now the request's, so they are not written.
type want struct {
	allowed    bool
	remaining  int64
	reset      time.Duration // ResetAfter
	retryAfter time.Duration
}

// ok is an admitted step: remaining units and ResetAfter.
func ok(remaining int64, reset time.Duration) want {
	return want{allowed: true, remaining: remaining, reset: reset}
}

// no is a denied step: remaining units, ResetAfter and RetryAfter.
func no(remaining int64, reset, retryAfter time.Duration) want {
	return want{remaining: remaining, reset: reset, retryAfter: retryAfter}
}

// diff compares got with w for a request of limit l; "" if they agree.
// With ServerTime, durations are checked only for being zero, Never or
// positive and at most twice the period, because the store chose the time.
func (s *suite) diff(got floodgate.Decision, w want, l floodgate.Limit) string {
	var msg string
	field := func(name string, got, want any) {
		msg += fmt.Sprintf("\n\t%s = %v, want %v", name, got, want)
	}
	if got.Allowed != w.allowed {
		field("Allowed", got.Allowed, w.allowed)
	}
	if got.Limit != l.Capacity() {
		field("Limit", got.Limit, l.Capacity())
	}
	if got.Remaining != w.remaining {
		field("Remaining", got.Remaining, w.remaining)
	}
	dur := func(name string, got, want time.Duration) {
		if !s.opts.ServerTime || want == 0 || want == floodgate.Never {
			if got != want {
				field(name, got, want)
			}
			return
		}
		if got <= 0 || got > 2*l.Period {
			field(name, got, fmt.Sprintf("in (0, %v] (the store chose the time)", 2*l.Period))
		}
	}
	dur("ResetAfter", got.ResetAfter, w.reset)
	dur("RetryAfter", got.RetryAfter, w.retryAfter)
	return msg
}

// describe formats r for a failure message, with Now as an offset from
// base and long keys cut.
func describe(r floodgate.Request) string {
	key := r.Key
	if len(key) > 80 {
		key = fmt.Sprintf("%s…(%d bytes)", key[:60], len(key))
	}
	s := fmt.Sprintf("key=%q limit=%q cost=%d", key, r.Limit.String(), r.Cost)
	if !r.Now.IsZero() {
		s += fmt.Sprintf(" now=base%+v", r.Now.Sub(base))
	}
	if r.Lease != "" {
		s += " lease=" + r.Lease
	}
	if r.Release {
		s += " release"
	}
	return s
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+).
	return hex.EncodeToString(b)
}

// still is the period of the cases whose requests all carry one instant
// and whose subject is not time (race, many_keys, reset). A store may
// forget a key's state by its own clock once the state's life on the
// requests' clock has passed: a Redis store gives each key a TTL, in real
// time, of what is left of it at the request's Now (a tenth of the period
// for a token bucket with one unit of ten taken, at least a second). With
// periods of a second or a minute, a case that ran for seconds on a
// loaded machine saw its keys expire while its clock stood still (11
// admitted of 10; a Reset seeming to change other limits), a history no
// clock that moves makes. A day's period gives every key hours, beyond
// any run, however slow; the decisions are the same at any period.
const still = 24 * time.Hour

// rounds is n, or a tenth of it (at least 1) with -short.
func rounds(n int) int {
	if testing.Short() {
		return max(1, n/10)
	}
	return n
}
