package faults

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/store/redisstore"
)

const (
	// resCost is the units each reserve of a reservation load holds; its
	// commits use 1 to resCost of them, so each gives back 0 to
	// resCost-1.
	resCost = 5
	// resHold is how long a worker of a reservation load keeps a hold
	// before committing it: long enough that the holds reserved just
	// before a fault are committed after it has begun, short enough that
	// most commits fall in the reserve's window and give units back.
	resHold = 100 * time.Millisecond
	// retryCommit is how long a worker waits before committing again
	// after a commit failed, as a caller retries.
	retryCommit = 10 * time.Millisecond
	// acrossHolds is how many holds the reservation faults reserve just
	// before the fault, ten per instance, and commit once it has ended.
	acrossHolds = 40
)

// acrossLimit is the limit of the holds reserved before a fault and
// committed after it: a window of a minute from the first hit, so that
// the test stays in it and the key's count after the commits is their
// actual costs, and room for every hold.
var acrossLimit = floodgate.Limit{Algorithm: floodgate.FixedWindow, Window: floodgate.FirstHit, Limit: 1000, Period: time.Minute}

// hold is a reservation a load made that held units, and what its
// commits answered.
type hold struct {
	inst      int
	key       string
	res       *floodgate.Reservation
	n, actual int64
	at        time.Time // the reserve's Decision.Now: its window
	reserved  time.Time // when the reserve returned
	due       time.Time // when to commit (again)
	first     time.Time // when the first commit started; zero before
	// done is set once a commit answered for good, at answered: a
	// settlement (refunded), ErrUnknownReservation (unknown), or
	// ErrExpired or ErrConflict (err).
	done     bool
	answered time.Time
	refunded int64
	unknown  bool
	err      error
}

// resLoad is a load of reservations. Each worker, once per tick,
// commits the oldest of its holds that has been held for resHold (or
// whose commit failed retryCommit ago), then reserves resCost units under
// an ID of its own. The reserves are the load's calls, which measure,
// recovery and maxGap read; the commits are in commits.
type resLoad struct {
	*load
	commits []call  // under load.mu
	holds   []*hold // under load.mu; a worker's own until Stop
}

// startReserveLoad starts workers goroutines reserving resCost of key
// under limit from the instances in turn, and committing them, until
// Stop or maxLoad. The Stop is registered as a cleanup too.
func startReserveLoad(t *testing.T, insts []instance, workers int, key keyFunc, limit floodgate.Limit) *resLoad {
	t.Helper()
	l := &resLoad{load: &load{stop: make(chan struct{})}}
	end := time.Now().Add(maxLoad)
	for w := range workers {
		l.wg.Go(func() {
			ticker := time.NewTicker(tick)
			defer ticker.Stop()
			var mine []*hold
			for i := 0; time.Now().Before(end); i++ {
				select {
				case <-l.stop:
					return
				case <-ticker.C:
				}
				if len(mine) > 0 && !time.Now().Before(mine[0].due) {
					if l.commit(mine[0]) {
						mine = mine[1:]
					} else {
						mine[0].due = time.Now().Add(retryCommit)
					}
				}
				inst := (w + i) % len(insts)
				h := l.reserve(insts, inst, key(w, i), limit, fmt.Sprintf("w%d-%d", w, i), 1+int64(w+i)%resCost)
				if h != nil {
					h.due = h.reserved.Add(resHold)
					l.mu.Lock()
					l.holds = append(l.holds, h)
					l.mu.Unlock()
					mine = append(mine, h)
				}
			}
		})
	}
	for range workers {
		l.wg.Go(func() { l.probe(end) })
	}
	t.Cleanup(l.Stop)
	return l
}

// reserve reserves resCost units of key under limit with ID id from
// instance inst, records the call, and returns the hold, to be committed
// with actual units, or nil if none was acknowledged.
func (l *resLoad) reserve(insts []instance, inst int, key string, limit floodgate.Limit, id string, actual int64) *hold {
	h, _ := l.reserveErr(insts, inst, key, limit, id, actual)
	return h
}

