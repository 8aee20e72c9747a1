package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algorithm"
)

var (
	_ floodgate.Reserver   = (*Store)(nil)
	_ floodgate.HoldReader = (*Store)(nil)
	_ floodgate.Raiser     = (*Store)(nil)
)

// Reserve holds the cost of every request of r, all or nothing, under
// r.ID: see floodgate.Reserver. It behaves as memstore's Reserve: a retry
// with the same ID and requests gets the first answer (Replayed), a
// denied reserve is remembered (its retry is denied too), and another
// request with the ID is an error wrapping floodgate.ErrConflict. Each
// key's hold is a Redis key beside its state (see "Reservations" in
// docs/redis.md); on standalone Redis and Sentinel, and on a Cluster when
// every key is in one slot, the reserve is one script run, atomic. On a
// Cluster, keys of several slots are reserved slot by slot, all at once,
// and if one slot denies, the slots that held give their units back and
// record the denial, as ApplyBatch does. With r.Release, the holds are
// indexed first, so that the sweep gives their units back at expiry even
// if no one settles them.
func (s *Store) Reserve(ctx context.Context, r floodgate.HoldRequest) (floodgate.HoldResult, error) {
	if err := r.Validate(); err != nil {
		return floodgate.HoldResult{}, err
	}
	for i, q := range r.Requests {
		if sliced(q.Limit) {
			return floodgate.HoldResult{}, fmt.Errorf("redisstore: reserve request %d: %w", i, errSlicedAtomic)
		}
	}
	if s.closed.Load() {
		return floodgate.HoldResult{}, floodgate.ErrClosed
	}
	s.startSweeper()
	cs := make([]call, len(r.Requests))
	holds := make([]string, len(cs))
	for i, q := range r.Requests {
		cs[i] = call{r: q, alg: q.Limit.EffectiveAlgorithm(), key: s.Key(q.Key, q.Limit)}
		holds[i] = holdKey(cs[i].key, r.ID)
	}
	clock := s.runner.stampAll(cs)
	ttl, retain := r.TTL.Microseconds(), s.holdRetain
	if r.Release {
		if err := s.indexHolds(ctx, holds, clock, ttl); err != nil {
			return floodgate.HoldResult{}, err
		}
		// A hold the sweep must find outlives a late sweep, whatever the
		// retention: a hold gone before its sweep keeps its units.
		retain = max(retain, (sweepLease + max(s.holdSweep, DefaultHoldSweep)).Microseconds())
	}
	groups := s.slotGroups(cs)
	digest := keysDigest(cs)
	runs := make([]*reserveRun, len(groups))
	runAll(len(groups), func(g int) {
		h := &reserveRun{slotRun: slotRun{idx: groups[g]}}
		var rb []floodgate.Rebuild
		if r.Rebuild != nil {
			rb = pick(r.Rebuild, h.idx)
		}
		h.res, h.err = s.runner.reserve(ctx, pick(cs, h.idx), pick(holds, h.idx), rb, ttl, retain, clock, r.Release, len(groups) > 1, digest)
		h.ds = h.res.ds
		h.admitted = h.err == nil && h.res.held()
		runs[g] = h
	})
	return s.reserveResult(ctx, r, cs, holds, runs)
}

// reserveRun is the reserve of one slot's requests.
type reserveRun struct {
	slotRun
	res reserved
}

func slotRuns(runs []*reserveRun) []*slotRun {
	out := make([]*slotRun, len(runs))
	for i := range runs {
		out[i] = &runs[i].slotRun
	}
	return out
}

