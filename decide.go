package floodgate

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Item is one request of Limiter.Decide: a key, a limit and a cost, and the
// failure policy that answers it if the store fails.
type Item struct {
	// Key is the key, without the Limiter's KeyPrefix.
	Key string
	// Limit is the limit the key is checked against.
	Limit Limit
	// Cost is the number of units to take; 0 checks without taking.
	Cost int64
	// Policy answers a failure of the store for this item; empty means the
	// Limiter's Options.FailurePolicy. FailLocal needs a Limiter made with
	// Options.Local and Options.Instances; without them it answers as
	// FailClosed.
	Policy FailurePolicy
	// Lease and Release are a Concurrency limit's, as in Request: the
	// lease that acquires (or renews) Cost units, or with Release gives
	// them back. Limiter.Acquire makes a random lease for one key; a
	// service that hands lease IDs to its clients sets them here.
	Lease   string
	Release bool
	// Flow, when not empty, decides the item as Limiter.AllowFlow does:
	// for this flow (a tenant) of Key, whose Limit the flows share by
	// max-min fairness. The Limiter's store must be a Sharer.
	Flow string
	// Priority, when not empty, decides the item as Limiter.AllowPriority
	// does: under its Limit with the capacity lowered by the class's
	// reserve, on the key's one state, which every class shares. Empty
	// means no class: the whole Limit, as before classes existed (which
	// is Critical's budget, not Normal's). Only GCRA and FixedWindow
	// limits without CountRejected take a class other than Critical, and
	// a Flow item takes none: otherwise Decide returns an *ItemError
	// wrapping ErrInvalidLimit whose FieldError names "priority".
	Priority Priority
	// Reserves, when not nil, are the reserves Priority is decided
	// under (Reserves.Limit) instead of the default 5% and 20%; nil
	// reserves are the default. Invalid reserves, or reserves this
	// item's limit cannot keep, are an *ItemError wrapping
	// ErrInvalidLimit naming "reserves.normal" or "reserves.sheddable".
	Reserves *Reserves
}

// Outcome is the answer to one request of a Limiter: what to act on, and
// who decided it.
type Outcome struct {
	// Decision is what the caller should act on: the store's; under
	// FailLocal the local store's (Decision.Fallback set); or, when Err is
	// set and Policy is not FailLocal, the failure policy's (allowed for
	// FailOpen, denied for FailClosed).
	Decision Decision
	// Limit is the limit applied: the request's, or for a decision of the
	// local store, this instance's Share of it.
	Limit Limit
	// Err is the store's error, if it failed (a timeout included) or
	// refused the request. For a local decision it is the failure that
	// sent the request to the local store, or nil when the open breaker
	// did not ask the store.
	Err error
	// Policy says who answered when the store did not: FailOpen or
	// FailClosed for a made-up decision, FailLocal for a decision of the
	// local store. Empty when the store decided. An error that no failure
	// policy answers (see ErrStore) is denied as FailClosed.
	Policy FailurePolicy
}

// result is the outcome as the single-request methods return it: the
// decision, and the error unless the local store decided instead.
func (o *Outcome) result() (Decision, error) {
	if o.Policy == FailLocal {
		return o.Decision, nil
	}
	return o.Decision, o.Err
}

// An ItemError is the problem of one item of Limiter.Decide. When Decide
// returns one, no item of the call reached the store.
type ItemError struct {
	// Index is the item's position in the call.
	Index int
	// Err wraps ErrInvalidRequest or ErrInvalidLimit, and errors.As finds a
	// *FieldError naming the field.
	Err error
}

// Error is "item <Index>: <Err>".
func (e *ItemError) Error() string { return fmt.Sprintf("item %d: %v", e.Index, e.Err) }

// Unwrap returns Err.
func (e *ItemError) Unwrap() error { return e.Err }

// Decide decides several independent requests, each atomically on its own,
// in one round trip when the store is a Pipeliner (the Redis store is),
// under one deadline, and answers each store failure by the item's own
// failure policy. It is the path of a service that checks the descriptors
// of a request against rules with policies of their own (package server).
//
// Every item is validated before any reaches the store: an invalid one
// returns an *ItemError and nothing is applied. Otherwise there is one
// Outcome per item, in order; a store failure is an Outcome, never an
// error, and the Observer sees each item.
func (l *Limiter) Decide(ctx context.Context, items []Item) ([]Outcome, error) {
	return l.decide(ctx, items, false)
}

