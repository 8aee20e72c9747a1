package algorithm

import "slices"

// State is the state of one key under any algorithm, the one Kind names:
// Small for the algorithms whose state is O(1) integers, Log for
// SlidingWindowLog, Units for Concurrency. Its methods run that
// algorithm's Step, Refund and Expires, so that code that handles every
// algorithm (a store's reservations, the conformance suite's and the
// linearizability checker's models) chooses one only here. Like
// SlidingWindowLog.Step, its steps reuse the capacity of Log and Units:
// the returned state may share their arrays, so a caller that keeps s
// steps a Clone. The zero value is an empty key of KindFixedWindow.
type State struct {
	Kind  Kind
	Small Small
	Log   []int64
	Units []Unit
}

// Step decides cost units at now by the Kind's Step. For Concurrency it
// is StepLease with the empty lease ID and LeaseAcquire, which with cost 0
// is a peek.
func (s State) Step(p Params, now, cost int64) (State, Decision) {
	return s.StepLease(p, now, cost, "", LeaseAcquire)
}

// StepLease is Step with Concurrency's lease ID and op; the other
// algorithms ignore both.
func (s State) StepLease(p Params, now, cost int64, id string, op LeaseOp) (State, Decision) {
	var d Decision
	switch s.Kind {
	case KindSlidingWindowLog:
		var st SlidingWindowLog
		st, d = SlidingWindowLog{Log: s.Log}.Step(p, now, cost)
		s.Log = st.Log
	case KindConcurrency:
		var st Concurrency
		st, d = Concurrency{Units: s.Units}.Step(p, now, cost, id, op)
		s.Units = st.Units
	default:
		s.Small.StepTo(s.Kind, &d, p, now, cost)
	}
	return s, d
}

// Refund is the Kind's Refund. Concurrency has none (its leases are
// released, not refunded): it gives back nothing.
func (s State) Refund(p Params, now, at, units int64) (State, int64) {
	var back int64
	switch s.Kind {
	case KindSlidingWindowLog:
		var st SlidingWindowLog
		st, back = SlidingWindowLog{Log: s.Log}.Refund(p, now, at, units)
		s.Log = st.Log
	case KindConcurrency:
	default:
		s.Small, back = s.Small.Refund(s.Kind, p, now, at, units)
	}
	return s, back
}

// Expires is the Kind's Expires.
func (s State) Expires(p Params) int64 {
	switch s.Kind {
	case KindSlidingWindowLog:
		return SlidingWindowLog{Log: s.Log}.Expires(p)
	case KindConcurrency:
		return Concurrency{Units: s.Units}.Expires(p)
	}
	return s.Small.Expires(s.Kind, p)
}

// Clone is a copy of s that shares no array with it.
func (s State) Clone() State {
	s.Log, s.Units = slices.Clone(s.Log), slices.Clone(s.Units)
	return s
}

// Equal reports whether s and b are the same state: the same Kind, the
// same integers and the same entries, a nil slice equal to an empty one.
func (s State) Equal(b State) bool {
	return s.Kind == b.Kind && s.Small == b.Small && slices.Equal(s.Log, b.Log) && slices.Equal(s.Units, b.Units)
}

// Interface guard: State takes reservations (Reserve, Settle, Expire).
var _ Reserver[State] = State{}

// Small is the state of an algorithm whose state is O(1) integers
// (Kind.Small: FixedWindow, SlidingWindow, TokenBucket, GCRA) as three
// integers, the fields of that state in their order: FixedWindow{Start,
// Count, Next} is Small{Start, Count, Next}, SlidingWindow{Start, Prev, Curr} is
// Small{Start, Prev, Curr}, TokenBucket{Taken, Last, LastFrac} is
// Small{Taken, Last, LastFrac}, GCRA{TAT, TATFrac} is Small{A: TAT, B:
// TATFrac}. A store keeps every such key in one shape and steps it by its
// Kind; State is the same for every algorithm. The zero value is an empty
// key.
type Small struct{ A, B, C int64 }

// StepTo is the Step of the algorithm k, for a Small kind: it steps *s in
// place and writes the Decision to *d. A store's hot path calls it, and
// its shape is for speed: a Decision has too many fields to stay in
// registers, so each copy of one goes through memory, and the arguments
// of this form fit in registers, so Params are not copied on the way.
func (s *Small) StepTo(k Kind, d *Decision, p Params, now, cost int64) {
	switch k {
	case KindSlidingWindow:
		var st SlidingWindow
		st, *d = SlidingWindow{Start: s.A, Prev: s.B, Curr: s.C}.Step(p, now, cost)
		*s = Small{st.Start, st.Prev, st.Curr}
	case KindTokenBucket:
		var st TokenBucket
		st, *d = TokenBucket{Taken: s.A, Last: s.B, LastFrac: s.C}.Step(p, now, cost)
		*s = Small{st.Taken, st.Last, st.LastFrac}
	case KindGCRA:
		// stepTo writes *d itself: `st, *d = Step()` would copy the
		// Decision through a temporary with wide loads that wait for the
		// narrow stores that wrote it (see GCRA.stepTo).
		st := GCRA{TAT: s.A, TATFrac: s.B}.stepTo(d, p, now, cost)
		*s = Small{A: st.TAT, B: st.TATFrac}
	default:
		var st FixedWindow
		st, *d = FixedWindow{Start: s.A, Count: s.B, Next: s.C}.Step(p, now, cost)
		*s = Small{st.Start, st.Count, st.Next}
	}
}

// Refund is the Refund of the algorithm k, for a Small kind.
func (s Small) Refund(k Kind, p Params, now, at, units int64) (Small, int64) {
	var back int64
	switch k {
	case KindSlidingWindow:
		var st SlidingWindow
		st, back = SlidingWindow{Start: s.A, Prev: s.B, Curr: s.C}.Refund(p, now, at, units)
		return Small{st.Start, st.Prev, st.Curr}, back
	case KindTokenBucket:
		var st TokenBucket
		st, back = TokenBucket{Taken: s.A, Last: s.B, LastFrac: s.C}.Refund(p, now, at, units)
		return Small{st.Taken, st.Last, st.LastFrac}, back
	case KindGCRA:
		var st GCRA
		st, back = GCRA{TAT: s.A, TATFrac: s.B}.Refund(p, now, at, units)
		return Small{A: st.TAT, B: st.TATFrac}, back
	}
	var st FixedWindow
	st, back = FixedWindow{Start: s.A, Count: s.B, Next: s.C}.Refund(p, now, at, units)
	return Small{st.Start, st.Count, st.Next}, back
}

// Expires is the Expires of the algorithm k, for a Small kind.
func (s Small) Expires(k Kind, p Params) int64 {
	switch k {
	case KindSlidingWindow:
		return SlidingWindow{Start: s.A, Prev: s.B, Curr: s.C}.Expires(p)
	case KindTokenBucket:
		return TokenBucket{Taken: s.A, Last: s.B, LastFrac: s.C}.Expires(p)
	case KindGCRA:
		return GCRA{TAT: s.A, TATFrac: s.B}.Expires(p)
	}
	return FixedWindow{Start: s.A, Count: s.B, Next: s.C}.Expires(p)
}
