package floodgate

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"
)

// How long a reservation lives, and is remembered.
const (
	// DefaultHoldTTL is how long a reservation holds its units when
	// ReserveOptions.TTL is 0: long enough for a slow upstream call (an
	// LLM answer), short enough that a caller that crashed frees nothing
	// for long (see ReleaseOnExpiry).
	DefaultHoldTTL = time.Minute
	// MaxHoldTTL is the longest a reservation may hold its units.
	MaxHoldTTL = 24 * time.Hour
	// DefaultHoldRetention is how long a store remembers a reservation
	// after it was settled or expired, so that a retried reserve, commit
	// or cancel gets the first answer instead of doing the step again;
	// stores take an option to change it.
	DefaultHoldRetention = time.Hour
)

// Reserver is a Store that holds units for a caller that knows only the
// upper bound of a request's cost: Reserve takes the bound now, Settle
// commits the actual cost (giving back the rest) or cancels, each step one
// atomic and idempotent step of the store, keyed by the reservation's ID.
// docs/reservations.md has the exact rules (a table per step and per
// algorithm). Every algorithm but Concurrency supports it.
type Reserver interface {
	// Reserve takes every request's Cost for its key under its limit, all
	// or nothing, and holds them under r.ID until r.TTL has passed. A
	// reserve whose ID the store knows returns the first answer (Replayed)
	// if it asks the same, and ErrConflict if not.
	Reserve(ctx context.Context, r HoldRequest) (HoldResult, error)
	// Settle commits r.Actual units of the hold r.ID on every request's
	// key, or cancels it; see SettleRequest. It returns one Settlement
	// per request.
	Settle(ctx context.Context, r SettleRequest) ([]Settlement, error)
}

// HoldReader is a Reserver that reads what a reservation holds without
// settling it: the decorator that accounts for durable quotas (package
// ledger) asks it before it records a commit, so that the key, units and
// window it bills are those of the store's hold, and nothing is billed
// for a hold the store does not have. Both of Floodgate's stores are
// HoldReaders.
type HoldReader interface {
	// ReadHolds answers as Settle(ctx, r) would answer now, and changes
	// nothing: an error wrapping ErrUnknownReservation (no hold),
	// ErrConflict (some keys held, or a hold settled otherwise) or
	// ErrExpired (nil holds), a store failure; else one HeldUnits per
	// request, in order.
	ReadHolds(ctx context.Context, r SettleRequest) ([]HeldUnits, error)
}

// HeldUnits is what a reservation holds on one key, as the store
// recorded it at the reserve (HoldReader).
type HeldUnits struct {
	// Units are the units held: the reserve's cost.
	Units int64
	// Durable reports a hold reserved under a durable limit.
	Durable bool
	// Window is, for a durable hold, the start of the fixed window its
	// units count in (the store's, at the reserve); zero for the others.
	Window time.Time
	// Replayed reports that the step asked for settled the hold already:
	// Settle would answer its first answer.
	Replayed bool
}

// HoldRequest asks a Reserver to hold units.
type HoldRequest struct {
	// Requests are the keys, limits and costs (the upper bounds) to hold,
	// all or nothing. Now, if set, is the time of each.
	Requests []Request
	// ID is the reservation's ID, its idempotency key: 1 to MaxLeaseLen
	// bytes of [A-Za-z0-9_-]. Limiter.Reserve makes a random one.
	ID string
	// TTL is how long the units are held before the reservation expires:
	// above zero, at most MaxHoldTTL.
	TTL time.Duration
	// Release gives the units back when the reservation expires unsettled;
	// by default they stay charged, as a caller that crashed between
	// reserve and commit may have done the work.
	Release bool
	// Rebuild, if set, has one entry per request: how the counter of a
	// durable quota is checked and rebuilt from its durable record (see
	// Rebuild; only a FixedWindow request may have one). The decorator
	// that accounts for durable quotas sets it; stores honour it.
	Rebuild []Rebuild
}

