package ui

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/topk"
)

// Defaults of Options.
const (
	DefaultCounters = 128
	DefaultSlice    = 15 * time.Second
	DefaultInterval = time.Second
	DefaultTop      = 10
)

// Options configure a Dashboard. The zero value of each field is its
// default; a nil *Options means every default.
type Options struct {
	// Counters is the capacity k of each heavy-hitters sketch (one for
	// denied keys, one for keys near their limits, per time slice); default
	// DefaultCounters. A listed count is at most N/k too high, N being
	// the decisions the sketch counted (see internal/topk).
	Counters int
	// Slice is how long a sketch counts before the older of the two is
	// dropped: the top lists cover the last Slice to 2×Slice; default
	// DefaultSlice.
	Slice time.Duration
	// Interval is the time between two frames of the feed; default
	// DefaultInterval.
	Interval time.Duration
	// Top is the number of keys each top list shows; default DefaultTop.
	Top int
	// NearLimitRatio is the share of a limit used at or above which an
	// admitted decision counts its key as near its limit; default 0.8, as
	// server.Options.
	NearLimitRatio float64
}

func (o *Options) withDefaults() Options {
	var c Options
	if o != nil {
		c = *o
	}
	if c.Counters <= 0 {
		c.Counters = DefaultCounters
	}
	if c.Slice <= 0 {
		c.Slice = DefaultSlice
	}
	if c.Interval <= 0 {
		c.Interval = DefaultInterval
	}
	if c.Top <= 0 {
		c.Top = DefaultTop
	}
	if c.NearLimitRatio <= 0 || c.NearLimitRatio > 1 {
		c.NearLimitRatio = 0.8
	}
	return c
}

// last is what a sketch keeps with a key: its latest decision.
type last struct {
	limit     floodgate.Limit
	decision  floodgate.Decision
	localOnly bool // decided by the failure mode local
}

// recorder is the floodgate.Observer of a Dashboard: it counts denied
// keys and keys near their limits in two sketches per time slice, and
// the events that no metric of the server counts (the breaker's local
// decisions, leases). Decisions that are neither denied nor near their
// limit cost it two comparisons and no lock. It is safe for concurrent
// use.
type recorder struct {
	near  float64
	slice time.Duration
	now   func() time.Time

	mu    sync.Mutex
	start time.Time // of the current slice
	// denied and nearLimit: [0] the current slice, [1] the one before.
	denied, nearLimit [2]*topk.Sketch[last]

	counts counters
}

// counters are the recorder's running totals, read by each frame.
type counters struct {
	breakerLocal  atomic.Int64 // decided locally without asking the store
	failedToLocal atomic.Int64 // the store failed, decided locally
	leaseAcquired atomic.Int64
	leaseDenied   atomic.Int64
	leaseReleased atomic.Int64
}

func newRecorder(o Options, now func() time.Time) *recorder {
	r := &recorder{near: o.NearLimitRatio, slice: o.Slice, now: now, start: now()}
	for i := range 2 {
		r.denied[i] = topk.New[last](o.Counters)
		r.nearLimit[i] = topk.New[last](o.Counters)
	}
	return r
}

// Observe counts one event of the server's Limiter.
func (r *recorder) Observe(e floodgate.Event) {
	if e.Decision.Fallback {
		if e.Err == nil {
			r.counts.breakerLocal.Add(1)
		} else {
			r.counts.failedToLocal.Add(1)
		}
	}
	failed := e.Err != nil && e.Policy != floodgate.FailLocal
	if e.Request.Lease != "" {
		switch {
		case failed:
		case e.Request.Release:
			r.counts.leaseReleased.Add(1)
		case e.Decision.Allowed:
			r.counts.leaseAcquired.Add(1)
		default:
			r.counts.leaseDenied.Add(1)
		}
		return
	}
	// A peek (cost 0) takes nothing, and a made-up answer of fail_open or
	// fail_closed says nothing of the key.
	if e.Request.Cost == 0 || failed {
		return
	}
	d := &e.Decision
	var sk *[2]*topk.Sketch[last]
	switch {
	case !d.Allowed && d.RetryAfter != 0:
		// RetryAfter 0 on a denial: all or nothing, another key of the
		// request denied it; this one had room.
		sk = &r.denied
	case d.Allowed && d.Limit > 0 && float64(d.Limit-d.Remaining) >= r.near*float64(d.Limit):
		sk = &r.nearLimit
	default:
		return
	}
	v := last{limit: e.Request.Limit, decision: *d, localOnly: d.Fallback}
	now := r.now()
	r.mu.Lock()
	r.rotate(now)
	sk[0].Add(e.Request.Key, 1, v)
	r.mu.Unlock()
}

// rotate starts a new slice when the current one is over; r.mu is held.
func (r *recorder) rotate(now time.Time) {
	elapsed := now.Sub(r.start)
	if elapsed < r.slice {
		return
	}
	for _, sk := range []*[2]*topk.Sketch[last]{&r.denied, &r.nearLimit} {
		sk[0], sk[1] = sk[1], sk[0]
		sk[0].Reset()
		if elapsed >= 2*r.slice {
			sk[1].Reset() // nothing of the last slice is recent either
		}
	}
	r.start = now
}

// top is the merge of the two slices of each sketch.
func (r *recorder) top() (denied, near topk.Summary[last]) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rotate(r.now())
	return topk.Merge(r.denied[1], r.denied[0]), topk.Merge(r.nearLimit[1], r.nearLimit[0])
}
