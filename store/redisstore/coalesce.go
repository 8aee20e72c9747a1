package redisstore

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// The coalescer: see "Coalescing" in the package doc for what it does and
// promises. A group holds its runs in flight and the calls waiting. A call
// that finds a run free sends its own script on its own goroutine, as
// without coalescing; when any run of the group comes back (finish), the
// calls that waited go out in new runs, each on a goroutine of its own, so
// that no caller's goroutine is held past its own deadline by a run it
// shares.

// DefaultCoalesce is the default Options.Coalesce. Of 1, 2, 4 and 8 runs
// in flight, 2 made the most decisions per second at 16, 64 and 256
// callers on 100k keys (BENCHMARKS.md, "Coalescing"): one run leaves Redis
// idle while its reply travels back, more coalesce less.
const DefaultCoalesce = 2

// maxCoalesced is the most requests in one run of multi.lua: a run blocks
// Redis for the time of all its decisions (a few µs each), so it is kept
// to well under a millisecond.
const maxCoalesced = 128

// coalescer coalesces a Store's concurrent remote decisions.
type coalescer struct {
	s     *Store
	limit int  // runs in flight per group before calls wait
	byTag bool // a group per hash tag (Cluster); else one group

	runs, decisions atomic.Int64 // shared runs sent and the calls in them (CoalesceStats)

	mu     sync.Mutex
	all    group             // the group when !byTag
	groups map[string]*group // by hash tag, when byTag; a group is deleted when idle
}

// group is the runs in flight and the calls waiting for one, of keys that
// may share a script.
type group struct {
	inflight int
	queue    []*waiter
}

// waiter is a call waiting to go out in a run.
type waiter struct {
	ctx  context.Context
	r    floodgate.Request
	alg  floodgate.Algorithm
	key  string
	now  int64 // as passed to the script; see Store.nowMicros
	done chan result
}

type result struct {
	d   floodgate.Decision
	err error
}

func newCoalescer(s *Store, limit int, byTag bool) *coalescer {
	return &coalescer{s: s, limit: limit, byTag: byTag, groups: make(map[string]*group)}
}

// tagOf is the hash tag of a key of the store, from its '{': the prefix
// holds no brace and the encoded subject escapes them.
func tagOf(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		return key[i:]
	}
	return key
}

// groupOf returns key's group; c.mu is held.
func (c *coalescer) groupOf(key string) (*group, string) {
	if !c.byTag {
		return &c.all, ""
	}
	tag := tagOf(key)
	g := c.groups[tag]
	if g == nil {
		g = &group{}
		c.groups[tag] = g
	}
	return g, tag
}

// apply decides r at now, on its own if its group has a run free, else in
// the next run of its group.
func (c *coalescer) apply(ctx context.Context, r floodgate.Request, alg floodgate.Algorithm, key string, now int64) (floodgate.Decision, error) {
	c.mu.Lock()
	g, tag := c.groupOf(key)
	if g.inflight < c.limit && len(g.queue) == 0 {
		g.inflight++
		c.mu.Unlock()
		defer c.finish(g, tag)
		return c.s.applyOne(ctx, r, alg, key, now)
	}
	w := &waiter{ctx: ctx, r: r, alg: alg, key: key, now: now, done: make(chan result, 1)}
	g.queue = append(g.queue, w)
	c.mu.Unlock()
	select {
	case res := <-w.done:
		return res.d, res.err
	case <-ctx.Done():
		// Sent or not: if not, the run that takes it drops it.
		return floodgate.Decision{}, fmt.Errorf("redisstore: %s %s: %w", alg, key, ctx.Err())
	}
}

// finish ends a run of g (of hash tag tag) and starts the runs of the calls
// that waited, as many as the limit allows.
func (c *coalescer) finish(g *group, tag string) {
	c.mu.Lock()
	g.inflight--
	for g.inflight < c.limit && len(g.queue) > 0 {
		n := min(len(g.queue), maxCoalesced)
		run := make([]*waiter, n)
		copy(run, g.queue)
		// Shift rather than reslice, so that the queue's array does not
		// keep the waiters of past runs alive.
		m := copy(g.queue, g.queue[n:])
		clear(g.queue[m:])
		g.queue = g.queue[:m]
		g.inflight++
		go c.send(g, tag, run)
	}
	if c.byTag && g.inflight == 0 && len(g.queue) == 0 {
		delete(c.groups, tag)
	}
	c.mu.Unlock()
}

