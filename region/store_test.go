package region

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/floodgatetest"
	"github.com/floodgate-rl/floodgate/grant"
	"github.com/floodgate-rl/floodgate/share"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

// cutHome is a Home that fails while cut, as a partition does.
type cutHome struct {
	grant.Home
	cut atomic.Bool
}

var errCut = errors.New("home unreachable")

func (h *cutHome) Grant(ctx context.Context, r grant.Request) (grant.Grant, error) {
	if h.cut.Load() {
		return grant.Grant{}, errCut
	}
	return h.Home.Grant(ctx, r)
}

// testRegion is one region of a test: its Store over a memstore, and a
// Limiter over it.
type testRegion struct {
	name  string
	home  *cutHome
	store *Store
	lim   *floodgate.Limiter
}

// newRegions starts n regions sharing home and clock. Rebalancing is the
// test's to drive; Rebalance is 250 ms, so a rebalance measures demand
// only when the clock moved 125 ms since the last one.
func newRegions(t *testing.T, home grant.Home, clock floodgate.Clock, names []string, o Options) []*testRegion {
	t.Helper()
	var out []*testRegion
	for _, name := range names {
		ch := &cutHome{Home: home}
		o := o
		o.Name, o.Clock = name, clock
		o.Rebalance = 250 * time.Millisecond
		o.Term = max(o.Term, 2*time.Hour)
		o.FirstWait = -1
		s, err := newStore(memstore.New(&memstore.Options{Clock: clock}), ch, &o, false)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		lim, err := floodgate.New(s, nil)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, &testRegion{name, ch, s, lim})
	}
	return out
}

func TestFirstGrantAndDecision(t *testing.T) {
	t.Parallel()
	clock := floodgatetest.NewFakeClock(time.Unix(1_700_000_000, 0))
	rs := newRegions(t, &grant.MemHome{}, clock, []string{"a", "b"}, Options{Term: 2 * time.Hour})
	limit := floodgate.Limit{Limit: 100, Period: time.Second, Global: true}
	ctx := t.Context()
	// The first decision finds no grant (FirstWait is negative): denied,
	// but not for ever.
	d, err := rs[0].lim.Allow(ctx, "k", limit)
	if err != nil || d.Allowed || d.RetryAfter <= 0 || d.Limit != 100 {
		t.Fatalf("first decision = %+v, %v; want a denial to retry, of limit 100", d, err)
	}
	rs[0].store.rebalance(false)
	if h := rs[0].store.Held("k", limit); h.Share != 100 {
		t.Fatalf("after the first claim, a holds %+v, want all 100 (nobody else holds any)", h)
	}
	if st := rs[0].store.Stats(); st.Calls != 1 || st.Failures != 0 || st.Keys != 1 || st.Failing != 0 || st.Share != 100 || st.Limit != 100 {
		t.Fatalf("a's Stats after the first claim = %+v, want 1 call, 1 key, share 100 of 100", st)
	}
	d, err = rs[0].lim.AllowN(ctx, "k", limit, 60)
	if err != nil || !d.Allowed || d.Limit != 100 || d.Remaining != 40 {
		t.Fatalf("AllowN(60) = %+v, %v; want allowed, 40 left", d, err)
	}
	// b asks: nothing is free until a lowers.
	for range 30 {
		if d, _ := rs[1].lim.Allow(ctx, "k", limit); d.Allowed {
			t.Fatal("b admitted before holding a share")
		}
	}
	clock.Advance(500 * time.Millisecond)
	rs[1].store.rebalance(false)
	if h := rs[1].store.Held("k", limit); h.Share != 0 {
		t.Fatalf("b holds %+v while a holds all, want 0", h)
	}
	// a lowers toward the split (a asked 61 in 500 ms, b 30) but not
	// below the 60 it used in this window. Its first rebalance learns b's
	// demand; its second acts on it.
	rs[0].store.rebalance(false)
	rs[0].store.rebalance(false)
	if h := rs[0].store.Held("k", limit); h.Share < 60 || h.Share == 100 {
		t.Fatalf("a holds %+v after seeing b, want at least the 60 it used and less than 100", h)
	}
	rs[1].store.rebalance(false)
	hb := rs[1].store.Held("k", limit)
	ha := rs[0].store.Held("k", limit)
	if hb.Share <= 0 || ha.Share+hb.Share > 100 {
		t.Fatalf("a holds %+v, b %+v: want b above 0 and a sum of at most 100", ha, hb)
	}
}