// reserveResult answers a reserve from its slots' runs: the first error
// or conflict, after the slots that made holds undid them; else, if
// every slot holds, the holds; else the denial, after the slots that
// held gave their units back and recorded the denial (settle.lua's deny),
// so that every key ends with a Denied hold, as in memstore.
func (s *Store) reserveResult(ctx context.Context, r floodgate.HoldRequest, cs []call, holds []string, runs []*reserveRun) (floodgate.HoldResult, error) {
	var failure error
	var lost []time.Time
	replayed, admitted := true, true
	for _, h := range runs {
		switch {
		case h.res.status == reserveLost && h.err == nil:
			// Nothing changed in this slot: the ledger must be read. The
			// slots that made holds undo them, as for a failure.
			if lost == nil {
				lost = make([]time.Time, len(cs))
			}
			for j, i := range h.idx {
				if at := h.res.lost[j]; at > 0 {
					lost[i] = time.UnixMicro(at)
				}
			}
		case h.err != nil:
			failure = cmpErr(failure, h.err)
		case h.res.status == reserveOtherKeys:
			failure = cmpErr(failure, fmt.Errorf("redisstore: reservation %s: %w: it holds other keys", r.ID, floodgate.ErrConflict))
		case h.res.status == reserveConflict:
			failure = cmpErr(failure, fmt.Errorf("redisstore: reservation %s: %w: it held other units, limits, TTL or release", r.ID, floodgate.ErrConflict))
		}
		replayed = replayed && h.res.status == reserveReplayed
		admitted = admitted && h.admitted
	}
	if len(runs) > 1 {
		s.crossSlot.calls.Add(1)
	}
	if len(runs) > 1 && (failure != nil || lost != nil || !admitted) {
		// Undo the holds this call made when it fails; else deny those
		// that hold.
		mode := modeDeny
		if failure != nil || lost != nil {
			mode = modeUndo
		}
		var undo []*slotRun
		for _, h := range runs {
			if mode == modeUndo && h.err == nil && h.res.status == reserveNew || mode == modeDeny && h.admitted {
				undo = append(undo, &h.slotRun)
			}
		}
		s.compensate(ctx, undo, func(ctx context.Context, g *slotRun) error {
			res, err := s.runner.settle(ctx, mode, pick(cs, g.idx), pick(holds, g.idx), 0, false, -1)
			if err != nil {
				return err
			}
			if res.status != settleDone {
				return fmt.Errorf("redisstore: %s %s: %w: status %d", mode, holds[g.idx[0]], floodgate.ErrUnexpectedReply, res.status)
			}
			for j, st := range res.sts {
				s.crossSlot.refunded.Add(st.Refunded)
				g.ds[j] = st.Decision
				if st.Refunded > 0 {
					s.forgetDenial(cs[g.idx[j]].key)
				}
			}
			return nil
		}, costs(cs))
	}
	if failure != nil {
		return floodgate.HoldResult{}, failure
	}
	if lost != nil {
		return floodgate.HoldResult{Lost: lost}, nil
	}
	out := floodgate.HoldResult{Decisions: assemble(len(cs), slotRuns(runs)), Replayed: replayed}
	for _, h := range runs {
		if h.idx[0] == 0 {
			out.Expires = time.UnixMicro(h.res.expires)
		}
	}
	return out, nil
}

// forgetDenial forgets this store's cached denial of key (Options.DenyCache)
// after a refund gave it units back: the denial may no longer hold. Other
// instances' cached denials hold until their RetryAfter.
func (s *Store) forgetDenial(key string) {
	if s.deny != nil {
		s.deny.forget(key)
	}
}

// cmpErr keeps the first error, but prefers a conflict, which is the
// caller's, to a failure of the store.
func cmpErr(first, err error) error {
	if first == nil || errors.Is(err, floodgate.ErrConflict) && !errors.Is(first, floodgate.ErrConflict) {
		return err
	}
	return first
}