// send decides the calls of run in one script and hands each its result.
func (c *coalescer) send(g *group, tag string, run []*waiter) {
	live := run[:0]
	for _, w := range run {
		if w.ctx.Err() == nil {
			live = append(live, w)
		}
	}
	ctx, cancel := runContext(live)
	defer cancel()
	switch len(live) {
	case 0:
		c.finish(g, tag)
		return
	case 1:
		w := live[0]
		d, err := c.s.applyOne(ctx, w.r, w.alg, w.key, w.now)
		c.finish(g, tag)
		w.done <- result{d, err}
		return
	}
	keys := make([]string, len(live))
	args := make([]string, 0, len(live)*(1+argsPerRequest))
	for i, w := range live {
		keys[i] = w.key
		args = append(args, string(w.alg))
		args = appendRequest(args, &w.r, w.alg, w.now)
	}
	c.runs.Add(1)
	c.decisions.Add(int64(len(live)))
	vals, err := c.s.run(ctx, scripts.multi, keys, args)
	c.finish(g, tag)
	if err == nil && len(vals) != replyLen*len(live) {
		err = fmt.Errorf("%w: %d integers for %d requests, want %d", floodgate.ErrUnexpectedReply, len(vals), len(live), replyLen*len(live))
	}
	var again []*waiter
	for i, w := range live {
		if err != nil {
			w.done <- result{err: fmt.Errorf("redisstore: %s %s: %w", w.alg, w.key, err)}
			continue
		}
		v := vals[i*replyLen : (i+1)*replyLen]
		if v[0] == multiFailed {
			again = append(again, w)
			continue
		}
		d, err := decode(v, w.now)
		if err != nil {
			err = fmt.Errorf("redisstore: %s %s: %w", w.alg, w.key, err)
		}
		w.done <- result{d, err}
	}
	// A request that failed in the run failed before its first write, so
	// it changed nothing: alone, it fails again with its own error (or,
	// if what failed it is gone, is decided). Each goes on its own, at
	// once, as its call would have without coalescing.
	for _, w := range again {
		go func() {
			d, err := c.s.applyOne(w.ctx, w.r, w.alg, w.key, w.now)
			w.done <- result{d, err}
		}()
	}
}

// multiFailed is MULTI_FAILED in multi.lua: the allowed field of a request
// that failed.
const multiFailed = 2

// runContext is the context of a run: it ends at the latest deadline of
// the calls, or never if one of them has no deadline. It carries none of
// the calls' values or cancellation, so that no caller ends the others'
// run.
func runContext(run []*waiter) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, w := range run {
		d, ok := w.ctx.Deadline()
		if !ok {
			return context.Background(), func() {}
		}
		if d.After(latest) {
			latest = d
		}
	}
	if latest.IsZero() {
		return context.Background(), func() {}
	}
	return context.WithDeadline(context.Background(), latest)
}

// CoalesceStats counts the script runs a Store shared between concurrent
// calls (see "Coalescing" in the package doc) since it was opened.
type CoalesceStats struct {
	// Runs is the script runs that decided several calls at once.
	Runs int64
	// Decisions is the calls sent in those runs; Decisions/Runs is the
	// mean number of calls a shared run decided.
	Decisions int64
}

// CoalesceStats returns how many script runs s shared and how many calls
// they carried, for metrics: `floodgate serve` exports them as
// floodgate_coalesced_runs_total and floodgate_coalesced_decisions_total.
// Both are 0 with coalescing off.
func (s *Store) CoalesceStats() CoalesceStats {
	if s.co == nil {
		return CoalesceStats{}
	}
	return CoalesceStats{Runs: s.co.runs.Load(), Decisions: s.co.decisions.Load()}
}
