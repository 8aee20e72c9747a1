package redisstore

import (
	"context"
	"fmt"
	"strconv"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algorithm"
)

// gcraSetWidth is SET_WIDTH in gcra_multi.lua: the ARGV strings of one
// parameter set.
const gcraSetWidth = 5

// gcraDeclined is DECLINED in gcra_multi.lua: a request it left unchanged,
// for gcra.lua.
const gcraDeclined = -1

// gcraSet is a parameter set of gcra_multi.lua, the number of its
// requests and its params.
type gcraSet struct {
	now int64
	p   algorithm.Params
	n   int
}

// usualGCRA reports whether c is a request gcra_multi.lua takes: a GCRA
// request with a rate (limit above 0) and nothing else (no reservation's
// wait; the other flags are not a GCRA's).
func usualGCRA(c *call) bool {
	if c.alg != floodgate.GCRA || c.r.Release || c.r.Limit.Calendar.Unit != "" {
		return false
	}
	p := c.r.Limit.Params()
	return p.Limit > 0 && p.Burst > 0 && !p.FirstHit && !p.CountRejected && p.Wait == 0
}

// gcraMultiArgs is the KEYS and ARGV of one run of gcra_multi.lua for cs,
// the index in cs of the call of each key, and the parameter sets, if
// every call of cs is a usual GCRA request (usualGCRA); ok is false
// otherwise. The keys are grouped by parameter set (the time, limit,
// period and burst), in the order each set was first seen, each set's in
// the order of cs; ARGV is the number of sets, each set's numbers and
// count, then each key's cost.
func gcraMultiArgs(cs []*call) (keys, args []string, order []int, sets []gcraSet, ok bool) {
	if len(cs) > maxCoalesced {
		return nil, nil, nil, nil, false
	}
	sets = make([]gcraSet, 0, 2)
	var idxBuf [maxCoalesced]uint8
	idx := idxBuf[:0]
	for _, c := range cs {
		if !usualGCRA(c) {
			return nil, nil, nil, nil, false
		}
		set := gcraSet{now: c.now, p: c.r.Limit.Params()}
		j := 0
		for j < len(sets) && (sets[j].now != set.now || sets[j].p != set.p) {
			j++
		}
		if j == len(sets) {
			sets = append(sets, set)
		}
		sets[j].n++
		idx = append(idx, uint8(j))
	}
	// next[j] is the position of set j's next key.
	var nextBuf [4]int
	next := nextBuf[:0]
	if len(sets) > len(nextBuf) {
		next = make([]int, 0, len(sets))
	}
	next = append(next, 0)
	for j := 1; j < len(sets); j++ {
		next = append(next, next[j-1]+sets[j-1].n)
	}
	// One allocation for the keys and the arguments, and one for every
	// set's numbers, written into one string and sliced from it.
	kv := make([]string, 2*len(cs)+1+len(sets)*gcraSetWidth)
	keys, args = kv[:len(cs):len(cs)], kv[len(cs):]
	order = make([]int, len(cs))
	args[0] = multiIndex[len(sets)]
	var bBuf [2 * 4 * 20]byte // two sets' numbers on the stack
	b := bBuf[:0]
	for _, set := range sets {
		for _, n := range [4]int64{set.now, set.p.Limit, set.p.Period, set.p.Burst} {
			b = strconv.AppendInt(b, n, 10)
		}
	}
	nums := string(b)
	for j, set := range sets {
		a := args[1+j*gcraSetWidth:]
		for f, n := range [4]int64{set.now, set.p.Limit, set.p.Period, set.p.Burst} {
			w := len(strconv.AppendInt(b[:0], n, 10))
			a[f], nums = nums[:w], nums[w:]
		}
		a[4] = multiIndex[set.n]
	}
	costs := args[1+len(sets)*gcraSetWidth:]
	for i, c := range cs {
		k := next[idx[i]]
		next[idx[i]]++
		keys[k], order[k] = c.key, i
		if c.r.Cost == 1 {
			costs[k] = "1"
		} else {
			costs[k] = strconv.FormatInt(c.r.Cost, 10)
		}
	}
	return keys, args, order, sets, true
}

// gcraMulti decides cs in one run of gcra_multi.lua (see gcraMultiArgs);
// as multi, a request the script declined is errAlone. Each decision is
// algorithm.GCRA.Step's on the state the request found, which the script
// replies, and must admit what the script admitted.
func (rn *runner) gcraMulti(ctx context.Context, cs []*call, keys, args []string, order []int, sets []gcraSet) ([]result, error) {
	vals, err := rn.run(ctx, scripts.gcraMulti, keys, args)
	if err != nil {
		return nil, err
	}
	if len(vals) != len(sets)+2*len(cs) {
		return nil, fmt.Errorf("%w: %d integers for %d requests of %d sets, want %d", floodgate.ErrUnexpectedReply, len(vals), len(cs), len(sets), len(sets)+2*len(cs))
	}
	out := make([]result, len(cs))
	k := 0
	for _, set := range sets {
		now := vals[0]
		for j := range set.n {
			i := order[k]
			k++
			ahead, x := vals[1+2*j], vals[2+2*j]
			if ahead == gcraDeclined {
				out[i].err = errAlone
				continue
			}
			out[i].d, out[i].err = decodeGCRA(set.p, cs[i].r.Cost, cs[i].now, now, ahead, x)
		}
		vals = vals[1+2*set.n:]
	}
	return out, nil
}

// decodeGCRA is the decision of a request of cost under p, decided at
// now (wantNow: the time passed to the script, or -1 for the server's) on
// a state ahead µs and frac (x / 2) after now, admitted if x is odd, as
// gcra_multi.lua replies it.
func decodeGCRA(p algorithm.Params, cost, wantNow, now, ahead, x int64) (floodgate.Decision, error) {
	bad := func(field string, n int64) (floodgate.Decision, error) {
		return floodgate.Decision{}, fmt.Errorf("%w: %s %d out of range", floodgate.ErrUnexpectedReply, field, n)
	}
	switch {
	case now < 0 || now > algorithm.MaxExact-algorithm.MaxPeriod || (wantNow >= 0 && now != wantNow):
		return bad("now_us", now)
	case ahead < 0 || ahead > algorithm.MaxExact-now:
		return bad("tat_us - now_us", ahead)
	case x < 0 || x>>1 >= p.Limit:
		return bad("tat_frac * 2 + allowed", x)
	}
	_, d := algorithm.GCRA{TAT: now + ahead, TATFrac: x >> 1}.Step(p, now, cost)
	if d.Allowed != (x&1 == 1) {
		return floodgate.Decision{}, fmt.Errorf("%w: the script's allowed %d differs from GCRA.Step's %v at tat %d+%d/%d, now %d, cost %d",
			floodgate.ErrUnexpectedReply, x&1, d.Allowed, now+ahead, x>>1, p.Limit, now, cost)
	}
	return floodgate.FromAlgorithm(d, now), nil
}
