package floodgatetest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// testInvalid checks that every invalid request is refused with an error
// wrapping ErrInvalidRequest or ErrInvalidLimit, by Apply, ApplyBatch and
// Reset alike, and that none panics.
func (s *suite) testInvalid(t *testing.T) {
	t.Parallel()
	key := s.key(t, "k")
	good := lim(floodgate.FixedWindow, 10, sec)
	conc := lim(floodgate.Concurrency, 10, sec)
	req := func(f func(*floodgate.Request)) floodgate.Request {
		r := floodgate.Request{Key: key, Limit: good, Cost: 1}
		f(&r)
		return r
	}
	withLimit := func(f func(*floodgate.Limit)) floodgate.Request {
		return req(func(r *floodgate.Request) { f(&r.Limit) })
	}
	tests := []struct {
		name string
		r    floodgate.Request
		want error
	}{
		{"empty_key", req(func(r *floodgate.Request) { r.Key = "" }), floodgate.ErrInvalidRequest},
		{"key_too_long", req(func(r *floodgate.Request) { r.Key = strings.Repeat("k", floodgate.MaxKeyLen+1) }), floodgate.ErrInvalidRequest},
		{"negative_cost", req(func(r *floodgate.Request) { r.Cost = -1 }), floodgate.ErrInvalidRequest},
		{"cost_above_max", req(func(r *floodgate.Request) { r.Cost = floodgate.MaxLimit + 1 }), floodgate.ErrInvalidRequest},
		{"now_before_1970", req(func(r *floodgate.Request) { r.Now = time.Unix(-1, 0) }), floodgate.ErrInvalidRequest},
		{"now_after_2112", req(func(r *floodgate.Request) { r.Now = time.UnixMicro(1 << 52) }), floodgate.ErrInvalidRequest},
		{"lease_on_fixed_window", req(func(r *floodgate.Request) { r.Lease = "a" }), floodgate.ErrInvalidRequest},
		{"release_on_fixed_window", req(func(r *floodgate.Request) { r.Release = true }), floodgate.ErrInvalidRequest},
		{"concurrency_without_lease", req(func(r *floodgate.Request) { r.Limit = conc }), floodgate.ErrInvalidRequest},
		{"release_without_lease", req(func(r *floodgate.Request) { r.Limit, r.Release = conc, true }), floodgate.ErrInvalidRequest},
		{"lease_bad_byte", req(func(r *floodgate.Request) { r.Limit, r.Lease = conc, "a:b" }), floodgate.ErrInvalidRequest},
		{"lease_too_long", req(func(r *floodgate.Request) { r.Limit, r.Lease = conc, strings.Repeat("a", floodgate.MaxLeaseLen+1) }), floodgate.ErrInvalidRequest},
		{"zero_limit", req(func(r *floodgate.Request) { r.Limit = floodgate.Limit{} }), floodgate.ErrInvalidLimit},
		{"negative_limit", withLimit(func(l *floodgate.Limit) { l.Limit = -1 }), floodgate.ErrInvalidLimit},
		{"limit_above_max", withLimit(func(l *floodgate.Limit) { l.Limit = floodgate.MaxLimit + 1 }), floodgate.ErrInvalidLimit},
		{"negative_period", withLimit(func(l *floodgate.Limit) { l.Period = -sec }), floodgate.ErrInvalidLimit},
		{"period_above_max", withLimit(func(l *floodgate.Limit) { l.Period = floodgate.MaxPeriod + us }), floodgate.ErrInvalidLimit},
		{"period_not_whole_microseconds", withLimit(func(l *floodgate.Limit) { l.Period = 1500 * time.Nanosecond }), floodgate.ErrInvalidLimit},
		{"unknown_algorithm", withLimit(func(l *floodgate.Limit) { l.Algorithm = "leaky_bucket" }), floodgate.ErrInvalidLimit},
		{"burst_on_fixed_window", withLimit(func(l *floodgate.Limit) { l.Burst = 5 }), floodgate.ErrInvalidLimit},
		{"negative_burst", withLimit(func(l *floodgate.Limit) { l.Algorithm, l.Burst = floodgate.GCRA, -1 }), floodgate.ErrInvalidLimit},
		{"burst_above_max", withLimit(func(l *floodgate.Limit) { l.Algorithm, l.Burst = floodgate.TokenBucket, floodgate.MaxLimit+1 }), floodgate.ErrInvalidLimit},
		{"first_hit_on_gcra", withLimit(func(l *floodgate.Limit) { l.Algorithm, l.Window = floodgate.GCRA, floodgate.FirstHit }), floodgate.ErrInvalidLimit},
		{"unknown_window", withLimit(func(l *floodgate.Limit) { l.Window = "rolling" }), floodgate.ErrInvalidLimit},
		{"count_rejected_on_token_bucket", withLimit(func(l *floodgate.Limit) { l.Algorithm, l.CountRejected = floodgate.TokenBucket, true }), floodgate.ErrInvalidLimit},
		{"log_limit_above_max", withLimit(func(l *floodgate.Limit) { l.Algorithm, l.Limit = floodgate.SlidingWindowLog, floodgate.MaxLogLimit+1 }), floodgate.ErrInvalidLimit},
		{"sliding_window_too_large", withLimit(func(l *floodgate.Limit) {
			l.Algorithm, l.Limit, l.Period = floodgate.SlidingWindow, 100, floodgate.MaxPeriod
		}), floodgate.ErrInvalidLimit},
	}
	check := func(t *testing.T, call string, err, want error) {
		t.Helper()
		switch {
		case errors.Is(err, errPanic):
			t.Errorf("%s: %v", call, err)
		case err == nil:
			t.Errorf("%s: no error, want one wrapping %v", call, want)
		case !errors.Is(err, want):
			t.Errorf("%s = %v, want an error wrapping %v", call, err, want)
		}
	}
	b, isBatcher := s.store.(floodgate.Batcher)
	rs, isResetter := s.store.(floodgate.Resetter)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := s.tryApply(t.Context(), tt.r)
			check(t, "Apply("+describe(tt.r)+")", err, tt.want)
			if isBatcher {
				batch := []floodgate.Request{{Key: key, Limit: good, Now: s.at(0)}, tt.r}
				_, err := s.tryBatch(t.Context(), b, batch)
				check(t, "ApplyBatch("+describeBatch(batch)+")", err, tt.want)
			}
			if isResetter && errors.Is(tt.want, floodgate.ErrInvalidLimit) {
				err := s.tryReset(t.Context(), rs, tt.r.Key, tt.r.Limit)
				check(t, "Reset("+describe(tt.r)+")", err, tt.want)
			}
		})
	}
	if isResetter {
		t.Run("reset_empty_key", func(t *testing.T) {
			t.Parallel()
			err := s.tryReset(t.Context(), rs, "", good)
			check(t, `Reset("")`, err, floodgate.ErrInvalidRequest)
		})
	}
}