// Rebuild is how a Reserver treats the fixed-window counter of a durable
// request (HoldRequest.Rebuild): it is how a counter that the store lost
// is rebuilt from the durable record of what was used (see Limit.Durable)
// before the next decision on it.
type Rebuild struct {
	// Check asks the store to answer the reserve Lost, changing nothing,
	// when the counter has no count in the window that contains the
	// request's time (a new window, or a counter the store lost): the
	// durable record must be read first.
	Check bool
	// Known, with Window and Units, is what the durable record holds for
	// the window that starts at Window: a counter with no count in its
	// window is first raised to Units there, as Raiser.Raise does, and
	// then the request decided; if that window does not hold the store's
	// time (it ended since the record was read), the store answers Lost
	// again. Known takes precedence over Check.
	Known  bool
	Window time.Time
	Units  int64
}

// HoldResult is a Reserver's answer to a HoldRequest.
type HoldResult struct {
	// Decisions has one Decision per request: all allowed, or all denied
	// (a request that had room reports its unchanged state with
	// RetryAfter 0), as a Batcher answers.
	Decisions []Decision
	// Expires is when the hold ends unless settled before.
	Expires time.Time
	// Replayed reports a retry of a reserve the store had answered: the
	// hold is the first one (Allowed as first answered), and Decisions
	// report the state now.
	Replayed bool
	// Lost, when set, has one entry per request: for a durable request
	// whose counter had no count in its window while its Rebuild asked to
	// Check (or knew a window that does not hold the store's time), the
	// time the store decided at, by which the caller reads its durable record;
	// zero for the others. The store changed nothing (no hold, no
	// decision: Decisions is nil); the caller reserves again with the
	// Rebuild Known.
	Lost []time.Time
	// Windows, when set, has one entry per request: for a durable
	// request, the start of the window its units count in, which the
	// decorator that accounts for durable quotas sets and its settle
	// records (Reservation.Windows, SettleRequest.Windows); zero for the
	// others. Stores leave it nil.
	Windows []time.Time
}

// SettleRequest asks a Reserver to settle a hold.
type SettleRequest struct {
	// Requests name the keys and limits of the hold, as reserved: Key and
	// Limit's algorithm and Period find each (a settle uses the limit the
	// hold was made under, which the store kept); Cost is not used by
	// stores (for Signed, it is the units held). Now, if set, is the time
	// of each.
	Requests []Request
	// ID is the reservation's ID.
	ID string
	// Actual is the cost used, 0 to MaxLimit: below the hold the rest goes
	// back, above it the excess is taken if the limit admits it.
	Actual int64
	// Cancel gives every held unit back instead (Actual must be 0).
	Cancel bool
	// Windows, if set, are the reservation's (Reservation.Windows): for
	// a durable request, the start of the window its units count in.
	// Stores ignore it; so does the decorator that records commits, but
	// for a Signed request whose hold the store lost.
	Windows []time.Time
	// Signed reports that the requests (each Cost the units held), the
	// Windows and Expires are the service's own record of the reserve,
	// which it signed (Reservation.Signed), not a caller's claim. When the
	// store no longer has the hold (it lost it: a restart without
	// persistence, a failover), the decorator that accounts for durable
	// quotas bills a commit made before Expires from them, at most the
	// units held, and says so (Settlement.HoldLost); without Signed such
	// a commit is ErrUnknownReservation and billed nowhere. Stores ignore
	// it.
	Signed bool
	// Expires is the reservation's, for Signed.
	Expires time.Time
}

// Settlement is what settling a reservation did to one key's budget.
type Settlement struct {
	// Refunded is the units given back: the hold above the actual cost
	// (all of it for a cancel), at most what the algorithm still counts
	// (a fixed window that has ended gives nothing back).
	Refunded int64
	// Charged is the cost above the hold that was taken.
	Charged int64
	// Short is the cost above the hold that the limit did not admit, and
	// that was not taken.
	Short int64
	// Replayed reports a retry of the step that settled the hold: this is
	// the first answer, and nothing changed now.
	Replayed bool
	// Durable reports a hold reserved under a durable limit
	// (Limit.Durable), as the store recorded it: whatever the caller of
	// the settle says of the limit, its commit is recorded.
	Durable bool
	// Billed is the units the durable record holds for this commit of
	// the key (the decorator that accounts for durable quotas sets it):
	// the actual cost, or for a HoldLost commit what the signed record
	// held at most; 0 for a cancel and for keys that are not durable.
	Billed int64
	// HoldLost reports a commit of a Signed reservation whose hold the
	// store no longer had: nothing was settled in the store, and a
	// durable key's commit was billed from the signed record (Billed;
	// Short is the cost above what it held, not billed).
	HoldLost bool
	// Decision is the key's state after the step (a peek).
	Decision Decision
}

