package ledger_test

import (
	"errors"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/floodgatetest"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

// TestSettleBillsOnlyHolds: a commit or cancel of a reservation the store
// does not hold (a forged or guessed ID, another key) writes nothing to
// the ledger and changes no counter, and a cancel of one it holds writes
// nothing either. Before, the ledger recorded the commit's units under
// the named key before the store found no hold, and a cancel wrote a
// 0-unit row under any ID.
func TestSettleBillsOnlyHolds(t *testing.T) {
	clock := floodgatetest.NewFakeClock(base.Add(time.Hour))
	lg := openSQLite(t)
	s := memstore.New(&memstore.Options{Clock: clock, SweepInterval: -1})
	defer s.Close()
	l, acc := durableLimiter(t, s, lg, clock, "")
	victim := []floodgate.Item{{Key: "victim", Limit: paid}}
	for _, cancel := range []bool{false, true} {
		forged := l.Reservation("forged-id", victim, false)
		var err error
		if cancel {
			_, err = forged.Cancel(t.Context())
		} else {
			_, err = forged.Commit(t.Context(), 1_000_000)
		}
		if !errors.Is(err, floodgate.ErrUnknownReservation) {
			t.Errorf("settle (cancel %v) of an ID the store does not hold: %v, want ErrUnknownReservation", cancel, err)
		}
	}
	// A reservation of another key, committed under the victim's.
	res, d, err := l.Reserve(t.Context(), "attacker", paid, 1, nil)
	if err != nil || !d.Allowed {
		t.Fatalf("reserve: %+v, %v", d, err)
	}
	if _, err := l.Reservation(res.ID, victim, false).Commit(t.Context(), 1_000_000); !errors.Is(err, floodgate.ErrUnknownReservation) {
		t.Errorf("commit of another key's ID under the victim: %v, want ErrUnknownReservation", err)
	}
	if _, err := res.Cancel(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := ledgerUnits(t, lg, "victim", clock.Now()); got != 0 {
		t.Errorf("the victim's ledger holds %d units, want 0", got)
	}
	if st := acc.Stats(); st.Records != 0 || st.Written != 0 {
		t.Errorf("ledger stats %+v, want nothing recorded (a cancel records nothing)", st)
	}
	if d, err := l.Peek(t.Context(), "victim", paid); err != nil || d.Remaining != paid.Limit {
		t.Errorf("the victim's counter: %+v, %v; want untouched", d, err)
	}
}

// TestSettleWindowFromHold: the window a commit is billed in is the
// store's hold's, whatever the settle names (before, a reservation token
// naming the previous window was billed there, and that window's
// counter, rebuilt after a loss, admitted the quota again), and a hold
// the store recorded as durable is billed even when the settle says the
// limit is not.
func TestSettleWindowFromHold(t *testing.T) {
	clock := floodgatetest.NewFakeClock(base.Add(time.Hour))
	lg := openSQLite(t)
	s := memstore.New(&memstore.Options{Clock: clock, SweepInterval: -1})
	defer s.Close()
	l, _ := durableLimiter(t, s, lg, clock, "")
	res, d, err := l.Reserve(t.Context(), "k", paid, 40, nil)
	if err != nil || !d.Allowed {
		t.Fatalf("reserve: %+v, %v", d, err)
	}
	r := l.Reservation(res.ID, res.Items, false)
	r.Windows = []time.Time{clock.Now().Add(-paid.Period).Truncate(paid.Period)}
	sts, err := r.Commit(t.Context(), 30)
	if err != nil || sts[0].Billed != 30 {
		t.Fatalf("commit naming yesterday: %+v, %v", sts, err)
	}
	if got := ledgerUnits(t, lg, "k", clock.Now()); got != 30 {
		t.Errorf("today's window holds %d units, want the 30 committed", got)
	}
	if got := ledgerUnits(t, lg, "k", clock.Now().Add(-paid.Period)); got != 0 {
		t.Errorf("yesterday's window holds %d units, want 0", got)
	}
	res, _, err = l.Reserve(t.Context(), "k", paid, 5, nil)
	if err != nil {
		t.Fatal(err)
	}
	plain := res.Items[0]
	plain.Limit.Durable = false
	if _, err := l.Reservation(res.ID, []floodgate.Item{plain}, false).Commit(t.Context(), 5); err != nil {
		t.Fatal(err)
	}
	if got := ledgerUnits(t, lg, "k", clock.Now()); got != 35 {
		t.Errorf("after a commit that called the quota not durable the ledger holds %d units, want 35", got)
	}
}

// TestSettleLostHold: a commit of a signed reservation whose hold the
// store lost is billed from the signed record, at most the units held,
// and its answer says so (HoldLost, Billed); without a signed record, or
// after its expiry, or for a cancel, nothing is billed.
func TestSettleLostHold(t *testing.T) {
	clock := floodgatetest.NewFakeClock(base.Add(time.Hour))
	lg := openSQLite(t)
	s := memstore.New(&memstore.Options{Clock: clock, SweepInterval: -1})
	defer s.Close()
	l, _ := durableLimiter(t, s, lg, clock, "")
	res, d, err := l.Reserve(t.Context(), "k", paid, 40, nil)
	if err != nil || !d.Allowed {
		t.Fatalf("reserve: %+v, %v", d, err)
	}
	// The store loses everything: a Limiter over an empty one.
	empty := memstore.New(&memstore.Options{Clock: clock, SweepInterval: -1})
	defer empty.Close()
	l2, _ := durableLimiter(t, empty, lg, clock, "")
	rebuilt := func(signed bool) *floodgate.Reservation {
		r := l2.Reservation(res.ID, res.Items, false)
		r.Windows, r.Expires, r.Signed = res.Windows, res.Expires, signed
		return r
	}
	if _, err := rebuilt(false).Commit(t.Context(), 30); !errors.Is(err, floodgate.ErrUnknownReservation) {
		t.Errorf("unsigned commit of a lost hold: %v, want ErrUnknownReservation", err)
	}
	if _, err := rebuilt(true).Cancel(t.Context()); !errors.Is(err, floodgate.ErrUnknownReservation) {
		t.Errorf("signed cancel of a lost hold: %v, want ErrUnknownReservation", err)
	}
	if got := ledgerUnits(t, lg, "k", clock.Now()); got != 0 {
		t.Fatalf("ledger holds %d units before the signed commit, want 0", got)
	}
	sts, err := rebuilt(true).Commit(t.Context(), 55)
	if err != nil || len(sts) != 1 || !sts[0].HoldLost || sts[0].Billed != 40 || sts[0].Short != 15 {
		t.Fatalf("signed commit of 55 of a lost hold of 40: %+v, %v; want HoldLost, 40 billed, 15 short", sts, err)
	}
	if got := ledgerUnits(t, lg, "k", clock.Now()); got != 40 {
		t.Errorf("ledger holds %d units, want 40", got)
	}
	res2, _, err := l.Reserve(t.Context(), "k2", paid, 10, &floodgate.ReserveOptions{TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Second)
	r := l2.Reservation(res2.ID, res2.Items, false)
	r.Windows, r.Expires, r.Signed = res2.Windows, res2.Expires, true
	if _, err := r.Commit(t.Context(), 10); !errors.Is(err, floodgate.ErrUnknownReservation) {
		t.Errorf("signed commit of a lost hold after its expiry: %v, want ErrUnknownReservation", err)
	}
	if got := ledgerUnits(t, lg, "k2", clock.Now()); got != 0 {
		t.Errorf("ledger holds %d units of the expired reservation, want 0", got)
	}
}
