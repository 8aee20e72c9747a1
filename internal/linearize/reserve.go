package linearize

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algorithm"
)

// Op is the kind of a recorded call.
type Op uint8

// The calls a history holds besides Apply.
const (
	OpReserve Op = iota + 1
	OpSettle
)

// HoldInput is the reservation's side of a reserve or a settle.
type HoldInput struct {
	ID      string
	TTL     time.Duration // of a reserve
	Release bool          // of a reserve
	Actual  int64         // of a settle
	Cancel  bool          // of a settle
}

// heldID is a reservation in the model's state of a key, and the params
// a settle of it uses, those it was reserved under (as the stores keep
// them, without a token bucket's Wait).
type heldID struct {
	id string
	h  algorithm.Hold
	p  algorithm.Params
}

// Reserve calls rv.Reserve for r (one key, its Cost held) as client,
// records it and returns what it returned. r must have its own Now.
func (rec *Recorder) Reserve(ctx context.Context, rv floodgate.Reserver, client int, r floodgate.Request, h HoldInput) (floodgate.HoldResult, error) {
	callWall := time.Now()
	res, err := rv.Reserve(ctx, floodgate.HoldRequest{Requests: []floodgate.Request{r}, ID: h.ID, TTL: h.TTL, Release: h.Release})
	out := Output{Known: err == nil}
	if err == nil {
		out.D, out.Replayed = res.Decisions[0], res.Replayed
	} else if errors.Is(err, floodgate.ErrConflict) {
		out.Known, out.Code = true, algorithm.Conflict
	} else {
		out.Err = err.Error()
	}
	rec.add(client, Input{Req: r, Op: OpReserve, Hold: h}, out, callWall, err)
	return res, err
}

// Settle calls rv.Settle on r's key and limit as client, records it and
// returns what it returned. r must have its own Now.
func (rec *Recorder) Settle(ctx context.Context, rv floodgate.Reserver, client int, r floodgate.Request, h HoldInput) ([]floodgate.Settlement, error) {
	callWall := time.Now()
	sts, err := rv.Settle(ctx, floodgate.SettleRequest{Requests: []floodgate.Request{r}, ID: h.ID, Actual: h.Actual, Cancel: h.Cancel})
	out := Output{Known: true}
	switch {
	case err == nil || errors.Is(err, floodgate.ErrExpired):
		if len(sts) != 1 {
			out.Known, out.Err = false, fmt.Sprintf("%d settlements: %v", len(sts), err)
			break
		}
		st := sts[0]
		out.D, out.Replayed = st.Decision, st.Replayed
		out.Settlement = algorithm.Settlement{Refunded: st.Refunded, Charged: st.Charged, Short: st.Short}
		out.Code = algorithm.Settled
		if err != nil {
			out.Code = algorithm.TooLate
		} else if st.Replayed {
			out.Code = algorithm.Replayed
		}
	case errors.Is(err, floodgate.ErrConflict):
		out.Code = algorithm.Conflict
	case errors.Is(err, floodgate.ErrUnknownReservation):
		out.Unknown = true
	default:
		out.Known, out.Err = false, err.Error()
	}
	rec.add(client, Input{Req: r, Op: OpSettle, Hold: h}, out, callWall, err)
	return sts, err
}

// add records one call.
func (rec *Recorder) add(client int, in Input, out Output, callWall time.Time, err error) {
	returnWall := time.Now()
	op := porcupine.Operation{ClientId: client, Input: in, Call: callWall.Sub(rec.start).Nanoseconds(), Output: out, Return: returnWall.Sub(rec.start).Nanoseconds()}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	rec.ops = append(rec.ops, record{op: op, callWall: callWall, returnWall: returnWall})
	if now := out.D.Now; err == nil && !now.IsZero() {
		if rec.first.IsZero() || now.Before(rec.first) {
			rec.first = now
		}
		if now.After(rec.last) {
			rec.last = now
		}
	}
}

// holdOf is the reservation id in s, if any, and its params.
func holdOf(s state, id string) (algorithm.Hold, algorithm.Params, bool) {
	for _, h := range s.holds {
		if h.id == id {
			return h.h, h.p, true
		}
	}
	return algorithm.Hold{}, algorithm.Params{}, false
}