// Settle commits or cancels the hold r.ID on every request of r: see
// floodgate.Reserver. It behaves as memstore's Settle: every hold is
// checked before any changes (an unknown one, or a step that conflicts
// with how one was settled, changes nothing), a retry gets the first
// answer (Settlement.Replayed), and a step after the expiry is an error
// wrapping floodgate.ErrExpired, with the expiry's settlements. On a
// Cluster, holds of several slots are settled slot by slot, all at once:
// each slot checks its own holds first, and records its answer, so a
// retry completes a settle that failed halfway; see "Reservations" in
// docs/redis.md for what a conflict found in one slot only means.
func (s *Store) Settle(ctx context.Context, r floodgate.SettleRequest) ([]floodgate.Settlement, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	if s.closed.Load() {
		return nil, floodgate.ErrClosed
	}
	cs := make([]call, len(r.Requests))
	holds := make([]string, len(cs))
	for i, q := range r.Requests {
		q.Cost = 0
		cs[i] = call{r: q, alg: q.Limit.EffectiveAlgorithm(), key: s.Key(q.Key, q.Limit)}
		holds[i] = holdKey(cs[i].key, r.ID)
	}
	clock := s.runner.stampAll(cs)
	groups := s.slotGroups(cs)
	res := make([]settled, len(groups))
	errs := make([]error, len(groups))
	runAll(len(groups), func(g int) {
		res[g], errs[g] = s.runner.settle(ctx, modeSettle, pick(cs, groups[g]), pick(holds, groups[g]), r.Actual, r.Cancel, clock)
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	sts := make([]slotStatus, len(res))
	for g := range res {
		sts[g] = res[g].slotStatus
	}
	if err := holdsErr(r.ID, sts); err != nil {
		return nil, err
	}
	out := make([]floodgate.Settlement, len(cs))
	late := false
	for g, sr := range res {
		for j, i := range groups[g] {
			out[i] = sr.sts[j]
			late = late || sr.codes[j] == algorithm.TooLate
			if out[i].Refunded > 0 && !out[i].Replayed {
				s.forgetDenial(cs[i].key)
			}
		}
	}
	if late {
		return out, fmt.Errorf("redisstore: reservation %s: %w", r.ID, floodgate.ErrExpired)
	}
	return out, nil
}

// ReadHolds answers as Settle would, changing nothing: see
// floodgate.HoldReader. On a Cluster each slot's holds are read in one
// script run, all at once; a settle that follows may find them changed
// by another in between, as it may on one slot.
func (s *Store) ReadHolds(ctx context.Context, r floodgate.SettleRequest) ([]floodgate.HeldUnits, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	if s.closed.Load() {
		return nil, floodgate.ErrClosed
	}
	cs := make([]call, len(r.Requests))
	holds := make([]string, len(cs))
	for i, q := range r.Requests {
		q.Cost = 0
		cs[i] = call{r: q, alg: q.Limit.EffectiveAlgorithm(), key: s.Key(q.Key, q.Limit)}
		holds[i] = holdKey(cs[i].key, r.ID)
	}
	clock := s.runner.stampAll(cs)
	groups := s.slotGroups(cs)
	res := make([]read, len(groups))
	errs := make([]error, len(groups))
	runAll(len(groups), func(g int) {
		res[g], errs[g] = s.runner.read(ctx, pick(cs, groups[g]), pick(holds, groups[g]), r.Actual, r.Cancel, clock)
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	sts := make([]slotStatus, len(res))
	for g := range res {
		sts[g] = res[g].slotStatus
	}
	if err := holdsErr(r.ID, sts); err != nil {
		return nil, err
	}
	out := make([]floodgate.HeldUnits, len(cs))
	for g, sr := range res {
		for j, i := range groups[g] {
			if sr.codes[j] == algorithm.TooLate {
				return nil, fmt.Errorf("redisstore: reservation %s: %w", r.ID, floodgate.ErrExpired)
			}
			out[i] = sr.held[j]
		}
	}
	return out, nil
}

// settledAs says how a hold in state was settled, for a conflict's
// message, as memstore's settledAs.
func settledAs(state, actual int64) string {
	switch algorithm.HoldState(state) {
	case algorithm.Denied:
		return "it was denied and holds nothing"
	case algorithm.Committed:
		return fmt.Sprintf("committed with cost %d", actual)
	case algorithm.Cancelled:
		return "cancelled"
	}
	return "expired"
}
