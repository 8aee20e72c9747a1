package redisstore

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"fmt"
	"math/bits"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algorithm"
	"github.com/floodgate-rl/floodgate/grant"
	"github.com/floodgate-rl/floodgate/share"
)

// rateSlices is the layer of floodgate.Limit.LocalBudget for TokenBucket
// and GCRA: each instance decides a key on a slice of the limit's rate
// (and the same fraction of its burst) that home grants it on Redis
// through the grant protocol (package grant, its scripts/home.lua), and
// the slices follow demand. See "Rate slices" in docs/redis.md for the
// design and why the instances together never admit more than the limit.
type rateSlices struct {
	home   grant.Home
	holder string // this Store's name at home: unique per Store
	clock  localClock
	base   time.Time // the clock at the start: bucket time is measured from it
	renew  time.Duration
	term   time.Duration
	grace  time.Duration
	idle   time.Duration
	shards *shards[*slice]
	// mark runs seen.lua on key's mark (the runner's seenEval).
	mark func(ctx context.Context, key string, mark, ttl int64) (int64, error)

	sweeper *loop

	// admitted counts requests admitted on a slice (LocalStats), calls the
	// grant calls made.
	admitted, calls atomic.Int64
}

// A slice is one key's share of a limit's rate at this instance. Every
// field is read and written with its shard's lock held.
type slice struct {
	limit floodgate.Limit
	// share is the units per Period this instance decides on, never above
	// what home holds for it: lowered here before home is told, raised
	// only once home granted it. burst is its part of the limit's
	// capacity, burstOf(share).
	share, burst int64
	// tb is the local bucket, of rate share per Period and capacity burst:
	// the memory store's token bucket step (which admits what GCRA admits).
	tb algorithm.TokenBucket
	// until is the end of the grant: no decision on the share at or after
	// it: the grant's term, or the end last recorded in the key's mark
	// (seen.lua), whichever is earlier. next is when the next grant call
	// is due.
	until, next time.Time
	// recorded is the end this instance last recorded in the mark.
	recorded time.Time
	// Demand: units asked since tick, and the measure reported to home.
	asked  int64
	tick   time.Time
	demand grant.Demand
	// last is home's last answer: every live holder's demand and share,
	// and this instance's place among them (Self -1: none yet).
	last    grant.Grant
	lastUse time.Time
	// busy is closed when the grant call in flight, if any, is done;
	// gone marks a slice given back, which callers no longer use.
	busy chan struct{}
	gone bool
	// gen counts the changes of the bucket other than refills: every
	// resize and every admission. A batch's give-back returns units only
	// to the bucket it took them from, unchanged since (sliceTicket).
	gen uint64
}

// sliceTicket is what a batch's sliced request took (Store.slicedBatch):
// the slice and its gen right after the take.
type sliceTicket struct {
	e   *slice
	gen uint64
}

// Defaults of the rate slices' Options.
const (
	DefaultSliceRenew = 200 * time.Millisecond
	DefaultSliceTerm  = 2 * time.Second
	DefaultSliceGrace = 500 * time.Millisecond
)

// errSlicedAtomic is the error of a reservation with a sliced limit: the
// Redis script that holds units for later decides on the key's state in
// Redis, and a sliced limit's rate is in its instances' slices, not there.
var errSlicedAtomic = fmt.Errorf("%w: local_budget: a token_bucket or gcra with a local_budget is decided on this instance's slice of its rate, which a reservation cannot hold; use Apply, or the limit without local_budget", floodgate.ErrInvalidRequest)

// sliced reports whether l is decided on rate slices: a TokenBucket or
// GCRA with a LocalBudget.
func sliced(l floodgate.Limit) bool {
	alg := l.EffectiveAlgorithm()
	return l.LocalBudget > 0 && (alg == floodgate.TokenBucket || alg == floodgate.GCRA)
}