// ReserveOptions configure a reservation. A nil *ReserveOptions, or the
// zero value, means a random ID, DefaultHoldTTL, and units charged at
// expiry.
type ReserveOptions struct {
	// ID is the reservation's ID and idempotency key: a retry of Reserve
	// with the same ID and request gets the first answer. Empty: a random
	// one.
	ID string
	// TTL is how long the units are held; 0 means DefaultHoldTTL.
	TTL time.Duration
	// ReleaseOnExpiry gives the units back when the reservation expires
	// unsettled, at the store's next sweep; by default they stay charged.
	ReleaseOnExpiry bool
}

// Reservation is units held by Limiter.Reserve until Commit, Cancel or
// expiry. It is a small value: a service that gives the ID to a client
// can settle it later from the ID and the items alone
// (Limiter.Reservation).
type Reservation struct {
	// ID is the reservation's ID.
	ID string
	// Items are the keys, limits and costs held.
	Items []Item
	// Expires is when the hold ends unless settled before.
	Expires time.Time
	// Held reports that the store holds the units. It is false when the
	// reservation was denied, and when a store failure was answered by
	// FailOpen (allowed, holding nothing): Commit and Cancel then do
	// nothing.
	Held bool
	// Local reports a reservation held by FailLocal's local store, where
	// Commit and Cancel settle it.
	Local bool
	// Replayed reports a retry of a reserve the store had answered.
	Replayed bool
	// Windows, for a reservation of durable quotas, has one entry per
	// item: the start of the window a durable item's units count in (zero
	// for the others), as the store's reserve answered it
	// (HoldResult.Windows), which its commit records. A service that
	// settles a reservation from its ID keeps them with the items;
	// A commit records the window of the store's hold; these serve a
	// Signed reservation whose hold the store lost.
	Windows []time.Time
	// Signed reports that Items (each Cost the units held), Windows and
	// Expires are the Limiter's own record of the reserve, not a caller's
	// claim (see SettleRequest.Signed): Reserve and ReserveEach set it on
	// what they hold; Limiter.Reservation leaves it unset, and a service
	// sets it only on a Reservation rebuilt from a record it signed.
	Signed bool

	l *Limiter
}

// Reserve holds n units of key under limit: the upper bound of a request
// whose cost is known only afterwards. Commit the actual cost when it is
// known (the rest goes back), or Cancel. The Decision is the reserve's,
// as AllowN's; a denied reservation holds nothing. See ReserveEach.
func (l *Limiter) Reserve(ctx context.Context, key string, limit Limit, n int64, o *ReserveOptions) (*Reservation, Decision, error) {
	res, d, _, err := l.ReserveEach(ctx, []Item{{Key: key, Limit: limit, Cost: n}}, o)
	return res, d, err
}

// ReserveEach holds the cost of every item, all or nothing: a denial by
// any leaves the others untouched, and the combined Decision (Combine) is
// denied. There is one Outcome per item, as Decide returns. A store
// failure is answered by each item's failure policy (Item.Policy, or the
// Limiter's): FailClosed denies, FailOpen allows a reservation that holds
// nothing, FailLocal holds the units in the local store. A reservation is
// held in one store: when some items are decided locally and the others
// by the store or a policy, both sides are cancelled and every item denied
// (ErrSplitReservation). An invalid item, an algorithm without reservations (Concurrency) or a store that is not a
// Reserver is an error.
func (l *Limiter) ReserveEach(ctx context.Context, items []Item, o *ReserveOptions) (*Reservation, Decision, []Outcome, error) {
	var opts ReserveOptions
	if o != nil {
		opts = *o
	}
	if err := l.checkReserve(items, &opts); err != nil {
		return nil, Decision{RetryAfter: Never}, nil, err
	}
	c, err := l.newCall(items, true)
	if err == nil {
		err = checkHoldRequests(c.rs)
	}
	if err != nil {
		return nil, Decision{RetryAfter: Never}, nil, err
	}
	c.hold = &holdStep{id: opts.ID, ttl: opts.TTL, release: opts.ReleaseOnExpiry}
	l.run(ctx, &c)
	for _, o := range c.out {
		if o.Err != nil && !isStoreFailure(o.Err) {
			// A conflict with an earlier reserve of the same ID, a durable
			// record that could not rebuild a counter, a cancelled call:
			// no failure policy answers it.
			return nil, Decision{RetryAfter: Never}, nil, o.Err
		}
	}
	held := c.hold.result
	res := &Reservation{ID: opts.ID, Items: items, Expires: held.Expires, Replayed: held.Replayed, l: l}
	if split := l.unsplit(ctx, opts.ID, items, c.out); split != nil {
		return res, Decision{}, c.out, split
	}
	ds := make([]Decision, len(items))
	for i := range c.out {
		d, err := c.out[i].result()
		if err != nil {
			// The failure policy's answer: FailOpen allows a reservation
			// that holds nothing.
			return res, d, c.out, err
		}
		ds[i] = d
	}
	d := Combine(ds)
	// Held in one store: the shared one, or the local one for every item.
	res.Local = c.out[0].Policy == FailLocal
	res.Held = d.Allowed
	if res.Held {
		res.Windows, res.Signed = held.Windows, true
	}
	return res, d, c.out, nil
}