// reserveErr is reserve, with the call's error.
func (l *resLoad) reserveErr(insts []instance, inst int, key string, limit floodgate.Limit, id string, actual int64) (*hold, error) {
	c := call{inst: inst, key: key, start: time.Now()}
	ctx, cancel := context.WithDeadline(context.Background(), c.start.Add(timeout))
	res, d, err := insts[inst].lim.Reserve(ctx, key, limit, resCost, &floodgate.ReserveOptions{ID: id})
	c.end = time.Now()
	cancel()
	c.allowed, c.err, c.now = d.Allowed, err, d.Now
	var h *hold
	if err == nil && res != nil && res.Held {
		h = &hold{inst: inst, key: key, res: res, n: resCost, actual: actual, at: d.Now, reserved: c.end}
	}
	l.mu.Lock()
	l.calls = append(l.calls, c)
	l.mu.Unlock()
	return h, err
}

// commit commits h once, as its instance's caller would, and records
// the call. It reports whether the answer is final: a settlement, or an
// error that no retry can change.
func (l *resLoad) commit(h *hold) bool {
	c := call{inst: h.inst, key: h.key, start: time.Now()}
	if h.first.IsZero() {
		h.first = c.start
	}
	ctx, cancel := context.WithDeadline(context.Background(), c.start.Add(timeout))
	sts, err := h.res.Commit(ctx, h.actual)
	c.end = time.Now()
	cancel()
	c.err = err
	switch {
	case err == nil:
		h.done, h.refunded = true, sts[0].Refunded
	case errors.Is(err, floodgate.ErrUnknownReservation):
		h.done, h.unknown = true, true
	case errors.Is(err, floodgate.ErrExpired), errors.Is(err, floodgate.ErrConflict):
		h.done, h.err = true, err
	}
	if h.done {
		h.answered = c.end
	}
	l.mu.Lock()
	l.commits = append(l.commits, c)
	l.mu.Unlock()
	return h.done
}

// Holds returns the holds the workers made so far (not those of
// reserveAcross). Their fields are the workers' until Stop.
func (l *resLoad) Holds() []*hold {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.holds)
}

// Commits returns the commit calls recorded so far.
func (l *resLoad) Commits() []call {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.commits)
}

// reserveAcross reserves acrossHolds holds of resCost on key "across"
// under acrossLimit, ten from each instance, each to be committed with
// 0 to resCost units once the fault has ended. It fails t unless every
// one holds. Before the fault a reserve fails only by its deadline on a
// loaded machine (the fresh-clone run at load 20 saw it): it is sent again
// with the same id, which Redis answers once (a replay of the hold if the
// late one was made), for up to 10 s.
func (l *resLoad) reserveAcross(t *testing.T, insts []instance) []*hold {
	t.Helper()
	var out []*hold
	for i := range acrossHolds {
		var h *hold
		for until := time.Now().Add(10 * time.Second); ; {
			var err error
			h, err = l.reserveErr(insts, i%len(insts), "across", acrossLimit, fmt.Sprintf("across-%d", i), int64(i%(resCost+1)))
			if h != nil || !errors.Is(err, context.DeadlineExceeded) || time.Now().After(until) {
				break
			}
		}
		if h == nil {
			t.Fatalf("reserve %d of %d before the fault held nothing", i, acrossHolds)
		}
		out = append(out, h)
	}
	return out
}

// settleAll commits each of holds that no commit has answered for good,
// again and again, until each has been answered, for at most d. The
// load's workers must be stopped, or the holds not theirs.
func (l *resLoad) settleAll(t *testing.T, d time.Duration, holds []*hold) {
	t.Helper()
	waitFor(t, d, "an answer to the commit of every hold", func() bool {
		all := true
		for _, h := range holds {
			if !h.done && !l.commit(h) {
				all = false
			}
		}
		return all
	})
}

// lost is what a retry of every acknowledged commit found after the load:
// the commits lost, those of them that gave units back and their units,
// and when the last lost commit was answered.
type lost struct {
	commits, refunds int
	units            int64
	last             time.Time
}

