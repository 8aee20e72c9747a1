package redisstore

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// ApplyBatch decides rs all or nothing: see floodgate.Batcher. The requests
// may be of any keys. On standalone Redis and Sentinel, and on a Redis
// Cluster when every key is in one slot (the limits of one subject share
// its hash tag), the batch is one script run, atomic. On a Cluster, keys of
// several slots cannot meet in one script: each slot's requests are one
// run of their own, all at once, and if one slot denies, what the others
// took is given back (see "Batches" in docs/redis.md for the protocol
// and its worst case). A batch of one is an Apply.
func (s *Store) ApplyBatch(ctx context.Context, rs []floodgate.Request) ([]floodgate.Decision, error) {
	for i := range rs {
		if err := rs[i].Validate(); err != nil {
			return nil, fmt.Errorf("redisstore: batch request %d: %w", i, err)
		}
	}
	if len(rs) > 1 && slices.ContainsFunc(rs, func(r floodgate.Request) bool { return sliced(r.Limit) }) {
		if s.closed.Load() {
			return nil, floodgate.ErrClosed
		}
		return s.slicedBatch(ctx, rs)
	}
	switch len(rs) {
	case 0:
		return []floodgate.Decision{}, nil
	case 1:
		d, err := s.Apply(ctx, rs[0])
		if err != nil {
			return nil, err
		}
		return []floodgate.Decision{d}, nil
	}
	if s.closed.Load() {
		return nil, floodgate.ErrClosed
	}
	cs := make([]call, len(rs))
	for i, r := range rs {
		cs[i] = call{r: r, alg: r.Limit.EffectiveAlgorithm(), key: s.Key(r.Key, r.Limit)}
	}
	s.runner.stampAll(cs)
	groups := s.slotGroups(cs)
	if len(groups) == 1 {
		return s.runner.batch(ctx, cs, false)
	}
	return s.crossSlotBatch(ctx, cs, groups)
}

// slicedBatch decides rs, some of whose limits are decided on this
// instance's rate slices, all or nothing. The sliced requests are decided
// first, on their slices, each taking what it admits; then the others in
// Redis as a batch (ApplyBatch), or, when a slice denied, as a denied
// batch that takes nothing (each reporting its state or its denial, as a
// denied batch does). If anything denied, the slices get back what they
// took (TokenBucket.Refund on the local bucket, at most its burst, as if
// never taken) and report their state after it with RetryAfter 0. Giving
// back units never taken elsewhere cannot admit more than the slices
// would have without them, so the rate slices' bound holds; the batch is
// not one atomic step across instances (a slice's units are held for the
// Redis round trip, as a cross-slot batch's are).
func (s *Store) slicedBatch(ctx context.Context, rs []floodgate.Request) ([]floodgate.Decision, error) {
	ds := make([]floodgate.Decision, len(rs))
	var took, others []int
	tickets := make([]sliceTicket, len(rs))
	denied := false
	giveBack := func() {
		for _, i := range took {
			ds[i] = s.slices.giveBack(s.Key(rs[i].Key, rs[i].Limit), rs[i], tickets[i])
		}
	}
	for i, r := range rs {
		if !sliced(r.Limit) {
			others = append(others, i)
			continue
		}
		d, err := s.slices.take(ctx, call{r: r, alg: r.Limit.EffectiveAlgorithm(), key: s.Key(r.Key, r.Limit)}, &tickets[i])
		if err != nil {
			giveBack()
			return nil, err
		}
		ds[i] = d
		if d.Allowed && r.Cost > 0 {
			took = append(took, i)
		}
		denied = denied || !d.Allowed
	}
	if len(others) > 0 {
		sub := pick(rs, others)
		var sds []floodgate.Decision
		var err error
		if denied {
			sds, err = s.deniedBatch(ctx, sub)
		} else {
			sds, err = s.ApplyBatch(ctx, sub)
		}
		if err != nil {
			giveBack()
			return nil, err
		}
		for j, i := range others {
			ds[i] = sds[j]
			denied = denied || !sds[j].Allowed
		}
	}
	if denied {
		giveBack()
	}
	return ds, nil
}

