package redisstore

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// The sweep of reservations made with release (floodgate.HoldRequest's
// Release): see "Reservations" in docs/redis.md.

const (
	// clusterIndexShards is the number of index keys on a Redis Cluster,
	// where each is in a slot of its own, so that the indexing of holds
	// spreads over the masters. Elsewhere there is one.
	clusterIndexShards = 16
	// sweepBatch is the most holds one claim of the sweep takes.
	sweepBatch = 100
	// sweepLease is how long a sweep's claim keeps other sweeps off the
	// holds it took: a sweep that stops halfway (a crash, a timeout)
	// leaves them to the next sweep after that.
	sweepLease = 10 * time.Second
	// minSweepTimeout bounds a pass of the sweeper, at least, or its
	// interval if longer.
	minSweepTimeout = 5 * time.Second
)

// indexShards is the number of index keys.
func (s *Store) indexShards() int {
	if s.conn.Cluster() {
		return clusterIndexShards
	}
	return 1
}

// indexKey is the key of index shard i:
//
//	<prefix>:v1:holds:{<i>}
func (s *Store) indexKey(i int) string {
	return s.prefix + ":" + keyVersion + ":holds:{" + strconv.Itoa(i) + "}"
}

// indexHolds adds holds to the index, due ttl µs after clock (-1: the
// server's TIME): before their reserve, so that a hold never exists
// without its entry. An entry whose reserve then did not hold (denied,
// failed) is dropped by the sweep when it finds no hold held.
func (s *Store) indexHolds(ctx context.Context, holds []string, clock, ttl int64) error {
	byShard := make(map[int][]string)
	for _, h := range holds {
		i := int(keySlot(h)) % s.indexShards()
		byShard[i] = append(byShard[i], h)
	}
	shards := make([]int, 0, len(byShard))
	for i := range byShard {
		shards = append(shards, i)
	}
	slices.Sort(shards)
	keep := strconv.FormatInt(s.holdRetain+sweepLease.Microseconds(), 10)
	errs := make([]error, len(shards))
	runAll(len(shards), func(j int) {
		args := append([]string{strconv.FormatInt(ttl, 10), keep}, byShard[shards[j]]...)
		_, errs[j] = s.runner.index(ctx, s.indexKey(shards[j]), "add", clock, args...)
	})
	return errors.Join(errs...)
}

// SweepHolds expires the holds of reservations made with release
// (floodgate.ReserveOptions.ReleaseOnExpiry) whose time has come and that
// nobody settled, giving their units back, and returns how many it
// expired. Each hold expires once, however many stores sweep at once: its
// state says whether it is still held. The store calls it every
// Options.HoldSweep from its first Reserve until Close; call it yourself
// with a negative HoldSweep. It visits the holds due, not the keyspace:
// one script per index key (one, or sixteen on a Cluster) and per slot of
// the holds due.
func (s *Store) SweepHolds(ctx context.Context) (int, error) {
	if s.closed.Load() {
		return 0, floodgate.ErrClosed
	}
	return s.sweepHolds(ctx)
}

func (s *Store) sweepHolds(ctx context.Context) (int, error) {
	clock := s.runner.stampAll(nil)
	total := 0
	var errs []error
	for i := range s.indexShards() {
		key := s.indexKey(i)
		for {
			members, err := s.runner.due(ctx, key, clock, sweepBatch, sweepLease.Microseconds())
			if err != nil {
				errs = append(errs, err)
				break
			}
			n, err := s.expireMembers(ctx, key, clock, members)
			total += n
			if err != nil {
				errs = append(errs, err)
				break
			}
			if len(members) < sweepBatch {
				break
			}
		}
	}
	return total, errors.Join(errs...)
}

// expireMembers expires the holds members of the index at key name, one
// script per slot, and then removes from the index those that are no
// longer held, and makes those not due yet due later. A slot whose script
// failed leaves its members claimed, for a sweep after the lease. It
// returns how many holds it expired.
func (s *Store) expireMembers(ctx context.Context, key string, clock int64, members []string) (int, error) {
	if len(members) == 0 {
		return 0, nil
	}
	var states, holds, done []string
	ours := s.prefix + ":" + keyVersion + ":"
	for _, m := range members {
		i := strings.LastIndex(m, ":hold:")
		if i < 0 || !strings.HasPrefix(m, ours) {
			done = append(done, m) // not a hold of this store: drop it
			continue
		}
		states, holds = append(states, m[:i]), append(holds, m)
	}
	groups := s.slotGroupsOf(states)
	outs := make([][]expired, len(groups))
	errs := make([]error, len(groups))
	runAll(len(groups), func(g int) {
		outs[g], errs[g] = s.runner.expire(ctx, pick(states, groups[g]), pick(holds, groups[g]), clock)
	})
	n := 0
	var later []error
	for g, idx := range groups {
		for j, i := range idx {
			if errs[g] != nil {
				break
			}
			switch e := outs[g][j]; e.outcome {
			case expireNotDue:
				_, err := s.runner.index(ctx, key, "later", clock, strconv.FormatInt(e.due, 10), holds[i])
				later = append(later, err)
			case expireNow:
				n++
				done = append(done, holds[i])
				if e.refunded > 0 {
					s.forgetDenial(states[i])
				}
			default:
				done = append(done, holds[i])
			}
		}
	}
	var err error
	if len(done) > 0 {
		_, err = s.runner.index(ctx, key, "done", clock, done...)
	}
	return n, errors.Join(append(append(errs, later...), err)...)
}

// startSweeper starts the sweeper, once, unless Options.HoldSweep is
// negative: a pass every Options.HoldSweep until Close.
func (s *Store) startSweeper() {
	if s.holdSweep < 0 {
		return
	}
	s.holdSweeper.start(s.holdSweep, func(ctx context.Context) {
		pass, done := context.WithTimeout(ctx, max(s.holdSweep, minSweepTimeout))
		defer done()
		// An error leaves the holds to the next pass: a library does not
		// log.
		_, _ = s.sweepHolds(pass)
	})
}

// stopSweeper stops the sweeper and waits for it.
func (s *Store) stopSweeper() { s.holdSweeper.halt() }
