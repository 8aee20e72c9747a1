package ledger

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// Ledger is the durable record that Quotas accounts durable quotas in
// (floodgate.Limit.Durable). Durable makes one from a Store (PostgreSQL
// or SQLite). Both methods are safe for concurrent use.
type Ledger interface {
	// Record writes the commits of one settle of a reservation, all or
	// none, each at most once per (Key, ID): a commit the ledger holds
	// already (a retry) is not written again, and is no error. An error
	// means the ledger may hold none of them.
	Record(ctx context.Context, commits []Commit) error
	// Used returns what the ledger holds for key under limit in the window
	// of limit that contains at: the window's start and the units
	// committed in it; zero units (and any start) when it holds none.
	Used(ctx context.Context, key string, limit floodgate.Limit, at time.Time) (window time.Time, units int64, err error)
}

// Commit is one committed use of a durable quota, as a Ledger records it.
type Commit struct {
	// Key is the store key: the item's key with the Limiter's KeyPrefix.
	Key string
	// Limit is the quota the units were taken under.
	Limit floodgate.Limit
	// Window is the start of the window the units count in: the window of
	// the reservation's reserve.
	Window time.Time
	// Units is the cost committed.
	Units int64
	// ID is the reservation's ID: with Key, what makes a commit once.
	ID string
	// At is when the commit was made: the request's time (the Limiter's
	// Clock), or the process clock when it has none.
	At time.Time
}

// ErrLedger is wrapped by the errors of a durable quota's ledger: a commit
// the ledger did not take (not acknowledged: the hold stays, retry the
// commit), or a lost counter that could not be rebuilt because the ledger
// could not be read (denied under WrapOptions.Policy FailClosed). It is
// never a failure of the store (floodgate.ErrStore): no store failure
// policy answers it, and a Limiter denies it.
var ErrLedger = errors.New("ledger: failed")

// DefaultTimeout is WrapOptions.Timeout's default: a ledger write waits
// for a disk flush or a database's commit, which is slower and rarer than
// a decision.
const DefaultTimeout = 5 * time.Second

// WrapOptions configure Wrap. A nil *WrapOptions, or the zero value,
// means every default.
type WrapOptions struct {
	// Policy answers a ledger that cannot be read when a durable quota's
	// counter must be rebuilt (a new window, or a counter the store
	// lost): floodgate.FailClosed (the default) denies, as a paid quota
	// should; floodgate.FailOpen decides on the counter as it is, which
	// after a loss of the store re-admits what the ledger held. A commit
	// always needs the ledger: one it did not take is not acknowledged,
	// whatever the policy. FailLocal is not a ledger policy.
	Policy floodgate.FailurePolicy
	// Timeout bounds each ledger call (a commit's write, a rebuild's
	// read) on top of the caller's context, apart from the store's
	// deadline (floodgate.Options.Timeout); 0 means DefaultTimeout.
	Timeout time.Duration
	// Local marks the store as FailLocal's local store
	// (floodgate.Options.Local), which decides on this instance's share
	// of each limit while the shared store fails: its counters are never
	// rebuilt from the ledger (the ledger holds the whole fleet's use),
	// but its commits are recorded, under the share the Limiter gave it.
	Local bool
	// Trace, if set, is called as each call of the Ledger starts, with
	// its context: op "record" for a commit's write (Record, one
	// transaction of commits commits) or "read" for a window's units
	// (Used). The call runs under the context it returns, and calls end
	// with its error when it returns. floodgate serve makes a span of
	// each (server/tracing); nil traces nothing. It must be safe for
	// concurrent use.
	Trace func(ctx context.Context, op string, commits int) (context.Context, func(err error))
}