// withHold is s with the reservation id set to h (the holds are copied:
// the model's states are shared).
func withHold(s state, id string, h algorithm.Hold, p algorithm.Params) state {
	holds := make([]heldID, 0, len(s.holds)+1)
	set := false
	for _, x := range s.holds {
		if x.id == id {
			x.h, x.p, set = h, p, true
		}
		holds = append(holds, x)
	}
	if !set {
		holds = append(holds, heldID{id, h, p})
		slices.SortFunc(holds, func(a, b heldID) int { return compareStrings(a.id, b.id) })
	}
	s.holds = holds
	return s
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// reserveStates is the model's step for a reserve, at now.
func reserveStates(s state, in Input, out Output, now int64, known bool) []state {
	r, h := in.Req, in.Hold
	p := r.Limit.Params()
	if old, _, ok := holdOf(s, h.ID); ok {
		// A retry: the first answer if it asks the same, else a conflict;
		// nothing changes.
		same := old.Units == r.Cost && old.Expires-old.At == int64(h.TTL/time.Microsecond) && old.Release == h.Release
		switch {
		case !known:
			return []state{s}
		case same && out.Code == 0 && out.Replayed && out.D.Allowed == (old.State != algorithm.Denied):
			return []state{s}
		case !same && out.Code == algorithm.Conflict:
			return []state{s}
		}
		return nil
	}
	var hold algorithm.Hold
	var d algorithm.Decision
	next := s
	next.st, hold, d = algorithm.Reserve(algState(s, r), p, now, r.Cost, int64(h.TTL/time.Microsecond), h.Release)
	hp := p
	hp.Wait = 0
	next = withHold(next, h.ID, hold, hp)
	next.last = max(next.last, now)
	if !known {
		return []state{s, next}
	}
	if out.Replayed || out.Code != 0 || floodgate.FromAlgorithm(d, now) != out.D {
		return nil
	}
	return []state{next}
}

// settleStates is the model's step for a settle, at now.
func settleStates(s state, in Input, out Output, now int64, known bool) []state {
	r, h := in.Req, in.Hold
	old, p, ok := holdOf(s, h.ID)
	if !ok {
		if !known || out.Unknown {
			return []state{s}
		}
		return nil
	}
	var hold algorithm.Hold
	var st algorithm.Settlement
	var code algorithm.SettleCode
	var d algorithm.Decision
	next := s
	next.st, hold, st, code, d = algorithm.Settle(algState(s, r), old, p, now, h.Actual, h.Cancel)
	next = withHold(next, h.ID, hold, p)
	next.last = max(next.last, now)
	if !known {
		return []state{s, next}
	}
	if out.Unknown || out.Code != code {
		return nil
	}
	if code == algorithm.Conflict {
		return []state{next}
	}
	if out.Settlement != st || (code != algorithm.TooLate && floodgate.FromAlgorithm(d, now) != out.D) {
		return nil
	}
	return []state{next}
}

// ReserveWorkload is a history of reservations: clients calling Reserve,
// Settle (commit and cancel, of their own holds and of others', live,
// settled or expired, and retries) and Apply at random on a few keys of
// one store, every call with its own Now from one clock that moves on with
// calls.
type ReserveWorkload struct {
	Store   floodgate.Store // a floodgate.Reserver
	Limit   floodgate.Limit
	Keys    []string
	Clients int
	Calls   int // per client
	Seed    uint64
	// Step is how far the clock moves per call. On a store whose keys
	// expire in real time (Redis: a state's TTL is its time to the empty
	// state, at least a second; a hold's is its own), choose Step long
	// enough that no call takes longer in real time than Step: the fake
	// clock then runs ahead of the real one and no key expires before its
	// state says so. With a millisecond Step, a loaded host (2.5 s for
	// 240 calls) lost token bucket states to expiry mid-run and the
	// history was rightly found illegal.
	Step time.Duration
	// MaxWait, above zero, makes every reserve a wait of up to MaxWait
	// (floodgate.Limiter.Schedule, through a Limiter per client whose
	// store records what it is asked): the model reserves under the
	// limit the Limiter sends, a GCRA's raised burst or a token bucket's
	// Params.Wait. Limit must then be a GCRA or a token bucket.
	MaxWait time.Duration
}

// recording is the store of a client's Limiter in a workload with
// MaxWait: it records each reserve, as Recorder.Reserve, with the
// request the Limiter made (its limit says how long the wait may be).
type recording struct {
	floodgate.Store
	rv     floodgate.Reserver
	rec    *Recorder
	client int
}

func (s *recording) Reserve(ctx context.Context, r floodgate.HoldRequest) (floodgate.HoldResult, error) {
	if len(r.Requests) != 1 {
		return floodgate.HoldResult{}, fmt.Errorf("linearize: a wait of %d requests", len(r.Requests))
	}
	return s.rec.Reserve(ctx, s.rv, s.client, r.Requests[0], HoldInput{ID: r.ID, TTL: r.TTL, Release: r.Release})
}

func (s *recording) Settle(ctx context.Context, r floodgate.SettleRequest) ([]floodgate.Settlement, error) {
	return s.rv.Settle(ctx, r)
}

// callClock is a client's Limiter's clock: the Now of its next call.
type callClock struct{ now time.Time }

func (c *callClock) Now() time.Time { return c.now }

// RunReserve records w and checks that the history is linearizable.
func RunReserve(t *testing.T, w ReserveWorkload) {
	t.Helper()
	rv, ok := w.Store.(floodgate.Reserver)
	if !ok {
		t.Fatalf("linearize: %T is not a floodgate.Reserver", w.Store)
	}
	rec := NewRecorder()
	var clock atomic.Int64
	start := time.Unix(1_800_000_000, 0)
	var ids []string
	for i := range w.Clients * w.Calls / 3 {
		ids = append(ids, fmt.Sprintf("r%d", i))
	}
	var wg sync.WaitGroup
	errs := make(chan error, w.Clients)
	for c := range w.Clients {
		var lim *floodgate.Limiter
		cc := &callClock{}
		if w.MaxWait > 0 {
			var err error
			lim, err = floodgate.New(&recording{Store: w.Store, rv: rv, rec: rec, client: c}, &floodgate.Options{Clock: cc})
			if err != nil {
				t.Fatal(err)
			}
		}
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(w.Seed, uint64(c)))
			for range w.Calls {
				now := start.Add(time.Duration(clock.Add(1)) * w.Step)
				cc.now = now
				r := floodgate.Request{Key: w.Keys[rng.IntN(len(w.Keys))], Limit: w.Limit, Now: now}
				id := ids[rng.IntN(len(ids))]
				var err error
				switch x := rng.IntN(10); {
				case x < 2:
					r.Cost = rng.Int64N(3)
					_, err = rec.Apply(t.Context(), w.Store, c, r)
				case x < 6 && w.MaxWait > 0:
					// A wait: its TTL at least MaxWait, as Schedule wants.
					r.Cost = 1 + rng.Int64N(min(3, w.Limit.Capacity()))
					ttl := w.MaxWait + time.Duration(1+rng.IntN(8))*w.Step*time.Duration(w.Clients)
					_, _, err = lim.Schedule(t.Context(), r.Key, w.Limit, r.Cost, w.MaxWait, &floodgate.ReserveOptions{ID: id, TTL: ttl})
				case x < 6:
					r.Cost = 1 + rng.Int64N(3)
					_, err = rec.Reserve(t.Context(), rv, c, r, HoldInput{ID: id, TTL: time.Duration(1+rng.IntN(8)) * w.Step * time.Duration(w.Clients), Release: rng.IntN(2) == 0})
				default:
					cancel := rng.IntN(3) == 0
					h := HoldInput{ID: id, Cancel: cancel}
					if !cancel {
						h.Actual = rng.Int64N(5)
					}
					_, err = rec.Settle(t.Context(), rv, c, r, h)
				}
				if err != nil && !errors.Is(err, floodgate.ErrConflict) && !errors.Is(err, floodgate.ErrExpired) && !errors.Is(err, floodgate.ErrUnknownReservation) {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	res, info, err := Check(rec.Operations(), Options{}, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if res != porcupine.Ok {
		path := WriteVisualization(t, Options{}, info)
		t.Fatalf("the history of %d calls is not linearizable (%v); see %s", len(rec.ops), res, path)
	}
}
