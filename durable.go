package floodgate

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Ledger is the durable record that a Limiter accounts its durable quotas
// in (Limit.Durable, Options.Ledger): package ledger makes one from a
// PostgreSQL or SQLite ledger (ledger.Durable). Both methods are safe for
// concurrent use.
type Ledger interface {
	// Record writes the commits of one settle of a reservation, all or
	// none, each at most once per (Key, ID): a commit the ledger holds
	// already (a retry) is not written again, and is no error. An error
	// means the ledger may hold none of them.
	Record(ctx context.Context, commits []Commit) error
	// Used returns what the ledger holds for key under limit in the window
	// of limit that contains at: the window's start and the units
	// committed in it; zero units (and any start) when it holds none.
	Used(ctx context.Context, key string, limit Limit, at time.Time) (window time.Time, units int64, err error)
}

// Commit is one committed use of a durable quota, as a Ledger records it.
type Commit struct {
	// Key is the store key: the item's key with the Limiter's KeyPrefix.
	Key string
	// Limit is the quota the units were taken under.
	Limit Limit
	// Window is the start of the window the units count in: the window of
	// the reservation's reserve.
	Window time.Time
	// Units is the cost committed.
	Units int64
	// ID is the reservation's ID: with Key, what makes a commit once.
	ID string
	// At is when the commit was made, by the Limiter's clock.
	At time.Time
}

// ErrLedger is wrapped by the errors of a durable quota's ledger: a
// commit the ledger did not take (not acknowledged: the hold stays, retry
// the commit), or a lost counter that could not be rebuilt because the
// ledger could not be read (denied under LedgerPolicy FailClosed). It is
// never a failure of the store: no store failure policy answers it.
var ErrLedger = errors.New("floodgate: ledger failed")

// Rebuild is how a Reserver treats the fixed-window counter of a durable
// request (HoldRequest.Rebuild): it is how a counter that the store lost
// is rebuilt from the ledger before the next decision on it.
type Rebuild struct {
	// Check asks the store to answer the reserve Lost, changing nothing,
	// when the counter has no count in the window that contains the
	// request's time (a new window, or a counter the store lost): the
	// ledger must be read first.
	Check bool
	// Known, with Window and Units, is what the ledger holds for the
	// window that starts at Window: a counter with no count in its window
	// is first raised to Units there, as Raiser.Raise does, and then the
	// request decided; if that window does not hold the store's time (it
	// ended since the ledger was read), the store answers Lost again.
	// Known takes precedence over Check.
	Known  bool
	Window time.Time
	Units  int64
}

// maxRebuilds bounds the reserves of one call that a store may answer
// Lost: each answer is followed by a read of the ledger and a reserve that
// knows it, and a counter answers Lost again only if its window ended in
// between.
const maxRebuilds = 3

// reserveDurable runs the reserve r in s under ctx (the store's deadline),
// rebuilding each durable request's counter from the ledger when the store
// answers it Lost: the ledger is read under outer (the caller's context)
// and the ledger's deadline, and each reserve after it gets a deadline of
// its own. The local store of FailLocal decides on shares and is not
// rebuilt.
func (l *Limiter) reserveDurable(ctx, outer context.Context, rv Reserver, r HoldRequest, local bool) (HoldResult, error) {
	if local || l.ledger == nil {
		return rv.Reserve(ctx, r)
	}
	for i, q := range r.Requests {
		if !q.Limit.Durable {
			continue
		}
		if r.Rebuild == nil {
			r.Rebuild = make([]Rebuild, len(r.Requests))
		}
		r.Rebuild[i].Check = true
	}
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			var cancel context.CancelFunc
			ctx, cancel = l.withTimeout(outer)
			defer cancel()
		}
		held, err := rv.Reserve(ctx, r)
		if err != nil || held.Lost == nil {
			return held, err
		}
		if len(held.Lost) != len(r.Requests) {
			return HoldResult{}, fmt.Errorf("%w: %d lost flags for %d requests", ErrUnexpectedReply, len(held.Lost), len(r.Requests))
		}
		if attempt == maxRebuilds {
			// Denied, whatever the store's failure policy: a counter that
			// cannot be rebuilt must not be decided as empty.
			return HoldResult{}, fmt.Errorf("floodgate: Reserve: %w: the store answered a counter lost %d times", ErrLedger, attempt+1)
		}
		for i, at := range held.Lost {
			if at.IsZero() {
				continue
			}
			// The ledger is read at the store's time, by which the store
			// counts its windows (Redis's TIME, or the store's Clock).
			q := r.Requests[i]
			lctx, cancel := context.WithTimeout(outer, l.ledgerTimeout)
			window, units, err := l.ledger.Used(lctx, q.Key, q.Limit, at)
			cancel()
			switch {
			case err != nil && l.ledgerPolicy == FailOpen:
				// Decide on the counter as it is.
				r.Rebuild[i] = Rebuild{}
				continue
			case err != nil:
				return HoldResult{}, fmt.Errorf("floodgate: Reserve: rebuilding the counter of %q from the ledger: %w: %w", q.Key, ErrLedger, err)
			}
			if units == 0 {
				// Nothing recorded: the window the store's time opens.
				window = windowStart(q.Limit, at, 0)
			}
			r.Rebuild[i] = Rebuild{Known: true, Window: window, Units: units}
		}
	}
}