// TestZeroOverrunConnected runs three regions on one clock, with demand
// moving between them, decisions racing the rebalances, and checks that
// in every window the regions together admitted at most the limit.
func TestZeroOverrunConnected(t *testing.T) {
	t.Parallel()
	clock := floodgatetest.NewFakeClock(time.Unix(1_700_000_000, 0))
	names := []string{"a", "b", "c"}
	rs := newRegions(t, &grant.MemHome{}, clock, names, Options{Floor: 0.05})
	const L = 200
	limit := floodgate.Limit{Limit: L, Period: time.Second, Global: true}
	ctx := t.Context()
	perWindow := map[int64]int64{}
	var mu sync.Mutex
	var asked, admitted int64
	const windows = 60
	for w := range windows {
		// Demand moves from a to c over the run: weights 70/20/10 to 10/20/70.
		f := float64(w) / windows
		weights := []float64{0.7 - 0.6*f, 0.2, 0.1 + 0.6*f}
		for range 10 { // ten slices of a window, a rebalance after each
			var wg sync.WaitGroup
			for i, r := range rs {
				n := int(weights[i] * 60) // 600 asked per window in all: 3× the limit
				rng := rand.New(rand.NewPCG(uint64(w), uint64(i)))
				wg.Go(func() {
					for range n {
						cost := int64(1 + rng.IntN(2))
						d, err := r.lim.AllowN(ctx, "k", limit, cost)
						if err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						asked += cost
						if d.Allowed {
							perWindow[window(d.Now, limit.Period)] += cost
							admitted += cost
						}
						mu.Unlock()
					}
				})
				// Rebalance while decisions run.
				wg.Go(func() { r.store.rebalance(false) })
			}
			wg.Wait()
			clock.Advance(100 * time.Millisecond)
		}
	}
	for w, n := range perWindow {
		if n > L {
			t.Errorf("window %d admitted %d across the regions, above the limit %d", w, n, L)
		}
	}
	// Utilisation: demand is three times the limit in every window, so a
	// central counter would admit the limit in each.
	if u := float64(admitted) / float64(windows*L); u < 0.8 {
		t.Errorf("admitted %d of %d asked in %d windows: utilisation %.2f, want at least 0.8", admitted, asked, windows, u)
	}
	t.Logf("admitted %d of %d asked; utilisation %.3f of the limit", admitted, asked, float64(admitted)/float64(windows*L))
}