func newRateSlices(home grant.Home, mark func(ctx context.Context, key string, mark, ttl int64) (int64, error), clock localClock, renew, term, grace, idle time.Duration) *rateSlices {
	return &rateSlices{
		home: home, mark: mark, holder: "redisstore#" + grant.Incarnation(), clock: clock, base: clock.now(),
		renew: renew, term: term, grace: grace, idle: max(idle, 2*renew), shards: newShards[*slice](),
		sweeper: newLoop(),
	}
}

// micros is t on the bucket's time line: microseconds since the epoch
// when the slices started, plus the time since by the clock's monotonic
// reading, so that a step of the wall clock adds no tokens.
func (rs *rateSlices) micros(t time.Time) int64 {
	return rs.base.UnixMicro() + t.Sub(rs.base).Microseconds()
}

// homeLimit is what home is told of l: its Limit, which the slices share
// out in whole units, and a Period of one microsecond. Home rounds a
// grant's end up to a multiple of the Period it is given (a fixed window's
// boundary, for regions); a bucket has no windows, so its grants end
// SliceTerm after their renewal, to the microsecond. The key of the home
// state is the state key's, which holds the algorithm and the real
// Period.
func homeLimit(l floodgate.Limit) floodgate.Limit {
	return floodgate.Limit{Limit: l.Limit, Period: time.Microsecond}
}

// sameSlicing reports whether a and b, limits of one Redis key (so of one
// algorithm and period), slice alike: the same rate, capacity and
// LocalBudget (their names may differ).
func sameSlicing(a, b floodgate.Limit) bool {
	return a.Limit == b.Limit && a.Capacity() == b.Capacity() && a.LocalBudget == b.LocalBudget
}

// burstOf is the part of l's capacity that goes with share units per
// Period of its rate: ⌊share × Capacity / Limit⌋, so that shares adding up
// to at most Limit have bursts adding up to at most Capacity.
// share × Capacity ≤ Limit × Capacity ≤ 2^52 (Limit.Validate).
func burstOf(l floodgate.Limit, share int64) int64 {
	if l.Limit <= 0 || share <= 0 {
		return 0
	}
	return share * l.Capacity() / l.Limit
}

// maxShare is the most units per Period one instance holds: the limit's
// LocalBudget, at most its Limit.
func maxShare(l floodgate.Limit) int64 { return min(l.LocalBudget, l.Limit) }

// params is e's local bucket in the algorithm's form.
func (e *slice) params() algorithm.Params {
	return algorithm.Params{Limit: e.share, Period: e.limit.Period.Microseconds(), Burst: e.burst}
}

// resize sets e's share at bucket time now: the tokens the bucket holds
// (whole ones: the part of a token being earned is dropped) are kept, at
// most the new burst; a share that grew gains rate from now on, and no
// tokens. Every change of a share goes through here, so a bucket never
// holds more than its burst nor earns faster than its share.
func (e *slice) resize(now, share int64) {
	e.gen++
	var level int64
	if e.share > 0 && e.burst > 0 {
		st, _ := e.tb.Step(e.params(), now, 0)
		level = e.burst - min(max(0, st.Taken), e.burst)
	}
	e.share, e.burst = share, burstOf(e.limit, share)
	e.tb = algorithm.TokenBucket{}
	if taken := e.burst - min(level, e.burst); taken > 0 {
		e.tb = algorithm.TokenBucket{Taken: taken, Last: now}
	}
}

// decide decides c, whose limit is sliced (a TokenBucket or GCRA with a
// LocalBudget), on this instance's slice of the key's rate: in process,
// except for the call to home that grants or renews the slice, which the
// caller that finds it due makes (once per SliceRenew per key) and which
// other callers wait for only when there is no live grant to decide on.
func (rs *rateSlices) decide(ctx context.Context, c call) (floodgate.Decision, error) {
	return rs.take(ctx, c, nil)
}