// windowsOf returns the start of the window each durable item's units
// count in, from the reserve's decisions; nil when no item is durable.
func windowsOf(items []Item, ds []Decision) []time.Time {
	var ws []time.Time
	for i, it := range items {
		if !it.Limit.Durable || i >= len(ds) {
			continue
		}
		if ws == nil {
			ws = make([]time.Time, len(items))
		}
		ws[i] = windowStart(it.Limit, ds[i].Now, ds[i].ResetAfter)
	}
	return ws
}

// windowStart is the start of the fixed window of limit that a decision
// made at now, whose window ends resetAfter later, counts in: the aligned
// window that contains now, or for FirstHit the window that ends then.
func windowStart(limit Limit, now time.Time, resetAfter time.Duration) time.Time {
	us, p := now.UnixMicro(), limit.Period.Microseconds()
	switch {
	case limit.Window == FirstHit && resetAfter > 0:
		return time.UnixMicro(us + resetAfter.Microseconds() - p).UTC()
	case limit.Window == FirstHit:
		return time.UnixMicro(us).UTC() // no count: a window would start now
	}
	return time.UnixMicro(us - us%p).UTC()
}

// record writes the commit of actual[i] units of reservation id on each
// durable request rs[i] (prepared, with prefix) to the ledger, before the
// store settles: a commit is acknowledged only once the ledger holds it. A
// cancel is recorded as a commit of 0 units, so that a commit after it
// (which the store refuses) cannot have been billed first. windows are
// the reservation's (Reservation.Windows); a missing one is the aligned
// window of now, or for FirstHit the ledger's window of now.
func (l *Limiter) record(ctx context.Context, id string, rs []Request, windows []time.Time, actual []int64) error {
	var commits []Commit
	now := l.wallNow()
	for i, r := range rs {
		if !r.Limit.Durable {
			continue
		}
		var w time.Time
		if i < len(windows) {
			w = windows[i]
		}
		if w.IsZero() && r.Limit.Window == FirstHit {
			lctx, cancel := context.WithTimeout(ctx, l.ledgerTimeout)
			lw, units, err := l.ledger.Used(lctx, r.Key, r.Limit, now)
			cancel()
			if err != nil {
				return fmt.Errorf("floodgate: commit of %s: finding the window of %q: %w: %w", id, r.Key, ErrLedger, err)
			}
			if units > 0 {
				w = lw
			}
		}
		if w.IsZero() {
			w = windowStart(Limit{Period: r.Limit.Period}, now, 0)
		}
		commits = append(commits, Commit{Key: r.Key, Limit: r.Limit, Window: w, Units: actual[i], ID: id, At: now})
	}
	if len(commits) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, l.ledgerTimeout)
	defer cancel()
	if err := l.ledger.Record(ctx, commits); err != nil {
		return fmt.Errorf("floodgate: commit of %s: %w: %w", id, ErrLedger, err)
	}
	return nil
}

// hasDurable reports whether an item with a cost takes a durable quota.
func hasDurable(items []Item) bool {
	for i := range items {
		if items[i].Limit.Durable && items[i].Cost > 0 {
			return true
		}
	}
	return false
}

// durableHoldTTL is how long the reservation of a durable decision (a
// Decide or Allow of a durable quota: a reserve, then a commit of its
// cost) holds its units if the commit never comes: the units stay
// charged at its expiry.
const durableHoldTTL = time.Minute

// decideDurable is Decide and DecideAll for items some of which take a
// durable quota: each durable item of Decide, or all the items of
// DecideAll, is a reservation of its cost, committed at once, so that the
// ledger records it before the decision is answered. A commit the ledger
// does not take denies (ErrLedger), its hold left charged until it
// expires.
func (l *Limiter) decideDurable(ctx context.Context, items []Item, atomic bool) ([]Outcome, error) {
	if atomic {
		return l.reserveCommit(ctx, items)
	}
	out := make([]Outcome, len(items))
	var plain []Item
	var which []int
	for i, it := range items {
		if !it.Limit.Durable || it.Cost == 0 {
			plain = append(plain, it)
			which = append(which, i)
		}
	}
	// Validate every item before any reaches the store.
	if _, err := l.newCall(items, false); err != nil {
		return nil, err
	}
	if len(plain) > 0 {
		pout, err := l.decide(ctx, plain, false)
		if err != nil {
			return nil, err
		}
		for j, i := range which {
			out[i] = pout[j]
		}
	}
	for i, it := range items {
		if !it.Limit.Durable || it.Cost == 0 {
			continue
		}
		o, err := l.reserveCommit(ctx, []Item{it})
		if err != nil {
			var ie *ItemError
			if errors.As(err, &ie) {
				ie.Index = i
			}
			return nil, err
		}
		out[i] = o[0]
	}
	return out, nil
}

