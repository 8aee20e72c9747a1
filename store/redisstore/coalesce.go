package redisstore

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// The coalescer: see "Coalescing" in docs/redis.md for what it does and
// promises. A group holds its runs in flight and the calls waiting. A call
// that finds a run free sends its own script on its own goroutine, as
// without coalescing; when any run of the group comes back (finish), the
// calls that waited go out in new runs, each on a goroutine of the
// coalescer's, never a caller's, so that no caller's goroutine is held
// past its own deadline by a run it shares. The goroutine whose shared run
// came back answers its calls and then sends the next run itself, so that
// under load a run costs no new goroutine (its start and its wake-up):
// runs follow each other on the same few goroutines.

// DefaultCoalesce is the default Options.Coalesce: one run in flight leaves
// Redis idle while its reply travels back, and each run more leaves fewer
// waiting calls to share a run (docs/redis.md, "Coalescing", links the
// measurements that chose it).
const DefaultCoalesce = 2

// maxCoalesced is the most requests in one run of multi.lua: a run blocks
// Redis for the time of all its decisions, so it is kept to well under a
// millisecond.
const maxCoalesced = 128

// coalescer is the layer of a Store that coalesces concurrent calls
// (Options.Coalesce), between the local budgets above and the runner
// below. It decides nothing itself: every call it takes goes to Redis,
// alone or in a shared run.
type coalescer struct {
	runner scriptRunner
	limit  int  // runs in flight per group before calls wait
	byTag  bool // a group per hash tag (Cluster); else one group

	// The shared runs sent and the calls in them (CoalesceStats).
	sharedRuns, sharedDecisions atomic.Int64

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
	c    call // stamped when it came
	done chan result
}

// scriptRunner is the layer below a coalescer, the runner: the time a call
// is decided at, and script runs of one call or of several.
type scriptRunner interface {
	stamp(r *floodgate.Request) int64
	one(ctx context.Context, c *call) (floodgate.Decision, error)
	multi(ctx context.Context, cs []*call) ([]result, error)
}

var (
	_ decider      = (*coalescer)(nil)
	_ scriptRunner = (*runner)(nil)
)

// newCoalescer returns a coalescer that keeps up to limit runs of runner
// in flight per group: per hash tag if byTag (a Cluster), else for all
// keys.
func newCoalescer(runner scriptRunner, limit int, byTag bool) *coalescer {
	return &coalescer{runner: runner, limit: limit, byTag: byTag, groups: make(map[string]*group)}
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

// decide stamps cl with its time and decides it, on its own if its group
// has a run free, else in the next run of its group.
func (c *coalescer) decide(ctx context.Context, cl call) (floodgate.Decision, error) {
	// cl goes to the runner in a kept waiter, alone or queued: by its
	// own address, it would be moved to the heap on every call.
	w := waiters.Get().(*waiter)
	w.ctx, w.c = ctx, cl
	w.c.now = c.runner.stamp(&w.c.r)
	if cl.r.Limit.Calendar.Unit != "" {
		// multi.lua takes a calendar's windows per parameter set, not
		// per request: a calendar limit is decided on its own.
		return c.alone(ctx, w)
	}
	c.mu.Lock()
	g, tag := c.groupOf(cl.key)
	if g.inflight < c.limit && len(g.queue) == 0 {
		g.inflight++
		c.mu.Unlock()
		// Deferred, so that the run ends even if the runner panics (an
		// HTTP server recovers a handler's panic and goes on).
		defer c.finishAlone(g, tag)
		return c.alone(ctx, w)
	}
	g.queue = append(g.queue, w)
	if len(g.queue) >= maxCoalesced {
		// A full run goes out at once, past the limit: the limit makes
		// calls wait so that they share a run, and these already fill
		// one. Without this, the runs in flight capped a store's
		// decisions at limit*maxCoalesced per round trip (853 a second
		// for 2 runs over a 300 ms round trip to another region), while
		// calls waited with Redis idle.
		run := make([]*waiter, len(g.queue))
		copy(run, g.queue)
		clear(g.queue)
		g.queue = g.queue[:0]
		g.inflight++
		go c.send(g, tag, run)
	}
	c.mu.Unlock()
	select {
	case res := <-w.done:
		// The run that sent it is done with it: kept for another call.
		*w = waiter{done: w.done}
		waiters.Put(w)
		return res.d, res.err
	case <-ctx.Done():
		// Sent or not: if not, the run that takes it drops it. A run
		// may still hold it and answer it, so it is never kept.
		return floodgate.Decision{}, cl.wrap(ctx.Err())
	}
}

// alone decides w's call, on the caller's goroutine, and keeps w for
// another call: the runner keeps nothing of the call.
func (c *coalescer) alone(ctx context.Context, w *waiter) (floodgate.Decision, error) {
	d, err := c.runner.one(ctx, &w.c)
	*w = waiter{done: w.done}
	waiters.Put(w)
	return d, err
}

// finishAlone ends a run of g that a caller sent alone on its own
// goroutine, and starts the next run on a goroutine of the coalescer's.
func (c *coalescer) finishAlone(g *group, tag string) {
	if run := c.finish(g, tag); run != nil {
		go c.send(g, tag, run)
	}
}

// waiters keeps the waiters whose answer was taken, each with its
// channel, empty: most calls wait when the store is busy, and the two
// allocations of a waiter were a noticeable part of a decision's.
// A waiter is put back only by the call that received its answer, once no
// run holds it (send answers each waiter once and last).
var waiters = sync.Pool{New: func() any { return &waiter{done: make(chan result, 1)} }}

// finish ends a run of g (of hash tag tag) and starts the runs of the calls
// that waited, as many as the limit allows: it returns the first of them,
// for its caller to send (the goroutine of a shared run that ended sends
// it itself; a caller's goroutine, which never sends a run it shares,
// starts it on a goroutine of its own), and starts the others, if any,
// on goroutines of their own. nil: no run starts.
func (c *coalescer) finish(g *group, tag string) []*waiter {
	var first []*waiter
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
		if first == nil {
			first = run
			continue
		}
		go c.send(g, tag, run)
	}
	if c.byTag && g.inflight == 0 && len(g.queue) == 0 {
		delete(c.groups, tag)
	}
	c.mu.Unlock()
	return first
}

