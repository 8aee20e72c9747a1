package redisstore

import (
	"hash/maphash"
	"sync"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// What the layers that decide in process, the deny cache (denycache.go)
// and the local budgets (budget.go), share: their clock, their sharded
// maps, and the margin that keeps their entries within Redis's time.
//
// Times are the store's local clock: Options.Clock with ClientTime, else
// the monotonic clock. An entry's end is always the local time taken
// before the call that made it was sent, plus what Redis replied, shrunk
// by clockMargin: it ends no later than Redis's own time would, whatever
// the offset between the clocks.

// localClock is the clock of the in-process layers.
type localClock struct {
	c floodgate.Clock // nil: time.Now
}

func (lc localClock) now() time.Time {
	if lc.c != nil {
		return lc.c.Now()
	}
	return time.Now()
}

// clockMargin shrinks a span Redis reported, so that a local entry ends
// before Redis's own time even if the local clock runs faster than the
// server's by up to 1000 ppm (NTP slews by at most 500 ppm), plus a
// millisecond.
func clockMargin(d time.Duration) time.Duration {
	return max(0, d-d/1000-time.Millisecond)
}

// localShards is the number of independently locked parts of a shards.
const localShards = 32

// shards is a map from Redis keys to V, in localShards independently
// locked parts.
type shards[V any] struct {
	seed  maphash.Seed
	parts [localShards]shard[V]
}

// A shard is a part of a shards: m is read and written with mu held.
type shard[V any] struct {
	mu sync.Mutex
	m  map[string]V
}

func newShards[V any]() *shards[V] {
	s := &shards[V]{seed: maphash.MakeSeed()}
	for i := range s.parts {
		s.parts[i].m = make(map[string]V)
	}
	return s
}

// of returns the shard of key.
func (s *shards[V]) of(key string) *shard[V] {
	return &s.parts[maphash.String(s.seed, key)%localShards]
}

// forget deletes key.
func (s *shards[V]) forget(key string) {
	sh := s.of(key)
	sh.mu.Lock()
	delete(sh.m, key)
	sh.mu.Unlock()
}