// take is decide, and if c is admitted and tk is not nil, records in tk
// what it took from (for giveBack).
func (rs *rateSlices) take(ctx context.Context, c call, tk *sliceTicket) (floodgate.Decision, error) {
	if !c.r.Now.IsZero() {
		return floodgate.Decision{}, c.wrap(fmt.Errorf("%w: now: a %s with a local_budget is decided on this process's clock (Options.Clock), so a request cannot carry its own time; leave Now zero (no Limiter Options.Clock)",
			floodgate.ErrInvalidRequest, c.alg))
	}
	rs.sweeper.start(rs.renew, rs.sweepIdle)
	sh := rs.shards.of(c.key)
	var grantErr error
	called := false // at most one grant call per decision
	for waits := 0; ; waits++ {
		// The time is read with the lock held, so that each bucket steps
		// through times in order, as the algorithm's exactness needs.
		sh.mu.Lock()
		now := rs.clock.now()
		e := sh.m[c.key]
		switch {
		case e == nil && len(sh.m) >= maxBudgetsPerShard:
			sh.mu.Unlock()
			return floodgate.Decision{Limit: c.r.Limit.Capacity(), RetryAfter: rs.renew, Now: now}, nil
		case e == nil:
			e = &slice{limit: c.r.Limit, last: grant.Grant{Self: -1}}
			sh.m[c.key] = e
		case !sameSlicing(e.limit, c.r.Limit) && e.busy == nil:
			// The limit changed (a config reload): decide on nothing until
			// home grants a share of the new one.
			e.resize(rs.micros(now), 0)
			e.limit, e.last, e.next = c.r.Limit, grant.Grant{Self: -1}, time.Time{}
		}
		live := now.Before(e.until) && !e.gone && sameSlicing(e.limit, c.r.Limit)
		if !live && e.share > 0 && !e.gone {
			// The grant ended: its share is no longer this instance's.
			e.resize(rs.micros(now), 0)
		}
		if e.busy == nil && !e.gone && (!live || !now.Before(e.next)) && !called {
			req := rs.plan(c.key, e, now)
			e.busy = make(chan struct{})
			recorded, l := e.recorded, e.limit
			sh.mu.Unlock()
			out, err := rs.home.Grant(ctx, req)
			var start int64
			if err == nil && out.Share > 0 && out.Until.After(recorded) {
				alone := len(out.Parties) == 1 && out.Self == 0
				recorded, start = rs.record(ctx, c.key, l, out.Until, recorded, min(out.Share, maxShare(l)), alone, req.Now)
			}
			sh.mu.Lock()
			rs.install(e, req, out, err, rs.clock.now(), recorded, start)
			sh.mu.Unlock()
			grantErr, called = err, true
			continue
		}
		if !live && e.busy != nil && waits < maxClaimWaits {
			ch := e.busy
			sh.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return floodgate.Decision{}, c.wrap(ctx.Err())
			}
		}
		if !live && grantErr != nil {
			sh.mu.Unlock()
			return floodgate.Decision{}, c.wrap(grantErr)
		}
		d := rs.step(e, c.r, now, live)
		if tk != nil && d.Allowed {
			*tk = sliceTicket{e: e, gen: e.gen}
		}
		sh.mu.Unlock()
		if d.Allowed {
			rs.admitted.Add(1)
		}
		return d, nil
	}
}

// step decides r on e at now: on its bucket while its grant is live, a
// denial otherwise. The caller holds e's shard lock.
func (rs *rateSlices) step(e *slice, r floodgate.Request, now time.Time, live bool) floodgate.Decision {
	e.asked += r.Cost
	e.lastUse = now
	us := rs.micros(now)
	var ad algorithm.Decision
	if live {
		e.tb, ad = e.tb.Step(e.params(), us, r.Cost)
		if ad.Allowed && r.Cost > 0 {
			e.gen++
		}
	} else {
		ad = algorithm.Decision{RetryAfter: algorithm.Never}
	}
	d := floodgate.FromAlgorithm(ad, now.UnixMicro())
	d.Limit = r.Limit.Capacity()
	if d.RetryAfter == floodgate.Never && r.Cost <= d.Limit {
		// Above this slice's burst, or no slice yet, but not above the
		// limit's: the slice may grow at the next renewal.
		d.RetryAfter = rs.renew
	}
	return d
}

