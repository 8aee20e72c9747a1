package memstore

import (
	"errors"
	"fmt"

	"github.com/floodgate-rl/floodgate/algorithm"
)

// ErrFull is the failure of a request that would add a key to a Store at
// Options.MaxKeys (after dropping the expired keys of its shard): a store
// failure, which a floodgate.Limiter answers by the request's failure
// policy, as it answers any store failure. Requests on keys the store
// holds are decided as ever.
var ErrFull = errors.New("memstore: full")

// keys is the number of keys the shard holds state for; the caller holds
// its lock.
func (sh *shard) keys() int {
	n := sh.logs.len() + sh.conc.len()
	for k := range sh.small {
		n += sh.small[k].len()
	}
	return n
}

// has reports whether the shard holds state of kind k under r; the caller
// holds its lock.
func (sh *shard) has(k algorithm.Kind, r ref) bool {
	switch k {
	case algorithm.KindSlidingWindowLog:
		_, ok := sh.logs.get(r)
		return ok
	case algorithm.KindConcurrency:
		_, ok := sh.conc.get(r)
		return ok
	}
	_, w := sh.small[k].find(r)
	return w != absent
}

// room reports whether the shard, whose lock the caller holds, may hold
// state of kind k under r: it does already, or it is below its share of
// Options.MaxKeys, or is once its expired keys are dropped (at most once a
// second).
func (s *Store) room(sh *shard, k algorithm.Kind, r ref) bool {
	// The count first: below the cap, a decision pays a few additions,
	// not a second lookup of its key.
	if s.perShard == 0 || sh.keys() < s.perShard || sh.has(k, r) {
		return true
	}
	// A full shard is swept at most once a second: callers inventing keys
	// against a full store must not make each refusal walk the shard
	// under its lock.
	if now := s.clockNow(); now-sh.fullSwept >= fullSweepEvery {
		sh.fullSwept = now
		sh.sweepLocked(now)
	}
	return sh.keys() < s.perShard
}

// fullSweepEvery is how often, at most, room sweeps a full shard (µs).
const fullSweepEvery = 1_000_000

// fullError counts a refusal and returns its error.
func (s *Store) fullError() error {
	s.refused.Add(1)
	return fmt.Errorf("%w: a new key would exceed Options.MaxKeys (%d; %d in each of %d shards)", ErrFull, s.maxKeys, s.perShard, len(s.shards))
}

// room is Store.room for every request of the batch.
func (b *batch) room() error {
	for i := range b.rs {
		if !b.s.room(b.shard(i), b.items[i].kind, b.items[i].ref) {
			return b.s.fullError()
		}
	}
	return nil
}

// Refused is the number of requests refused with ErrFull since the store
// was made.
func (s *Store) Refused() int64 { return s.refused.Load() }