// audit commits again each of holds whose commit was acknowledged, with
// the same cost, as a caller's retry would: the store must answer with
// the first settlement (Replayed). One that settles afresh (the hold was
// still held) or finds no hold lost the acknowledged commit, and its
// refund if it gave units back. The retry settles such a hold now; call
// audit after reading the counts.
func audit(t *testing.T, holds []*hold) lost {
	t.Helper()
	var out lost
	for _, h := range holds {
		if !h.done || h.unknown || h.err != nil {
			continue
		}
		var (
			sts []floodgate.Settlement
			err error
		)
		waitFor(t, 10*time.Second, "an answer to a commit's retry", func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			sts, err = h.res.Commit(ctx, h.actual)
			return err == nil || errors.Is(err, floodgate.ErrUnknownReservation) || errors.Is(err, floodgate.ErrConflict) ||
				errors.Is(err, floodgate.ErrExpired)
		})
		switch {
		case err == nil && sts[0].Replayed:
			if sts[0].Refunded != h.refunded {
				t.Errorf("hold %s: the retry of the commit answered %d refunded, the commit %d", h.res.ID, sts[0].Refunded, h.refunded)
			}
			continue
		case err == nil, errors.Is(err, floodgate.ErrUnknownReservation):
		default:
			t.Errorf("hold %s: the retry of an acknowledged commit: %v", h.res.ID, err)
			continue
		}
		out.commits++
		if h.answered.After(out.last) {
			out.last = h.answered
		}
		if h.refunded > 0 {
			out.refunds++
			out.units += h.refunded
		}
	}
	return out
}

// holdWindows counts, per key and fixed window of limit (from the
// reserve's Decision.Now), the units admitted: those the acknowledged
// holds reserved less those their commits reported given back. It
// returns the total above the limit, the most in one window, and the
// windows over it whose start is not in the fault (inFault), as windows
// does for decisions.
func holdWindows(holds []*hold, limit floodgate.Limit, inFault func(time.Time) bool) (overrun, maxWindow int64, badWindows int) {
	type window struct {
		key   string
		start int64
	}
	per := make(map[window]int64)
	periodUS := limit.Period.Microseconds()
	for _, h := range holds {
		us := h.at.UnixMicro()
		per[window{h.key, us - us%periodUS}] += h.n - h.refunded
	}
	for w, n := range per {
		maxWindow = max(maxWindow, n)
		if n > limit.Limit {
			overrun += n - limit.Limit
			if inFault == nil || !inFault(time.UnixMicro(w.start)) {
				badWindows++
			}
		}
	}
	return overrun, maxWindow, badWindows
}

// across counts the holds reserved before to, on the store's clock
// (Decision.Now, which the store's process read while it decided), and
// first committed after from, and those of them whose commit answered
// ErrUnknownReservation.
func across(holds []*hold, from, to time.Time) (n, unknown int) {
	for _, h := range holds {
		if h.at.Before(to) && h.first.After(from) {
			n++
			if h.unknown {
				unknown++
			}
		}
	}
	return n, unknown
}

// settledCount peeks at key under limit through inst and returns its
// count (Limit less Remaining), and what the acknowledged commits of
// holds on key left: the sum of their actual costs.
func settledCount(t *testing.T, inst instance, key string, limit floodgate.Limit, holds []*hold) (count, want int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	d, err := inst.lim.Peek(ctx, key, limit)
	if err != nil {
		t.Fatalf("peek at %s: %v", key, err)
	}
	for _, h := range holds {
		if h.key == key && h.done && !h.unknown && h.err == nil {
			want += h.actual
		}
	}
	return limit.Limit - d.Remaining, want
}

