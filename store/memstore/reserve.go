package memstore

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algorithm"
)

var _ floodgate.HoldReader = (*Store)(nil)

// holdKey names a reservation: its ID on the state of one key, algorithm
// and period. It is kept in the shard of the key, so that a reserve or a
// settle changes the hold and the state under one lock.
type holdKey struct {
	key    string
	period int64
	kind   algorithm.Kind
	id     string
}

// holdEntry is a reservation: the hold, the limit it was made under (a
// settle uses it, whatever the limit is by then), and until when the
// store keeps it, on the store's clock.
type holdEntry struct {
	h algorithm.Hold
	p algorithm.Params
	// durable: reserved under a durable limit (Settlement.Durable);
	// window: then the start of the fixed window its units count in (µs
	// of the request's clock), for the ledger (floodgate.HeldUnits).
	durable bool
	window  int64
	// cal is the limit's calendar, whose windows a settle takes around
	// its own time (p.Calendar holds the reserve's).
	cal  floodgate.Calendar
	kind algorithm.Kind
	ref  ref // of the state
	skew int64
	keep int64
}

// Reserve holds the cost of every request of r, all or nothing, under r.ID:
// see floodgate.Reserver.
func (s *Store) Reserve(ctx context.Context, r floodgate.HoldRequest) (floodgate.HoldResult, error) {
	if err := r.Validate(); err != nil {
		return floodgate.HoldResult{}, err
	}
	if err := ctx.Err(); err != nil {
		return floodgate.HoldResult{}, err
	}
	b := s.lockBatch(r.Requests)
	defer b.unlock()
	ttl := r.TTL.Microseconds()
	switch found, err := b.findHolds(r.ID); {
	case err != nil:
		return floodgate.HoldResult{}, err
	case found != nil:
		return b.replayReserve(found, ttl, r.Release)
	}
	if err := b.room(); err != nil {
		return floodgate.HoldResult{}, err
	}
	if err := b.holdRoom(r.ID); err != nil {
		return floodgate.HoldResult{}, err
	}
	if r.Rebuild != nil {
		if lost := b.rebuild(r.Rebuild); lost != nil {
			return floodgate.HoldResult{Lost: lost}, nil
		}
	}
	ds, admitted := b.apply()
	state := algorithm.Denied
	if admitted {
		state = algorithm.Held
	}
	for i := range b.rs {
		sh := b.shard(i)
		h := algorithm.Hold{State: state, Units: b.rs[i].Cost, At: b.items[i].now, Expires: b.items[i].now + ttl, Release: r.Release}
		e := &holdEntry{h: h, p: holdParams(b.items[i].params), durable: b.rs[i].Limit.Durable, cal: b.rs[i].Limit.Calendar, kind: b.items[i].kind, ref: b.items[i].ref,
			skew: b.items[i].skew, keep: h.Expires + b.items[i].skew + s.retain}
		if e.durable && e.kind == algorithm.KindFixedWindow {
			e.window = b.window(i)
		}
		sh.putHold(b.holdKey(i, r.ID), e)
	}
	return floodgate.HoldResult{Decisions: b.decisions(ds), Expires: time.UnixMicro(b.items[0].now + ttl)}, nil
}

// window is the start of the fixed window that request i's units count
// in, after it was decided: the live window's, else the one a request
// would open now (reserve.lua's hold_window).
func (b *batch) window(i int) int64 {
	it := &b.items[i]
	old, _ := b.shard(i).small[algorithm.KindFixedWindow].find(it.ref)
	switch {
	case (algorithm.FixedWindow{Start: old.st.A, Count: old.st.B, Next: old.st.C}).Live(it.params, it.now):
		return old.st.A
	}
	start, _ := it.params.WindowAt(it.now)
	return start
}

func (b *batch) holdKey(i int, id string) holdKey {
	return holdKey{key: b.rs[i].Key, period: keyPeriod(&b.rs[i].Limit), kind: b.items[i].kind, id: id}
}

