package redisstore

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// localBudgets is the layer of floodgate.Limit.LocalBudget, between the
// deny cache above and the coalescer (or the runner) below: it keeps a
// local budget per key of a limit with a LocalBudget, admits requests from
// it in process, and claims units from Redis, and gives them back, through
// the runner. Every other request goes to next, as do requests with their
// own Now (their time is not the store's) and of cost 0 (they change
// nothing). See "Local decisions" in docs/redis.md.
type localBudgets struct {
	next    decider // the coalescer, or the runner without coalescing
	claimer claimer // the runner
	clock   localClock
	idle    time.Duration // Options.BudgetIdle
	shards  *shards[*budget]

	// The sweeper gives back idle budgets; started with the first budget.
	sweeper *loop

	// Decisions made in process (LocalStats): admitted from a budget,
	// denied from a budget's last denial.
	admitted, denied atomic.Int64
}

// claimer is what the local budgets need of the runner: a claim, which
// decides a request and counts extra units for this instance, and a
// give-back of unused units.
type claimer interface {
	claim(ctx context.Context, c call, extra int64) (d floodgate.Decision, granted, start int64, err error)
	giveBack(ctx context.Context, key string, limit floodgate.Limit, n, start int64) (int64, error)
}

var (
	_ decider = (*localBudgets)(nil)
	_ claimer = (*runner)(nil)
)

// A budget is the local budget of one key under one limit
// (floodgate.Limit.LocalBudget): units this store claimed from Redis and
// admits in process. Its units were counted in Redis like admitted requests
// when claimed, so spending them before the window they were counted in
// ends admits nothing Redis would not have (see scripts/budget.lua for
// why).
type budget struct {
	limit   floodgate.Limit
	left    int64     // claimed units not spent yet
	end     time.Time // local time the units stop being spendable
	start   int64     // the window's start in Redis (µs), to give units back
	resetAt time.Time // local time of the state's reset, as last known
	remote  int64     // Redis's Remaining at the last claim
	max     int64     // Decision.Limit
	want    int64     // the extra units the next claim asks for
	// seenUntil is the local time the window of the last claim that
	// claimed nothing extra ends: a request before it finds the key in use
	// twice in one window, and only then does the key start claiming, so
	// that a key used once per window costs one script, as without a local
	// budget, and nothing to give back.
	seenUntil time.Time
	lastUse   time.Time
	deny      *denial // the last denial, while it holds
	// claiming is closed when the claim in flight, if any, is done; others
	// wait for it rather than each claiming.
	claiming chan struct{}
}

// maxClaimWaits is how many claims in flight a caller waits for, trying
// the budget after each, before it runs a claim of its own (of nothing
// more than its request) rather than wait longer.
const maxClaimWaits = 8

// maxBudgetsPerShard bounds the local budgets held at once: 32 × 2048 =
// 65,536 keys. A request over a full shard is decided in Redis, without a
// local budget.
const maxBudgetsPerShard = 2048

// giveBackTimeout bounds the round trips that give unused units back.
const giveBackTimeout = 2 * time.Second

// newLocalBudgets returns the local budgets above next, claiming through
// claimer, giving back what went unused for idle.
func newLocalBudgets(next decider, claimer claimer, clock localClock, idle time.Duration) *localBudgets {
	return &localBudgets{
		next: next, claimer: claimer, clock: clock, idle: idle, shards: newShards[*budget](),
		sweeper: newLoop(),
	}
}