// reserveStats is what the calls of a reservation load amount to: those
// of measure for the reserves, with the commits added to the calls,
// errors, deadlines, NOSCRIPT errors and latency. Commits answered
// ErrUnknownReservation are counted as errors, and as holds lost.
func reserveStats(l *resLoad, insts []instance) (st stats, holdsLost int) {
	st = measure(l.load, insts)
	for _, c := range l.Commits() {
		st.calls++
		if c.latency() > st.maxLatency {
			st.maxLatency, st.slowest = c.latency(), c
		}
		if c.err == nil {
			continue
		}
		st.errors++
		switch {
		case errors.Is(c.err, floodgate.ErrUnknownReservation):
			holdsLost++
		case errors.Is(c.err, context.DeadlineExceeded):
			st.deadlines++
		}
		if strings.Contains(c.err.Error(), "NOSCRIPT") {
			st.noscript++
		}
	}
	return st, holdsLost
}

// served is the reserves and commits of l by end, with the commits
// answered ErrUnknownReservation as successes: the store answered them.
// recovery, afterRecovery and maxGap read it.
func (l *resLoad) served() []call {
	out := l.Calls()
	for _, c := range l.Commits() {
		if errors.Is(c.err, floodgate.ErrUnknownReservation) {
			c.err = nil
		}
		out = append(out, c)
	}
	slices.SortStableFunc(out, func(a, b call) int { return a.end.Compare(b.end) })
	return out
}

// TestFaultReserveSentinelFailover promotes the replica with SENTINEL
// FAILOVER while reservations are made and committed, forty of them
// reserved just before the failover and committed once it is over, and
// the load's own holds committed 100 ms after their reserve, across it
// too. Without WAIT the old master keeps acknowledging reserves and
// commits until the clients follow the sentinels' +switch-master: a hold
// it made after the promotion is unknown to the new master (its commit
// answers ErrUnknownReservation), a commit it acknowledged is lost with
// its refund (the new master still holds the hold, charged), and the
// units it admitted are admitted again.
func TestFaultReserveSentinelFailover(t *testing.T) {
	reserveFailover(t, "Sentinel failover (SENTINEL FAILOVER) while reservations are held and committed", 0)
}

// TestFaultReserveSentinelFailoverWait is TestFaultReserveSentinelFailover
// with redisstore.Options.WaitReplicas 1, the deployment's one replica: a
// reserve or a commit is acknowledged only once the replica holds it, so
// the new master has every acknowledged hold and settlement. After the
// promotion the old master has no replica and every reserve and commit it
// takes fails (ErrNotReplicated); the callers retry their commits, which
// the new master settles once it has its replica again (the old master,
// demoted), each exactly once.
func TestFaultReserveSentinelFailoverWait(t *testing.T) {
	reserveFailover(t, "Sentinel failover (SENTINEL FAILOVER) while reservations are held and committed, with WaitReplicas 1 (every replica)", 1)
}