// Quotas is a floodgate.Store that accounts for durable quotas
// (floodgate.Limit.Durable) in a Ledger, over a store that decides them.
// Make one with Wrap and put it under a floodgate.Limiter as its store
// (outermost, so that the Limiter finds it); Wrap the Limiter's
// Options.Local too, with WrapOptions.Local, so that the commits of
// FailLocal's decisions are recorded. It is safe for concurrent use.
//
// What it does to a request of a durable quota, and nothing to the
// others:
//
//   - a reserve (Reserve) asks the store to check the counter
//     (floodgate.HoldRequest.Rebuild): a counter with no count in its
//     window (a new window, or one the store lost) is answered Lost, the
//     window's units are read from the ledger (Ledger.Used), and the
//     store raises the counter to them and decides, in one atomic step;
//   - a commit (Settle) of a hold that the store has, and recorded as
//     durable, is written to the ledger (once per reservation ID) under
//     the hold's key and in the hold's window, before the store settles
//     it, and acknowledged only then; nothing is written for a hold the
//     store does not have, but for a signed record's (see Settle), nor
//     for a cancel;
//   - a decision that takes units (Apply, ApplyBatch, ApplyPipelined) is
//     a reserve of its cost and its commit at once: admitted only once
//     the ledger holds the commit. A commit the ledger does not take
//     denies with ErrLedger, its hold left charged until it expires.
//
// So a lost counter re-admits at most the units that were held and not
// yet committed when it was lost, instead of the whole quota
// (docs/guarantees.md states the bound and measures it). The store must
// be a floodgate.Reserver, and should be a floodgate.HoldReader (both of
// Floodgate's stores are; see Settle for one that is not); its other
// abilities (Batcher, Pipeliner, Resetter, Pinger, Raiser) are found by
// type assertion, as a Limiter finds them.
type Quotas struct {
	inner floodgate.Store
	rv    floodgate.Reserver
	l     Ledger
	o     WrapOptions
	// timeout bounds each call of inner (WithTimeout); 0: none.
	timeout time.Duration
}

var (
	_ floodgate.Store     = (*Quotas)(nil)
	_ floodgate.Batcher   = (*Quotas)(nil)
	_ floodgate.Pipeliner = (*Quotas)(nil)
	_ floodgate.Reserver  = (*Quotas)(nil)
	_ floodgate.Resetter  = (*Quotas)(nil)
	_ floodgate.Pinger    = (*Quotas)(nil)
	_ floodgate.Raiser    = (*Quotas)(nil)
)

// Wrap returns store with its durable quotas accounted in l:
//
//	acc := ledger.Durable(pg, nil)
//	quotas, err := ledger.Wrap(redis, acc, nil)
//	limiter, err := floodgate.New(quotas, nil)
//
// store must be a floodgate.Reserver; o may be nil. Neither store nor l
// is closed by it.
func Wrap(store floodgate.Store, l Ledger, o *WrapOptions) (*Quotas, error) {
	if store == nil || l == nil {
		return nil, errors.New("ledger: Wrap: nil store or ledger")
	}
	rv, ok := store.(floodgate.Reserver)
	if !ok {
		return nil, fmt.Errorf("ledger: Wrap: the store takes no reservations, which durable quotas are made of: %w", floodgate.ErrNotSupported)
	}
	q := &Quotas{inner: store, rv: rv, l: l}
	if o != nil {
		q.o = *o
	}
	switch {
	case q.o.Timeout < 0:
		return nil, fmt.Errorf("ledger: Wrap: negative ledger timeout %v", q.o.Timeout)
	case q.o.Timeout == 0:
		q.o.Timeout = DefaultTimeout
	}
	switch q.o.Policy {
	case "":
		q.o.Policy = floodgate.FailClosed
	case floodgate.FailClosed, floodgate.FailOpen:
	default:
		return nil, fmt.Errorf("ledger: Wrap: ledger policy %q (want fail_closed or fail_open)", q.o.Policy)
	}
	return q, nil
}

// Store returns the store it wraps.
func (q *Quotas) Store() floodgate.Store { return q.inner }

// Ledger returns the ledger it records in.
func (q *Quotas) Ledger() Ledger { return q.l }

// Policy returns the ledger policy (WrapOptions.Policy, with its
// default).
func (q *Quotas) Policy() floodgate.FailurePolicy { return q.o.Policy }

// DurableQuotas reports true: a floodgate.Limiter over q accepts durable
// limits.
func (q *Quotas) DurableQuotas() bool { return true }