// decide decides c, whose limit has a LocalBudget, from the key's local
// budget when it has the units, else by a claim: one script run that
// decides c and, if c is admitted, claims up to e.want more units (at most
// half of what remains). A key's first claim takes nothing extra; a second
// request in the same window starts its claims at 1 unit, doubling each
// time a budget runs out before its window ends, up to Limit.LocalBudget,
// and halving when an idle budget is given back. While one claim of a key
// is in flight, other callers wait for it and then try the new budget.
func (b *localBudgets) decide(ctx context.Context, c call) (floodgate.Decision, error) {
	if !c.r.Now.IsZero() || c.r.Cost <= 0 || c.r.Limit.LocalBudget <= 0 {
		return b.next.decide(ctx, c)
	}
	b.sweeper.start(max(b.idle/2, time.Millisecond), b.sweepIdle)
	sh := b.shards.of(c.key)
	for waits := 0; ; waits++ {
		now := b.clock.now()
		sh.mu.Lock()
		e := b.entry(sh, c)
		if e == nil {
			// Another limit of the key holds its entry, or the shard is full.
			sh.mu.Unlock()
			return b.next.decide(ctx, c)
		}
		if d, ok := e.spend(c.r.Cost, now); ok {
			sh.mu.Unlock()
			b.admitted.Add(1)
			return d, nil
		}
		if d, ok := e.denied(c.r, now); ok {
			sh.mu.Unlock()
			b.denied.Add(1)
			return d, nil
		}
		if ch := e.claiming; ch != nil && waits < maxClaimWaits {
			sh.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return floodgate.Decision{}, c.wrap(ctx.Err())
			}
		}
		want, ch := e.startClaim(now, c.r.Limit.LocalBudget)
		sh.mu.Unlock()
		return b.claim(ctx, sh, e, c, want, ch, now)
	}
}

// entry returns the budget of c's key in sh, whose lock the caller holds,
// making it if there is none; nil if another limit holds the key's entry
// or sh is full.
func (b *localBudgets) entry(sh *shard[*budget], c call) *budget {
	e := sh.m[c.key]
	switch {
	case e != nil && e.limit != c.r.Limit:
		return nil
	case e == nil && len(sh.m) >= maxBudgetsPerShard:
		return nil
	case e == nil:
		e = &budget{limit: c.r.Limit}
		sh.m[c.key] = e
	}
	return e
}