// TestPartitionBound cuts one region from home and checks the package
// doc's bound: it decides on its share until its grant ends, then on the
// safe share; the others take its share once the grant and the grace have
// passed; in any window the total stays within Limit + SafeShare×Limit.
func TestPartitionBound(t *testing.T) {
	t.Parallel()
	clock := floodgatetest.NewFakeClock(time.Unix(1_700_000_000, 0))
	const L = 100
	o := Options{Term: 3 * time.Second, Grace: time.Second, SafeShare: 0.1}
	var rs []*testRegion
	home := &grant.MemHome{}
	for _, name := range []string{"a", "b", "c"} {
		ch := &cutHome{Home: home}
		oo := o
		oo.Name, oo.Clock, oo.Rebalance, oo.FirstWait = name, clock, time.Second, -1
		s, err := newStore(memstore.New(&memstore.Options{Clock: clock}), ch, &oo, false)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		lim, _ := floodgate.New(s, nil)
		rs = append(rs, &testRegion{name, ch, s, lim})
	}
	limit := floodgate.Limit{Limit: L, Period: time.Second, Global: true}
	ctx := t.Context()
	perWindow := map[int64]int64{}
	cutAt, healAt := 5, 15 // seconds
	var cShareAtCut int64
	for sec := range 25 {
		if sec == cutAt {
			rs[2].home.cut.Store(true)
			cShareAtCut = rs[2].store.Held("k", limit).Share
		}
		if sec == healAt {
			rs[2].home.cut.Store(false)
		}
		for step := range 4 {
			for _, r := range rs {
				for range 60 { // every region asks for more than the whole limit
					d, err := r.lim.Allow(ctx, "k", limit)
					if err != nil {
						t.Fatal(err)
					}
					if d.Allowed {
						perWindow[window(d.Now, limit.Period)]++
					}
				}
			}
			if step%2 == 1 {
				for _, r := range rs {
					r.store.rebalance(false)
				}
			}
			clock.Advance(250 * time.Millisecond)
		}
		// Within the grant c decides on the share it held; after it, on
		// the safe share.
		h := rs[2].store.Held("k", limit)
		if st := rs[2].store.Stats(); st.Keys != 1 || st.Share != h.Share || st.Limit != L || (st.Failing == 1) != (sec >= cutAt && sec < healAt) {
			t.Errorf("at %d s, c's Stats = %+v, want 1 key of limit %d, share %d, failing only while cut off", sec, st, L, h.Share)
		}
		switch now := clock.Now(); {
		case sec >= cutAt && sec < healAt && now.Before(h.Until):
			if h.Share != cShareAtCut {
				t.Errorf("at %d s, cut off and within its grant (until %v), c decides on %d, want the %d it held", sec, h.Until, h.Share, cShareAtCut)
			}
		case sec >= cutAt && sec < healAt:
			if h.Share != 10 {
				t.Errorf("at %d s, cut off past its grant, c decides on %d, want the safe share 10", sec, h.Share)
			}
		}
	}
	var over int64
	for w, n := range perWindow {
		if n > L+10 {
			t.Errorf("window %d admitted %d, above the partition bound %d + %d", w, n, L, 10)
		}
		over += max(0, n-L)
	}
	if over == 0 {
		t.Errorf("no window above the limit: the test did not reach the safe share's overrun")
	}
	t.Logf("overrun over the run: %d units, at most %d in a window", over, maxOver(perWindow, L))
}

func maxOver(m map[int64]int64, L int64) int64 {
	var o int64
	for _, n := range m {
		o = max(o, n-L)
	}
	return o
}

// TestRestartIsNewHolder: a process that restarts under the same name is a
// new holder; the old one's share stays counted until its grant ends, so
// the new one cannot spend it again in the same window.
func TestRestartIsNewHolder(t *testing.T) {
	t.Parallel()
	clock := floodgatetest.NewFakeClock(time.Unix(1_700_000_000, 0))
	home := &grant.MemHome{}
	limit := floodgate.Limit{Limit: 50, Period: time.Second, Global: true}
	first := newRegions(t, home, clock, []string{"a"}, Options{})[0]
	first.lim.Allow(t.Context(), "k", limit)
	first.store.rebalance(false)
	if d, _ := first.lim.AllowN(t.Context(), "k", limit, 50); !d.Allowed {
		t.Fatal("a could not spend the whole limit it held")
	}
	// A crash: no Close, so no release.
	second := newRegions(t, home, clock, []string{"a"}, Options{})[0]
	if first.store.Holder() == second.store.Holder() {
		t.Fatalf("two processes hold under one name %q", first.store.Holder())
	}
	second.lim.Allow(t.Context(), "k", limit)
	second.store.rebalance(false)
	if h := second.store.Held("k", limit); h.Share != 0 {
		t.Errorf("the restarted process holds %+v while its old self's grant lasts, want 0", h)
	}
	first.store.stopForTest()
}

