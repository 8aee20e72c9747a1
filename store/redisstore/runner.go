package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algorithm"
)

// runner is the lowest layer of a Store, the only one that talks to
// Redis: it stamps each call with the time passed to its script, encodes
// the call as the script's arguments, runs the script through the Conn by
// EVALSHA (sending the source again after NOSCRIPT) or, with
// Options.Functions, by FCALL (loading the library when it is missing),
// each followed by the WAIT of Options.WaitReplicas, and checks and
// decodes the reply. Its methods are one per script: a single decision
// (one), a coalesced run (multi), a batch, and a local budget's claim and
// give-back. It is safe for concurrent use.
type runner struct {
	c     Conn
	clock floodgate.Clock // nil: the server's TIME
	wait  Wait            // Replicas 0: no WAIT
	lib   *libLoader      // nil: EVALSHA
}

var _ decider = (*runner)(nil)

// stamp is the time passed to r's script, in µs: Request.Now, the Clock
// with ClientTime, or -1 for the server's TIME.
func (rn *runner) stamp(r *floodgate.Request) int64 {
	switch {
	case !r.Now.IsZero():
		return r.Now.UnixMicro()
	case rn.clock != nil:
		return rn.clock.Now().UnixMicro()
	}
	return -1
}

// decide decides c in a script run of its own: the runner as the layer
// below the local budgets when coalescing is off.
func (rn *runner) decide(ctx context.Context, c call) (floodgate.Decision, error) {
	c.now = rn.stamp(&c.r)
	return rn.one(ctx, &c)
}

// one decides c, already stamped, in one run of its algorithm's script.
func (rn *runner) one(ctx context.Context, c *call) (floodgate.Decision, error) {
	if usualGCRA(c) {
		// gcra_multi.lua, a run of one; gcra.lua if it declined.
		cs := [1]*call{c}
		keys, args, order, sets, _ := gcraMultiArgs(cs[:])
		res, err := rn.gcraMulti(ctx, cs[:], keys, args, order, sets)
		switch {
		case err != nil:
			return floodgate.Decision{}, c.wrap(err)
		case res[0].err == nil:
			return res[0].d, nil
		case res[0].err != errAlone:
			return floodgate.Decision{}, c.wrap(res[0].err)
		}
	}
	// One allocation for the key and the arguments.
	kv := make([]string, 1, 1+argsPerRequest)
	kv[0] = c.key
	args := appendRequest(kv[1:1], &c.r, c.alg, c.now)
	var vals []int64
	var err error
	var fast *script
	switch {
	case c.alg == floodgate.FixedWindow && counted(c.r.Limit) && c.r.Limit.Calendar.Unit == "":
		fast = scripts.fast
	case c.alg == floodgate.SlidingWindow:
		fast = scripts.slidingFast
	}
	if fast != nil {
		vals, err = rn.run(ctx, fast, kv[:1], args)
		if err == nil && len(vals) == 1 && vals[0] == fastDeclined {
			vals, err = nil, nil // not the usual request: the algorithm's script decides it
		}
	}
	if vals == nil && err == nil {
		vals, err = rn.run(ctx, scripts.single[c.alg], kv[:1], args)
	}
	if err != nil {
		return floodgate.Decision{}, c.wrap(err)
	}
	if len(vals) != replyLen {
		return floodgate.Decision{}, c.wrap(fmt.Errorf("%w: %d integers, want %d", floodgate.ErrUnexpectedReply, len(vals), replyLen))
	}
	d, err := decode(vals, c.now)
	if err != nil {
		return floodgate.Decision{}, c.wrap(err)
	}
	return d, nil
}

// fastDeclined is FAST_DECLINED in fixed_window_fast.lua and
// sliding_window_fast.lua: the one integer of its reply when it left the
// request, unchanged, to the algorithm's script.
const fastDeclined = 2

// A result is the outcome of one call.
type result struct {
	d   floodgate.Decision
	err error
}