// findHolds returns the holds of id on every request, nil if there is
// none; some but not all is a conflict: the ID held other keys.
func (b *batch) findHolds(id string) ([]*holdEntry, error) {
	found := make([]*holdEntry, len(b.rs))
	n := 0
	for i := range b.rs {
		if e := b.shard(i).holds[b.holdKey(i, id)]; e != nil {
			found[i] = e
			n++
		}
	}
	switch n {
	case 0:
		return nil, nil
	case len(b.rs):
		return found, nil
	}
	return nil, fmt.Errorf("memstore: reservation %s: %w: it holds other keys", id, floodgate.ErrConflict)
}

// sameParams reports whether a and b are the same limit: equal but for
// the calendar windows, which are those around each one's time, and a
// token bucket's Wait, which a hold does not keep (holdParams).
func sameParams(a, b algorithm.Params) bool {
	if (a.Calendar == nil) != (b.Calendar == nil) {
		return false
	}
	a.Calendar, b.Calendar = nil, nil
	a.Wait, b.Wait = 0, 0
	return a == b
}

// holdParams is the limit a hold keeps for its settle: p without Wait,
// so that a commit above the hold takes its excess only if it fits now,
// never in debt (reserve.lua's hold keeps no wait either).
func holdParams(p algorithm.Params) algorithm.Params {
	p.Wait = 0
	return p
}

// replayReserve answers a reserve whose holds exist: the first answer if
// they are what it asks for, else a conflict.
func (b *batch) replayReserve(found []*holdEntry, ttl int64, release bool) (floodgate.HoldResult, error) {
	ds := make([]algorithm.Decision, len(found))
	for i, e := range found {
		if e.h.Units != b.rs[i].Cost || !sameParams(e.p, b.items[i].params) || e.h.Expires-e.h.At != ttl || e.h.Release != release {
			return floodgate.HoldResult{}, fmt.Errorf("memstore: reservation of %d units: %w: it held %d units under another limit or TTL", b.rs[i].Cost, floodgate.ErrConflict, e.h.Units)
		}
		if e.h.State == algorithm.Denied {
			d := b.peekCost(i)
			d.Allowed = false
			ds[i] = d
			continue
		}
		ds[i] = b.peek(i)
		ds[i].Allowed, ds[i].RetryAfter = true, 0
	}
	return floodgate.HoldResult{Decisions: b.decisions(ds), Expires: time.UnixMicro(found[0].h.Expires), Replayed: true}, nil
}

// peekCost is what request i would get now, without taking it.
func (b *batch) peekCost(i int) algorithm.Decision {
	return b.shard(i).step(&b.rs[i], b.items[i].kind, b.items[i].params, b.items[i].ref, b.items[i].now, b.items[i].skew, false)
}

