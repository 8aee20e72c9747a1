package memstore

import (
	"errors"
	"fmt"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algorithm"
)

// ErrFull is the refusal of a request that would take the Store past one
// of its bounds (Options.MaxKeys, Options.MaxBytes,
// Options.MaxHoldsPerKey), after the expired state of its shard was
// dropped. It is not a store failure (it does not wrap floodgate.ErrStore):
// a floodgate.Limiter denies the request with the error whatever its
// failure policy (Outcome.Policy FailClosed), so that a full store never
// turns into FailOpen's admissions. Requests on state the store holds are
// decided as ever; nothing the refused request asked for changed.
var ErrFull = errors.New("memstore: full")

// The accounted sizes of Options.MaxBytes, in bytes: an estimate of what
// each thing the store holds takes in the heap, not a measure of it (the
// garbage collector's slack comes on top; see the package doc).
const (
	// keyOverhead is a key's state beside its own bytes: a 64-byte entry
	// of a table, its slot in the table's map, and the slack of the
	// growing slice (BenchmarkMemoryPerKey measures about 110).
	keyOverhead = 128
	// logUnit is a logged time of sliding_window_log.
	logUnit = 8
	// leaseUnit is a unit of concurrency held by a lease, beside the
	// lease ID's bytes.
	leaseUnit = 48
	// holdOverhead is a reservation beside its key and ID: the map entry
	// and its key, the hold, the limit it was made under.
	holdOverhead = 320
)

// keyBytes is the accounted size of a key of n bytes holding state.
func keyBytes(n int) int64 { return keyOverhead + int64(n) }

// holdBytes is the accounted size of a reservation of id on key.
func holdBytes(key, id string) int64 { return holdOverhead + int64(len(key)+len(id)) }

func (slot) extraBytes() int64         { return 0 }
func (ls *logSlot) extraBytes() int64  { return ls.acct }
func (cs *concSlot) extraBytes() int64 { return cs.acct }

// account sets ls's accounted units to what it holds now, in t, the
// table that holds it.
func (ls *logSlot) account(t *table[*logSlot]) {
	n := logUnit * int64(cap(ls.log))
	t.bytes += n - ls.acct
	ls.acct = n
}

// account is logSlot.account for a concurrency state.
func (cs *concSlot) account(t *table[*concSlot]) {
	var n int64
	for i := range cs.units {
		n += leaseUnit + int64(len(cs.units[i].ID))
	}
	t.bytes += n - cs.acct
	cs.acct = n
}

// keys is the number of keys the shard holds state for; the caller holds
// its lock.
func (sh *shard) keys() int {
	n := sh.logs.len() + sh.conc.len()
	for k := range sh.small {
		n += sh.small[k].len()
	}
	return n
}

