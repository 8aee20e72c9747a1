package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algorithm"
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

// giveBackTimeout bounds the round trips that give unused units back.
const giveBackTimeout = 2 * time.Second

// applyBudget decides r, whose limit has a LocalBudget, from the key's
// local budget when it has the units, else by a claim: one script run that
// decides r and, if r is admitted, claims up to e.want more units (at most
// half of what remains). A key's first claim takes nothing extra; a second
// request in the same window starts its claims at 1 unit, doubling each
// time a budget runs out before its window ends, up to Limit.LocalBudget,
// and halving when an idle budget is given back. While one claim of a key
// is in flight, other callers wait for it and then try the new budget.
func (l *local) applyBudget(ctx context.Context, s *Store, r floodgate.Request, alg floodgate.Algorithm, key string) (floodgate.Decision, error) {
	l.sweepOnce.Do(func() {
		l.sweeping = true
		go l.sweeper(s)
	})
	sh := l.shard(key)
	for waits := 0; ; waits++ {
		now := l.now()
		sh.mu.Lock()
		e := sh.budgets[key]
		if e != nil && e.limit != r.Limit {
			// Another limit on the same key holds the entry.
			sh.mu.Unlock()
			return s.applyRemote(ctx, r, alg, key)
		}
		if e == nil {
			if len(sh.budgets) >= maxBudgetsPerShard {
				sh.mu.Unlock()
				return s.applyRemote(ctx, r, alg, key)
			}
			e = &budget{limit: r.Limit}
			sh.budgets[key] = e
		}
		if now.Before(e.end) && e.left >= r.Cost {
			e.left -= r.Cost
			e.lastUse = now
			d := floodgate.Decision{Allowed: true, Limit: e.max, Remaining: min(e.left+e.remote, e.max), ResetAfter: max(0, e.resetAt.Sub(now)), Now: now}
			sh.mu.Unlock()
			l.budgetHits.Add(1)
			return d, nil
		}
		if e.deny != nil {
			if d, ok := e.deny.serve(r.Limit, r.Cost, now); ok {
				d.Remaining = min(e.left, d.Limit)
				sh.mu.Unlock()
				l.denyHits.Add(1)
				return d, nil
			}
		}
		if ch := e.claiming; ch != nil && waits < maxClaimWaits {
			sh.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return floodgate.Decision{}, fmt.Errorf("redisstore: %s %s: %w", alg, key, ctx.Err())
			}
		}
		var ch chan struct{}
		want := int64(0)
		if e.claiming == nil {
			if now.Before(e.end) || now.Before(e.seenUntil) {
				// The budget ran out within its window, or the key is asked
				// for twice in one window: demand is high.
				e.want = min(max(1, 2*e.want), r.Limit.LocalBudget)
			}
			want = e.want
			ch = make(chan struct{})
			e.claiming = ch
		}
		sh.mu.Unlock()

		sent := now
		var d floodgate.Decision
		var granted, start int64
		var err error
		if want > 0 {
			d, granted, start, err = s.claim(ctx, r, alg, key, want)
		} else {
			// Nothing extra to claim: the algorithm's own script, smaller
			// than the budget script, so a key used once per window costs
			// Redis what it costs without a LocalBudget. The start derived
			// from ResetAfter is the window's for a fixed window and only a
			// hint of how long the key stays hot for a sliding one: no unit
			// depends on it, since none is claimed.
			d, err = s.applyRemote(ctx, r, alg, key)
			start = d.Now.UnixMicro() + d.ResetAfter.Microseconds() - int64(r.Limit.Period/time.Microsecond)
		}
		sh.mu.Lock()
		if ch != nil {
			e.claiming = nil
			close(ch)
		}
		if err == nil && sh.budgets[key] == e {
			// (An entry no longer in the map was forgotten by a Reset; what
			// it was granted is dropped, which admits less, never more.)
			l.noteClaim(e, r, alg, d, granted, start, sent)
			d.Remaining = min(d.Remaining+e.left, d.Limit)
		}
		sh.mu.Unlock()
		return d, err
	}
}