// holdStep is the reservation step of a call (ReserveEach): it holds the
// call's requests, all or nothing, in place of a batch of Apply, in the
// store or in FailLocal's local store, and keeps the answer.
type holdStep struct {
	id      string
	ttl     time.Duration
	release bool
	// result is the answer of the store that held (or refused) last.
	result HoldResult
}

// reserve holds rs in s and returns one decision per request.
func (h *holdStep) reserve(ctx context.Context, s Store, rs []Request) ([]Decision, error) {
	rv, ok := s.(Reserver)
	if !ok {
		return nil, fmt.Errorf("floodgate: Reserve: %w", ErrNotSupported)
	}
	var err error
	h.result, err = rv.Reserve(ctx, HoldRequest{Requests: rs, ID: h.id, TTL: h.ttl, Release: h.release})
	return h.result.Decisions, err
}

// unsplit returns nil when every outcome of a reservation was decided in
// one store. Otherwise it gives back what each side holds (best effort:
// what a failed cancel leaves expires at the reservation's TTL), answers
// every item as FailClosed and returns an error wrapping
// ErrSplitReservation.
func (l *Limiter) unsplit(ctx context.Context, id string, items []Item, out []Outcome) error {
	var local, shared []Item
	localHeld, sharedHeld := true, true
	var cause error
	for i, o := range out {
		if o.Policy == FailLocal {
			local = append(local, items[i])
			localHeld = localHeld && o.Decision.Allowed
		} else {
			shared = append(shared, items[i])
			// The store holds only what it decided (no error), all allowed.
			sharedHeld = sharedHeld && o.Err == nil && o.Decision.Allowed
		}
		if cause == nil && o.Err != nil {
			cause = o.Err
		}
	}
	if len(local) == 0 || len(shared) == 0 {
		return nil
	}
	if localHeld {
		_, _ = (&Reservation{ID: id, Items: local, Held: true, Local: true, l: l}).Cancel(ctx)
	}
	if sharedHeld {
		_, _ = (&Reservation{ID: id, Items: shared, Held: true, l: l}).Cancel(ctx)
	}
	err := fmt.Errorf("%w: %d of %d items decided locally", ErrSplitReservation, len(local), len(items))
	if cause != nil {
		err = fmt.Errorf("%w: %w", err, cause)
	}
	for i := range out {
		out[i] = Outcome{Decision: failed(FailClosed), Limit: items[i].Limit, Err: err, Policy: FailClosed}
	}
	return err
}

// checkReserve fills in the defaults of o and checks what a reservation
// needs beyond a valid request: a store that can hold, an algorithm with
// reservations, a valid TTL and ID.
func (l *Limiter) checkReserve(items []Item, o *ReserveOptions) error {
	if _, ok := l.store.(Reserver); !ok {
		return fmt.Errorf("floodgate: Reserve: %w", ErrNotSupported)
	}
	if len(items) == 0 {
		return fieldErr(ErrInvalidRequest, "items", "none to reserve")
	}
	for i, it := range items {
		if it.Limit.Algorithm == Concurrency {
			return &ItemError{Index: i, Err: fieldErr(ErrInvalidLimit, "algorithm", "concurrency limits hold units with leases (Acquire), not reservations")}
		}
		if it.Flow != "" {
			return &ItemError{Index: i, Err: fieldErr(ErrInvalidRequest, "flow", "a limit shared by flows is decided, not reserved (AllowFlow)")}
		}
	}
	if o.TTL == 0 {
		o.TTL = DefaultHoldTTL
	}
	if err := checkHold(o.ID, o.TTL); err != nil && o.ID != "" {
		return err
	}
	if o.ID == "" {
		var id [16]byte
		_, _ = rand.Read(id[:]) // crypto/rand.Read never fails (Go 1.24+).
		o.ID = hex.EncodeToString(id[:])
	}
	return checkHold(o.ID, o.TTL)
}