// errAlone is the error of a call that failed inside a run of multi.lua:
// it failed before its first write, so it changed nothing, and it should
// run again alone to report its own error.
var errAlone = errors.New("redisstore: failed in a shared run")

// multiFailed is MULTI_FAILED in multi.lua: the allowed field of a request
// that failed.
const multiFailed = 2

// multi decides cs, already stamped, in one run of multi.lua, each on its
// own, or, when every call of cs is a usual aligned fixed-window request,
// of fixed_window_multi.lua, a usual sliding-window request, of
// sliding_window_multi.lua (windowMulti), or a usual GCRA request, of
// gcra_multi.lua (gcraMulti). The error is the run's;
// without one, each result is its call's decision, its call's error, or
// errAlone.
func (rn *runner) multi(ctx context.Context, cs []*call) ([]result, error) {
	if keys, args, order, sets, ok := fastMultiArgs(cs); ok {
		return rn.windowMulti(ctx, scripts.fastMulti, cs, keys, args, order, sets)
	}
	if keys, args, order, sets, ok := gcraMultiArgs(cs); ok {
		return rn.gcraMulti(ctx, cs, keys, args, order, sets)
	}
	if keys, args, order, sets, ok := slidingMultiArgs(cs); ok {
		return rn.windowMulti(ctx, scripts.slidingMulti, cs, keys, args, order, sets)
	}
	keys, args := multiArgs(cs)
	sc := scripts.multiOf[cs[0].alg]
	for _, c := range cs[1:] {
		if c.alg != cs[0].alg {
			sc = scripts.multi
			break
		}
	}
	vals, err := rn.run(ctx, sc, keys, args)
	if err != nil {
		return nil, err
	}
	if len(vals) != replyLen*len(cs) {
		return nil, fmt.Errorf("%w: %d integers for %d requests, want %d", floodgate.ErrUnexpectedReply, len(vals), len(cs), replyLen*len(cs))
	}
	out := make([]result, len(cs))
	for i, c := range cs {
		v := vals[i*replyLen : (i+1)*replyLen]
		if v[0] == multiFailed {
			out[i].err = errAlone
			continue
		}
		out[i].d, out[i].err = decode(v, c.now)
	}
	return out, nil
}

// windowMulti decides cs in one run of sc, fixed_window_multi.lua or
// sliding_window_multi.lua, whose KEYS and ARGV are keys and args, the
// call of its k-th key cs[order[k]] and its parameter sets sets (see
// windowMultiArgs); as multi, a request the script declined is errAlone.
// The reply is, per set, its now and the µs left in its window, then one
// packed decision per request of the set (unpackFast, unpackSliding),
// which sliding_window_multi.lua follows with its retry_after_us when it
// denied the request.
func (rn *runner) windowMulti(ctx context.Context, sc *script, cs []*call, keys, args []string, order []int, sets []fastSet) ([]result, error) {
	vals, err := rn.run(ctx, sc, keys, args)
	if err != nil {
		return nil, err
	}
	sliding := sc == scripts.slidingMulti
	short := func() ([]result, error) {
		return nil, fmt.Errorf("%w: %d integers for %d requests of %d sets, too few", floodgate.ErrUnexpectedReply, len(vals), len(cs), len(sets))
	}
	out := make([]result, len(cs))
	k, i := 0, 0
	for _, set := range sets {
		if i+2+set.n > len(vals) {
			return short()
		}
		now, left := vals[i], vals[i+1]
		i += 2
		for range set.n {
			j := order[k]
			k++
			if i >= len(vals) {
				return short()
			}
			x := vals[i]
			i++
			if x == fastDeclinedRequest {
				out[j].err = errAlone
				continue
			}
			var v [replyLen]int64
			if sliding {
				retry := int64(0)
				if x&1 == 0 && x >= 0 {
					if i >= len(vals) {
						return short()
					}
					retry = vals[i]
					i++
				}
				v = unpackSliding(x, set.limit, set.period, now, left, retry)
			} else {
				v = unpackFast(x, set.limit, cs[j].r.Cost, now, left)
			}
			out[j].d, out[j].err = decode(v[:], cs[j].now)
		}
	}
	if i != len(vals) {
		return nil, fmt.Errorf("%w: %d integers for %d requests of %d sets, %d left over", floodgate.ErrUnexpectedReply, len(vals), len(cs), len(sets), len(vals)-i)
	}
	return out, nil
}

