package region

import (
	"context"
	"sync"
	"time"

	"github.com/floodgate-rl/floodgate/grant"
	"github.com/floodgate-rl/floodgate/share"
)

// loop rebalances every Rebalance, and at once for a key's first grant,
// until Close.
func (s *Store) loop() {
	defer close(s.done)
	if !s.ticking {
		<-s.stop
		return
	}
	t := time.NewTicker(s.o.Rebalance)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-s.kick:
			s.rebalance(true)
		case <-t.C:
			s.rebalance(false)
		}
	}
}

// A grantJob is one call to home of a rebalance.
type grantJob struct {
	k   entryKey
	e   *entry
	req grant.Request
	out grant.Grant
	err error
}

// rebalance reports each key's demand to home and claims or returns share
// (only the keys that have no grant yet, if fresh): for each key, the
// target share is the policy's split of the limit over every holder's
// last reported demand and floor, with this region's own demand measured
// since the last rebalance. A share above the target is lowered here
// first, to no less than what the current window already used, after
// the decisions in flight on it have finished; then home is told, all
// keys at once. A share below the target grows only by what home grants.
// One rebalance runs at a time.
func (s *Store) rebalance(fresh bool) {
	s.tickMu.Lock()
	defer s.tickMu.Unlock()
	now := s.now(time.Time{})
	s.mu.Lock()
	type kv struct {
		k entryKey
		e *entry
	}
	all := make([]kv, 0, len(s.entries))
	for k, e := range s.entries {
		all = append(all, kv{k, e})
	}
	s.mu.Unlock()
	jobs := make([]*grantJob, 0, len(all))
	for _, x := range all {
		if fresh && isClosed(x.e.ready) {
			continue
		}
		if j := s.plan(x.k, x.e, now); j != nil {
			jobs = append(jobs, j)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-s.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			cctx, ccancel := context.WithTimeout(ctx, s.o.Timeout)
			defer ccancel()
			j.out, j.err = s.home.Grant(cctx, j.req)
		})
	}
	wg.Wait()
	for _, j := range jobs {
		s.install(j)
	}
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// plan measures e's demand, computes its target, lowers its share if it
// is above the target, and returns the call to home; e is dropped (and
// its share released) when it has been idle for Idle and holds nothing.
func (s *Store) plan(k entryKey, e *entry, now time.Time) *grantJob {
	elapsed := now.Sub(e.lastTick)
	measure := elapsed >= s.o.Rebalance/2 // a first grant's call comes at once: too soon to tell a rate
	e.um.Lock()
	limit, asked, lastUse := e.limit, e.asked, e.lastUse
	if measure {
		e.asked = 0
	}
	e.um.Unlock()
	L := limit.Limit
	if measure {
		e.demand.Measure(uint64(asked), elapsed, limit.Period)
		e.lastTick = now
	}
	floor := s.floor(L)
	idle := !lastUse.IsZero() && now.Sub(lastUse) >= max(s.o.Idle, 2*limit.Period)
	var want int64
	if !idle {
		var ok bool
		if want, ok = e.last.Target(L, share.Party{Demand: e.demand.Rate, Floor: floor}, s.o.Policy); !ok {
			want = L // no split known yet: whatever is free
		}
	}
	release := false
	e.mu.Lock()
	e.target = want
	if want < e.share {
		// Every decision on the share has finished: what the window used
		// is final, and no later decision can use more than the new share.
		// The window is the latest any decision can be in: a time taken
		// now, with the lock held, is at or after every decision's.
		cur := window(s.now(time.Time{}), limit.Period)
		e.um.Lock()
		used := e.used
		if e.win < cur {
			used = 0
		}
		e.um.Unlock()
		e.share = max(want, used)
	}
	// Ask for the target, or, if the share could not go that low (the
	// window used more), for the share as lowered.
	want = max(want, e.share)
	if idle && e.share == 0 {
		release = true
		e.gone = true
		s.mu.Lock()
		if s.entries[k] == e {
			delete(s.entries, k)
		}
		s.mu.Unlock()
	}
	e.mu.Unlock()
	return &grantJob{k: k, e: e, req: grant.Request{Key: k.key, Limit: limit, Holder: s.holder, Now: now,
		Term: s.o.Term, Grace: s.o.Grace, Want: want, Demand: e.demand.Rate, Floor: floor, Release: release}}
}

// install applies home's answer to j: the granted share (at least what the
// region asked for when it lowered), the end of its term, and every
// holder's demand for the next split. A failed call leaves the share and
// its term as they were: the grant runs out on its own.
func (s *Store) install(j *grantJob) {
	s.calls.Add(1)
	e := j.e
	e.mu.Lock()
	switch {
	case j.err != nil:
		s.failures.Add(1)
		e.failed = true
	case !j.req.Release:
		e.failed = false
		e.granted = true
		e.share = j.out.Share
		e.until = j.out.Until
		e.last = j.out
	}
	e.mu.Unlock()
	e.readyOnce.Do(func() { close(e.ready) })
}
