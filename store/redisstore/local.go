package redisstore

import (
	"context"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// local is what a Store decides in process, with no round trip: denials it
// remembers (denycache.go) and local budgets (budget.go). The deny cache
// is off when Options.DenyCache is 0, and budgets are made only for limits
// whose LocalBudget is above zero.
//
// Times are the store's local clock: Options.Clock with ClientTime, else
// the monotonic clock. An entry's end is always the local time taken
// before the call that made it was sent, plus what Redis replied, shrunk
// by clockMargin: it ends no later than Redis's own time would, whatever
// the offset between the clocks.
type local struct {
	clock   floodgate.Clock // nil: time.Now
	denyCap int             // the most remembered denials per shard; 0 off
	idle    time.Duration   // Options.BudgetIdle
	shards  [localShards]localShard
	seed    maphash.Seed

	// The sweeper gives back idle budgets; started with the first budget.
	sweepOnce sync.Once
	sweeping  bool // set by sweepOnce when it started the sweeper
	stop      chan struct{}
	done      chan struct{}

	// Decisions made in process (Store.LocalStats).
	denyHits, budgetHits atomic.Int64
}

// localShards is the number of independently locked parts of the maps.
const localShards = 32

// maxBudgetsPerShard bounds the local budgets held at once: 32 × 2048 =
// 65,536 keys. A request over a full shard is decided in Redis, without a
// local budget.
const maxBudgetsPerShard = 2048

type localShard struct {
	mu      sync.Mutex
	deny    map[string]*denial
	budgets map[string]*budget
}

func newLocal(o *Options, clock floodgate.Clock) *local {
	idle := o.BudgetIdle
	if idle <= 0 {
		idle = DefaultBudgetIdle
	}
	l := &local{clock: clock, idle: idle, seed: maphash.MakeSeed(), stop: make(chan struct{}), done: make(chan struct{})}
	if o.DenyCache > 0 {
		l.denyCap = max(1, (o.DenyCache+localShards-1)/localShards)
	}
	for i := range l.shards {
		l.shards[i].deny = make(map[string]*denial)
		l.shards[i].budgets = make(map[string]*budget)
	}
	return l
}

func (l *local) now() time.Time {
	if l.clock != nil {
		return l.clock.Now()
	}
	return time.Now()
}

func (l *local) shard(key string) *localShard {
	return &l.shards[maphash.String(l.seed, key)%localShards]
}

// clockMargin shrinks a span Redis reported, so that a local entry ends
// before Redis's own time even if the local clock runs faster than the
// server's by up to 1000 ppm (NTP slews by at most 500 ppm), plus a
// millisecond.
func clockMargin(d time.Duration) time.Duration {
	return max(0, d-d/1000-time.Millisecond)
}

// apply decides r of the Redis key key, in process when it can. Requests
// with their own Now bypass it (their time is not the store's), as do
// requests of cost 0, which change nothing.
func (l *local) apply(ctx context.Context, s *Store, r floodgate.Request, alg floodgate.Algorithm, key string) (floodgate.Decision, error) {
	if r.Cost > 0 && r.Limit.LocalBudget > 0 {
		return l.applyBudget(ctx, s, r, alg, key)
	}
	if l.denyCap == 0 || !denialCacheable(r.Limit, alg) || r.Cost <= 0 {
		return s.applyRemote(ctx, r, alg, key)
	}
	sh := l.shard(key)
	sent := l.now()
	sh.mu.Lock()
	if e := sh.deny[key]; e != nil {
		if d, ok := e.serve(r.Limit, r.Cost, sent); ok {
			sh.mu.Unlock()
			l.denyHits.Add(1)
			return d, nil
		}
	}
	sh.mu.Unlock()
	d, err := s.applyRemote(ctx, r, alg, key)
	if err == nil && !d.Allowed {
		if e, ok := newDenial(r.Limit, r.Cost, d, sent); ok {
			sh.mu.Lock()
			l.putDenial(sh, key, e, sent)
			sh.mu.Unlock()
		}
	}
	return d, err
}

// forget drops what the store remembers of key (a Reset through this
// store), under every limit. Claimed units are not given back: the state
// they were counted in is gone.
func (l *local) forget(key string) {
	sh := l.shard(key)
	sh.mu.Lock()
	delete(sh.deny, key)
	delete(sh.budgets, key)
	sh.mu.Unlock()
}

// LocalStats counts the decisions a Store made in process, without a round
// trip to Redis, since it was opened.
type LocalStats struct {
	// DenyCache is the requests denied from the deny cache
	// (Options.DenyCache), including those a key with a local budget
	// denied from its last denial.
	DenyCache int64
	// LocalBudget is the requests admitted from units this instance
	// claimed from Redis (floodgate.Limit.LocalBudget).
	LocalBudget int64
}

// LocalStats returns how many decisions s made without Redis, for metrics:
// `floodgate serve` exports them as floodgate_local_decisions_total.
func (s *Store) LocalStats() LocalStats {
	return LocalStats{DenyCache: s.local.denyHits.Load(), LocalBudget: s.local.budgetHits.Load()}
}