// stopForTest stops the rebalancing without giving anything back, as a
// crash would.
func (s *Store) stopForTest() {
	if !s.closed.Swap(true) {
		close(s.stop)
		<-s.done
	}
}

func TestBatchAndPipeline(t *testing.T) {
	t.Parallel()
	clock := floodgatetest.NewFakeClock(time.Unix(1_700_000_000, 0))
	r := newRegions(t, &grant.MemHome{}, clock, []string{"a"}, Options{})[0]
	global := floodgate.Limit{Limit: 10, Period: time.Second, Global: true}
	local := floodgate.Limit{Limit: 3, Period: time.Second}
	ctx := t.Context()
	r.lim.Allow(ctx, "g", global)
	r.store.rebalance(false)
	outs, err := r.lim.DecideAll(ctx, []floodgate.Item{{Key: "g", Limit: global, Cost: 4}, {Key: "g", Limit: global, Cost: 4}, {Key: "l", Limit: local, Cost: 3}})
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range outs {
		if !o.Decision.Allowed || o.Err != nil {
			t.Errorf("item %d: %+v, want allowed", i, o)
		}
	}
	outs, _ = r.lim.Decide(ctx, []floodgate.Item{{Key: "g", Limit: global, Cost: 2}, {Key: "g", Limit: global, Cost: 1}, {Key: "l", Limit: local}})
	if got := []bool{outs[0].Decision.Allowed, outs[1].Decision.Allowed, outs[2].Decision.Allowed}; got[0] != true || got[1] != false || got[2] != true {
		t.Errorf("Decide after 8 of 10 = %v, want [true false true] (2 left, then none; the peek of l allowed)", got)
	}
	if outs[0].Decision.Limit != 10 {
		t.Errorf("a global decision's Limit is %d, want the global 10", outs[0].Decision.Limit)
	}
}

func TestNewRejects(t *testing.T) {
	t.Parallel()
	m := memstore.New(nil)
	for _, o := range []Options{{}, {Name: "a b"}, {Name: "a", Floor: 2}, {Name: "a", SafeShare: -1}, {Name: "a", Rebalance: time.Minute, Term: time.Minute}} {
		if s, err := New(m, &grant.MemHome{}, &o); err == nil {
			s.Close()
			t.Errorf("New(%+v) = nil error", o)
		}
	}
}

// TestLowerCountsLatestWindow: a rebalance that began in one window and
// lowers the share after decisions of the next window counts what the
// next window used, so the share never drops below it.
func TestLowerCountsLatestWindow(t *testing.T) {
	t.Parallel()
	clock := floodgatetest.NewFakeClock(time.Unix(1_700_000_000, 0))
	r := newRegions(t, &grant.MemHome{}, clock, []string{"a"}, Options{})[0]
	limit := floodgate.Limit{Limit: 100, Period: time.Second, Global: true}
	ctx := t.Context()
	r.lim.Allow(ctx, "k", limit)
	r.store.rebalance(false)
	stale := r.store.now(time.Time{}) // the rebalance's time, in window w
	clock.Advance(time.Second)        // window w+1
	if d, _ := r.lim.AllowN(ctx, "k", limit, 60); !d.Allowed {
		t.Fatal("60 of a share of 100 denied")
	}
	k := entryKey{"k", limit.Period}
	r.store.mu.Lock()
	e := r.store.entries[k]
	r.store.mu.Unlock()
	// Another holder with all the demand: the target is 0.
	e.last = grant.Grant{Parties: []share.Party{{}, {Demand: 1000}}, Self: 0}
	r.store.plan(k, e, stale)
	if h := r.store.Held("k", limit); h.Granted < 60 {
		t.Errorf("after lowering, a holds %+v: below the 60 its current window used", h)
	}
}