// reserveCommit reserves the cost of every item, all or nothing, and
// commits it at once.
func (l *Limiter) reserveCommit(ctx context.Context, items []Item) ([]Outcome, error) {
	res, _, out, err := l.ReserveEach(ctx, items, &ReserveOptions{TTL: durableHoldTTL})
	var ie *ItemError
	var fe *FieldError
	switch {
	case errors.As(err, &ie):
		return nil, err
	case out == nil && errors.As(err, &fe):
		return nil, &ItemError{Index: 0, Err: err}
	case out == nil:
		// The ledger could not rebuild a lost counter (or the store
		// answered nonsense): denied, as FailClosed.
		out = make([]Outcome, len(items))
		for i := range out {
			out[i] = Outcome{Decision: failed(FailClosed), Limit: items[i].Limit, Err: err, Policy: FailClosed}
		}
		return out, nil
	case res == nil || !res.Held || res.Local && l.fb == nil:
		return out, nil
	}
	// The ledger first, every item's cost in one batch; then one settle
	// of the store per distinct cost (a settle takes one actual cost for
	// the items it names).
	costs := make([]int64, len(items))
	for i := range items {
		costs[i] = items[i].Cost
	}
	if err := l.recordItems(ctx, res.ID, items, res.Windows, costs); err != nil {
		// Not acknowledged: denied. The hold is left as it is, charged in
		// full at its expiry: a write that timed out may still land in the
		// ledger, and giving the units back would then leave a billed use
		// uncounted.
		for i := range out {
			out[i] = Outcome{Decision: failed(FailClosed), Limit: out[i].Limit, Err: err, Policy: FailClosed}
		}
		return out, nil
	}
	// The ledger holds the commit: the decision stands. A settle that
	// fails leaves the hold, charged in full at its expiry, which is the
	// cost committed.
	done := make([]bool, len(items))
	for i := range items {
		if done[i] {
			continue
		}
		var group []Item
		for j := i; j < len(items); j++ {
			if !done[j] && items[j].Cost == items[i].Cost {
				done[j] = true
				group = append(group, items[j])
			}
		}
		_, _ = l.settleHold(ctx, res.ID, group, nil, items[i].Cost, false, res.Local, true)
	}
	return out, nil
}

// recordItems is record for items, which it prepares.
func (l *Limiter) recordItems(ctx context.Context, id string, items []Item, windows []time.Time, actual []int64) error {
	rs := make([]Request, len(items))
	now := l.now()
	for i, it := range items {
		rs[i] = Request{Key: it.Key, Limit: it.Limit}
		if err := l.prepare(&rs[i], now); err != nil {
			return &ItemError{Index: i, Err: err}
		}
	}
	return l.record(ctx, id, rs, windows, actual)
}

// allowEachDurable is AllowEach with a durable limit among limits.
func (l *Limiter) allowEachDurable(ctx context.Context, key string, n int64, limits []Limit) (Decision, []Decision, error) {
	items := make([]Item, len(limits))
	for i, lim := range limits {
		items[i] = Item{Key: key, Limit: lim, Cost: n, Policy: l.policy}
	}
	out, err := l.decideDurable(ctx, items, true)
	if err != nil {
		return Decision{RetryAfter: Never}, nil, unwrapItem(err)
	}
	ds := make([]Decision, len(out))
	for i := range out {
		d, err := out[i].result()
		if err != nil {
			return d, nil, err
		}
		ds[i] = d
	}
	return Combine(ds), ds, nil
}

// unwrapItem is the error of an item as the single-request methods
// return it: the item's own, without its index.
func unwrapItem(err error) error {
	var ie *ItemError
	if errors.As(err, &ie) {
		return ie.Err
	}
	return err
}

// wallNow is the Limiter's Clock, or without one the process clock: the
// time of a ledger's entries and reads (a store with its own clock, such
// as Redis's TIME, leaves Request.Now unset).
func (l *Limiter) wallNow() time.Time {
	if now := l.now(); !now.IsZero() {
		return now
	}
	return time.Now()
}