// deniedBatch decides rs as a batch that another part denied: nothing is
// taken, a request with room reports the unchanged state with RetryAfter
// 0, a denied one its denial (batch.lua with 'deny', a run per slot).
func (s *Store) deniedBatch(ctx context.Context, rs []floodgate.Request) ([]floodgate.Decision, error) {
	cs := make([]call, len(rs))
	for i, r := range rs {
		cs[i] = call{r: r, alg: r.Limit.EffectiveAlgorithm(), key: s.Key(r.Key, r.Limit)}
	}
	s.runner.stampAll(cs)
	ds := make([]floodgate.Decision, len(rs))
	for _, g := range s.slotGroups(cs) {
		gds, err := s.runner.batch(ctx, pick(cs, g), true)
		if err != nil {
			return nil, err
		}
		for j, i := range g {
			ds[i] = gds[j]
		}
	}
	return ds, nil
}

// slotGroups groups the indexes of cs by the Cluster slot of their keys
// (slotGroupsOf).
func (s *Store) slotGroups(cs []call) [][]int {
	keys := make([]string, len(cs))
	for i := range cs {
		keys[i] = cs[i].key
	}
	return s.slotGroupsOf(keys)
}

// slotGroupsOf groups the indexes of keys by their Cluster slot, in order
// of first appearance; one group of all when the client is not a Cluster
// client, since one node then holds every key.
func (s *Store) slotGroupsOf(keys []string) [][]int {
	if len(keys) == 0 {
		return nil
	}
	if !s.conn.Cluster() {
		all := make([]int, len(keys))
		for i := range all {
			all[i] = i
		}
		return [][]int{all}
	}
	var groups [][]int
	bySlot := make(map[uint16]int)
	for i, key := range keys {
		slot := keySlot(key)
		g, ok := bySlot[slot]
		if !ok {
			g = len(groups)
			bySlot[slot] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	return groups
}

// compensateTimeout bounds the compensation of a call split over several
// slots (giving back what the slots that admitted took), which runs after
// the caller's context may have ended: a compensation that does not run
// leaves units taken.
const compensateTimeout = time.Second

// A slotRun is the run of one slot's requests of a call split over
// several slots: the indexes of the call's requests it holds, and what
// its script answered.
type slotRun struct {
	idx      []int
	ds       []floodgate.Decision
	err      error
	admitted bool
}

// pick returns the elements of xs at idx.
func pick[T any](xs []T, idx []int) []T {
	out := make([]T, len(idx))
	for j, i := range idx {
		out[j] = xs[i]
	}
	return out
}

// runAll runs f(0) to f(n-1), at once when n is above 1, and waits for
// them.
func runAll(n int, f func(i int)) {
	if n == 1 {
		f(0)
		return
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { f(i) })
	}
	wg.Wait()
}

// crossSlotBatch decides cs, of keys in several Cluster slots (groups),
// all or nothing, as floodgate.Batcher says: one batch script per slot,
// all at once; if every slot admits, that is the answer; if one denies,
// or fails, the slots that admitted get what they took back (refund.lua,
// each request's Refund at the time its decision reported) and report
// the state after it with RetryAfter 0, as a request that had room in a
// denied batch does. A refund that fails is not retried: its units stay
// taken, counted in CrossSlotStats.Failed, so the worst case is an
// over-charge, never an under-charge.
//
// Concurrency leases cannot be given back as they were (an acquire may
// have renewed a lease that held units before), so they are never
// compensated: every concurrency request of the batch must be in one
// slot, whose run goes last, only once every other slot admitted; if one
// did not, that slot runs as a denied batch (batch.lua's deny), which
// takes nothing.
func (s *Store) crossSlotBatch(ctx context.Context, cs []call, groups [][]int) ([]floodgate.Decision, error) {
	lease := -1 // the group with concurrency requests, if any
	for g, idx := range groups {
		for _, i := range idx {
			if cs[i].alg != floodgate.Concurrency {
				continue
			}
			if lease >= 0 && lease != g {
				return nil, &floodgate.FieldError{Kind: floodgate.ErrInvalidRequest, Field: "key",
					Problem: fmt.Sprintf("a batch over several Redis Cluster slots takes concurrency requests of one slot only, but request %d is in another slot than request %d", i, groups[lease][0])}
			}
			lease = g
		}
	}
	runs := make([]*slotRun, 0, len(groups))
	var last *slotRun
	for g, idx := range groups {
		if g == lease {
			last = &slotRun{idx: idx}
			continue
		}
		runs = append(runs, &slotRun{idx: idx})
	}
	s.crossSlot.calls.Add(1)
	batch := func(g *slotRun, deny bool) {
		g.ds, g.err = s.runner.batch(ctx, pick(cs, g.idx), deny)
		g.admitted = g.err == nil && g.ds[0].Allowed
	}
	runAll(len(runs), func(i int) { batch(runs[i], false) })
	admitted, failed := true, false
	for _, g := range runs {
		admitted = admitted && g.admitted
		failed = failed || g.err != nil
	}
	if last != nil && !failed {
		batch(last, !admitted)
		runs = append(runs, last)
		admitted = admitted && last.admitted
	}
	if admitted {
		return assemble(len(cs), runs), nil
	}
	s.compensate(ctx, admittedRuns(runs), func(ctx context.Context, g *slotRun) error {
		backs, ds, err := s.runner.refund(ctx, pick(cs, g.idx), g.ds)
		if err != nil {
			return err
		}
		for j := range ds {
			s.crossSlot.refunded.Add(backs[j])
			g.ds[j] = ds[j]
			if backs[j] > 0 {
				s.forgetDenial(cs[g.idx[j]].key)
			}
		}
		return nil
	}, costs(cs))
	for _, g := range runs {
		if g.err != nil {
			return nil, g.err
		}
	}
	return assemble(len(cs), runs), nil
}

// admittedRuns returns the runs that admitted their requests.
func admittedRuns(runs []*slotRun) []*slotRun {
	var out []*slotRun
	for _, g := range runs {
		if g.admitted {
			out = append(out, g)
		}
	}
	return out
}

// costs returns what a run of cs took: the costs of its requests if it
// admitted them, else nothing.
func costs(cs []call) func(g *slotRun) int64 {
	return func(g *slotRun) int64 {
		var n int64
		for _, i := range g.idx {
			if g.admitted {
				n += cs[i].r.Cost
			}
		}
		return n
	}
}

// compensate undoes runs (the runs that admitted, when the call is denied
// or failed) under a context of its own (compensateTimeout): the
// caller's may have ended, and a compensation that does not run leaves
// units taken. units is what a run took, for CrossSlotStats. A run
// compensated reports every decision denied with RetryAfter 0: the state
// after undo, or as it was if undo failed, which is never retried: its
// units stay taken.
func (s *Store) compensate(ctx context.Context, runs []*slotRun, undo func(ctx context.Context, g *slotRun) error, units func(g *slotRun) int64) {
	if len(runs) == 0 {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), compensateTimeout)
	defer cancel()
	runAll(len(runs), func(i int) {
		g := runs[i]
		s.crossSlot.compensated.Add(1)
		s.crossSlot.units.Add(units(g))
		if err := undo(cctx, g); err != nil {
			s.crossSlot.failed.Add(1)
		}
		for j := range g.ds {
			g.ds[j].Allowed, g.ds[j].RetryAfter = false, 0
		}
		g.admitted = false
	})
}

