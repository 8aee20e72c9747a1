package ui

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/loop"
	"github.com/floodgate-rl/floodgate/internal/topk"
	"github.com/floodgate-rl/floodgate/server/transport"
)

// Defaults of Options.
const (
	DefaultCounters = 64
	DefaultSlice    = 15 * time.Second
	DefaultInterval = time.Second
	DefaultTop      = 10
	// DefaultMaxSubscribers and DefaultMaxSubscribersPerPeer are the
	// caps of the feed's streams, in all and from one peer.
	DefaultMaxSubscribers        = 100
	DefaultMaxSubscribersPerPeer = 10
)

// Options configure a Dashboard. The zero value of each field is its
// default; a nil *Options means every default.
type Options struct {
	// Counters is the capacity k of each heavy-hitters sketch; default
	// DefaultCounters. There are two sketches (denied keys, keys near
	// their limits) per time slice and per shard (the keys are split by a
	// hash into `shards`, so that concurrent decisions rarely wait on one
	// lock): 2×2×8×64 = 2,048 counters by default. A listed count is at
	// most N/k too high, N being the decisions counted (see
	// internal/topk).
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
	// MaxSubscribers is the most streams of the feed at once, and
	// MaxSubscribersPerPeer the most from one peer (an IPv4 address, an
	// IPv6 /64: transport.Peer); a stream beyond either is answered 503
	// with Retry-After. Defaults DefaultMaxSubscribers and
	// DefaultMaxSubscribersPerPeer.
	MaxSubscribers        int
	MaxSubscribersPerPeer int
	// WriteTimeout is the longest each frame of the feed may take to
	// send; a stream whose client does not read ends then. Default
	// transport.DefaultWriteTimeout.
	WriteTimeout time.Duration
	// Auth is the server's tokens (the HTTP API's httpapi.Options.Auth):
	// the feed shows its top keys and rules only to admin tokens. Nil:
	// to every caller, as on a server without token files.
	Auth *transport.Auth

	// newTicker, if set, makes the feed's ticker (a test's).
	newTicker func(time.Duration) loop.Ticker
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
	if c.MaxSubscribers <= 0 {
		c.MaxSubscribers = DefaultMaxSubscribers
	}
	if c.MaxSubscribersPerPeer <= 0 {
		c.MaxSubscribersPerPeer = DefaultMaxSubscribersPerPeer
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = transport.DefaultWriteTimeout
	}
	if c.NearLimitRatio <= 0 || c.NearLimitRatio > 1 {
		c.NearLimitRatio = 0.8
	}
	return c
}

// last is what a sketch keeps with a key: its latest decision, and the
// limit it was decided under.
type last struct {
	limit      floodgate.Limit
	capacity   int64 // Decision.Limit
	remaining  int64
	retryAfter time.Duration
	localOnly  bool // decided by the failure mode local
}

// shards is the number of parts the recorder's keys are split into, each
// with its own lock and sketches.
const shards = 8

// recorder is the floodgate.Observer of a Dashboard: it counts denied
// keys and keys near their limits in sketches per time slice, and the
// events that no metric of the server counts (the breaker's local
// decisions, leases). A decision that is neither denied nor near its
// limit costs it a few comparisons and no lock; one that is costs a hash,
// a lock of one of `shards` and a sketch update. It is safe for
// concurrent use.
type recorder struct {
	near   float64
	seed   maphash.Seed
	shards [shards]shard
	counts counters
}

// shard holds the sketches of the keys whose hash falls in it.
type shard struct {
	mu sync.Mutex
	// denied and nearLimit: [0] the current slice, [1] the one before.
	denied, nearLimit [2]*topk.Sketch[last]
	_                 [64]byte // keep shards on separate cache lines
}

// counters are the recorder's running totals, read by each frame.
type counters struct {
	breakerLocal  atomic.Int64 // decided locally without asking the store
	failedToLocal atomic.Int64 // the store failed, decided locally
	leaseAcquired atomic.Int64
	leaseDenied   atomic.Int64
	leaseReleased atomic.Int64
}

func newRecorder(o Options) *recorder {
	r := &recorder{near: o.NearLimitRatio, seed: maphash.MakeSeed()}
	for i := range r.shards {
		for j := range 2 {
			r.shards[i].denied[j] = topk.New[last](o.Counters)
			r.shards[i].nearLimit[j] = topk.New[last](o.Counters)
		}
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
	denied := false
	switch {
	case !d.Allowed && d.RetryAfter != 0:
		// RetryAfter 0 on a denial: all or nothing, another key of the
		// request denied it; this one had room.
		denied = true
	case d.Allowed && d.Limit > 0 && float64(d.Limit-d.Remaining) >= r.near*float64(d.Limit):
	default:
		return
	}
	sh := &r.shards[maphash.String(r.seed, e.Request.Key)%shards]
	sh.mu.Lock()
	sk := sh.nearLimit[0]
	if denied {
		sk = sh.denied[0]
	}
	sk.Add(e.Request.Key, 1, last{limit: e.Request.Limit, capacity: d.Limit, remaining: d.Remaining, retryAfter: d.RetryAfter, localOnly: d.Fallback})
	sh.mu.Unlock()
}

// rotate starts a new time slice: the current one becomes the previous,
// and the previous is forgotten. The Dashboard calls it every
// Options.Slice.
func (r *recorder) rotate() {
	for i := range r.shards {
		sh := &r.shards[i]
		sh.mu.Lock()
		for _, sk := range []*[2]*topk.Sketch[last]{&sh.denied, &sh.nearLimit} {
			sk[0], sk[1] = sk[1], sk[0]
			sk[0].Reset()
		}
		sh.mu.Unlock()
	}
}

// top is, for each list, the union of the shards of the merge of the two
// slices of each shard's sketch: Bound is the largest shard's, at most
// N/k.
func (r *recorder) top() (denied, near topk.Summary[last]) {
	var ds, ns []topk.Summary[last]
	for i := range r.shards {
		sh := &r.shards[i]
		sh.mu.Lock()
		ds = append(ds, topk.Merge(sh.denied[1], sh.denied[0]))
		ns = append(ns, topk.Merge(sh.nearLimit[1], sh.nearLimit[0]))
		sh.mu.Unlock()
	}
	return topk.Union(ds...), topk.Union(ns...)
}