// fastDeclinedRequest is DECLINED in fixed_window_multi.lua: a request it
// left unchanged, for the single path.
const fastDeclinedRequest = -1

// unpackFast is the reply of fixed_window.lua for a request of cost cost
// under limit, decided at now in a window that ends left µs after, from
// its packed decision x in the reply of fixed_window_multi.lua (remaining
// * 4 + 2 if the counter is above 0 + allowed). A negative x unpacks to
// values that decode rejects.
func unpackFast(x, limit, cost, now, left int64) [replyLen]int64 {
	allowed, remaining, reset, retry := x&1, x>>2, int64(0), int64(0)
	if x&2 != 0 {
		reset = left
	}
	switch {
	case x < 0:
		allowed = -1
	case allowed == 1:
	case cost > limit:
		retry = algorithm.Never
	default:
		retry = left
	}
	return [replyLen]int64{allowed, limit, remaining, reset, retry, now}
}

// unpackSliding is the reply of sliding_window.lua for a request under
// limit and period, decided at now, left µs before the end of its window,
// from its packed decision x in the reply of sliding_window_multi.lua
// (remaining * 8 + reset * 2 + allowed: reset 2 if the window's counter is
// above 0, 1 if only the one before is, else 0) and its retry_after_us. A
// negative x, or a reset code of 3, unpacks to values that decode rejects.
func unpackSliding(x, limit, period, now, left, retry int64) [replyLen]int64 {
	allowed, remaining, reset := x&1, x>>3, int64(0)
	switch (x >> 1) & 3 {
	case 1:
		reset = left
	case 2:
		reset = left + period
	case 3:
		reset = -1
	}
	if x < 0 {
		allowed = -1
	}
	return [replyLen]int64{allowed, limit, remaining, reset, retry, now}
}

// fastSet is a parameter set of fixed_window_multi.lua and the number of
// its requests.
type fastSet struct {
	now, limit, period int64
	flags, n           int
}

// fastMultiArgs is the KEYS and ARGV of one run of fixed_window_multi.lua
// for cs, the index in cs of the call of each key, and the parameter sets,
// if every call of cs is a usual request of an aligned fixed window (as
// fixed_window_fast.lua takes: no first hit, calendar, release or burst);
// ok is false otherwise. See windowMultiArgs.
func fastMultiArgs(cs []*call) (keys, args []string, order []int, sets []fastSet, ok bool) {
	return windowMultiArgs(cs, floodgate.FixedWindow)
}

// slidingMultiArgs is fastMultiArgs for sliding_window_multi.lua: ok if
// every call of cs is a usual sliding-window request (as
// sliding_window_fast.lua takes: no calendar, release or burst).
func slidingMultiArgs(cs []*call) (keys, args []string, order []int, sets []fastSet, ok bool) {
	return windowMultiArgs(cs, floodgate.SlidingWindow)
}