// WithTimeout returns q with each call of the store it wraps bounded by
// timeout, on top of the caller's context: a floodgate.Limiter calls it
// with its Options.Timeout (see there), so that the deadline bounds the
// store's calls and not the ledger's, which WrapOptions.Timeout bounds.
// The store's own rule is kept: a store that bounds its calls itself
// (a WithTimeout method: the Redis store counts the deadline from each
// script's send) is given timeout that way, and a store that decides in
// this process (InProcess reports true: the memory store) gets none.
func (q *Quotas) WithTimeout(timeout time.Duration) floodgate.Store {
	c := *q
	c.timeout = timeout
	switch inner := q.inner.(type) {
	case interface{ InProcess() bool }:
		if inner.InProcess() {
			c.timeout = 0
		}
	case interface {
		WithTimeout(time.Duration) floodgate.Store
	}:
		if rv, ok := inner.WithTimeout(timeout).(floodgate.Reserver); ok {
			c.inner, c.rv, c.timeout = rv.(floodgate.Store), rv, 0
		}
	}
	return &c
}

// storeCtx is ctx bounded by the store's deadline.
func (q *Quotas) storeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if q.timeout <= 0 {
		return ctx, func() {}
	}
	if d, ok := ctx.Deadline(); ok && !d.After(time.Now().Add(q.timeout)) {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, q.timeout)
}

// takes reports whether r takes units of a durable quota.
func takes(r *floodgate.Request) bool { return r.Limit.Durable && r.Cost > 0 }

// Apply decides r: for a durable quota with a cost, a reserve of the cost
// and its commit (see Quotas); anything else in the store as it is.
func (q *Quotas) Apply(ctx context.Context, r floodgate.Request) (floodgate.Decision, error) {
	if !takes(&r) {
		ctx, cancel := q.storeCtx(ctx)
		defer cancel()
		return q.inner.Apply(ctx, r)
	}
	ds, err := q.reserveCommit(ctx, []floodgate.Request{r})
	if err != nil {
		return floodgate.Decision{}, err
	}
	return ds[0], nil
}

// ApplyBatch decides rs all or nothing: when one takes units of a durable
// quota, as one reservation of every request's cost, committed at once;
// otherwise by the store's ApplyBatch, or one by one when the store is
// not a floodgate.Batcher (a later denial then cannot give back what an
// earlier request took).
func (q *Quotas) ApplyBatch(ctx context.Context, rs []floodgate.Request) ([]floodgate.Decision, error) {
	for i := range rs {
		if takes(&rs[i]) {
			return q.reserveCommit(ctx, rs)
		}
	}
	ctx, cancel := q.storeCtx(ctx)
	defer cancel()
	if b, ok := q.inner.(floodgate.Batcher); ok {
		return b.ApplyBatch(ctx, rs)
	}
	ds := make([]floodgate.Decision, 0, len(rs))
	for _, r := range rs {
		d, err := q.inner.Apply(ctx, r)
		if err != nil {
			return nil, err
		}
		ds = append(ds, d)
	}
	return ds, nil
}

// ApplyPipelined decides each of rs on its own: those of durable quotas
// with a cost each as Apply does, the others in one round trip when the
// store is a floodgate.Pipeliner.
func (q *Quotas) ApplyPipelined(ctx context.Context, rs []floodgate.Request) ([]floodgate.Decision, []error) {
	ds, errs := make([]floodgate.Decision, len(rs)), make([]error, len(rs))
	var plain []floodgate.Request
	var which []int
	for i := range rs {
		if !takes(&rs[i]) {
			plain = append(plain, rs[i])
			which = append(which, i)
		}
	}
	if len(plain) > 0 {
		pctx, cancel := q.storeCtx(ctx)
		p, ok := q.inner.(floodgate.Pipeliner)
		if ok && len(plain) > 1 {
			pds, perrs := p.ApplyPipelined(pctx, plain)
			if len(pds) != len(plain) || len(perrs) != len(plain) {
				err := fmt.Errorf("ledger: %w: %d decisions and %d errors for %d requests", floodgate.ErrUnexpectedReply, len(pds), len(perrs), len(plain))
				pds, perrs = make([]floodgate.Decision, len(plain)), make([]error, len(plain))
				for j := range perrs {
					perrs[j] = err
				}
			}
			for j, i := range which {
				ds[i], errs[i] = pds[j], perrs[j]
			}
		} else {
			for j, i := range which {
				ds[i], errs[i] = q.inner.Apply(pctx, plain[j])
			}
		}
		cancel()
	}
	for i := range rs {
		if takes(&rs[i]) {
			ds[i], errs[i] = q.Apply(ctx, rs[i])
		}
	}
	return ds, errs
}