// assemble puts the decisions of runs back in the order of the call's n
// requests.
func assemble(n int, runs []*slotRun) []floodgate.Decision {
	out := make([]floodgate.Decision, n)
	for _, g := range runs {
		for j, i := range g.idx {
			out[i] = g.ds[j]
		}
	}
	return out
}

// crossSlotCounters are the atomic counters behind CrossSlotStats.
type crossSlotCounters struct {
	calls, compensated, units, refunded, failed atomic.Int64
}

// CrossSlotStats counts the all-or-nothing calls (ApplyBatch, Reserve)
// that a Store on a Redis Cluster split over several slots since it was
// opened, and what their compensation did (see "Batches" in
// docs/redis.md). All are 0 on standalone Redis and Sentinel, where a call is one
// script.
type CrossSlotStats struct {
	// Calls is the calls split over several slots.
	Calls int64
	// Compensated is the slot runs that admitted their requests and then
	// gave them back, because another slot of the call denied it (or
	// failed).
	Compensated int64
	// Units is the units those runs took, held for the time between their
	// run and its compensation: others saw them taken meanwhile.
	Units int64
	// Refunded is the units the compensations gave back: Units less what
	// the algorithms no longer counted (a window that ended in between)
	// and what failed compensations left.
	Refunded int64
	// Failed is the compensations that failed (an error, a timeout) and
	// were not retried: the units of those runs stay taken, an
	// over-charge that lasts until the state's window or refill frees
	// them, or for a reservation until its expiry.
	Failed int64
}

// CrossSlotStats returns the counters of the calls s split over several
// Cluster slots.
func (s *Store) CrossSlotStats() CrossSlotStats {
	c := &s.crossSlot
	return CrossSlotStats{Calls: c.calls.Load(), Compensated: c.compensated.Load(), Units: c.units.Load(), Refunded: c.refunded.Load(), Failed: c.failed.Load()}
}