// bytes is the shard's accounted size: its keys' states and its
// reservations. The caller holds its lock.
func (sh *shard) bytes() int64 {
	n := sh.logs.bytes + sh.conc.bytes + sh.holdBytes
	for k := range sh.small {
		n += sh.small[k].bytes
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

// growth is what r may add to the accounted size of a state the store
// already holds: the units an O(limit) algorithm logs or leases; 0 for
// the O(1) algorithms, whose state never grows.
func growth(r *floodgate.Request, k algorithm.Kind) int64 {
	switch {
	case k == algorithm.KindSlidingWindowLog:
		return logUnit * r.Cost
	case k == algorithm.KindConcurrency && !r.Release:
		return (leaseUnit + int64(len(r.Lease))) * r.Cost
	}
	return 0
}

// room reports whether the shard, whose lock the caller holds, may decide
// a request of kind k on r that may add grow bytes to its state: the
// shard holds the state already and has room for grow bytes more, or is
// below its share of Options.MaxKeys and has room for a new key of the
// request; or has, once its expired state is dropped (at most once a
// second).
func (s *Store) room(sh *shard, k algorithm.Kind, r ref, grow int64) bool {
	if s.fits(sh, k, r, grow) {
		return true
	}
	// A full shard is swept at most once a second: callers inventing keys
	// against a full store must not make each refusal walk the shard
	// under its lock.
	if now := s.clockNow(); now-sh.fullSwept >= fullSweepEvery {
		sh.fullSwept = now
		sh.sweepLocked(now)
		return s.fits(sh, k, r, grow)
	}
	return false
}

// fits is room without the sweep.
func (s *Store) fits(sh *shard, k algorithm.Kind, r ref, grow int64) bool {
	// The counts first: below the bounds, a decision pays a few
	// additions, not a second lookup of its key.
	keysOK := s.perShard == 0 || sh.keys() < s.perShard
	var size int64
	if s.perShardBytes != 0 {
		size = sh.bytes()
		if keysOK && size+keyBytes(len(r.key))+grow <= s.perShardBytes {
			return true
		}
	} else if keysOK {
		return true
	}
	if !sh.has(k, r) {
		return false
	}
	return grow == 0 || s.perShardBytes == 0 || size+grow <= s.perShardBytes
}

// fullSweepEvery is how often, at most, room sweeps a full shard (µs).
const fullSweepEvery = 1_000_000

// fullError counts a refusal and returns its error.
func (s *Store) fullError() error {
	s.refused.Add(1)
	return fmt.Errorf("%w: a new key or more units would exceed Options.MaxKeys (%d) or MaxBytes (%d), kept per shard (%d keys and %d bytes in each of %d shards)",
		ErrFull, s.maxKeys, s.maxBytes, s.perShard, s.perShardBytes, len(s.shards))
}

// room is Store.room for every request of the batch.
func (b *batch) room() error {
	if !b.s.bounded {
		return nil
	}
	for i := range b.rs {
		if !b.s.room(b.shard(i), b.items[i].kind, b.items[i].ref, growth(&b.rs[i], b.items[i].kind)) {
			return b.s.fullError()
		}
	}
	return nil
}

// holdRoom reports whether every request of the batch may take one more
// reservation, of id: under Options.MaxHoldsPerKey on its state, and
// with the hold's accounted size under its shard's share of
// Options.MaxBytes; or may, once the expired holds of its shard are
// dropped (at most once a second). It returns ErrFull, counted, when not.
func (b *batch) holdRoom(id string) error {
	s := b.s
	if s.maxHoldsPerKey == 0 && s.perShardBytes == 0 {
		return nil
	}
	for i := range b.rs {
		sh := b.shard(i)
		if s.holdFits(sh, b.items[i].ref, id) {
			continue
		}
		if now := s.clockNow(); now-sh.fullSwept >= fullSweepEvery {
			sh.fullSwept = now
			sh.sweepLocked(now)
			if s.holdFits(sh, b.items[i].ref, id) {
				continue
			}
		}
		s.refused.Add(1)
		return fmt.Errorf("%w: a reservation would exceed Options.MaxHoldsPerKey (%d on one key and period) or MaxBytes (%d, %d in each of %d shards)",
			ErrFull, s.maxHoldsPerKey, s.maxBytes, s.perShardBytes, len(s.shards))
	}
	return nil
}

// holdFits is holdRoom's test for one state, without the sweep.
func (s *Store) holdFits(sh *shard, r ref, id string) bool {
	if s.maxHoldsPerKey != 0 && sh.holdsPer[r.mkey] >= s.maxHoldsPerKey {
		return false
	}
	return s.perShardBytes == 0 || sh.bytes()+holdBytes(r.key, id) <= s.perShardBytes
}

// putHold keeps e as the reservation hk, accounting for it; the caller
// holds the shard's lock.
func (sh *shard) putHold(hk holdKey, e *holdEntry) {
	if sh.holds == nil {
		sh.holds = make(map[holdKey]*holdEntry)
		sh.holdsPer = make(map[mkey]int)
	}
	if _, ok := sh.holds[hk]; !ok {
		sh.holdBytes += holdBytes(hk.key, hk.id)
		sh.holdsPer[mkey{hk.key, hk.period}]++
	}
	sh.holds[hk] = e
}

// dropHold forgets the reservation hk; the caller holds the shard's
// lock.
func (sh *shard) dropHold(hk holdKey) {
	if _, ok := sh.holds[hk]; !ok {
		return
	}
	delete(sh.holds, hk)
	sh.holdBytes -= holdBytes(hk.key, hk.id)
	mk := mkey{hk.key, hk.period}
	if n := sh.holdsPer[mk] - 1; n > 0 {
		sh.holdsPer[mk] = n
	} else {
		delete(sh.holdsPer, mk)
	}
}

// Refused is the number of requests refused with ErrFull since the store
// was made.
func (s *Store) Refused() int64 { return s.refused.Load() }

// Bytes is the accounted size of what the store holds (see
// Options.MaxBytes): its keys' states, live or expired but not yet swept,
// and its reservations.
func (s *Store) Bytes() int64 {
	var n int64
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.bytes()
		sh.mu.Unlock()
	}
	return n
}