// giveBack returns to key's slice the cost r took from it, in a batch that
// was denied elsewhere (Store.slicedBatch), and reports the slice's state
// after, as a request with room in a denied batch does: not allowed,
// RetryAfter 0. The bucket gets back what is missing now, at most the cost
// (TokenBucket.Refund), and only if nothing but time changed it since the
// take (tk: no admission, no resize): then its level only rose since, so
// what is missing now is what the take still owes, and the bucket holds
// what it would have held had the units never been taken. Had it admitted
// meanwhile, the refill the take let in may have been spent already
// (TestSliceBatchGiveBackOverrun), so it keeps nothing back, as a slice
// whose grant ended, or that was given back or resized, keeps nothing:
// either can only admit less.
func (rs *rateSlices) giveBack(key string, r floodgate.Request, tk sliceTicket) floodgate.Decision {
	sh := rs.shards.of(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := rs.clock.now()
	e := sh.m[key]
	if e == nil || e.gone || !now.Before(e.until) || !sameSlicing(e.limit, r.Limit) || e.share <= 0 {
		return floodgate.Decision{Limit: r.Limit.Capacity(), Now: now.Truncate(time.Microsecond)}
	}
	us, p := rs.micros(now), e.params()
	if e == tk.e && e.gen == tk.gen {
		e.tb, _ = e.tb.Refund(p, us, us, r.Cost)
	}
	_, ad := e.tb.Step(p, us, 0)
	d := floodgate.FromAlgorithm(ad, now.UnixMicro())
	d.Limit = r.Limit.Capacity()
	d.Allowed, d.RetryAfter = false, 0
	return d
}

// plan measures e's demand, computes the share to ask home for, lowers
// e's share to it first if it is lower, and returns the call to make. The
// caller holds e's shard lock: no decision on e is in flight, so a share
// lowered here is final before home hears of it.
func (rs *rateSlices) plan(key string, e *slice, now time.Time) grant.Request {
	l := e.limit
	switch elapsed := now.Sub(e.tick); {
	case e.tick.IsZero():
		e.tick = now
	case elapsed >= rs.renew/2:
		e.demand.Measure(uint64(e.asked), elapsed, l.Period)
		e.asked, e.tick = 0, now
	}
	want, ok := e.last.Target(l.Limit, share.Party{Demand: e.demand.Rate}, share.Proportional)
	if !ok {
		want = l.Limit // no split known yet: what is free, up to the most one instance holds
	}
	want = min(want, maxShare(l))
	if want < e.share {
		e.resize(rs.micros(now), want)
	}
	return grant.Request{Key: key, Limit: homeLimit(l), Holder: rs.holder, Now: now,
		Term: rs.term, Grace: rs.grace, Want: max(want, e.share), Demand: e.demand.Rate}
}

// install applies home's answer to the call req, received at local time
// at: a share above e's is taken from now on (the grant came first), and
// the grant's end and every holder's demand are kept for the next split.
// A failed call leaves e as it was (a call that timed out may have run: e
// then holds less than home counts, never more); the next is due after a
// SliceRenew. The caller holds e's shard lock; install ends e's call.
//
// recorded is the end recorded in the key's mark (e's decisions stop at
// it too), and start the tokens a slice that grows may start with (see
// record), at most its burst.
func (rs *rateSlices) install(e *slice, req grant.Request, out grant.Grant, err error, at, recorded time.Time, start int64) {
	rs.calls.Add(1)
	e.next = at.Add(rs.renew)
	if ch := e.busy; ch != nil {
		e.busy = nil
		close(ch)
	}
	if err != nil || req.Release || homeLimit(e.limit) != req.Limit {
		return
	}
	if e.share > 0 && !at.Before(e.until) {
		// The grant ended while the call was in flight: home may have
		// given its share to others since (a call that runs late runs at
		// the time it was sent), so what the bucket earned at the old share
		// after the end is not this instance's
		// (TestSliceStaleRenewalOverrun). Drop it, as decide does.
		e.resize(rs.micros(at), 0)
	}
	if recorded.After(e.recorded) {
		e.recorded = recorded
	}
	e.until = out.Until
	if out.Share > 0 && e.recorded.Before(e.until) {
		// No decision past the end recorded in the mark. (A slice of
		// nothing admits nothing, whatever its end.)
		e.until = e.recorded
	}
	e.last = out
	if out.Share != e.share && at.Before(e.until) {
		e.resize(rs.micros(at), min(out.Share, maxShare(e.limit)))
		if start > 0 && e.burst > 0 {
			e.tb = algorithm.TokenBucket{} // a full bucket
			if taken := e.burst - min(start, e.burst); taken > 0 {
				e.tb = algorithm.TokenBucket{Taken: taken, Last: rs.micros(at)}
			}
		}
	}
}

// record records in key's mark that this instance may decide l until
// grantEnd plus a SliceTerm (so that the next few renewals need no
// record), and reports the end recorded (prev if the call failed) and
// the tokens the slice may start with, from the mark that was there
// ("Rate slices" in docs/redis.md has the argument). With x the time
// the call was sent and silence = x − (mark + SliceGrace), the time since
// anyone may last have admitted:
//
//   - silence at least the refill time: the whole burst (the one bucket
//     would be full);
//   - else, if this instance was the only live holder at its grant call
//     (alone), and the silence had begun when it sent that call
//     (grantSent): what its share earns in the silence, ⌊share ×
//     silence / Period⌋ (every other holder was granted after it, and earned
//     at most its own share since);
//   - else nothing.
func (rs *rateSlices) record(ctx context.Context, key string, l floodgate.Limit, grantEnd, prev time.Time, share int64, alone bool, grantSent time.Time) (time.Time, int64) {
	sent := rs.clock.now()
	mark := grantEnd.Add(rs.term)
	refill, ok := refillTime(l)
	if !ok {
		refill = algorithm.MaxPeriod // refills in no useful time: never full
	}
	life := mark.Sub(sent) + time.Duration(refill)*time.Microsecond + rs.grace
	old, err := rs.mark(ctx, key+":seen", mark.UnixMicro(), max(1, life.Milliseconds()+1))
	if err != nil {
		// The call may have run, recording more than prev: no matter,
		// decisions stop at prev.
		return prev, 0
	}
	recorded := time.UnixMicro(mark.UnixMicro())
	quiet := old + rs.grace.Microseconds() // the silence begins
	silence := sent.UnixMicro() - quiet
	switch {
	case ok && silence >= refill:
		return recorded, burstOf(l, share)
	case ok && alone && silence > 0 && quiet <= grantSent.UnixMicro():
		// share × silence < 2^40 × 2^48, and the quotient is below the
		// burst: it fits in 64 bits.
		hi, lo := bits.Mul64(uint64(share), uint64(silence))
		q, _ := bits.Div64(hi, lo, uint64(l.Period.Microseconds()))
		return recorded, int64(q)
	}
	return recorded, 0
}

// refillTime is how long l's bucket takes to fill from empty, in µs,
// rounded up: ⌈Capacity × Period / Limit⌉, at most MaxPeriod for a valid
// limit (Limit.Validate).
func refillTime(l floodgate.Limit) (int64, bool) {
	if l.Limit <= 0 {
		return 0, false
	}
	hi, lo := bits.Mul64(uint64(l.Capacity()), uint64(l.Period.Microseconds()))
	if hi >= uint64(l.Limit) {
		return 0, false
	}
	q, r := bits.Div64(hi, lo, uint64(l.Limit))
	if r > 0 {
		q++
	}
	if q > uint64(algorithm.MaxPeriod) {
		return 0, false
	}
	return int64(q), true
}

// sweep gives back the slices idle for SliceIdle (all of them, if all) at
// local time now: each is lowered to nothing here, then released at home,
// and dropped. It returns how many it released.
func (rs *rateSlices) sweep(ctx context.Context, now time.Time, all bool) int {
	type job struct {
		sh  *shard[*slice]
		key string
		e   *slice
		req grant.Request
	}
	var jobs []job
	for i := range rs.shards.parts {
		sh := &rs.shards.parts[i]
		sh.mu.Lock()
		for k, e := range sh.m {
			if e.busy != nil || !all && now.Sub(e.lastUse) < rs.idle {
				continue
			}
			e.resize(rs.micros(now), 0)
			e.gone = true
			e.busy = make(chan struct{})
			jobs = append(jobs, job{sh, k, e, grant.Request{Key: k, Limit: homeLimit(e.limit),
				Holder: rs.holder, Now: now, Term: rs.term, Grace: rs.grace, Release: true}})
		}
		sh.mu.Unlock()
	}
	for _, j := range jobs {
		// An error leaves the grant at home to run out: less admitted
		// until it does, never more.
		out, err := rs.home.Grant(ctx, j.req)
		j.sh.mu.Lock()
		rs.install(j.e, j.req, out, err, rs.clock.now(), time.Time{}, 0)
		if j.sh.m[j.key] == j.e {
			delete(j.sh.m, j.key)
		}
		j.sh.mu.Unlock()
	}
	return len(jobs)
}

// sweepIdle is a pass of the sweeper, every SliceRenew until close: it
// gives back the slices idle for their idle time. A pass in progress at
// close runs to its end (giveBackTimeout), not to close's.
func (rs *rateSlices) sweepIdle(context.Context) {
	ctx, cancel := context.WithTimeout(context.Background(), giveBackTimeout)
	defer cancel()
	rs.sweep(ctx, rs.clock.now(), false)
}

// close stops the sweeper and gives every slice back, but for a slice
// whose grant call is in flight, whose grant runs out after SliceTerm.
func (rs *rateSlices) close() {
	rs.sweeper.halt()
	ctx, cancel := context.WithTimeout(context.Background(), giveBackTimeout)
	defer cancel()
	rs.sweep(ctx, rs.clock.now(), true)
}

//go:embed scripts/seen.lua
var seenLua string

var seenSHA = func() string {
	sum := sha1.Sum([]byte(seenLua))
	return hex.EncodeToString(sum[:])
}()

// seenEval runs seen.lua on the mark key, recording mark (µs) for ttl
// (ms), and returns the mark that was there.
func (rn *runner) seenEval(ctx context.Context, key string, mark, ttl int64) (int64, error) {
	vals, err := rn.homeEval(ctx, key, seenLua, seenSHA, []string{strconv.FormatInt(mark, 10), strconv.FormatInt(ttl, 10)})
	if err != nil {
		return 0, err
	}
	if len(vals) != 1 || vals[0] < 0 {
		return 0, fmt.Errorf("seen.lua: %w: %v", floodgate.ErrUnexpectedReply, vals)
	}
	return vals[0], nil
}

// homeEval runs home.lua (package grant's) or seen.lua for the rate
// slices: by EVALSHA, then EVAL after NOSCRIPT, even with
// Options.Functions (neither script is part of the store's library). It is
// the grant.EvalFunc of the slices' grant.ScriptHome.
func (rn *runner) homeEval(ctx context.Context, key, src, sha string, args []string) ([]int64, error) {
	keys := []string{key}
	ctx, cancel := sendDeadline(ctx)
	defer cancel()
	vals, err := rn.c.EvalSHA(ctx, sha, keys, args, rn.wait.within(ctx))
	if err != nil && rn.c.IsNoScript(err) {
		vals, err = rn.c.Eval(ctx, src, keys, args, rn.wait.within(ctx))
	}
	if err != nil {
		return nil, classify(err)
	}
	return vals, nil
}