// claim decides c in Redis, at local time sent: with a claim of want more
// units, or, want 0, by the algorithm's own script through next. ch, if
// not nil, is the claim in flight that this call owns and closes. The
// reply updates e if e is still the key's budget.
func (b *localBudgets) claim(ctx context.Context, sh *shard[*budget], e *budget, c call, want int64, ch chan struct{}, sent time.Time) (floodgate.Decision, error) {
	var d floodgate.Decision
	var granted, start int64
	var err error
	if want > 0 {
		d, granted, start, err = b.claimer.claim(ctx, c, want)
	} else {
		// Nothing extra to claim: the algorithm's own script, smaller
		// than the budget script, so a key used once per window costs
		// Redis what it costs without a LocalBudget. The start derived
		// from ResetAfter is the window's for a fixed window and only a
		// hint of how long the key stays hot for a sliding one: no unit
		// depends on it, since none is claimed.
		d, err = b.next.decide(ctx, c)
		start = d.Now.UnixMicro() + d.ResetAfter.Microseconds() - int64(c.r.Limit.Period/time.Microsecond)
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if ch != nil {
		e.claiming = nil
		close(ch)
	}
	if err == nil && sh.m[c.key] == e {
		// (An entry no longer in the map was forgotten by a Reset; what it
		// was granted is dropped, which admits less, never more.)
		e.noteClaim(c, d, granted, start, sent)
		d.Remaining = min(d.Remaining+e.left, d.Limit)
	}
	return d, err
}

// spend admits cost from e at local time now, if e has the units and its
// window has not ended. The caller holds e's shard lock.
func (e *budget) spend(cost int64, now time.Time) (floodgate.Decision, bool) {
	if !now.Before(e.end) || e.left < cost {
		return floodgate.Decision{}, false
	}
	e.left -= cost
	e.lastUse = now
	return floodgate.Decision{Allowed: true, Limit: e.max, Remaining: min(e.left+e.remote, e.max), ResetAfter: max(0, e.resetAt.Sub(now)), Now: now}, true
}

// denied returns e's last denial for r at local time now, if it still
// holds. The caller holds e's shard lock.
func (e *budget) denied(r floodgate.Request, now time.Time) (floodgate.Decision, bool) {
	if e.deny == nil {
		return floodgate.Decision{}, false
	}
	d, ok := e.deny.serve(r.Limit, r.Cost, now)
	if ok {
		d.Remaining = min(e.left, d.Limit)
	}
	return d, ok
}

// startClaim makes the caller the owner of e's next claim, at local time
// now, unless a claim is in flight: it returns how many extra units to
// claim and the channel to close when done. The caller holds e's shard
// lock.
func (e *budget) startClaim(now time.Time, localBudget int64) (int64, chan struct{}) {
	if e.claiming != nil {
		// Waited long enough for others' claims: decide alone.
		return 0, nil
	}
	if now.Before(e.end) || now.Before(e.seenUntil) {
		// The budget ran out within its window, or the key is asked for
		// twice in one window: demand is high.
		e.want = min(max(1, 2*e.want), localBudget)
	}
	e.claiming = make(chan struct{})
	return e.want, e.claiming
}

// noteClaim updates e, under its shard's lock, with the reply of c's claim
// sent at local time sent: d, granted extra units counted in the window
// that starts at start (Redis µs).
func (e *budget) noteClaim(c call, d floodgate.Decision, granted, start int64, sent time.Time) {
	e.lastUse = sent
	if !d.Allowed {
		if denialCacheable(c.r.Limit, c.alg) {
			if dn, ok := newDenial(c.r.Limit, c.r.Cost, d, sent); ok {
				e.deny = dn
			}
		}
		return
	}
	e.deny = nil
	// The window of both algorithms ends at start + Period in Redis's time.
	left := time.Duration(start+int64(c.r.Limit.Period/time.Microsecond)-d.Now.UnixMicro()) * time.Microsecond
	end := sent.Add(clockMargin(left))
	if granted <= 0 {
		e.seenUntil = end
		// The budget's fields describe the window of its units: a claim
		// of nothing in another window (a caller that claimed while
		// another's claim was in flight) leaves them.
		if e.left == 0 || !sent.Before(e.end) || e.start == start {
			e.max, e.remote, e.resetAt = d.Limit, d.Remaining, sent.Add(d.ResetAfter)
		}
		return
	}
	e.max, e.remote, e.resetAt = d.Limit, d.Remaining, sent.Add(d.ResetAfter)
	if e.start == start && sent.Before(e.end) {
		e.left += granted
		if end.After(e.end) {
			e.end = end
		}
		return
	}
	// A new window: units left of an older one can no longer be spent.
	e.left, e.start, e.end = granted, start, end
}

// forget drops the budget of key, if any (a Reset through this store),
// under every limit. Its units are not given back: the state they were
// counted in is gone.
func (b *localBudgets) forget(key string) { b.shards.forget(key) }

// unusedUnits is unused units taken out of a budget to be given back.
type unusedUnits struct {
	key      string
	limit    floodgate.Limit
	n, start int64
}

// sweep gives back the unused units of budgets idle for BudgetIdle (all
// of them, if all), at local time now, and drops the entries that hold
// nothing any more. It returns how many units Redis took back.
func (b *localBudgets) sweep(ctx context.Context, now time.Time, all bool) int64 {
	var back []unusedUnits
	for i := range b.shards.parts {
		sh := &b.shards.parts[i]
		sh.mu.Lock()
		for k, e := range sh.m {
			idle := all || now.Sub(e.lastUse) >= b.idle
			if e.claiming != nil || !idle {
				continue
			}
			if e.left > 0 && now.Before(e.end) {
				back = append(back, unusedUnits{k, e.limit, e.left, e.start})
				e.want = max(1, e.want/2)
			}
			e.left = 0
			if e.deny == nil || !now.Before(e.deny.until) {
				delete(sh.m, k)
			}
		}
		sh.mu.Unlock()
	}
	var total int64
	for _, u := range back {
		// An error leaves the units counted: fewer admitted, never more.
		n, _ := b.claimer.giveBack(ctx, u.key, u.limit, u.n, u.start)
		total += n
	}
	return total
}

// sweepIdle is a pass of the sweeper, every BudgetIdle/2 until close: it
// gives back the budgets idle for BudgetIdle. A pass in progress at close
// runs to its end (giveBackTimeout), not to close's.
func (b *localBudgets) sweepIdle(context.Context) {
	ctx, cancel := context.WithTimeout(context.Background(), giveBackTimeout)
	defer cancel()
	b.sweep(ctx, b.clock.now(), false)
}

// close stops the sweeper and gives every budget's unused units back.
func (b *localBudgets) close() {
	b.sweeper.halt()
	ctx, cancel := context.WithTimeout(context.Background(), giveBackTimeout)
	defer cancel()
	b.sweep(ctx, b.clock.now(), true)
}
