package floodgate_test

import (
	"errors"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/floodgatetest"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

// TestPriorityOverload is issue 29's overload test: on a frozen injected
// clock (so no unit comes back), the three classes ask in turn, one unit
// each, on three instances over one real Redis (and over memory), until
// every class is refused. Sheddable stops with 20 of 100 left, Normal
// with 5, Critical takes the budget to its end: 80 + 15 + 5 admitted of
// each limit, exactly, for a GCRA and for a fixed window.
func TestPriorityOverload(t *testing.T) {
	limits := map[string]floodgate.Limit{
		"gcra":         {Algorithm: floodgate.GCRA, Limit: 100, Period: time.Second},
		"fixed_window": {Algorithm: floodgate.FixedWindow, Limit: 100, Period: time.Minute},
	}
	for _, storeName := range []string{"memory", "redis"} {
		t.Run(storeName, func(t *testing.T) {
			clock := floodgatetest.NewFakeClock(start.Add(time.Second / 3))
			ls := fleet(t, storeName, clock, nil)
			for name, lim := range limits {
				t.Run(name, func(t *testing.T) {
					admitted := map[floodgate.Priority]int{}
					open := map[floodgate.Priority]bool{floodgate.Sheddable: true, floodgate.Normal: true, floodgate.Critical: true}
					order := []floodgate.Priority{floodgate.Sheddable, floodgate.Normal, floodgate.Critical}
					for i := 0; len(open) > 0 && i < 1000; i++ {
						p := order[i%3]
						d, err := ls[i%3].AllowPriority(t.Context(), "upstream:"+name, lim, 1, p)
						if err != nil {
							t.Fatal(err)
						}
						if d.Allowed {
							if !open[p] {
								t.Fatalf("%s admitted after it was refused", p)
							}
							admitted[p]++
						} else {
							delete(open, p)
						}
					}
					// Sheddable takes a third of the first 80 (the classes
					// alternate), so: the total when each stops.
					total := admitted[floodgate.Sheddable] + admitted[floodgate.Normal] + admitted[floodgate.Critical]
					if total != 100 {
						t.Errorf("admitted %d in all, want the whole budget 100: %v", total, admitted)
					}
					// The model: the classes ask in turn; a class is admitted
					// while the units used after it are at most 100 less its
					// reserve (80, 95, 100).
					want := map[floodgate.Priority]int{}
					used, stops := 0, map[floodgate.Priority]int{floodgate.Sheddable: 80, floodgate.Normal: 95, floodgate.Critical: 100}
					for i, shut := 0, map[floodgate.Priority]bool{}; len(shut) < 3 && i < 1000; i++ {
						p := order[i%3]
						if !shut[p] && used+1 <= stops[p] {
							used++
							want[p]++
						} else {
							shut[p] = true
						}
					}
					for _, p := range order {
						if admitted[p] != want[p] {
							t.Errorf("%s admitted %d, want %d", p, admitted[p], want[p])
						}
					}
					// Sheddable was refused first, with 20 left: the units
					// admitted until then were 80 in all.
					d, _ := ls[0].Peek(t.Context(), "upstream:"+name, lim)
					if d.Remaining != 0 {
						t.Errorf("remaining %d after critical, want 0", d.Remaining)
					}
					t.Logf("%s: admitted by class %v of 100", name, admitted)
				})
			}
		})
	}
}

// TestPriorityReserve checks the reserve of each class exactly: from a
// full budget of 100, Sheddable alone takes 80, then Normal 15, then
// Critical the last 5.
func TestPriorityReserve(t *testing.T) {
	t.Parallel()
	clock := floodgatetest.NewFakeClock(start)
	m := memstore.New(&memstore.Options{SweepInterval: -1, Clock: clock})
	t.Cleanup(func() { m.Close() })
	l, _ := floodgate.New(m, &floodgate.Options{Clock: clock})
	lim := floodgate.Limit{Algorithm: floodgate.GCRA, Limit: 100, Period: time.Second}
	for _, tc := range []struct {
		p    floodgate.Priority
		want int
	}{{floodgate.Sheddable, 80}, {floodgate.Normal, 15}, {floodgate.Critical, 5}} {
		n := 0
		for range 200 {
			d, err := l.AllowPriority(t.Context(), "k", lim, 1, tc.p)
			if err != nil {
				t.Fatal(err)
			}
			if !d.Allowed {
				break
			}
			n++
		}
		if n != tc.want {
			t.Errorf("%s admitted %d, want %d", tc.p, n, tc.want)
		}
	}
	if _, err := l.AllowPriority(t.Context(), "k", lim, 1, "urgent"); !errors.Is(err, floodgate.ErrInvalidRequest) {
		t.Errorf("unknown class: %v, want ErrInvalidRequest", err)
	}
	tb := floodgate.Limit{Algorithm: floodgate.TokenBucket, Limit: 100, Period: time.Second}
	if _, err := l.AllowPriority(t.Context(), "k", tb, 1, floodgate.Sheddable); !errors.Is(err, floodgate.ErrInvalidLimit) {
		t.Errorf("token bucket: %v, want ErrInvalidLimit", err)
	}
}

// TestDecidePriority: an Item's Priority is AllowPriority's class through
// Decide and DecideAll: sheddable items stop with 20 of 100 left while
// critical ones take the rest, on the key's one state; an empty class is
// the whole limit; a class the algorithm cannot honour, or on a flow, is
// refused naming "priority" and nothing is applied.
func TestDecidePriority(t *testing.T) {
	clock := floodgatetest.NewFakeClock(start)
	m := memstore.New(&memstore.Options{SweepInterval: -1, Clock: clock})
	t.Cleanup(func() { m.Close() })
	l, err := floodgate.New(m, &floodgate.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	lim := floodgate.Limit{Algorithm: floodgate.GCRA, Limit: 100, Period: time.Minute}
	count := func(p floodgate.Priority, all bool) int {
		n := 0
		for range 200 {
			decide := l.Decide
			if all {
				decide = l.DecideAll
			}
			outs, err := decide(t.Context(), []floodgate.Item{{Key: "k", Limit: lim, Cost: 1, Priority: p}})
			if err != nil {
				t.Fatal(err)
			}
			if !outs[0].Decision.Allowed {
				return n
			}
			n++
		}
		return n
	}
	if got := count(floodgate.Sheddable, false); got != 80 {
		t.Errorf("sheddable admitted %d of 100, want 80", got)
	}
	if got := count(floodgate.Normal, true); got != 15 {
		t.Errorf("normal admitted %d after sheddable, want 15", got)
	}
	if got := count("", false); got != 5 {
		t.Errorf("no class admitted %d after normal, want the last 5", got)
	}

	for name, it := range map[string]floodgate.Item{
		"token bucket": {Key: "t", Limit: floodgate.Limit{Algorithm: floodgate.TokenBucket, Limit: 10, Period: time.Second}, Cost: 1, Priority: floodgate.Sheddable},
		"flow":         {Key: "f", Limit: lim, Cost: 1, Flow: "tenant", Priority: floodgate.Normal},
	} {
		_, err := l.Decide(t.Context(), []floodgate.Item{{Key: "ok", Limit: lim, Cost: 1}, it})
		var ie *floodgate.ItemError
		var fe *floodgate.FieldError
		if !errors.As(err, &ie) || ie.Index != 1 || !errors.As(err, &fe) || fe.Field != "priority" || !errors.Is(err, floodgate.ErrInvalidLimit) {
			t.Errorf("%s: err = %v, want item 1's ErrInvalidLimit naming priority", name, err)
		}
	}
	d, err := l.Peek(t.Context(), "ok", lim)
	if err != nil || d.Remaining != 100 {
		t.Errorf("a refused call applied its valid item: remaining %d, %v", d.Remaining, err)
	}
	if _, err := floodgate.ParsePriority("urgent"); !errors.Is(err, floodgate.ErrInvalidRequest) {
		t.Errorf("ParsePriority(urgent) = %v, want ErrInvalidRequest", err)
	}
}

// TestPriorityReservesOverload is TestPriorityOverload under configured
// reserves (Item.Reserves through Decide): Normal keeps 10 units,
// Sheddable 40%, so of 100 Sheddable stops with 40 left, Normal with 10
// and Critical takes the rest, on three instances over one real Redis
// and over memory, for a GCRA and a fixed window. Every decision is
// checked against the model: admitted exactly when the units taken
// before it plus its own are at most its class's bound.
func TestPriorityReservesOverload(t *testing.T) {
	limits := map[string]floodgate.Limit{
		"gcra":         {Algorithm: floodgate.GCRA, Limit: 100, Period: time.Second},
		"fixed_window": {Algorithm: floodgate.FixedWindow, Limit: 100, Period: time.Minute},
	}
	rs := &floodgate.Reserves{Normal: floodgate.ClassReserve{Units: 10}, Sheddable: floodgate.ClassReserve{Percent: 40}}
	bound := map[floodgate.Priority]int{floodgate.Sheddable: 60, floodgate.Normal: 90, floodgate.Critical: 100}
	order := []floodgate.Priority{floodgate.Sheddable, floodgate.Normal, floodgate.Critical}
	for _, storeName := range []string{"memory", "redis"} {
		t.Run(storeName, func(t *testing.T) {
			clock := floodgatetest.NewFakeClock(start.Add(time.Second / 3))
			ls := fleet(t, storeName, clock, nil)
			for name, lim := range limits {
				t.Run(name, func(t *testing.T) {
					admitted := map[floodgate.Priority]int{}
					used, refusedAll := 0, 0
					for i := 0; i < 300 && refusedAll < 3; i++ {
						p := order[i%3]
						outs, err := ls[i%3].Decide(t.Context(), []floodgate.Item{{Key: "custom:" + name, Limit: lim, Cost: 1, Priority: p, Reserves: rs}})
						if err != nil {
							t.Fatal(err)
						}
						want := used+1 <= bound[p]
						if got := outs[0].Decision.Allowed; got != want {
							t.Fatalf("decision %d (%s, %d taken before): allowed %v, the model says %v", i, p, used, got, want)
						}
						if want {
							used++
							admitted[p]++
							refusedAll = 0
						} else {
							refusedAll++
						}
					}
					if used != 100 || admitted[floodgate.Critical] == 0 {
						t.Errorf("admitted %d in all, want the whole budget 100: %v", used, admitted)
					}
					// The model's counts: the classes alternate until
					// Sheddable stops at 60 (20 each), then Normal and
					// Critical until 90 (15 more each), then Critical.
					for p, w := range map[floodgate.Priority]int{floodgate.Sheddable: 20, floodgate.Normal: 35, floodgate.Critical: 45} {
						if admitted[p] != w {
							t.Errorf("%s admitted %d, want %d", p, admitted[p], w)
						}
					}
					t.Logf("%s: admitted by class %v of 100", name, admitted)
				})
			}
		})
	}
}

// TestReserves checks Reserves on their own: the units kept, the limit
// of each class, and the errors for bad reserves.
func TestReserves(t *testing.T) {
	t.Parallel()
	lim := floodgate.Limit{Algorithm: floodgate.GCRA, Limit: 10, Period: time.Second, Burst: 50}
	rs := floodgate.Reserves{Normal: floodgate.ClassReserve{Percent: 10}, Sheddable: floodgate.ClassReserve{Units: 20}}
	for p, want := range map[floodgate.Priority]int64{"": 50, floodgate.Critical: 50, floodgate.Normal: 45, floodgate.Sheddable: 30} {
		cl, err := rs.Limit(lim, p)
		if err != nil || cl.Burst != want {
			t.Errorf("%q: burst %d, %v; want %d", p, cl.Burst, err, want)
		}
	}
	if k := (floodgate.ClassReserve{Percent: 20}).Kept(11); k != 3 {
		t.Errorf("20%% of 11 keeps %d, want 3 (rounded up)", k)
	}
	if k := (floodgate.ClassReserve{Units: 80}).Kept(50); k != 50 {
		t.Errorf("80 units of 50 keeps %d, want 50", k)
	}
	all, err := floodgate.Reserves{Sheddable: floodgate.ClassReserve{Units: 50}}.Limit(lim, floodgate.Sheddable)
	if err != nil || all.Limit != 0 {
		t.Errorf("a reserve of the whole capacity: %+v, %v; want a limit admitting nothing", all, err)
	}
	for name, tc := range map[string]struct {
		rs    floodgate.Reserves
		lim   floodgate.Limit
		field string
	}{
		"negative":        {floodgate.Reserves{Normal: floodgate.ClassReserve{Units: -1}}, lim, "reserves.normal"},
		"over 100%":       {floodgate.Reserves{Sheddable: floodgate.ClassReserve{Percent: 101}}, lim, "reserves.sheddable"},
		"both":            {floodgate.Reserves{Sheddable: floodgate.ClassReserve{Percent: 10, Units: 1}}, lim, "reserves.sheddable"},
		"sheddable fewer": {floodgate.Reserves{Normal: floodgate.ClassReserve{Units: 10}, Sheddable: floodgate.ClassReserve{Percent: 10}}, lim, "reserves.sheddable"},
		"token bucket":    {rs, floodgate.Limit{Algorithm: floodgate.TokenBucket, Limit: 10, Period: time.Second}, "algorithm"},
	} {
		_, err := tc.rs.Limit(tc.lim, floodgate.Sheddable)
		var fe *floodgate.FieldError
		if !errors.Is(err, floodgate.ErrInvalidLimit) || !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%s: %v, want ErrInvalidLimit naming %s", name, err, tc.field)
		}
	}
	// Through Decide: bad reserves are the item's error, nothing applied.
	clock := floodgatetest.NewFakeClock(start)
	m := memstore.New(&memstore.Options{SweepInterval: -1, Clock: clock})
	t.Cleanup(func() { m.Close() })
	l, _ := floodgate.New(m, &floodgate.Options{Clock: clock})
	bad := &floodgate.Reserves{Normal: floodgate.ClassReserve{Units: -5}}
	_, err = l.Decide(t.Context(), []floodgate.Item{{Key: "ok", Limit: lim, Cost: 1}, {Key: "b", Limit: lim, Cost: 1, Priority: floodgate.Normal, Reserves: bad}})
	var ie *floodgate.ItemError
	var fe *floodgate.FieldError
	if !errors.As(err, &ie) || ie.Index != 1 || !errors.As(err, &fe) || fe.Field != "reserves.normal" {
		t.Errorf("bad reserves through Decide: %v, want item 1's error naming reserves.normal", err)
	}
	if d, _ := l.Peek(t.Context(), "ok", lim); d.Remaining != 50 {
		t.Errorf("a refused call applied its valid item: remaining %d", d.Remaining)
	}
}