// holdTTL is how long the reservation of a durable decision (a reserve,
// then a commit of its cost) holds its units if the commit never comes:
// the units stay charged at its expiry.
const holdTTL = time.Minute

// reserveCommit reserves the cost of every request of rs, all or nothing,
// and commits it at once: the ledger first, every durable request's cost
// in one batch; then one settle of the store per distinct cost (a settle
// takes one actual cost for the requests it names).
func (q *Quotas) reserveCommit(ctx context.Context, rs []floodgate.Request) ([]floodgate.Decision, error) {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+).
	id := hex.EncodeToString(b[:])
	held, err := q.Reserve(ctx, floodgate.HoldRequest{Requests: rs, ID: id, TTL: holdTTL})
	if err != nil {
		return nil, err
	}
	if len(held.Decisions) != len(rs) {
		return nil, fmt.Errorf("ledger: %w: %d decisions for %d requests", floodgate.ErrUnexpectedReply, len(held.Decisions), len(rs))
	}
	if !floodgate.Combine(held.Decisions).Allowed {
		return held.Decisions, nil
	}
	costs := make([]int64, len(rs))
	for i := range rs {
		costs[i] = rs[i].Cost
	}
	if err := q.record(ctx, id, rs, held.Windows, costs); err != nil {
		// Not acknowledged: denied. The hold is left as it is, charged in
		// full at its expiry: a write that timed out may still land in the
		// ledger, and giving the units back would then leave a billed use
		// uncounted.
		return nil, err
	}
	// The ledger holds the commit: the decision stands. A settle that
	// fails leaves the hold, charged in full at its expiry, which is the
	// cost committed.
	done := make([]bool, len(rs))
	for i := range rs {
		if done[i] {
			continue
		}
		var group []floodgate.Request
		for j := i; j < len(rs); j++ {
			if !done[j] && rs[j].Cost == rs[i].Cost {
				done[j] = true
				group = append(group, rs[j])
			}
		}
		sctx, cancel := q.storeCtx(ctx)
		_, _ = q.rv.Settle(sctx, floodgate.SettleRequest{Requests: group, ID: id, Actual: rs[i].Cost})
		cancel()
	}
	return held.Decisions, nil
}

// maxRebuilds bounds the reserves of one call that a store may answer
// Lost: each answer is followed by a read of the ledger and a reserve that
// knows it, and a counter answers Lost again only if its window ended in
// between.
const maxRebuilds = 3

// Reserve holds r in the store, rebuilding each durable request's counter
// from the ledger when the store answers it Lost (see Quotas): the ledger
// is read under ctx and WrapOptions.Timeout, each reserve under the
// store's deadline. A counter that cannot be rebuilt (the ledger cannot be
// read under the policy FailClosed, or the store answers Lost again and
// again) is an error wrapping ErrLedger. The result's Windows are the
// windows the durable requests' units count in. A Local store's counters
// are not rebuilt.
func (q *Quotas) Reserve(ctx context.Context, r floodgate.HoldRequest) (floodgate.HoldResult, error) {
	if !q.o.Local {
		rb := make([]floodgate.Rebuild, len(r.Requests))
		copy(rb, r.Rebuild)
		check := false
		for i := range r.Requests {
			if r.Requests[i].Limit.Durable {
				rb[i].Check, check = true, true
			}
		}
		if check {
			r.Rebuild = rb
		}
	}
	for attempt := 0; ; attempt++ {
		held, err := q.reserve(ctx, r)
		if err != nil {
			return held, err
		}
		if held.Lost == nil {
			held.Windows = windowsOf(r.Requests, held.Decisions)
			return held, nil
		}
		if len(held.Lost) != len(r.Requests) || r.Rebuild == nil {
			return floodgate.HoldResult{}, fmt.Errorf("ledger: Reserve: %w: %d lost flags for %d requests", floodgate.ErrUnexpectedReply, len(held.Lost), len(r.Requests))
		}
		if attempt == maxRebuilds {
			// Denied, whatever the store's failure policy: a counter that
			// cannot be rebuilt must not be decided as empty.
			return floodgate.HoldResult{}, fmt.Errorf("ledger: Reserve: %w: the store answered a counter lost %d times", ErrLedger, attempt+1)
		}
		for i, at := range held.Lost {
			if at.IsZero() {
				continue
			}
			// The ledger is read at the store's time, by which the store
			// counts its windows (Redis's TIME, or the store's Clock).
			rq := r.Requests[i]
			window, units, err := q.used(ctx, rq.Key, rq.Limit, at)
			switch {
			case err != nil && q.o.Policy == floodgate.FailOpen:
				// Decide on the counter as it is.
				r.Rebuild[i] = floodgate.Rebuild{}
				continue
			case err != nil:
				return floodgate.HoldResult{}, fmt.Errorf("ledger: Reserve: rebuilding the counter of %q from the ledger: %w: %w", rq.Key, ErrLedger, err)
			}
			if units == 0 {
				// Nothing recorded: the window the store's time opens.
				window = windowStart(rq.Limit, at, 0)
			}
			r.Rebuild[i] = floodgate.Rebuild{Known: true, Window: window, Units: units}
		}
	}
}

