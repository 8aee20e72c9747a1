package memstore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/floodgatetest"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

// TestReserveSweep: a caller that crashes between reserve and commit is
// settled by the sweep after the TTL, exactly once: a reservation made
// with Release gets its units back, one without keeps them charged; a
// second sweep changes nothing; after the retention the reservation is
// forgotten.
func TestReserveSweep(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := floodgatetest.NewFakeClock(start)
	s := memstore.New(&memstore.Options{Clock: clock, SweepInterval: -1, HoldRetention: time.Hour})
	defer s.Close()
	l := floodgate.Limit{Algorithm: floodgate.TokenBucket, Limit: 10, Period: time.Hour}
	for _, tc := range []struct {
		key     string
		release bool
		want    int64 // remaining after the sweep
	}{{"charged", false, 4}, {"released", true, 10}} {
		r := floodgate.Request{Key: tc.key, Limit: l, Cost: 6}
		if _, err := s.Reserve(t.Context(), floodgate.HoldRequest{Requests: []floodgate.Request{r}, ID: "crashed", TTL: time.Minute, Release: tc.release}); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(time.Minute)
	s.Sweep()
	s.Sweep()
	for _, tc := range []struct {
		key  string
		want int64
	}{{"charged", 4}, {"released", 10}} {
		d, err := s.Apply(t.Context(), floodgate.Request{Key: tc.key, Limit: l})
		if err != nil {
			t.Fatal(err)
		}
		if d.Remaining != tc.want {
			t.Errorf("%s: %d remaining after the sweeps, want %d", tc.key, d.Remaining, tc.want)
		}
		settle := floodgate.SettleRequest{Requests: []floodgate.Request{{Key: tc.key, Limit: l}}, ID: "crashed", Actual: 6}
		if _, err := s.Settle(t.Context(), settle); !errors.Is(err, floodgate.ErrExpired) {
			t.Errorf("%s: a late commit: %v, want ErrExpired", tc.key, err)
		}
	}
	clock.Advance(time.Hour)
	s.Sweep()
	settle := floodgate.SettleRequest{Requests: []floodgate.Request{{Key: "charged", Limit: l}}, ID: "crashed", Actual: 6}
	if _, err := s.Settle(t.Context(), settle); !errors.Is(err, floodgate.ErrUnknownReservation) {
		t.Errorf("a commit after the retention: %v, want ErrUnknownReservation", err)
	}
}
