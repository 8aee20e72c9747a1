package floodgate

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"time"
)

// MaxFlowLen is the longest flow name a store keeps as it is, in bytes; a
// longer one is replaced by "#" and the base64url SHA-256 of the name
// (AllowFlow does it), so every instance names the flow alike.
const MaxFlowLen = 256

// MaxFlows is the most flows one shared limit tells apart: when MaxFlows
// flows are live, the requests of a new flow are counted as one overflow
// flow, which takes part in the split like any other flow.
const MaxFlows = 64

// Sharer is a Store that decides a request of one flow under a limit
// shared by flows (Limiter.AllowFlow): ApplyFlow decides r for flow in one
// atomic step of the store, which keeps each flow's recent demand beside
// the shared count (algorithm.Fair.Step says exactly what it does). r.Limit
// must pass CheckFlow; flow is 0 to MaxFlowLen bytes ("" is the overflow
// flow). Both stores are Sharers.
type Sharer interface {
	ApplyFlow(ctx context.Context, r Request, flow string) (Decision, error)
}

// CheckFlow reports the first problem of a request of flow under a shared
// limit, for stores to call: r valid; r.Limit an aligned FixedWindow
// without CountRejected, LocalBudget, Durable or Global, whose Period is
// at most MaxPeriod/2 (the demand of a window is kept for the next); flow
// at most MaxFlowLen bytes.
func CheckFlow(r Request, flow string) error {
	if err := r.Validate(); err != nil {
		return err
	}
	l := r.Limit
	switch {
	case l.EffectiveAlgorithm() != FixedWindow:
		return fieldErr(ErrInvalidLimit, "algorithm", "only fixed_window is shared by flows, not %s", l.EffectiveAlgorithm())
	case l.Window == FirstHit:
		return fieldErr(ErrInvalidLimit, "window", "a limit shared by flows takes aligned windows, not %s", l.Window)
	case l.IsCalendar():
		return fieldErr(ErrInvalidLimit, "calendar", "a limit shared by flows takes aligned windows of a period, not calendar %ss", l.Calendar.Unit)
	case l.CountRejected:
		return fieldErr(ErrInvalidLimit, "count_rejected", "a limit shared by flows counts what each flow asks for already")
	case l.LocalBudget != 0:
		return fieldErr(ErrInvalidLimit, "local_budget", "a limit shared by flows is decided in the store, each time")
	case l.Durable:
		return fieldErr(ErrInvalidLimit, "durable", "a limit shared by flows is not a durable quota")
	case l.Global:
		return fieldErr(ErrInvalidLimit, "global", "a limit shared by flows is not a global limit of regions")
	case l.Period > MaxPeriod/2:
		return fieldErr(ErrInvalidLimit, "period", "%v is above %v for a limit shared by flows, which remembers a window's demand for the next", l.Period, MaxPeriod/2)
	case len(flow) > MaxFlowLen:
		return fieldErr(ErrInvalidRequest, "flow", "%d bytes is above the maximum %d", len(flow), MaxFlowLen)
	}
	return nil
}

// FlowName is the name a store keeps for flow: flow itself up to
// MaxFlowLen bytes, else "#" and the unpadded base64url SHA-256 of flow.
func FlowName(flow string) string {
	if len(flow) <= MaxFlowLen {
		return flow
	}
	sum := sha256.Sum256([]byte(flow))
	return "#" + base64.RawURLEncoding.EncodeToString(sum[:])
}

// AllowFlow takes n units for flow (a tenant) of key under limit, which
// the flows of key share by max-min fairness over their recent demand:
// each flow may take up to its share, and the shares follow demand, so a
// flow that asks for less than an even part gets all it asks, the busy
// flows split the rest evenly, and what an idle flow does not ask for is
// theirs. With 100 per second shared by a flow asking 1,000 per second
// and one asking 20, the quiet one gets its 20 and the busy one 80.
//
// The limit is a fixed window with aligned windows (CheckFlow). Demand is
// what a flow asked for, admitted or not, in the current window and in
// the one before (the larger counts), kept beside the shared count in the
// store's one atomic step, which also splits the limit (package share,
// share.MaxMin) and decides: the units admitted in a window never exceed
// limit.Limit, across any number of instances, and a change of demand is
// followed from the next window on (docs/fairness.md has the bounds). The
// store must be a Sharer (both stores are); a store failure is answered
// by the failure policy, as for AllowN, without FailLocal's local store.
//
// The Decision's Limit is the flow's share at the decision, Remaining what
// it may still take in the window (its share and the limit both bound
// it). flow must not be empty; a flow above MaxFlowLen bytes is named by
// its hash (FlowName).
func (l *Limiter) AllowFlow(ctx context.Context, key, flow string, limit Limit, n int64) (Decision, error) {
	r := Request{Key: key, Limit: limit, Cost: n}
	if err := l.prepareFlow(&r, flow, l.now()); err != nil {
		return Decision{RetryAfter: Never}, err
	}
	o := l.applyFlow(ctx, r, FlowName(flow), l.policy)
	return o.Decision, o.Err
}

