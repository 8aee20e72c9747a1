package linearize

import (
	"time"

	"github.com/floodgate-rl/floodgate"
)

// Case is a limit the linearizability tests check, by name.
type Case struct {
	Name  string
	Limit floodgate.Limit
}

// Cases are the limits the linearizability tests run, one per algorithm
// (two for the fixed window's alignments). Periods are short (20 to 50 ms)
// so that windows roll over, buckets refill and leases expire many times
// during a history of a few hundred calls per key; limits are small so
// that calls are both admitted and denied.
var Cases = []Case{
	{"fixed_window_aligned", floodgate.Limit{Algorithm: floodgate.FixedWindow, Limit: 8, Period: 20 * time.Millisecond}},
	{"fixed_window_first_hit", floodgate.Limit{Algorithm: floodgate.FixedWindow, Limit: 8, Period: 20 * time.Millisecond, Window: floodgate.FirstHit}},
	{"sliding_window_log", floodgate.Limit{Algorithm: floodgate.SlidingWindowLog, Limit: 8, Period: 30 * time.Millisecond}},
	{"sliding_window", floodgate.Limit{Algorithm: floodgate.SlidingWindow, Limit: 8, Period: 20 * time.Millisecond, CountRejected: true}},
	{"token_bucket", floodgate.Limit{Algorithm: floodgate.TokenBucket, Limit: 3, Period: 20 * time.Millisecond, Burst: 6}},
	{"gcra", floodgate.Limit{Algorithm: floodgate.GCRA, Limit: 3, Period: 20 * time.Millisecond, Burst: 6}},
	{"concurrency", floodgate.Limit{Algorithm: floodgate.Concurrency, Limit: 4, Period: 50 * time.Millisecond}},
}