// reserve is one Reserve of the store, under its deadline.
func (q *Quotas) reserve(ctx context.Context, r floodgate.HoldRequest) (floodgate.HoldResult, error) {
	ctx, cancel := q.storeCtx(ctx)
	defer cancel()
	return q.rv.Reserve(ctx, r)
}

// Settle settles the hold r.ID in the store, recording the commit of
// each durable hold in the ledger first. What it records is the store's:
// it reads the holds (floodgate.HoldReader) and records, for each hold
// that the store recorded as durable, r.Actual units under its key in
// the hold's window, once per reservation ID; then the store settles,
// under its deadline. So nothing is recorded for a hold the store does
// not have, for a step the store will refuse (a conflict, an expiry), or
// in a window a caller names; a commit the ledger did not take is an
// error wrapping ErrLedger, and the store is not asked (the hold stays,
// and a retry records it). A cancel records nothing. Each Settlement of a
// durable hold reports what the ledger holds for it (Billed).
//
// The one commit recorded without a hold is that of a Signed request
// whose hold the store no longer has (floodgate.SettleRequest.Signed:
// the service's own record, which a store that lost the hold cannot
// contradict): made before its Expires, it is recorded from that record,
// at most the units held per durable key, and every Settlement says
// HoldLost. See docs/guarantees.md ("Durable quotas").
//
// A store that is no HoldReader is settled first and recorded after,
// from its Settlements (Durable): a commit the ledger did not take is
// then settled in the store but not acknowledged, and its retry, which
// the store answers as a replay, records it.
func (q *Quotas) Settle(ctx context.Context, r floodgate.SettleRequest) ([]floodgate.Settlement, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	hr, ok := q.inner.(floodgate.HoldReader)
	if !ok {
		return q.settleFirst(ctx, r)
	}
	sctx, cancel := q.storeCtx(ctx)
	held, err := hr.ReadHolds(sctx, r)
	cancel()
	switch {
	case errors.Is(err, floodgate.ErrUnknownReservation):
		if sts, billed, lerr := q.billLost(ctx, r); billed {
			return sts, lerr
		}
		return nil, err
	case errors.Is(err, floodgate.ErrConflict), errors.Is(err, floodgate.ErrExpired):
		// Nothing to record: the store answers the step as it refuses it
		// (an expiry with its settlements).
		return q.settle(ctx, r)
	case err != nil:
		return nil, err
	case len(held) != len(r.Requests):
		return nil, fmt.Errorf("ledger: Settle: %w: %d holds for %d requests", floodgate.ErrUnexpectedReply, len(held), len(r.Requests))
	}
	if !r.Cancel {
		var rs []floodgate.Request
		var windows []time.Time
		for i, h := range held {
			if !h.Durable || h.Replayed {
				// A replay was recorded before its first settle.
				continue
			}
			rq := r.Requests[i]
			rq.Limit.Durable = true
			w := h.Window
			if w.IsZero() && i < len(r.Windows) {
				// A hold from a store that kept no window.
				w = r.Windows[i]
			}
			rs, windows = append(rs, rq), append(windows, w)
		}
		if err := q.record(ctx, r.ID, rs, windows, repeat(r.Actual, len(rs))); err != nil {
			return nil, err
		}
	}
	sts, err := q.settle(ctx, r)
	for i := range sts {
		if i < len(held) && held[i].Durable && !r.Cancel {
			sts[i].Billed = r.Actual
		}
	}
	return sts, err
}