// prepareFlow prepares r as prepare does and checks it as a request of
// flow: the store a Sharer, flow not empty, CheckFlow.
func (l *Limiter) prepareFlow(r *Request, flow string, now time.Time) error {
	if _, ok := l.store.(Sharer); !ok {
		return fieldErr(ErrInvalidLimit, "share_by", "the store (%T) cannot share a limit by flows", l.store)
	}
	if flow == "" {
		return fieldErr(ErrInvalidRequest, "flow", "empty")
	}
	if err := l.prepare(r, now); err != nil {
		return err
	}
	return CheckFlow(*r, FlowName(flow))
}

// applyFlow decides r, prepared, for flow (a FlowName) in the store under
// the Limiter's deadline, answers a store failure by policy p (FailLocal
// as FailClosed: the local store has no flows), and tells the Observer.
func (l *Limiter) applyFlow(ctx context.Context, r Request, flow string, p FailurePolicy) Outcome {
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	start := time.Now()
	d, err := l.store.(Sharer).ApplyFlow(ctx, r, flow)
	o := Outcome{Decision: d, Limit: r.Limit, Err: err}
	if err != nil {
		o.Decision = Decision{}
		if answersByPolicy(err) {
			o.Policy = answeredBy(p)
			o.Decision = failed(o.Policy)
		}
	}
	if l.obs != nil {
		l.obs.Observe(Event{Request: r, Outcome: o, Latency: time.Since(start)})
	}
	return o
}

// decideFlows is decide for items of which some have a Flow: each of
// those is decided on its own by its Sharer step, first; then the others,
// as decide does. All or nothing (atomic), a flow item's denial keeps
// the others from taking anything: they are peeked and answered denied,
// with their unchanged state and RetryAfter 0, as a Batcher answers. A
// flow item admitted is not given back when another item is denied: it
// stays counted in its window (docs/fairness.md).
func (l *Limiter) decideFlows(ctx context.Context, items []Item, atomic bool) ([]Outcome, error) {
	now := l.now()
	out := make([]Outcome, len(items))
	var rest []Item
	var restAt []int
	rs := make([]Request, len(items))
	for i, it := range items {
		rs[i] = Request{Key: it.Key, Limit: it.Limit, Cost: it.Cost, Lease: it.Lease, Release: it.Release}
		err := itemLimit(&rs[i], it)
		switch {
		case err != nil:
		case it.Flow != "":
			err = l.prepareFlow(&rs[i], it.Flow, now)
		default:
			err = l.prepare(&rs[i], now)
		}
		if err != nil {
			return nil, &ItemError{Index: i, Err: err}
		}
		if it.Flow == "" {
			rest, restAt = append(rest, it), append(restAt, i)
		}
	}
	denied := false
	for i, it := range items {
		if it.Flow != "" {
			out[i] = l.applyFlow(ctx, rs[i], FlowName(it.Flow), l.policyOf(it.Policy))
			denied = denied || !out[i].Decision.Allowed
		}
	}
	if len(rest) == 0 {
		return out, nil
	}
	peek := atomic && denied
	if peek {
		for j := range rest {
			rest[j].Cost = 0
		}
	}
	routs, err := l.decide(ctx, rest, atomic)
	if err != nil {
		ie, _ := err.(*ItemError)
		if ie != nil {
			return nil, &ItemError{Index: restAt[ie.Index], Err: ie.Err}
		}
		return nil, err
	}
	for j, o := range routs {
		if peek && o.Decision.Allowed {
			o.Decision.Allowed = false
		}
		out[restAt[j]] = o
	}
	return out, nil
}
