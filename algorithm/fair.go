package algorithm

import "github.com/floodgate-rl/floodgate/share"

// MaxFlows is the most flows a Fair state tells apart. A request of a new
// flow when MaxFlows are live is counted as the overflow flow, named "",
// which takes part in the split like any other: the flows beyond MaxFlows
// share one party.
const MaxFlows = 64

// Fair is the state of a fixed window whose Limit is shared by flows (the
// tenants of a shared upstream) by max-min fairness over their recent
// demand: the windows start at multiples of Period, as an aligned
// FixedWindow's, and every flow's demand and use are counted in them.
// The zero value is an empty key. Mirrored by
// store/redisstore/scripts/fair.lua.
type Fair struct {
	// Start is the start of the current window, µs; 0 with no flows.
	Start int64
	// Next is the Seq the next new flow gets.
	Next int64
	// Flows are the live flows, in the order of their Seq.
	Flows []FairFlow
}

// FairFlow is one flow of a Fair state.
type FairFlow struct {
	// Name is the flow's name; "" is the overflow flow (see MaxFlows).
	Name string
	// Seq orders the flows (their parties in share.Split): the order in
	// which they became live.
	Seq int64
	// Asked is the units the flow asked for in the current window,
	// admitted or not, at most MaxLimit.
	Asked int64
	// Prev is what it asked for in the window before.
	Prev int64
	// Used is the units admitted in the current window.
	Used int64
}

// FairShares is the split of limit among flows of demands d: share.Split
// under share.MaxMin, each flow's demand the larger of what it asked in
// the previous window and in the current one.
func FairShares(limit int64, flows []FairFlow) []int64 {
	parties := make([]share.Party, len(flows))
	for i, f := range flows {
		parties[i].Demand = max(f.Prev, f.Asked)
	}
	return share.Split(limit, parties, share.MaxMin)
}

// Step decides a request of cost units of flow at now (p is an aligned
// fixed window: FirstHit and CountRejected are not taken).
//
// A new window (now at or after Start+Period) keeps only the flows that
// asked in the window just ended, with Prev their Asked; a gap of a whole
// window forgets every flow. A clock that goes backwards stays in the live
// window. The request's cost is added to its flow's Asked, admitted or
// not (demand is what is asked), then the limit is split among the live
// flows (FairShares) and the request is admitted when its flow's Used plus
// cost is at most its share and every flow's Used plus cost is at most
// Limit. So the units admitted in a window never exceed Limit, and a flow
// is held to its share of the split at the time of each decision. A peek
// (cost 0) of a flow that is not live changes nothing.
//
// The Decision's Limit is the flow's share, Remaining the least of what is
// left of the share and of the limit, ResetAfter the time to the window's
// end while a unit is used in it, RetryAfter the time to the window's end
// when denied, Never when cost is above Limit.
func (s Fair) Step(p Params, now, cost int64, flow string) (_ Fair, d Decision) {
	start, next := s.Start, s.Next
	flows := make([]FairFlow, 0, len(s.Flows)+1)
	if len(s.Flows) == 0 || now >= start+p.Period {
		newStart := now - now%p.Period
		adjacent := len(s.Flows) > 0 && newStart == start+p.Period
		for _, f := range s.Flows {
			if adjacent && f.Asked > 0 {
				flows = append(flows, FairFlow{Name: f.Name, Seq: f.Seq, Prev: f.Asked})
			}
		}
		start = newStart
	} else {
		flows = append(flows, s.Flows...)
	}
	i := -1
	for j := range flows {
		if flows[j].Name == flow {
			i = j
			break
		}
	}
	if i < 0 && len(flows) >= MaxFlows {
		flow = ""
		for j := range flows {
			if flows[j].Name == "" {
				i = j
				break
			}
		}
	}
	added := false
	if i < 0 {
		flows = append(flows, FairFlow{Name: flow, Seq: next})
		i, added = len(flows)-1, true
	}
	flows[i].Asked = min(flows[i].Asked+cost, MaxLimit)
	shares := FairShares(p.Limit, flows)
	var total int64
	for _, f := range flows {
		total += f.Used
	}
	left := min(shares[i]-flows[i].Used, p.Limit-total)
	allowed := cost <= left
	if allowed {
		flows[i].Used += cost
		total += cost
		left -= cost
	}
	d.Allowed, d.Limit, d.Remaining = allowed, shares[i], max(0, left)
	if total > 0 {
		d.ResetAfter = start + p.Period - now
	}
	switch {
	case allowed:
	case cost > p.Limit:
		d.RetryAfter = Never
	default:
		d.RetryAfter = start + p.Period - now
	}
	if added {
		if cost == 0 {
			flows = flows[:i]
		} else {
			next++
		}
	}
	if len(flows) == 0 {
		return Fair{}, d
	}
	return Fair{Start: start, Next: next, Flows: flows}, d
}

// Expires is when the state becomes equal to the zero state, in
// microseconds: the end of the window after the current one while a flow
// asked in the current one (its demand is remembered for one window), the
// end of the current window otherwise; 0 for the zero state. Stores drop
// the key then (a Redis TTL).
func (s Fair) Expires(p Params) int64 {
	if len(s.Flows) == 0 {
		return 0
	}
	for _, f := range s.Flows {
		if f.Asked > 0 {
			return s.Start + 2*p.Period
		}
	}
	return s.Start + p.Period
}