// reserveFailover promotes the replica of a Sentinel deployment with one
// replica under a reservation load, each store waiting for waitReplicas
// replicas after every script run.
func reserveFailover(t *testing.T, fault string, waitReplicas int) {
	d := redistest.StartSentinel(t)
	insts := instancesWith(t, "redis-sentinel://"+strings.Join(d.SentinelAddrs(), ",")+"/"+d.MasterName, 4,
		redisstore.Options{WaitReplicas: waitReplicas})
	l := startReserveLoad(t, insts, 6, keysOf("a", "b"), windowLimit)
	waitFor(t, 10*time.Second, "holds before the failover", func() bool { return len(l.Holds()) >= 40 })
	held := l.reserveAcross(t, insts)
	started := time.Now()
	d.Sentinels[0].MustCLI(t, "SENTINEL", "FAILOVER", d.MasterName)
	promoted := waitPromoted(t, d)
	switched := time.Now()
	t.Logf("the sentinels named the new master %v after the fault", switched.Sub(started))
	// As in sentinelFault: under WAIT, recovery is counted from when the
	// new master has its replica (the old master, demoted) in sync.
	from := switched
	if waitReplicas > 0 {
		waitFor(t, 30*time.Second, "the new master to have its replicas in sync", func() bool {
			return onlineReplicas(promoted.MustCLI(t, "INFO", "replication")) >= waitReplicas
		})
		from = time.Now()
		t.Logf("the new master had %d replicas in sync %v after the fault", waitReplicas, from.Sub(started))
	}
	waitFor(t, 20*time.Second, "every instance to succeed after the switch", func() bool {
		first, _ := recovery(l.served(), len(insts), from)
		return !latest(first).IsZero()
	})
	recovered := time.Now()
	l.settleAll(t, 20*time.Second, held)
	waitFor(t, 10*time.Second, "two periods after recovery", func() bool {
		return l.count(func(c call) bool { return c.err == nil && c.start.After(recovered.Add(2*windowLimit.Period)) }) > 0
	})
	l.Stop()
	holds := l.Holds()
	l.settleAll(t, 20*time.Second, holds)
	followed := followers(t, promoted)
	count, want := settledCount(t, insts[0], "across", acrossLimit, held)

	calls := l.served()
	st, holdsLost := reserveStats(l, insts)
	first, errsAfter := recovery(calls, len(insts), from)
	other, late := afterRecovery(t, from, errsAfter)
	overrun, maxWindow, bad := holdWindows(holds, windowLimit, span(started, latest(first).Add(time.Second), windowLimit.Period))
	gap := maxGap(calls, len(insts), started.Add(-time.Second))
	all := slices.Concat(holds, held)
	nAcross, lostAcross := across(all, started, switched)
	heldAcross, heldLost := across(held, started, switched)
	lostLate := 0 // lost holds the old master made after the switch
	for _, h := range all {
		if h.unknown && !h.at.Before(switched) {
			lostLate++
		}
	}
	lst := audit(t, all)
	saw := fmt.Sprintf("%d holds reserved, %d of them before the sentinels named the new master and committed after the failover began "+
		"(%d of the %d reserved just before it): %d of those lost (commit answered unknown; %d of the %d); "+
		"%d holds lost in all, %d of them reserved by the old master after the sentinels had named the new one; "+
		"%d acknowledged commits lost (a retry after the load settled the hold again, or found none), %d of them refunds (%d units)",
		len(all), nAcross, heldAcross, len(held), lostAcross, heldLost, len(held),
		holdsLost, lostLate, lst.commits, lst.refunds, lst.units)
	if lst.commits > 0 {
		saw += fmt.Sprintf(", the last answered %s after the sentinels named the new master", ms(lst.last.Sub(switched)))
	}
	saw += fmt.Sprintf("; the %d holds' key counted %d units after their commits, which left %d; overrun %d units; "+
		"%d of %d reserve and commit calls failed, each reserve answered by its policy; the sentinels named the new master %s after the fault; "+
		"max latency %s against a %s deadline (process stalled up to %s)",
		len(held), count, want, overrun,
		st.errors, st.calls, ms(switched.Sub(started)), ms(st.maxLatency), ms(timeout), ms(st.stall))
	if waitReplicas > 0 {
		saw += fmt.Sprintf("; the new master had its replica in sync %s after the fault", ms(from.Sub(started)))
	}
	record(t, Row{
		Fault: fault,
		Saw:   saw,
		Calls: st.calls, Errors: st.errors, Deadlines: st.deadlines,
		TimeoutMS: msf(timeout), MaxLatencyMS: msf(st.maxLatency), StallMS: msf(st.stall),
		WrongPolicy: st.wrongPolicy, ErrorsAfterRecovery: other, TimeoutsAfterRecovery: late, NoScript: st.noscript,
		RecoveryMS: -1, OutageMS: msf(gap), Instances: len(insts), Followed: followed,
		Limit: windowLimit.Limit, Overrun: overrun, MaxWindow: maxWindow, BadWindows: bad,
		Uncounted: st.uncounted,
		Holds:     len(all), HoldsAcross: nAcross, HoldsLost: holdsLost,
		CommitsLost: lst.commits, RefundsLost: lst.refunds, RefundedUnitsLost: lst.units,
		SettleMismatch: absDiff(count, want),
	})
}