// send decides the calls of run in one script and hands each its result,
// then sends the run that finish started after it, if any, and so on:
// the goroutine that runs send is the coalescer's, and ends when its
// group has no calls waiting as its run comes back.
func (c *coalescer) send(g *group, tag string, run []*waiter) {
	for run != nil {
		run = c.sendRun(g, tag, run)
	}
}

// sendRun decides the calls of run in one script, hands each its result,
// and returns the next run of g to send, if any (finish).
func (c *coalescer) sendRun(g *group, tag string, run []*waiter) (next []*waiter) {
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
		return c.finish(g, tag)
	case 1:
		w := live[0]
		d, err := c.runner.one(ctx, &w.c)
		next = c.finish(g, tag)
		w.done <- result{d, err}
		return next
	}
	cs := make([]*call, len(live))
	for i, w := range live {
		cs[i] = &w.c
	}
	c.sharedRuns.Add(1)
	c.sharedDecisions.Add(int64(len(live)))
	res, err := c.runner.multi(ctx, cs)
	// The next run is counted in flight before this one's calls are
	// answered, as when it went out at once on a goroutine of its own;
	// it is sent once they are, a few channel sends later.
	next = c.finish(g, tag)
	var again []*waiter
	for i, w := range live {
		switch {
		case err != nil:
			w.done <- result{err: w.c.wrap(err)}
		case errors.Is(res[i].err, errAlone):
			again = append(again, w)
		case res[i].err != nil:
			w.done <- result{err: w.c.wrap(res[i].err)}
		default:
			w.done <- res[i]
		}
	}
	// A request that failed in the run failed before its first write, so
	// it changed nothing: alone, it fails again with its own error (or,
	// if what failed it is gone, is decided). Each goes on its own, at
	// once, as its call would have without coalescing.
	for _, w := range again {
		go func() {
			d, err := c.runner.one(w.ctx, &w.c)
			w.done <- result{d, err}
		}()
	}
	return next
}

// runContext is the context of a run: it ends at the latest deadline of
// the calls, or never if one of them has no deadline. It carries none of
// the calls' values or cancellation, so that no caller ends the others'
// run.
//
// It carries the longest deadline from send (WithTimeout) of the calls,
// if every call has one, so that the run's script is bounded from its
// send as each of its calls would be.
func runContext(run []*waiter) (context.Context, context.CancelFunc) {
	var latest time.Time
	var send *time.Duration // the longest, as its calls' contexts carry it
	bounded, sendBounded := true, true
	for _, w := range run {
		if d := sendTimeoutOf(w.ctx); d != nil && *d > 0 {
			if send == nil || *d > *send {
				send = d
			}
		} else {
			sendBounded = false
		}
		d, ok := w.ctx.Deadline()
		if !ok {
			bounded = false
			continue
		}
		if d.After(latest) {
			latest = d
		}
	}
	ctx := context.Background()
	if sendBounded && send != nil {
		ctx = withSendTimeout(ctx, send)
	}
	if !bounded || latest.IsZero() {
		return ctx, func() {}
	}
	return context.WithDeadline(ctx, latest)
}