// settle is the store's Settle, under its deadline.
func (q *Quotas) settle(ctx context.Context, r floodgate.SettleRequest) ([]floodgate.Settlement, error) {
	sctx, cancel := q.storeCtx(ctx)
	defer cancel()
	return q.rv.Settle(sctx, r)
}

// settleFirst is Settle over a store that is no HoldReader: the store
// settles, then the commits of the holds it reports durable are recorded
// (a replay's again: the ledger writes it once), each in the window of r
// (floodgate.Reservation.Windows) or else of the settle's decision.
func (q *Quotas) settleFirst(ctx context.Context, r floodgate.SettleRequest) ([]floodgate.Settlement, error) {
	sts, err := q.settle(ctx, r)
	if err != nil || r.Cancel {
		return sts, err
	}
	var rs []floodgate.Request
	var windows []time.Time
	for i, st := range sts {
		if i >= len(r.Requests) || !st.Durable {
			continue
		}
		rq := r.Requests[i]
		rq.Limit.Durable = true
		var w time.Time
		if i < len(r.Windows) {
			w = r.Windows[i]
		}
		if w.IsZero() {
			w = windowStart(rq.Limit, st.Decision.Now, st.Decision.ResetAfter)
		}
		rs, windows = append(rs, rq), append(windows, w)
		sts[i].Billed = r.Actual
	}
	if err := q.record(ctx, r.ID, rs, windows, repeat(r.Actual, len(rs))); err != nil {
		return nil, err
	}
	return sts, nil
}

// billLost records the commit of a Signed request whose hold the store
// no longer has, from the signed record (see Settle): billed reports
// whether it applies (a commit, before Expires, of a durable key); each
// durable key is billed r.Actual, at most the units it held (the rest is
// Short).
func (q *Quotas) billLost(ctx context.Context, r floodgate.SettleRequest) (sts []floodgate.Settlement, billed bool, err error) {
	if !r.Signed || r.Cancel || len(r.Windows) != len(r.Requests) {
		return nil, false, nil
	}
	now := time.Now()
	if !r.Requests[0].Now.IsZero() {
		now = r.Requests[0].Now
	}
	if !now.Before(r.Expires) {
		return nil, false, nil
	}
	sts = make([]floodgate.Settlement, len(r.Requests))
	var rs []floodgate.Request
	var windows []time.Time
	var units []int64
	for i, rq := range r.Requests {
		sts[i].HoldLost = true
		if !rq.Limit.Durable || r.Windows[i].IsZero() {
			continue
		}
		u := min(r.Actual, rq.Cost)
		sts[i].Billed, sts[i].Short, sts[i].Durable = u, r.Actual-u, true
		rs, windows, units = append(rs, rq), append(windows, r.Windows[i]), append(units, u)
	}
	if len(rs) == 0 {
		return nil, false, nil
	}
	if err := q.record(ctx, r.ID, rs, windows, units); err != nil {
		return nil, true, err
	}
	return sts, true, nil
}

// repeat is n copies of v.
func repeat(v int64, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// record writes the commit of actual[i] units of reservation id on each
// durable request rs[i] to the ledger. windows are the reservation's
// (floodgate.Reservation.Windows); a missing one is the aligned window of
// now, or for FirstHit the ledger's window of now.
func (q *Quotas) record(ctx context.Context, id string, rs []floodgate.Request, windows []time.Time, actual []int64) error {
	var commits []Commit
	now := time.Now()
	if len(rs) > 0 && !rs[0].Now.IsZero() {
		now = rs[0].Now
	}
	for i, r := range rs {
		if !r.Limit.Durable {
			continue
		}
		var w time.Time
		if i < len(windows) {
			w = windows[i]
		}
		if w.IsZero() && r.Limit.Window == floodgate.FirstHit {
			lw, units, err := q.used(ctx, r.Key, r.Limit, now)
			if err != nil {
				return fmt.Errorf("ledger: commit of %s: finding the window of %q: %w: %w", id, r.Key, ErrLedger, err)
			}
			if units > 0 {
				w = lw
			}
		}
		if w.IsZero() {
			w = windowStart(floodgate.Limit{Period: r.Limit.Period, Calendar: r.Limit.Calendar}, now, 0)
		}
		commits = append(commits, Commit{Key: r.Key, Limit: r.Limit, Window: w, Units: actual[i], ID: id, At: now})
	}
	if len(commits) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, q.o.Timeout)
	defer cancel()
	var end func(error)
	if q.o.Trace != nil {
		ctx, end = q.o.Trace(ctx, "record", len(commits))
	}
	err := q.l.Record(ctx, commits)
	if end != nil {
		end(err)
	}
	if err != nil {
		return fmt.Errorf("ledger: commit of %s: %w: %w", id, ErrLedger, err)
	}
	return nil
}