// windowMultiArgs is the KEYS and ARGV of one run of alg's multi script
// (fixed_window_multi.lua, sliding_window_multi.lua) for cs, the index in
// cs of the call of each key, and the parameter sets, if every call of cs
// is of alg with no first hit, calendar, release, burst or wait; ok is
// false otherwise.
// The keys are grouped by parameter set (the time, limit, period and
// flags), in the order each set was first seen, each set's in the order of
// cs; ARGV is the number of sets, each set's numbers and count, then each
// key's cost.
func windowMultiArgs(cs []*call, alg floodgate.Algorithm) (keys, args []string, order []int, sets []fastSet, ok bool) {
	sets = make([]fastSet, 0, 2)
	var idxBuf [maxCoalesced]uint8
	idx := idxBuf[:0]
	if len(cs) > maxCoalesced {
		return nil, nil, nil, nil, false
	}
	for _, c := range cs {
		if c.alg != alg || c.r.Release || c.r.Limit.Calendar.Unit != "" {
			return nil, nil, nil, nil, false
		}
		p := c.r.Limit.Params()
		if p.FirstHit || p.Burst != 0 || p.Wait != 0 {
			return nil, nil, nil, nil, false
		}
		set := fastSet{now: c.now, limit: p.Limit, period: p.Period}
		if p.CountRejected {
			set.flags = flagCountRejected
		}
		j := 0
		for j < len(sets) && (sets[j].now != set.now || sets[j].limit != set.limit || sets[j].period != set.period || sets[j].flags != set.flags) {
			j++
		}
		if j == len(sets) {
			sets = append(sets, set)
		}
		sets[j].n++
		idx = append(idx, uint8(j))
	}
	// next[j] is the position of set j's next key.
	next := make([]int, len(sets))
	for j := 1; j < len(sets); j++ {
		next[j] = next[j-1] + sets[j-1].n
	}
	keys = make([]string, len(cs))
	order = make([]int, len(cs))
	args = make([]string, 1+len(sets)*fastSetWidth+len(cs))
	args[0] = multiIndex[len(sets)]
	for j, set := range sets {
		a := args[1+j*fastSetWidth:]
		a[0] = strconv.FormatInt(set.now, 10)
		a[1] = strconv.FormatInt(set.limit, 10)
		a[2] = strconv.FormatInt(set.period, 10)
		a[3] = multiIndex[set.flags]
		a[4] = multiIndex[set.n]
	}
	costs := args[1+len(sets)*fastSetWidth:]
	for i, c := range cs {
		k := next[idx[i]]
		next[idx[i]]++
		keys[k], order[k] = c.key, i
		costs[k] = strconv.FormatInt(c.r.Cost, 10)
	}
	return keys, args, order, sets, true
}

// multiSet is a parameter set of multi.lua: what the requests of one run
// that share it have in common.
type multiSet struct {
	alg                       floodgate.Algorithm
	now, limit, period, burst int64
	flags                     int
}

// multiIndex holds the decimal strings of the indexes of multi.lua's
// parameter sets, so that a run allocates none.
var multiIndex = func() (s [maxCoalesced + 1]string) {
	for i := range s {
		s[i] = strconv.Itoa(i)
	}
	return s
}()

// multiArgs is the KEYS and ARGV of one run of multi.lua for cs: the
// parameter sets (each distinct algorithm, time and limit of cs once, in
// the order first seen), then each call's set, cost and id.
func multiArgs(cs []*call) (keys, args []string) {
	keys = make([]string, len(cs))
	var setsBuf [4]multiSet
	sets := setsBuf[:0]
	idx := make([]int, len(cs))
	for i, c := range cs {
		keys[i] = c.key
		p := c.r.Limit.Params()
		set := multiSet{alg: c.alg, now: c.now, limit: p.Limit, period: p.Period, burst: p.Burst, flags: requestFlags(p, &c.r)}
		j := slices.Index(sets, set)
		if j < 0 {
			j = len(sets)
			sets = append(sets, set)
		}
		idx[i] = j + 1
	}
	args = make([]string, 0, 1+len(sets)*multiSetWidth+len(cs)*multiReqWidth)
	args = append(args, multiIndex[len(sets)])
	for _, set := range sets {
		args = append(args, string(set.alg),
			strconv.FormatInt(set.now, 10),
			strconv.FormatInt(set.limit, 10),
			strconv.FormatInt(set.period, 10),
			strconv.FormatInt(set.burst, 10),
			strconv.Itoa(set.flags))
	}
	for i, c := range cs {
		args = append(args, multiIndex[idx[i]], strconv.FormatInt(c.r.Cost, 10), requestIDOf(&c.r, c.alg))
	}
	return keys, args
}