// DecideAll is Decide, all or nothing: if any item is denied, no item's
// cost is taken (an item whose limit has CountRejected still counts), and
// every Outcome's decision is denied, an item that had room reporting its
// unchanged state with RetryAfter 0, as a Batcher answers. It is what a
// service wants for the limits of one request (a tenant's and a user's): a
// request denied by one spends nothing of the others. The store must be a
// Batcher for that (both stores are); on another, the items are applied
// one by one and a later denial cannot give back what an earlier item
// took. While FailLocal's breaker is open, its items are decided in the
// local store, all or nothing among themselves, apart from the others.
func (l *Limiter) DecideAll(ctx context.Context, items []Item) ([]Outcome, error) {
	return l.decide(ctx, items, true)
}

func (l *Limiter) decide(ctx context.Context, items []Item, atomic bool) ([]Outcome, error) {
	for _, it := range items {
		if it.Flow != "" {
			return l.decideFlows(ctx, items, atomic)
		}
	}
	c, err := l.newCall(items, atomic && len(items) > 1)
	if err != nil {
		return nil, err
	}
	l.run(ctx, &c)
	return c.out, nil
}

// newCall prepares the requests of items, each with its policy.
func (l *Limiter) newCall(items []Item, atomic bool) (call, error) {
	c := call{atomic: atomic}
	if len(items) == 1 {
		// The common call (a service's request of one descriptor): its
		// request and its outcome in one allocation.
		one := new(oneCall)
		c.rs, c.out = one.r[:], one.o[:]
	} else {
		c.rs, c.out = make([]Request, len(items)), make([]Outcome, len(items))
	}
	now := l.now()
	for i, it := range items {
		c.rs[i] = Request{Key: it.Key, Limit: it.Limit, Cost: it.Cost, Lease: it.Lease, Release: it.Release}
		if err := itemLimit(&c.rs[i], it); err != nil {
			return c, &ItemError{Index: i, Err: err}
		}
		if err := l.prepare(&c.rs[i], now); err != nil {
			return c, &ItemError{Index: i, Err: err}
		}
		c.out[i].Policy = l.policyOf(it.Policy)
	}
	return c, nil
}

// oneCall is the request and the outcome of a call of one item.
type oneCall struct {
	r [1]Request
	o [1]Outcome
}

// call is one pass through the pipeline: prepared requests and their
// outcomes. Until run settles them, each outcome's Policy is the policy
// that answers its request, its Decision and Err the store's answer. With
// atomic, the requests are all or nothing (AllowEach): the store gets
// them as one batch, and so does the local store. hold, if set, makes
// the call a reservation (ReserveEach): the store's step is a Reserve of
// the batch in place of an ApplyBatch, in the store or in the local store
// with this instance's shares.
type call struct {
	rs     []Request
	atomic bool
	hold   *holdStep
	out    []Outcome
}

// policyOf is the policy that answers an item that asked for p: the
// limiter's when p is empty, FailClosed for FailLocal without a local
// store.
func (l *Limiter) policyOf(p FailurePolicy) FailurePolicy {
	switch {
	case p == "":
		return l.policy
	case p == FailLocal && l.fb == nil:
		return FailClosed
	}
	return p
}

// run is the pipeline every decision of a Limiter but the plainest takes:
// the breaker of FailLocal, the store call under the deadline, the failure
// policies, and the Observer. The requests are prepared (validated, with
// prefix and time).
func (l *Limiter) run(ctx context.Context, c *call) {
	start := time.Now()
	local := l.localNow(c)
	l.ask(ctx, c, local)
	if l.fb != nil {
		l.reportFirstLocal(c, local)
	}
	l.settle(ctx, c, local)
	if l.obs != nil {
		latency := time.Since(start)
		for i := range c.rs {
			l.obs.Observe(Event{Request: c.rs[i], Outcome: c.out[i], Latency: latency})
		}
	}
}

// localNow marks the requests the open breaker sends to the local store
// without asking the shared one; nil when it sends none.
func (l *Limiter) localNow(c *call) []bool {
	if l.fb == nil {
		return nil
	}
	var local []bool
	for i := range c.out {
		if c.out[i].Policy != FailLocal {
			continue
		}
		if local == nil {
			// One question per call: the breaker lets at most one call
			// per interval probe the store.
			if !l.fb.useLocal() {
				return nil
			}
			local = make([]bool, len(c.rs))
		}
		local[i] = true
	}
	return local
}

// ask decides in the store, under the deadline, every request that local
// does not mark, writing the store's decision and error to its outcome.
func (l *Limiter) ask(ctx context.Context, c *call, local []bool) {
	rs := c.rs
	var which []int
	if local != nil {
		rs = nil
		for i, r := range c.rs {
			if !local[i] {
				rs = append(rs, r)
				which = append(which, i)
			}
		}
	}
	if len(rs) == 0 {
		return
	}
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	applyAll(ctx, l.store, rs, c, which)
}

