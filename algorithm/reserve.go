package algorithm

// A Hold is a reservation: Units units of one key taken at At
// (microseconds) as the upper bound of a request's cost, to be settled by
// a commit of the actual cost, by a cancel, or by expiry at Expires. Its
// State moves once, from Held to Committed, Cancelled or Expired, and then
// keeps the answer, so that a retry of the same step gets the same answer
// and another step is a conflict. The zero value is no hold.
type Hold struct {
	State HoldState
	// Units is what the reservation took, and At when.
	Units, At int64
	// Expires is when an unsettled hold expires.
	Expires int64
	// Release gives the units back at expiry; by default they stay
	// charged, as a caller that crashed may have done the work.
	Release bool
	// Actual is the cost committed (0 for a cancel or an expiry).
	Actual int64
	// Settlement is the answer of the step that settled the hold.
	Settlement Settlement
}

// HoldState is where a Hold is in its life.
type HoldState uint8

// The states of a Hold.
const (
	// Held: reserved, not settled yet.
	Held HoldState = iota + 1
	// Denied: the reservation was not admitted; nothing is held. The hold
	// is kept only so that a retry of the reserve gets the same answer.
	Denied
	// Committed: settled with the actual cost.
	Committed
	// Cancelled: settled with nothing used; every unit the algorithm still
	// counts is given back.
	Cancelled
	// Expired: not settled before Expires; the units stay charged, or are
	// given back when the hold has Release.
	Expired
)

// Settlement is what settling a hold did to the budget.
type Settlement struct {
	// Refunded is the units given back: the hold's units above the actual
	// cost (all of them for a cancel, or an expiry with Release), at most
	// what the algorithm still counts (see each Refund).
	Refunded int64
	// Charged is the cost above the hold that was taken, when the limit
	// admitted it.
	Charged int64
	// Short is the cost above the hold that the limit did not admit, which
	// was not taken (Charged is then 0): the caller used more than it
	// reserved and more than the limit had left.
	Short int64
}

// SettleCode says how a settle step went.
type SettleCode uint8

// The codes of a settle step.
const (
	// Settled: the hold was settled now.
	Settled SettleCode = iota + 1
	// Replayed: the hold was already settled by the same step (a commit of
	// the same cost, or a cancel): the answer is the first one, and
	// nothing changed.
	Replayed
	// Conflict: the hold was settled by another step (a commit of another
	// cost, a commit after a cancel or the other way round), or was never
	// held (Denied): nothing changed.
	Conflict
	// TooLate: the hold had expired (now, or before): its units stay
	// charged, or were given back with Release, and nothing else changed.
	TooLate
)

// A Reserver is the state of an algorithm that reservations work with:
// every algorithm but Concurrency, whose leases are holds already
// (floodgate.Limiter.Acquire). Step takes units, Refund gives them back.
type Reserver[S any] interface {
	Step(p Params, now, cost int64) (S, Decision)
	Refund(p Params, now, at, units int64) (S, int64)
}

// Reserve takes units at now, as Step does, and returns the hold that
// keeps them until now+ttl: Held when admitted, Denied (holding nothing)
// when not.
func Reserve[S Reserver[S]](s S, p Params, now, units, ttl int64, release bool) (S, Hold, Decision) {
	s, d := s.Step(p, now, units)
	h := Hold{State: Denied, Units: units, At: now, Expires: now + ttl, Release: release}
	if d.Allowed {
		h.State = Held
	}
	return s, h, d
}

// Settle settles hold h of state s at now: a commit of the actual cost, or
// with cancel a cancel (actual is then 0). A hold past its expiry expires
// first (see Expire) and the step is TooLate. Otherwise an actual cost
// below the hold gives back the difference (Refund); above it, the excess
// is taken if the limit admits it (Step), and else reported Short and not
// taken; equal changes nothing. A hold already settled answers as the
// SettleCode says, with the first Settlement. The Decision is a peek at the
// state after the step (cost 0).
func Settle[S Reserver[S]](s S, h Hold, p Params, now, actual int64, cancel bool) (S, Hold, Settlement, SettleCode, Decision) {
	target := Committed
	if cancel {
		target, actual = Cancelled, 0
	}
	code := Settled
	switch s, h = Expire(s, h, p, now); {
	case h.State == Held:
		s, h.Settlement = settle(s, h, p, now, actual)
		h.State, h.Actual = target, actual
	case h.State == Expired:
		code = TooLate
	case h.State == target && h.Actual == actual:
		code = Replayed
	default:
		code = Conflict
	}
	s, d := s.Step(p, now, 0)
	return s, h, h.Settlement, code, d
}

// settle is the budget's side of settling a held hold with actual.
func settle[S Reserver[S]](s S, h Hold, p Params, now, actual int64) (S, Settlement) {
	var st Settlement
	switch {
	case actual < h.Units:
		s, st.Refunded = s.Refund(p, now, h.At, h.Units-actual)
	case actual > h.Units:
		excess := actual - h.Units
		var d Decision
		// A denied step changes nothing, unless the limit counts
		// rejections: then the excess counts as any denied request does.
		if s, d = s.Step(p, now, excess); d.Allowed {
			st.Charged = excess
		} else {
			st.Short = excess
		}
	}
	return s, st
}

// Expire expires h at now if it is still held and its time has come: its
// units stay charged, or with Release are given back (Refund). Any other
// hold is returned as it is. Stores call it when they find an expired hold
// (a settle that comes too late, a sweep), so that every hold is settled
// exactly once, whenever that happens: a refund made after the expiry
// gives back what a refund at the expiry would have left by now.
func Expire[S Reserver[S]](s S, h Hold, p Params, now int64) (S, Hold) {
	if h.State != Held || now < h.Expires {
		return s, h
	}
	h.State, h.Actual = Expired, 0
	if h.Release {
		s, h.Settlement.Refunded = s.Refund(p, now, h.At, h.Units)
	}
	return s, h
}