// stampAll stamps every call of cs (see stamp), reading the Clock once:
// the requests of one all-or-nothing call are decided at one time. It
// returns that reading in µs, or -1 without a Clock (the server's TIME).
func (rn *runner) stampAll(cs []call) int64 {
	clock := int64(-1)
	if rn.clock != nil {
		clock = rn.clock.Now().UnixMicro()
	}
	for i := range cs {
		cs[i].now = clock
		if !cs[i].r.Now.IsZero() {
			cs[i].now = cs[i].r.Now.UnixMicro()
		}
	}
	return clock
}

// batch decides cs, already stamped, in one run of the batch script, all
// or nothing (Store.ApplyBatch); with deny, as a batch another slot
// denied (see batch.lua).
func (rn *runner) batch(ctx context.Context, cs []call, deny bool) ([]floodgate.Decision, error) {
	keys := make([]string, len(cs))
	args := make([]string, 0, len(cs)*(1+argsPerRequest)+1)
	for i := range cs {
		c := &cs[i]
		keys[i] = c.key
		args = append(args, string(c.alg))
		args = appendRequest(args, &c.r, c.alg, c.now)
	}
	if deny {
		args = append(args, "deny")
	}
	vals, err := rn.run(ctx, scripts.batch, keys, args)
	if err != nil {
		return nil, fmt.Errorf("redisstore: batch %s: %w", keys[0], err)
	}
	if len(vals) != replyLen*len(cs) {
		return nil, fmt.Errorf("redisstore: batch %s: %w: %d integers, want %d", keys[0], floodgate.ErrUnexpectedReply, len(vals), replyLen*len(cs))
	}
	out := make([]floodgate.Decision, len(cs))
	allowed := 0
	for i := range cs {
		if out[i], err = decode(vals[i*replyLen:(i+1)*replyLen], cs[i].now); err != nil {
			return nil, fmt.Errorf("redisstore: batch %s: request %d: %w", keys[i], i, err)
		}
		if out[i].Allowed {
			allowed++
		}
	}
	if allowed != 0 && (allowed != len(cs) || deny) {
		return nil, fmt.Errorf("redisstore: batch %s: %w: %d of %d allowed, want all or none", keys[0], floodgate.ErrUnexpectedReply, allowed, len(cs))
	}
	return out, nil
}

// refund runs the refund script to give back what cs, stamped, took as
// decided by ds (a slot's share of a batch that another slot denied): each
// request's cost, taken at its decision's time, given back at its stamp
// (the server's time for a request decided at it). It returns the units
// each got back and a peek at its state after.
func (rn *runner) refund(ctx context.Context, cs []call, ds []floodgate.Decision) ([]int64, []floodgate.Decision, error) {
	const width = 1 + replyLen // refunded, then the peek
	keys := make([]string, len(cs))
	args := make([]string, 0, len(cs)*refundWidth)
	for i := range cs {
		c := &cs[i]
		keys[i] = c.key
		args = append(args, string(c.alg))
		args = appendRequest(args, &c.r, c.alg, c.now)
		args = append(args, strconv.FormatInt(ds[i].Now.UnixMicro(), 10))
	}
	vals, err := rn.run(ctx, scripts.refund, keys, args)
	if err != nil {
		return nil, nil, fmt.Errorf("redisstore: refund %s: %w", keys[0], err)
	}
	if len(vals) != width*len(cs) {
		return nil, nil, fmt.Errorf("redisstore: refund %s: %w: %d integers, want %d", keys[0], floodgate.ErrUnexpectedReply, len(vals), width*len(cs))
	}
	backs := make([]int64, len(cs))
	out := make([]floodgate.Decision, len(cs))
	for i := range cs {
		v := vals[i*width : (i+1)*width]
		if backs[i] = v[0]; backs[i] < 0 || backs[i] > cs[i].r.Cost {
			return nil, nil, fmt.Errorf("redisstore: refund %s: %w: refunded %d of %d", keys[i], floodgate.ErrUnexpectedReply, backs[i], cs[i].r.Cost)
		}
		if out[i], err = decode(v[1:], cs[i].now); err != nil {
			return nil, nil, fmt.Errorf("redisstore: refund %s: %w", keys[i], err)
		}
	}
	return backs, out, nil
}