// applyAll decides rs, the requests of c or some of them, in s: as one
// batch when c is atomic (a hold when c has one), else each on its own,
// in one round trip when s is a Pipeliner. It writes request j's decision
// and error to c.out[which[j]], or c.out[j] when which is nil.
func applyAll(ctx context.Context, s Store, rs []Request, c *call, which []int) {
	out := c.out
	put := func(j int, d Decision, err error) {
		if which != nil {
			j = which[j]
		}
		out[j].Decision, out[j].Err = d, err
	}
	switch p, ok := s.(Pipeliner); {
	case c.atomic:
		ds, err := applyBatch(ctx, s, rs, c.hold)
		for j := range rs {
			if err != nil {
				put(j, Decision{}, err)
			} else {
				put(j, ds[j], nil)
			}
		}
	case ok && len(rs) > 1:
		ds, errs := p.ApplyPipelined(ctx, rs)
		if len(ds) != len(rs) || len(errs) != len(rs) {
			err := fmt.Errorf("%w: %d decisions for %d requests", ErrUnexpectedReply, len(ds), len(rs))
			for j := range rs {
				put(j, Decision{}, err)
			}
			return
		}
		for j := range rs {
			put(j, ds[j], errs[j])
		}
	case which == nil:
		for j, r := range rs {
			out[j].Decision, out[j].Err = s.Apply(ctx, r)
		}
	default:
		for j, r := range rs {
			d, err := s.Apply(ctx, r)
			put(j, d, err)
		}
	}
}

// applyBatch decides rs in s all or nothing: by hold when set (a
// reservation), else by ApplyBatch when s is a Batcher, else one by one;
// and checks the count of decisions.
func applyBatch(ctx context.Context, s Store, rs []Request, hold *holdStep) ([]Decision, error) {
	var ds []Decision
	var err error
	if hold != nil {
		ds, err = hold.reserve(ctx, s, rs)
	} else if b, ok := s.(Batcher); ok {
		ds, err = b.ApplyBatch(ctx, rs)
	} else {
		ds = make([]Decision, 0, len(rs))
		for _, r := range rs {
			var d Decision
			if d, err = s.Apply(ctx, r); err != nil {
				break
			}
			ds = append(ds, d)
		}
	}
	if err == nil && len(ds) != len(rs) {
		err = fmt.Errorf("%w: %d decisions for %d requests", ErrUnexpectedReply, len(ds), len(rs))
	}
	return ds, err
}

// reportFirstLocal tells the breaker how the store answered the first
// FailLocal request it was asked in this call: that answer is the store's
// answer to the call.
func (l *Limiter) reportFirstLocal(c *call, local []bool) {
	for i := range c.out {
		if c.out[i].Policy == FailLocal && (local == nil || !local[i]) {
			l.fb.report(c.out[i].Err)
			return
		}
	}
}

// settle fills every outcome: the store's decision, the local store's for
// FailLocal requests the breaker held back or the store failed, the
// failure policy's for another store failure, or a denial for an error
// no policy answers (see ErrStore).
func (l *Limiter) settle(ctx context.Context, c *call, local []bool) {
	var toLocal []int
	for i := range c.out {
		o := &c.out[i]
		p := o.Policy
		o.Limit, o.Policy = c.rs[i].Limit, ""
		held := local != nil && local[i]
		if p == FailLocal && (held || isStoreFailure(o.Err)) {
			toLocal = append(toLocal, i)
			continue
		}
		if o.Err == nil {
			continue
		}
		if !answersByPolicy(o.Err) {
			p = FailClosed
		}
		*o = Outcome{Decision: failed(p), Limit: o.Limit, Err: o.Err, Policy: answeredBy(p)}
	}
	if len(toLocal) == 0 {
		return
	}
	rs := make([]Request, len(toLocal))
	for j, i := range toLocal {
		rs[j] = c.rs[i]
	}
	ds, lerrs := l.fb.apply(ctx, rs, c.atomic, c.hold)
	for j, i := range toLocal {
		o := &c.out[i]
		if lerrs[j] != nil {
			err := errors.Join(o.Err, lerrs[j])
			*o = Outcome{Decision: failed(FailClosed), Limit: o.Limit, Err: err, Policy: FailClosed}
			continue
		}
		o.Decision, o.Limit, o.Policy = ds[j], Share(o.Limit, l.fb.instances), FailLocal
	}
}

// failed is the decision of failure policy p.
func failed(p FailurePolicy) Decision {
	if p == FailOpen {
		return Decision{Allowed: true}
	}
	return Decision{}
}

// answeredBy is the policy that answers a failure under p when the local
// store does not decide: FailLocal's is FailClosed.
func answeredBy(p FailurePolicy) FailurePolicy {
	if p == FailLocal {
		return FailClosed
	}
	return p
}