// checkHold checks a reservation's ID and TTL, as stores do.
func checkHold(id string, ttl time.Duration) error {
	switch {
	case ttl <= 0 || ttl > MaxHoldTTL:
		return fieldErr(ErrInvalidRequest, "ttl", "%v is not above 0 and at most %v", ttl, MaxHoldTTL)
	case ttl%time.Microsecond != 0:
		return fieldErr(ErrInvalidRequest, "ttl", "%v is not a whole number of microseconds", ttl)
	}
	return checkID("id", id)
}

// checkID checks an ID: 1 to MaxLeaseLen bytes of [A-Za-z0-9_-].
func checkID(field, id string) error {
	if id == "" || len(id) > MaxLeaseLen {
		return fieldErr(ErrInvalidRequest, field, "%d bytes, want 1 to %d", len(id), MaxLeaseLen)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return fieldErr(ErrInvalidRequest, field, "byte %q at %d is not one of [A-Za-z0-9_-]", c, i)
		}
	}
	return nil
}

// Commit settles the reservation with the cost actually used: below the
// hold the rest goes back, above it the excess is taken if the limits
// admit it (Settlement.Charged, else Short). A retry gets the first
// answer (Settlement.Replayed); a commit of another cost, or after Cancel,
// is ErrConflict; after the expiry, ErrExpired. A reservation that holds
// nothing (denied, or allowed by FailOpen) commits nothing.
func (r *Reservation) Commit(ctx context.Context, actual int64) ([]Settlement, error) {
	return r.settle(ctx, actual, false)
}

// Cancel gives every held unit back, as a commit of 0 would, but a later
// commit of 0 is a conflict. See Commit.
func (r *Reservation) Cancel(ctx context.Context) ([]Settlement, error) {
	return r.settle(ctx, 0, true)
}

// settle settles the hold in the store that holds it, each item under
// the limit the store kept from the reserve.
func (r *Reservation) settle(ctx context.Context, actual int64, cancel bool) ([]Settlement, error) {
	if !r.Held {
		return make([]Settlement, len(r.Items)), nil
	}
	l := r.l
	if err := checkID("id", r.ID); err != nil {
		return nil, err
	}
	switch {
	case actual < 0 || actual > MaxLimit:
		return nil, fieldErr(ErrInvalidRequest, "cost", "%d is not between 0 and %d", actual, MaxLimit)
	case cancel && actual != 0:
		return nil, fieldErr(ErrInvalidRequest, "cost", "a cancel uses nothing, not %d", actual)
	case len(r.Items) == 0:
		return nil, fieldErr(ErrInvalidRequest, "items", "none to settle")
	}
	rs := make([]Request, len(r.Items))
	now := l.now()
	for i, it := range r.Items {
		rs[i] = Request{Key: it.Key, Limit: it.Limit}
		if err := l.prepare(&rs[i], now); err != nil {
			return nil, &ItemError{Index: i, Err: err}
		}
	}
	store := l.store
	if r.Local {
		if l.fb == nil {
			return nil, fmt.Errorf("floodgate: settle: a local reservation on a Limiter without a local store: %w", ErrUnknownReservation)
		}
		store = l.fb.local
		for i := range rs {
			var err error
			if rs[i], err = l.fb.share(rs[i]); err != nil {
				return nil, err
			}
		}
	}
	rv, ok := store.(Reserver)
	if !ok {
		return nil, fmt.Errorf("floodgate: settle: %w", ErrNotSupported)
	}
	if r.Signed {
		for i, it := range r.Items {
			rs[i].Cost = it.Cost
		}
	}
	ctx, cancelCtx := l.withTimeout(ctx)
	defer cancelCtx()
	return rv.Settle(ctx, SettleRequest{Requests: rs, ID: r.ID, Actual: actual, Cancel: cancel, Windows: r.Windows, Signed: r.Signed, Expires: r.Expires})
}

