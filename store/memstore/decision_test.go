package memstore

import (
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algorithm"
)

// TestSetDecision checks that setDecision, which Apply uses to fill its
// result a field at a time, writes what floodgate.FromAlgorithm returns,
// whatever the result held before.
func TestSetDecision(t *testing.T) {
	for _, tc := range []struct {
		name  string
		d     algorithm.Decision
		nowUS int64
	}{
		{"allowed", algorithm.Decision{Allowed: true, Limit: 60, Remaining: 59, ResetAfter: 1_000_000}, 1_700_000_000_123_456},
		{"denied", algorithm.Decision{Limit: 60, ResetAfter: 60_000_000, RetryAfter: 1_000_000}, 1_700_000_000_000_000},
		{"never", algorithm.Decision{Limit: 5, RetryAfter: algorithm.Never}, 1},
		{"zero", algorithm.Decision{}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := floodgate.Decision{Allowed: true, Limit: 7, Remaining: 7, ResetAfter: time.Hour, RetryAfter: time.Hour, Now: time.Now(), Fallback: true}
			setDecision(&out, &tc.d, tc.nowUS)
			want := floodgate.FromAlgorithm(tc.d, tc.nowUS)
			if out != want {
				t.Errorf("setDecision = %+v, want %+v", out, want)
			}
		})
	}
}