// noteClaim updates e, under its shard's lock, with the reply of a claim
// sent at local time sent.
func (l *local) noteClaim(e *budget, r floodgate.Request, alg floodgate.Algorithm, d floodgate.Decision, granted, start int64, sent time.Time) {
	e.lastUse = sent
	if !d.Allowed {
		if denialCacheable(r.Limit, alg) {
			if dn, ok := newDenial(r.Limit, r.Cost, d, sent); ok {
				e.deny = dn
			}
		}
		return
	}
	e.deny = nil
	// The window of both algorithms ends at start + Period in Redis's time.
	left := time.Duration(start+int64(r.Limit.Period/time.Microsecond)-d.Now.UnixMicro()) * time.Microsecond
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

// claim runs the budget script: it decides r and claims up to extra more
// units. It returns r's decision, the units granted and the start of the
// window they were counted in (Redis µs).
func (s *Store) claim(ctx context.Context, r floodgate.Request, alg floodgate.Algorithm, key string, extra int64) (floodgate.Decision, int64, int64, error) {
	now := s.nowMicros(&r)
	args := appendRequest(make([]string, 0, argsPerRequest+2), &r, alg, now)
	args = append(args, "claim", strconv.FormatInt(extra, 10))
	vals, err := s.run(ctx, scripts.budget[alg], []string{key}, args)
	if err != nil {
		return floodgate.Decision{}, 0, 0, fmt.Errorf("redisstore: %s %s: %w", alg, key, err)
	}
	if len(vals) != replyLen+2 {
		return floodgate.Decision{}, 0, 0, fmt.Errorf("redisstore: %s %s: %w: %d integers, want %d", alg, key, floodgate.ErrUnexpectedReply, len(vals), replyLen+2)
	}
	d, err := decode(vals[:replyLen], now)
	if err != nil {
		return floodgate.Decision{}, 0, 0, fmt.Errorf("redisstore: %s %s: %w", alg, key, err)
	}
	granted, start := vals[replyLen], vals[replyLen+1]
	switch {
	case granted < 0 || granted > extra || (granted > 0 && !d.Allowed):
		err = fmt.Errorf("%w: granted %d out of range", floodgate.ErrUnexpectedReply, granted)
	case start < 0 || start > algorithm.MaxExact:
		err = fmt.Errorf("%w: window_start_us %d out of range", floodgate.ErrUnexpectedReply, start)
	}
	if err != nil {
		return floodgate.Decision{}, 0, 0, fmt.Errorf("redisstore: %s %s: %w", alg, key, err)
	}
	return d, granted, start, nil
}

// giveBack returns n unused units of key under limit, claimed in the window
// that starts at start, and reports how many Redis took back (fewer, or
// none, if the state changed since: another window, a Reset).
func (s *Store) giveBack(ctx context.Context, key string, limit floodgate.Limit, n, start int64) (int64, error) {
	alg := algorithmOf(limit)
	r := floodgate.Request{Limit: limit, Cost: n}
	now := s.nowMicros(&r)
	args := appendRequest(make([]string, 0, argsPerRequest+2), &r, alg, now)
	args = append(args, "return", strconv.FormatInt(start, 10))
	vals, err := s.run(ctx, scripts.budget[alg], []string{key}, args)
	if err != nil {
		return 0, fmt.Errorf("redisstore: %s %s: give back: %w", alg, key, err)
	}
	if len(vals) != 2 || vals[0] < 0 || vals[0] > n {
		return 0, fmt.Errorf("redisstore: %s %s: give back: %w: %v", alg, key, floodgate.ErrUnexpectedReply, vals)
	}
	return vals[0], nil
}

// unusedUnits is unused units taken out of a budget to be given back.
type unusedUnits struct {
	key      string
	limit    floodgate.Limit
	n, start int64
}

// sweep gives back the unused units of budgets idle for BudgetIdle, at
// local time now, and drops the entries that hold nothing any more. It returns
// how many units Redis took back.
func (l *local) sweep(ctx context.Context, s *Store, now time.Time, all bool) int64 {
	var back []unusedUnits
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		for k, e := range sh.budgets {
			if e.claiming != nil {
				continue
			}
			idle := all || now.Sub(e.lastUse) >= l.idle
			if !idle {
				continue
			}
			if e.left > 0 && now.Before(e.end) {
				back = append(back, unusedUnits{k, e.limit, e.left, e.start})
				e.want = max(1, e.want/2)
			}
			e.left = 0
			if e.deny == nil || !now.Before(e.deny.until) {
				delete(sh.budgets, k)
			}
		}
		sh.mu.Unlock()
	}
	var total int64
	for _, h := range back {
		// An error leaves the units counted: fewer admitted, never more.
		n, _ := s.giveBack(ctx, h.key, h.limit, h.n, h.start)
		total += n
	}
	return total
}

// sweeper sweeps every BudgetIdle/2 until close.
func (l *local) sweeper(s *Store) {
	defer close(l.done)
	t := time.NewTicker(max(l.idle/2, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), giveBackTimeout)
			l.sweep(ctx, s, l.now(), false)
			cancel()
		}
	}
}

// close stops the sweeper and gives every budget's unused units back.
func (l *local) close(s *Store) {
	l.sweepOnce.Do(func() {})
	close(l.stop)
	if l.sweeping {
		<-l.done
	}
	ctx, cancel := context.WithTimeout(context.Background(), giveBackTimeout)
	defer cancel()
	l.sweep(ctx, s, l.now(), true)
}
