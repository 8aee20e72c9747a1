package floodgatetest

import (
	"errors"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// batch applies rs with ApplyBatch, failing the test on an error, and
// checks the number of decisions and their Now.
func (s *suite) batch(t *testing.T, b floodgate.Batcher, rs []floodgate.Request) []floodgate.Decision {
	t.Helper()
	ds, err := s.tryBatch(t.Context(), b, rs)
	if err != nil {
		t.Fatalf("ApplyBatch(%s): %v", describeBatch(rs), err)
	}
	if len(ds) != len(rs) {
		t.Fatalf("ApplyBatch(%s): %d decisions, want %d", describeBatch(rs), len(ds), len(rs))
	}
	for i := range rs {
		if msg := s.checkNow(rs[i], ds[i]); msg != "" {
			t.Errorf("ApplyBatch(%s): decision %d: %s", describeBatch(rs), i, msg)
		}
	}
	return ds
}

// expectBatch applies rs and compares each decision with ws.
func (s *suite) expectBatch(t *testing.T, b floodgate.Batcher, rs []floodgate.Request, ws ...want) {
	t.Helper()
	ds := s.batch(t, b, rs)
	for i := range rs {
		if msg := s.diff(ds[i], ws[i], rs[i].Limit); msg != "" {
			t.Fatalf("ApplyBatch(%s): decision %d:%s", describeBatch(rs), i, msg)
		}
	}
}

// expect applies r and compares its decision with w.
func (s *suite) expect(t *testing.T, r floodgate.Request, w want) {
	t.Helper()
	if msg := s.diff(s.apply(t, r), w, r.Limit); msg != "" {
		t.Fatalf("Apply(%s):%s", describe(r), msg)
	}
}

func describeBatch(rs []floodgate.Request) string {
	out := "["
	for i, r := range rs {
		if i > 0 {
			out += "; "
		}
		out += describe(r)
	}
	return out + "]"
}

// unchanged is the decision of a request that had room in a denied batch:
// not allowed, RetryAfter 0, and the state as it was.
func unchanged(remaining int64, reset time.Duration) want {
	return want{remaining: remaining, reset: reset}
}

// testBatch checks Batcher against its doc: all or nothing.
func (s *suite) testBatch(t *testing.T) {
	t.Parallel()
	b, isBatcher := s.store.(floodgate.Batcher)
	if !isBatcher {
		t.Skip("the store is not a floodgate.Batcher")
	}
	req := func(key string, l floodgate.Limit, cost int64) floodgate.Request {
		return floodgate.Request{Key: key, Limit: l, Cost: cost, Now: s.at(0)}
	}
	t.Run("all_or_nothing", func(t *testing.T) {
		t.Parallel()
		key := s.key(t, "k")
		perSec := s.limit(t, lim(floodgate.FixedWindow, 10, sec))
		perMin := s.limit(t, lim(floodgate.FixedWindow, 3, time.Minute))
		for i := range int64(3) {
			s.expectBatch(t, b, []floodgate.Request{req(key, perSec, 1), req(key, perMin, 1)},
				ok(9-i, sec), ok(2-i, time.Minute))
		}
		// 3 per minute is used up: neither is taken.
		s.expectBatch(t, b, []floodgate.Request{req(key, perSec, 1), req(key, perMin, 1)},
			unchanged(7, sec), no(0, time.Minute, time.Minute))
		s.expectBatch(t, b, []floodgate.Request{req(key, perMin, 1), req(key, perSec, 1)},
			no(0, time.Minute, time.Minute), unchanged(7, sec))
		s.expect(t, req(key, perSec, 0), ok(7, sec))
		s.expect(t, req(key, perMin, 0), ok(0, time.Minute))
		if s.opts.ServerTime {
			return
		}
		next := func(r floodgate.Request) floodgate.Request { r.Now = s.at(time.Minute); return r }
		s.expectBatch(t, b, []floodgate.Request{next(req(key, perSec, 1)), next(req(key, perMin, 1))},
			ok(9, sec), ok(2, time.Minute))
	})
	t.Run("count_rejected", func(t *testing.T) {
		t.Parallel()
		key := s.key(t, "k")
		perSec := s.limit(t, lim(floodgate.FixedWindow, 10, sec))
		perMin := s.limit(t, with(lim(floodgate.FixedWindow, 3, time.Minute), countRejected))
		s.expectBatch(t, b, []floodgate.Request{req(key, perSec, 1), req(key, perMin, 2)},
			ok(9, sec), ok(1, time.Minute))
		// Denied, and counted all the same: 4 of 3.
		s.expectBatch(t, b, []floodgate.Request{req(key, perSec, 1), req(key, perMin, 2)},
			unchanged(9, sec), no(0, time.Minute, time.Minute))
		s.expect(t, req(key, perSec, 0), ok(9, sec))
		s.expect(t, req(key, perMin, 0), no(0, time.Minute, time.Minute))
	})
	t.Run("never", func(t *testing.T) {
		t.Parallel()
		key := s.key(t, "k")
		perSec := s.limit(t, lim(floodgate.FixedWindow, 10, sec))
		perMin := s.limit(t, lim(floodgate.FixedWindow, 3, time.Minute))
		s.expectBatch(t, b, []floodgate.Request{req(key, perSec, 1), req(key, perMin, 4)},
			unchanged(10, 0), no(3, 0, floodgate.Never))
		s.expect(t, req(key, perSec, 0), ok(10, 0))
	})
	t.Run("every_algorithm", func(t *testing.T) {
		t.Parallel()
		key := s.key(t, "k")
		conc := s.limit(t, lim(floodgate.Concurrency, 2, 10*sec))
		log := s.limit(t, lim(floodgate.SlidingWindowLog, 3, sec))
		sw := s.limit(t, lim(floodgate.SlidingWindow, 2, sec))
		tb := s.limit(t, lim(floodgate.TokenBucket, 2, sec))
		g := s.limit(t, lim(floodgate.GCRA, 2, sec))
		fw := s.limit(t, lim(floodgate.FixedWindow, 1, sec))
		lease := func(r floodgate.Request, id string) floodgate.Request { r.Lease = id; return r }
		s.expectBatch(t, b, []floodgate.Request{
			lease(req(key, conc, 1), "a"), req(key, log, 2), req(key, sw, 1), req(key, tb, 1), req(key, g, 1), req(key, fw, 1),
		}, ok(1, 10*sec), ok(1, sec), ok(1, 2*sec), ok(1, 500*ms), ok(1, 500*ms), ok(0, sec))
		s.expectBatch(t, b, []floodgate.Request{
			lease(req(key, conc, 1), "b"), req(key, log, 1), req(key, sw, 1), req(key, tb, 1), req(key, g, 1), req(key, fw, 1),
		}, unchanged(1, 10*sec), unchanged(1, sec), unchanged(1, 2*sec), unchanged(1, 500*ms), unchanged(1, 500*ms), no(0, sec, sec))
		s.expect(t, req(key, conc, 0), ok(1, 10*sec))
		s.expect(t, req(key, log, 0), ok(1, sec))
		s.expect(t, req(key, sw, 0), ok(1, 2*sec))
		s.expect(t, req(key, tb, 0), ok(1, 500*ms))
		s.expect(t, req(key, g, 0), ok(1, 500*ms))
		s.expect(t, lease(req(key, conc, 1), "b"), ok(0, 10*sec))
	})
	t.Run("empty", func(t *testing.T) {
		t.Parallel()
		if ds := s.batch(t, b, nil); len(ds) != 0 {
			t.Errorf("ApplyBatch(nil) = %v, want no decisions", ds)
		}
	})
	t.Run("invalid", func(t *testing.T) {
		t.Parallel()
		key := s.key(t, "k")
		perSec := s.limit(t, lim(floodgate.FixedWindow, 10, sec))
		rs := []floodgate.Request{req(key, perSec, 1), req(key, perSec, -1)}
		_, err := s.tryBatch(t.Context(), b, rs)
		switch {
		case errors.Is(err, errPanic):
			t.Fatalf("ApplyBatch(%s): %v", describeBatch(rs), err)
		case !errors.Is(err, floodgate.ErrInvalidRequest):
			t.Fatalf("ApplyBatch(%s) = %v, want an error wrapping %v", describeBatch(rs), err, floodgate.ErrInvalidRequest)
		}
		s.expect(t, req(key, perSec, 0), ok(10, 0))
	})
}