// claim runs the budget script for c: it decides c and claims up to extra
// more units. It returns c's decision, the units granted and the start of
// the window they were counted in (Redis µs).
func (rn *runner) claim(ctx context.Context, c call, extra int64) (d floodgate.Decision, granted, start int64, err error) {
	c.now = rn.stamp(&c.r)
	args := appendRequest(make([]string, 0, argsPerRequest+2), &c.r, c.alg, c.now)
	args = append(args, "claim", strconv.FormatInt(extra, 10))
	vals, err := rn.run(ctx, scripts.budget[c.alg], []string{c.key}, args)
	if err != nil {
		return floodgate.Decision{}, 0, 0, c.wrap(err)
	}
	if len(vals) != replyLen+2 {
		return floodgate.Decision{}, 0, 0, c.wrap(fmt.Errorf("%w: %d integers, want %d", floodgate.ErrUnexpectedReply, len(vals), replyLen+2))
	}
	if d, err = decode(vals[:replyLen], c.now); err != nil {
		return floodgate.Decision{}, 0, 0, c.wrap(err)
	}
	granted, start = vals[replyLen], vals[replyLen+1]
	switch {
	case granted < 0 || granted > extra || (granted > 0 && !d.Allowed):
		err = fmt.Errorf("%w: granted %d out of range", floodgate.ErrUnexpectedReply, granted)
	case start < 0 || start > algorithm.MaxExact:
		err = fmt.Errorf("%w: window_start_us %d out of range", floodgate.ErrUnexpectedReply, start)
	}
	if err != nil {
		return floodgate.Decision{}, 0, 0, c.wrap(err)
	}
	return d, granted, start, nil
}

// giveBack runs the budget script to give back n unused units of key under
// limit, claimed in the window that starts at start, and reports how many
// Redis took back (fewer, or none, if the state changed since: another
// window, a Reset).
func (rn *runner) giveBack(ctx context.Context, key string, limit floodgate.Limit, n, start int64) (int64, error) {
	c := call{r: floodgate.Request{Limit: limit, Cost: n}, alg: limit.EffectiveAlgorithm(), key: key}
	c.now = rn.stamp(&c.r)
	args := appendRequest(make([]string, 0, argsPerRequest+2), &c.r, c.alg, c.now)
	args = append(args, "return", strconv.FormatInt(start, 10))
	vals, err := rn.run(ctx, scripts.budget[c.alg], []string{key}, args)
	if err != nil {
		return 0, c.wrap(fmt.Errorf("give back: %w", err))
	}
	if len(vals) != 2 || vals[0] < 0 || vals[0] > n {
		return 0, c.wrap(fmt.Errorf("give back: %w: %v", floodgate.ErrUnexpectedReply, vals))
	}
	return vals[0], nil
}

// run runs sc by digest and, if the server does not have it (NOSCRIPT:
// after a restart, a failover or SCRIPT FLUSH), by source, which also
// caches it again; with Options.Functions, as a function (see fcall). The
// caller never sees NOSCRIPT. A script that failed with NOSCRIPT did not
// run, so running it again cannot count twice.
func (rn *runner) run(ctx context.Context, sc *script, keys, args []string) ([]int64, error) {
	ctx, cancel := sendDeadline(ctx)
	defer cancel()
	if rn.lib != nil {
		return rn.fcall(ctx, sc, keys, args)
	}
	vals, err := rn.c.EvalSHA(ctx, sc.sha, keys, args, rn.wait.within(ctx))
	if err != nil && rn.c.IsNoScript(err) {
		// The WAIT sent after the EVALSHA that found no script ran all the
		// same; this one gets what is left of the deadline.
		vals, err = rn.c.Eval(ctx, sc.src, keys, args, rn.wait.within(ctx))
	}
	if err != nil {
		return nil, classify(err)
	}
	return vals, nil
}