// used is the ledger's Used, under WrapOptions.Timeout.
func (q *Quotas) used(ctx context.Context, key string, limit floodgate.Limit, at time.Time) (time.Time, int64, error) {
	ctx, cancel := context.WithTimeout(ctx, q.o.Timeout)
	defer cancel()
	var end func(error)
	if q.o.Trace != nil {
		ctx, end = q.o.Trace(ctx, "read", 0)
	}
	window, units, err := q.l.Used(ctx, key, limit, at)
	if end != nil {
		end(err)
	}
	return window, units, err
}

// windowsOf returns the start of the window each durable request's units
// count in, from the reserve's decisions when they admitted the
// reservation; nil when none is durable or the reservation was denied.
func windowsOf(rs []floodgate.Request, ds []floodgate.Decision) []time.Time {
	if len(ds) != len(rs) || !floodgate.Combine(ds).Allowed {
		return nil
	}
	var ws []time.Time
	for i := range rs {
		if !rs[i].Limit.Durable {
			continue
		}
		if ws == nil {
			ws = make([]time.Time, len(rs))
		}
		ws[i] = windowStart(rs[i].Limit, ds[i].Now, ds[i].ResetAfter)
	}
	return ws
}

// windowStart is the start of the fixed window of limit that a decision
// made at now, whose window ends resetAfter later, counts in: the aligned
// window that contains now, or for FirstHit the window that ends then.
func windowStart(limit floodgate.Limit, now time.Time, resetAfter time.Duration) time.Time {
	if limit.IsCalendar() {
		return WindowFor(limit, now).Start
	}
	us, p := now.UnixMicro(), limit.Period.Microseconds()
	switch {
	case limit.Window == floodgate.FirstHit && resetAfter > 0:
		return time.UnixMicro(us + resetAfter.Microseconds() - p).UTC()
	case limit.Window == floodgate.FirstHit:
		return time.UnixMicro(us).UTC() // no count: a window would start now
	}
	return time.UnixMicro(us - us%p).UTC()
}

// Reset forgets key's state under limit in the store, which must be a
// floodgate.Resetter: the next reserve of a durable quota rebuilds its
// counter from the ledger.
func (q *Quotas) Reset(ctx context.Context, key string, limit floodgate.Limit) error {
	rs, ok := q.inner.(floodgate.Resetter)
	if !ok {
		return fmt.Errorf("ledger: Reset: %w", floodgate.ErrNotSupported)
	}
	ctx, cancel := q.storeCtx(ctx)
	defer cancel()
	return rs.Reset(ctx, key, limit)
}

// Raise raises a fixed window's count in the store, which must be a
// floodgate.Raiser.
func (q *Quotas) Raise(ctx context.Context, r floodgate.Request, window time.Time) (floodgate.Decision, error) {
	rs, ok := q.inner.(floodgate.Raiser)
	if !ok {
		return floodgate.Decision{}, fmt.Errorf("ledger: Raise: %w", floodgate.ErrNotSupported)
	}
	ctx, cancel := q.storeCtx(ctx)
	defer cancel()
	return rs.Raise(ctx, r, window)
}

// Ping checks the store, if it can be checked; the ledger's health is its
// own (Accounts.Ping).
func (q *Quotas) Ping(ctx context.Context) error {
	if p, ok := q.inner.(floodgate.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}