// lockHolds validates r, locks the shards of its requests and finds its
// holds, for Settle and ReadHolds: the batch is returned locked (the
// caller unlocks it), or unlocked with the error. No hold of r.ID is
// ErrUnknownReservation.
func (s *Store) lockHolds(ctx context.Context, r floodgate.SettleRequest) (*batch, []*holdEntry, error) {
	if err := r.Validate(); err != nil {
		return nil, nil, err
	}
	rs := make([]floodgate.Request, len(r.Requests))
	for i, q := range r.Requests {
		rs[i] = q
		rs[i].Cost = 0
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	b := s.lockBatch(rs)
	found, err := b.findHolds(r.ID)
	if err == nil && found == nil {
		err = fmt.Errorf("memstore: reservation %s: %w", r.ID, floodgate.ErrUnknownReservation)
	}
	if err != nil {
		b.unlock()
		return nil, nil, err
	}
	return b, found, nil
}

// Settle commits or cancels the hold r.ID on every request of r: see
// floodgate.Reserver. Every hold is checked before any changes: an unknown
// one, or a step that conflicts with how one was settled, changes nothing.
func (s *Store) Settle(ctx context.Context, r floodgate.SettleRequest) ([]floodgate.Settlement, error) {
	b, found, err := s.lockHolds(ctx, r)
	if err != nil {
		return nil, err
	}
	defer b.unlock()
	for i, e := range found {
		if settleCode(e.h, b.items[i].now, r.Actual, r.Cancel) == algorithm.Conflict {
			return nil, fmt.Errorf("memstore: reservation %s: %w: it was settled otherwise (%s)", r.ID, floodgate.ErrConflict, settledAs(e.h))
		}
	}
	out := make([]floodgate.Settlement, len(found))
	late := false
	for i, e := range found {
		st, code, d := b.shard(i).settleHold(e, b.items[i].now, r.Actual, r.Cancel, false)
		out[i] = floodgate.Settlement{Refunded: st.Refunded, Charged: st.Charged, Short: st.Short, Replayed: code == algorithm.Replayed,
			Durable: e.durable, Decision: floodgate.FromAlgorithm(d, b.items[i].now)}
		late = late || code == algorithm.TooLate
	}
	if late {
		return out, fmt.Errorf("memstore: reservation %s: %w", r.ID, floodgate.ErrExpired)
	}
	return out, nil
}

// ReadHolds answers as Settle would, changing nothing: see
// floodgate.HoldReader.
func (s *Store) ReadHolds(ctx context.Context, r floodgate.SettleRequest) ([]floodgate.HeldUnits, error) {
	b, found, err := s.lockHolds(ctx, r)
	if err != nil {
		return nil, err
	}
	defer b.unlock()
	out := make([]floodgate.HeldUnits, len(found))
	late := false
	for i, e := range found {
		switch settleCode(e.h, b.items[i].now, r.Actual, r.Cancel) {
		case algorithm.Conflict:
			return nil, fmt.Errorf("memstore: reservation %s: %w: it was settled otherwise (%s)", r.ID, floodgate.ErrConflict, settledAs(e.h))
		case algorithm.TooLate:
			late = true
		case algorithm.Replayed:
			out[i].Replayed = true
		}
		out[i].Units, out[i].Durable = e.h.Units, e.durable
		if e.durable {
			out[i].Window = time.UnixMicro(e.window).UTC()
		}
	}
	if late {
		return nil, fmt.Errorf("memstore: reservation %s: %w", r.ID, floodgate.ErrExpired)
	}
	return out, nil
}

// settleCode is the code algorithm.Settle will answer for h at now,
// without settling it.
func settleCode(h algorithm.Hold, now, actual int64, cancel bool) algorithm.SettleCode {
	target := algorithm.Committed
	if cancel {
		target = algorithm.Cancelled
	}
	switch {
	case h.State == algorithm.Held && now >= h.Expires, h.State == algorithm.Expired:
		return algorithm.TooLate
	case h.State == algorithm.Held:
		return algorithm.Settled
	case h.State == target && h.Actual == actual:
		return algorithm.Replayed
	}
	return algorithm.Conflict
}

// settledAs says how h was settled, for a conflict's message.
func settledAs(h algorithm.Hold) string {
	switch h.State {
	case algorithm.Denied:
		return "it was denied and holds nothing"
	case algorithm.Committed:
		return fmt.Sprintf("committed with cost %d", h.Actual)
	case algorithm.Cancelled:
		return "cancelled"
	}
	return "expired"
}

// settleHold settles e on its state at mk (the lock held), or with
// expireOnly only expires it if its time has come, and stores the state.
func (sh *shard) settleHold(e *holdEntry, now, actual int64, cancel, expireOnly bool) (algorithm.Settlement, algorithm.SettleCode, algorithm.Decision) {
	var st algorithm.Settlement
	var code algorithm.SettleCode
	var d algorithm.Decision
	p, mk := e.p, e.ref
	if p.Calendar != nil {
		w := e.cal.Windows(now)
		p.Calendar = &w
	}
	state := algorithm.State{Kind: e.kind}
	if e.kind == algorithm.KindSlidingWindowLog {
		ls, _ := sh.logs.get(mk)
		if ls != nil {
			state.Log = ls.log
		}
		state, e.h, st, code, d = settleOrExpire(state, e.h, p, now, actual, cancel, expireOnly)
		if exp := state.Expires(p); exp > 0 {
			if ls == nil {
				ls = &logSlot{}
				sh.logs.put(mk, ls)
			}
			ls.log, ls.exp = state.Log, exp+e.skew
			ls.account(&sh.logs)
		} else if ls != nil {
			sh.logs.del(mk)
		}
		return st, code, d
	}
	m := &sh.small[e.kind]
	old, w := m.find(mk)
	state.Small = old.st
	state, e.h, st, code, d = settleOrExpire(state, e.h, p, now, actual, cancel, expireOnly)
	switch next := (slot{st: state.Small, exp: state.Expires(p)}); {
	case next.st == old.st:
	case next.exp > 0:
		next.exp += e.skew
		m.set(mk, next, w)
	case w != absent:
		m.del(mk)
	}
	return st, code, d
}

// settleOrExpire is algorithm.Settle, or with expireOnly algorithm.Expire.
func settleOrExpire[S algorithm.Reserver[S]](s S, h algorithm.Hold, p algorithm.Params, now, actual int64, cancel, expireOnly bool) (S, algorithm.Hold, algorithm.Settlement, algorithm.SettleCode, algorithm.Decision) {
	if expireOnly {
		s, h = algorithm.Expire(s, h, p, now)
		return s, h, h.Settlement, 0, algorithm.Decision{}
	}
	return algorithm.Settle(s, h, p, now, actual, cancel)
}

// sweepHolds expires the holds whose time has come, giving back the units
// of those made with Release, and forgets the holds past their retention;
// now is the store's clock. The shard's lock is held.
func (sh *shard) sweepHolds(now int64) {
	for hk, e := range sh.holds {
		switch {
		case e.keep <= now:
			sh.dropHold(hk)
		case e.h.State == algorithm.Held && e.h.Expires+e.skew <= now:
			sh.settleHold(e, now-e.skew, 0, false, true)
		}
	}
}

// Raise raises r.Key's window that starts at window to at least r.Cost:
// see floodgate.Raiser.
func (s *Store) Raise(ctx context.Context, r floodgate.Request, window time.Time) (floodgate.Decision, error) {
	if err := floodgate.CheckRaise(r, window); err != nil {
		return floodgate.Decision{}, err
	}
	if err := ctx.Err(); err != nil {
		return floodgate.Decision{}, err
	}
	b := s.lockBatch([]floodgate.Request{r})
	defer b.unlock()
	if err := b.room(); err != nil {
		return floodgate.Decision{}, err
	}
	b.raise(0, window.UnixMicro(), r.Cost)
	return floodgate.FromAlgorithm(b.peek(0), b.items[0].now), nil
}

// raise is Raise on request i of the batch, a fixed window: its count
// raised to at least units in the window that starts at window (µs).
func (b *batch) raise(i int, window, units int64) {
	it := &b.items[i]
	m := &b.shard(i).small[algorithm.KindFixedWindow]
	old, w := m.find(it.ref)
	st := algorithm.FixedWindow{Start: old.st.A, Count: old.st.B, Next: old.st.C}.Raise(it.params, it.now, window, units)
	if next := (slot{st: algorithm.Small{A: st.Start, B: st.Count, C: st.Next}, exp: st.Expires(it.params)}); next.st != old.st {
		next.exp += it.skew
		m.set(it.ref, next, w)
	}
}

// knownHolds reports whether the ledger's window that starts at w holds
// now: the window of the counter a request at now counts in.
func knownHolds(p *algorithm.Params, w, now int64) bool {
	if p.Calendar != nil {
		start, _ := p.WindowAt(now)
		return start == w
	}
	return now >= w && now < w+p.Period
}

// rebuild applies a reserve's Rebuild (see floodgate.Rebuild): nil when
// every checked counter is live and every known window holds now, after
// raising the known ones; else, for the requests whose counter must be
// (re)read from the ledger, the time of the store's decision, and
// nothing changed.
func (b *batch) rebuild(rb []floodgate.Rebuild) []time.Time {
	var lost []time.Time
	for i, x := range rb {
		if !x.Check && !x.Known {
			continue
		}
		it := &b.items[i]
		old, _ := b.shard(i).small[algorithm.KindFixedWindow].find(it.ref)
		if (algorithm.FixedWindow{Start: old.st.A, Count: old.st.B, Next: old.st.C}).Live(it.params, it.now) {
			continue
		}
		if w := x.Window.UnixMicro(); x.Known && knownHolds(&it.params, w, it.now) {
			continue
		}
		if lost == nil {
			lost = make([]time.Time, len(rb))
		}
		lost[i] = time.UnixMicro(it.now)
	}
	if lost != nil {
		return lost
	}
	for i, x := range rb {
		if x.Known {
			b.raise(i, x.Window.UnixMicro(), x.Units)
		}
	}
	return nil
}