// fcall runs sc's function and, if the server does not have it (after the
// store's first call, a restart without persistence, a failover to a
// server without the library, FUNCTION FLUSH), loads the library and calls
// again, at most maxLoads times: an FCALL that failed with "Function not
// found" did not run, so calling again cannot count twice. After any other
// error, a timeout among them, the call may have run: it is not repeated.
func (rn *runner) fcall(ctx context.Context, sc *script, keys, args []string) ([]int64, error) {
	for loads := 0; ; loads++ {
		gen := rn.lib.gen.Load()
		vals, err := rn.c.FCall(ctx, sc.fn, keys, args, rn.wait.within(ctx))
		if err == nil {
			return vals, nil
		}
		if isUnknownCommand(err) {
			return nil, fmt.Errorf("%w: Options.Functions needs Redis 7.0 or later: %w", floodgate.ErrStore, err)
		}
		if !rn.c.IsNoFunction(err) || loads == maxLoads {
			return nil, classify(err)
		}
		if err := rn.lib.load(ctx, rn.c, gen); err != nil {
			return nil, fmt.Errorf("%w: FUNCTION LOAD %s: %w", floodgate.ErrStore, scripts.lib.name, err)
		}
	}
}

// isUnknownCommand reports whether err is Redis's answer to a command it
// does not have (FCALL before Redis 7.0).
func isUnknownCommand(err error) bool {
	return strings.HasPrefix(strings.TrimPrefix(err.Error(), "ERR "), "unknown command")
}

// classify wraps the error replies of the scripts in floodgate's sentinels:
// a rejected argument is an invalid request (Apply checks every request
// first, so it means the Go and Lua checks disagree), a key holding
// something else than Floodgate state is an unexpected reply, and
// anything else (the client's network errors and timeouts, a WAIT that
// too few replicas acknowledged, Redis's own error replies) is a failure
// of the store, floodgate.ErrStore.
func classify(err error) error {
	// rueidis drops the "ERR " of an error reply, go-redis keeps it.
	msg := strings.TrimPrefix(err.Error(), "ERR ")
	switch {
	case strings.HasPrefix(msg, "floodgate: state:"), strings.HasPrefix(msg, "WRONGTYPE"):
		return fmt.Errorf("%w: %w", floodgate.ErrUnexpectedReply, err)
	case strings.HasPrefix(msg, "floodgate: "):
		return fmt.Errorf("%w: %w", floodgate.ErrInvalidRequest, err)
	}
	return fmt.Errorf("%w: %w", floodgate.ErrStore, err)
}

// raise runs the raise script for c (a fixed window, its cost the units)
// and window (µs): it returns a peek at the state after.
func (rn *runner) raise(ctx context.Context, c call, window int64) (floodgate.Decision, error) {
	c.now = rn.stamp(&c.r)
	args := appendRequest(make([]string, 0, argsPerRequest+1), &c.r, c.alg, c.now)
	args = append(args, strconv.FormatInt(window, 10))
	vals, err := rn.run(ctx, scripts.raise, []string{c.key}, args)
	if err != nil {
		return floodgate.Decision{}, fmt.Errorf("redisstore: raise %s: %w", c.key, err)
	}
	if len(vals) != replyLen {
		return floodgate.Decision{}, fmt.Errorf("redisstore: raise %s: %w: %d integers, want %d", c.key, floodgate.ErrUnexpectedReply, len(vals), replyLen)
	}
	d, err := decode(vals, c.now)
	if err != nil {
		return floodgate.Decision{}, fmt.Errorf("redisstore: raise %s: %w", c.key, err)
	}
	return d, nil
}