// Reservation is the reservation id on items, as reserved, for a caller
// that kept only the ID and the items (a service that gave the ID to its
// client): its Commit and Cancel settle it. local says it was held by
// FailLocal's local store (Reservation.Local), which only this Limiter's
// process has.
func (l *Limiter) Reservation(id string, items []Item, local bool) *Reservation {
	return &Reservation{ID: id, Items: items, Held: true, Local: local, l: l}
}

// Validate reports the first problem of r, as Request.Validate does, for
// stores to call: every request, the ID, the TTL, and an algorithm with
// reservations.
func (r *HoldRequest) Validate() error {
	if err := checkHoldRequests(r.Requests); err != nil {
		return err
	}
	if err := checkRebuild(r.Requests, r.Rebuild); err != nil {
		return err
	}
	return checkHold(r.ID, r.TTL)
}

// Validate reports the first problem of r, as Request.Validate does, for
// stores to call. Cost is not used, and not checked.
func (r *SettleRequest) Validate() error {
	rs := make([]Request, len(r.Requests))
	for i, q := range r.Requests {
		rs[i] = q
		rs[i].Cost = 0
	}
	if err := checkHoldRequests(rs); err != nil {
		return err
	}
	switch {
	case r.Actual < 0 || r.Actual > MaxLimit:
		return fieldErr(ErrInvalidRequest, "cost", "%d is not between 0 and %d", r.Actual, MaxLimit)
	case r.Cancel && r.Actual != 0:
		return fieldErr(ErrInvalidRequest, "cost", "a cancel uses nothing, not %d", r.Actual)
	}
	return checkID("id", r.ID)
}

// checkHoldRequests checks the requests of a reservation. One state
// (key, algorithm and period) may appear once: a reservation holds its
// units on each state once, and a settle that named a state twice would
// give its units back twice.
func checkHoldRequests(rs []Request) error {
	if len(rs) == 0 {
		return fieldErr(ErrInvalidRequest, "requests", "none")
	}
	type state struct {
		key    string
		alg    Algorithm
		period time.Duration
	}
	seen := make(map[state]int, len(rs))
	for i := range rs {
		if rs[i].Limit.Algorithm == Concurrency {
			return &ItemError{Index: i, Err: fieldErr(ErrInvalidLimit, "algorithm", "concurrency limits hold units with leases (Acquire), not reservations")}
		}
		if err := rs[i].Validate(); err != nil {
			return &ItemError{Index: i, Err: err}
		}
		st := state{rs[i].Key, rs[i].Limit.EffectiveAlgorithm(), rs[i].Limit.statePeriod()}
		if j, ok := seen[st]; ok {
			return &ItemError{Index: i, Err: fieldErr(ErrInvalidRequest, "key", "the state of request %d again (same key, algorithm and period): a reservation holds each state once", j)}
		}
		seen[st] = i
	}
	return nil
}

// checkRebuild checks the Rebuild of a HoldRequest: none, or one per
// request, asking only of fixed windows, with a Known window that
// CheckRaise accepts and units in [0, MaxLimit].
func checkRebuild(rs []Request, rb []Rebuild) error {
	if rb == nil {
		return nil
	}
	if len(rb) != len(rs) {
		return fieldErr(ErrInvalidRequest, "rebuild", "%d entries for %d requests", len(rb), len(rs))
	}
	for i, b := range rb {
		if !b.Check && !b.Known {
			continue
		}
		r := rs[i]
		if !b.Known {
			if r.Limit.EffectiveAlgorithm() != FixedWindow {
				return &ItemError{Index: i, Err: fieldErr(ErrInvalidRequest, "rebuild", "only a fixed window's counter is rebuilt, not %s's", r.Limit.EffectiveAlgorithm())}
			}
			continue
		}
		if b.Units < 0 || b.Units > MaxLimit {
			return &ItemError{Index: i, Err: fieldErr(ErrInvalidRequest, "rebuild", "%d units is not between 0 and %d", b.Units, MaxLimit)}
		}
		if err := CheckRaise(r, b.Window); err != nil {
			return &ItemError{Index: i, Err: err}
		}
	}
	return nil
}