// TestFaultReserveKill SIGKILLs Redis (no persistence) while
// reservations are held and committed, and restarts it on the same port.
// The restarted Redis is empty: every hold reserved before the kill and
// committed after the restart is unknown to it (the commit answers
// ErrUnknownReservation), and every window starts again.
func TestFaultReserveKill(t *testing.T) {
	r := redistest.Standalone(t)
	insts := instances(t, "redis://"+r.Addr, 4)
	l := startReserveLoad(t, insts, 6, keysOf("a", "b"), windowLimit)
	waitFor(t, 10*time.Second, "holds before the kill", func() bool { return len(l.Holds()) >= 40 })
	held := l.reserveAcross(t, insts)
	killed := time.Now()
	if err := r.Kill(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "failed reserves while Redis is down", func() bool {
		return l.count(func(c call) bool { return c.err != nil && c.start.After(killed) }) >= 50
	})
	if err := r.Restart(t); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	waitFor(t, 10*time.Second, "every instance to succeed after the restart", func() bool {
		first, _ := recovery(l.served(), len(insts), restarted)
		return !latest(first).IsZero()
	})
	recovered := time.Now()
	l.settleAll(t, 10*time.Second, held)
	waitFor(t, 10*time.Second, "two periods after recovery", func() bool {
		return l.count(func(c call) bool { return c.err == nil && c.start.After(recovered.Add(2*windowLimit.Period)) }) > 0
	})
	l.Stop()
	holds := l.Holds()
	l.settleAll(t, 10*time.Second, holds)
	count, want := settledCount(t, insts[0], "across", acrossLimit, held)

	calls := l.served()
	st, holdsLost := reserveStats(l, insts)
	first, errsAfter := recovery(calls, len(insts), restarted)
	other, late := afterRecovery(t, restarted, errsAfter)
	overrun, maxWindow, bad := holdWindows(holds, windowLimit, span(killed, latest(first), windowLimit.Period))
	all := slices.Concat(holds, held)
	// Reserved by the killed process, committed after it died.
	nAcross, lostAcross := across(all, killed, killed)
	heldAcross, heldLost := across(held, killed, killed)
	if heldLost != len(held) {
		t.Errorf("%d of the %d holds reserved before the kill were unknown after the restart, want all", heldLost, len(held))
	}
	lst := audit(t, all)
	record(t, Row{
		Fault: "Redis SIGKILLed while reservations are held and committed, restarted without persistence",
		Saw: fmt.Sprintf("%d holds reserved, %d of them before the kill and committed after it, %d of those lost (commit answered unknown; "+
			"%d of the %d reserved just before the kill), %d holds lost in all; "+
			"%d acknowledged commits lost (a retry after the load found no hold), %d of them refunds (%d units); overrun %d units; "+
			"%d of %d reserve and commit calls failed, each reserve answered by its policy; max latency %s against a %s deadline (process stalled up to %s)",
			len(all), nAcross, lostAcross, heldAcross, len(held), holdsLost, lst.commits, lst.refunds, lst.units, overrun,
			st.errors, st.calls, ms(st.maxLatency), ms(timeout), ms(st.stall)),
		Calls: st.calls, Errors: st.errors, Deadlines: st.deadlines,
		TimeoutMS: msf(timeout), MaxLatencyMS: msf(st.maxLatency), StallMS: msf(st.stall),
		WrongPolicy: st.wrongPolicy, ErrorsAfterRecovery: other, TimeoutsAfterRecovery: late, NoScript: st.noscript,
		RecoveryMS: msf(latest(first).Sub(restarted)), OutageMS: msf(latest(first).Sub(killed)),
		Limit: windowLimit.Limit, Overrun: overrun, MaxWindow: maxWindow, BadWindows: bad,
		Uncounted: st.uncounted,
		Holds:     len(all), HoldsAcross: nAcross, HoldsLost: holdsLost,
		CommitsLost: lst.commits, RefundsLost: lst.refunds, RefundedUnitsLost: lst.units,
		SettleMismatch: absDiff(count, want),
	})
}

func absDiff(a, b int64) int64 {
	if a > b {
		return a - b
	}
	return b - a
}