// testContext checks that a cancelled or expired context is an error, for
// every call.
func (s *suite) testContext(t *testing.T) {
	t.Parallel()
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	expired, cancel2 := context.WithDeadline(t.Context(), time.Unix(1, 0))
	defer cancel2()
	ctxs := []struct {
		name string
		ctx  context.Context
		want error
	}{
		{"cancelled", cancelled, context.Canceled},
		{"deadline_exceeded", expired, context.DeadlineExceeded},
	}
	r := floodgate.Request{Key: s.key(t, "k"), Limit: s.limit(t, lim(floodgate.FixedWindow, 10, sec)), Cost: 1, Now: s.at(0)}
	for _, c := range ctxs {
		if _, err := s.tryApply(c.ctx, r); !errors.Is(err, c.want) {
			t.Errorf("Apply with a %s context = %v, want an error wrapping %v", c.name, err, c.want)
		}
		if b, isBatcher := s.store.(floodgate.Batcher); isBatcher {
			if _, err := s.tryBatch(c.ctx, b, []floodgate.Request{r}); !errors.Is(err, c.want) {
				t.Errorf("ApplyBatch with a %s context = %v, want an error wrapping %v", c.name, err, c.want)
			}
		}
		if rs, isResetter := s.store.(floodgate.Resetter); isResetter {
			if err := s.tryReset(c.ctx, rs, r.Key, r.Limit); !errors.Is(err, c.want) {
				t.Errorf("Reset with a %s context = %v, want an error wrapping %v", c.name, err, c.want)
			}
		}
	}
}
