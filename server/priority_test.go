package server_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/floodgatetest"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

// priorityYAML is a shared upstream whose requests are sheddable unless
// they say otherwise, under a GCRA and under a fixed window.
const priorityYAML = `
domain: api
descriptors:
  - key: upstream
    value: gcra
    priority: sheddable
    rate_limit: {unit: minute, requests_per_unit: 100, algorithm: gcra}
  - key: upstream
    value: window
    priority: sheddable
    rate_limit: {unit: minute, requests_per_unit: 100, algorithm: fixed_window}
`

// TestServicePriorityOverload is issue 29's overload test through the
// service: three instances over one store (memory, and a real Redis), a
// frozen clock so no unit comes back, and requests of the three classes
// in turn on one descriptor whose config makes it sheddable by default:
// the bulk requests name no class (so the descriptor's sheddable), the
// others name normal or critical. Each request is admitted exactly when
// the units taken before it are below its class's bound: 80 of 100 for
// sheddable (20% kept), 95 for normal, 100 for critical, which takes the
// budget to its end.
func TestServicePriorityOverload(t *testing.T) {
	for name, open := range sharedStores(t) {
		t.Run(name, func(t *testing.T) {
			clock := floodgatetest.NewFakeClock(time.Date(2026, 12, 2, 0, 0, 20, 0, time.UTC))
			srvs := instances(t, open(t), clock, 3, priorityYAML)
			for _, alg := range []string{"gcra", "window"} {
				t.Run(alg, func(t *testing.T) {
					classes := []floodgate.Priority{"", floodgate.Normal, floodgate.Critical}
					bound := map[floodgate.Priority]int{"": 80, floodgate.Normal: 95, floodgate.Critical: 100}
					taken := 0
					firstRefusal := map[floodgate.Priority]int{}
					admitted := map[floodgate.Priority]int{}
					for i := 0; len(firstRefusal) < len(classes) && i < 1000; i++ {
						p := classes[i%3]
						ds := []server.Descriptor{{Entries: []config.Entry{{Key: "upstream", Value: alg}}, Priority: p}}
						res, err := srvs[i%3].Decide(t.Context(), "api", ds, 1)
						if err != nil {
							t.Fatal(err)
						}
						if st := res.Statuses[0]; st.Err != nil {
							t.Fatalf("store failed: %v", st.Err)
						}
						if ok := res.Code == server.OK; ok != (taken < bound[p]) {
							t.Fatalf("class %q with %d of 100 taken: admitted %v, want %v", p, taken, ok, !ok)
						}
						if res.Code == server.OK {
							taken++
							admitted[p]++
						} else if _, seen := firstRefusal[p]; !seen {
							firstRefusal[p] = taken
						}
					}
					t.Logf("admitted: sheddable %d, normal %d, critical %d; first refusals at %v", admitted[""], admitted[floodgate.Normal], admitted[floodgate.Critical], firstRefusal)
					if taken != 100 || len(firstRefusal) != len(classes) {
						t.Errorf("%d of 100 taken, first refusals %v; want the whole budget and every class refused", taken, firstRefusal)
					}
				})
			}
		})
	}
}

// TestReservePriorityDefault: a reservation holds the whole limit of a
// descriptor whose config gives it a default class; the class is for
// decisions, not holds.
func TestReservePriorityDefault(t *testing.T) {
	clock := floodgatetest.NewFakeClock(time.Date(2026, 12, 2, 0, 0, 20, 0, time.UTC))
	srv := instances(t, sharedStores(t)["memory"](t), clock, 1, priorityYAML)[0]
	ds := []server.Descriptor{{Entries: []config.Entry{{Key: "upstream", Value: "gcra"}}}}
	r, res, err := srv.Reserve(t.Context(), "api", ds, 100, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Code != server.OK || r == nil {
		t.Fatalf("reserving the whole limit of a sheddable-default rule: %v, want OK", res.Code)
	}
}

// reservesYAML is a shared upstream with reserves of its own (normal
// keeps 10 units, sheddable 40%) whose requests carry their class in a
// "class" entry, up to critical.
const reservesYAML = `
domain: api
priority_key: class
descriptors:
  - key: upstream
    value: gcra
    priority: sheddable
    priority_max: critical
    priority_reserves: {normal: 10, sheddable: 40%}
    rate_limit: {unit: minute, requests_per_unit: 100, algorithm: gcra}
  - key: upstream
    value: window
    priority: sheddable
    priority_max: critical
    priority_reserves: {normal: 10, sheddable: 40%}
    rate_limit: {unit: minute, requests_per_unit: 100, algorithm: fixed_window}
`

// TestServiceReservesOverload is TestServicePriorityOverload under the
// rule's own reserves, with the class carried in a descriptor entry (the
// domain's priority_key), as Envoy sends it: three instances over one
// store (memory, and a real Redis), a frozen clock, the classes in turn,
// the class entry before or after the upstream entry. The entry comes off
// before matching, so every class is counted on the rule's one counter;
// each request is admitted exactly when the units taken before it are
// below its class's bound: 60 of 100 for sheddable, 90 for normal, 100
// for critical.
func TestServiceReservesOverload(t *testing.T) {
	for name, open := range sharedStores(t) {
		t.Run(name, func(t *testing.T) {
			clock := floodgatetest.NewFakeClock(time.Date(2026, 12, 2, 0, 0, 20, 0, time.UTC))
			srvs := instances(t, open(t), clock, 3, reservesYAML)
			for _, alg := range []string{"gcra", "window"} {
				t.Run(alg, func(t *testing.T) {
					classes := []floodgate.Priority{floodgate.Sheddable, floodgate.Normal, floodgate.Critical}
					bound := map[floodgate.Priority]int{floodgate.Sheddable: 60, floodgate.Normal: 90, floodgate.Critical: 100}
					taken := 0
					firstRefusal := map[floodgate.Priority]int{}
					admitted := map[floodgate.Priority]int{}
					for i := 0; len(firstRefusal) < len(classes) && i < 1000; i++ {
						p := classes[i%3]
						up, cl := config.Entry{Key: "upstream", Value: alg}, config.Entry{Key: "class", Value: string(p)}
						entries := []config.Entry{up, cl}
						if i%2 == 1 {
							entries = []config.Entry{cl, up}
						}
						res, err := srvs[i%3].Decide(t.Context(), "api", []server.Descriptor{{Entries: entries}}, 1)
						if err != nil {
							t.Fatal(err)
						}
						st := res.Statuses[0]
						if st.Err != nil || st.Rule == nil {
							t.Fatalf("status %+v: want the upstream rule, decided by the store", st)
						}
						if ok := res.Code == server.OK; ok != (taken < bound[p]) {
							t.Fatalf("class %s with %d of 100 taken: admitted %v, want %v", p, taken, ok, !ok)
						}
						if res.Code == server.OK {
							taken++
							admitted[p]++
						} else if _, seen := firstRefusal[p]; !seen {
							firstRefusal[p] = taken
						}
					}
					t.Logf("admitted: sheddable %d, normal %d, critical %d; first refusals at %v", admitted[floodgate.Sheddable], admitted[floodgate.Normal], admitted[floodgate.Critical], firstRefusal)
					want := map[floodgate.Priority]int{floodgate.Sheddable: 20, floodgate.Normal: 35, floodgate.Critical: 45}
					for p, w := range want {
						if admitted[p] != w {
							t.Errorf("%s admitted %d, want %d", p, admitted[p], w)
						}
					}
					if taken != 100 || firstRefusal[floodgate.Sheddable] != 60 || firstRefusal[floodgate.Normal] != 90 || firstRefusal[floodgate.Critical] != 100 {
						t.Errorf("%d of 100 taken, first refusals %v; want 100, and 60, 90, 100", taken, firstRefusal)
					}
				})
			}
		})
	}
}

// ceilingYAML has a rule for each way a carried class is held.
const ceilingYAML = `
domain: api
priority_key: class
descriptors:
  - key: held        # default normal, no ceiling: a request may lower its class only
    priority: normal
    rate_limit: {unit: minute, requests_per_unit: 100, algorithm: gcra}
  - key: open        # no default: no class is the whole limit, a carried class only lowers it
    rate_limit: {unit: minute, requests_per_unit: 100, algorithm: gcra}
  - key: capped      # up to normal, whatever the request claims
    priority_max: normal
    rate_limit: {unit: minute, requests_per_unit: 100, algorithm: gcra}
  - key: raised      # default sheddable, may claim up to critical
    priority: sheddable
    priority_max: critical
    priority_reserves: {normal: 5, sheddable: 30%}
    rate_limit: {unit: minute, requests_per_unit: 100, algorithm: gcra}
  - key: bucket      # keeps no reserve: a carried class is ignored
    rate_limit: {unit: minute, requests_per_unit: 100, algorithm: token_bucket}
  - key: class       # a descriptor of the class entry alone keeps it
    rate_limit: {unit: minute, requests_per_unit: 7, algorithm: gcra}
`

// TestPriorityKeyCeiling: which class a carried class becomes. Each case
// is one request on a fresh key of a GCRA of 100; the class it was
// decided in shows in the decision's Limit (the capacity less the
// class's reserve).
func TestPriorityKeyCeiling(t *testing.T) {
	clock := floodgatetest.NewFakeClock(time.Date(2026, 12, 2, 0, 0, 20, 0, time.UTC))
	srv := instances(t, sharedStores(t)["memory"](t), clock, 1, ceilingYAML)[0]
	for i, tc := range []struct {
		rule, class string // class "": no class entry
		explicit    floodgate.Priority
		want        int64
	}{
		{"held", "", "", 95},
		{"held", "critical", "", 95},
		{"held", "sheddable", "", 80},
		{"held", "critical", floodgate.Critical, 100}, // the HTTP API's explicit class wins, as before
		{"open", "", "", 100},
		{"open", "critical", "", 100},
		{"open", "normal", "", 95},
		{"open", "vip", "", 80}, // unknown: the lowest class
		{"capped", "", "", 100},
		{"capped", "critical", "", 95},
		{"capped", "sheddable", "", 80},
		{"raised", "", "", 70},
		{"raised", "normal", "", 95},
		{"raised", "critical", "", 100},
		{"bucket", "sheddable", "", 100},
	} {
		entries := []config.Entry{{Key: tc.rule, Value: fmt.Sprint(i)}}
		if tc.class != "" {
			entries = append(entries, config.Entry{Key: "class", Value: tc.class})
		}
		res, err := srv.Decide(t.Context(), "api", []server.Descriptor{{Entries: entries, Priority: tc.explicit}}, 1)
		if err != nil {
			t.Fatalf("%s carrying %q: %v", tc.rule, tc.class, err)
		}
		st := res.Statuses[0]
		if st.Rule == nil || st.Rule.Path[0].Key != tc.rule || res.Code != server.OK {
			t.Fatalf("%s carrying %q: status %+v", tc.rule, tc.class, st)
		}
		if st.Decision.Limit != tc.want {
			t.Errorf("%s carrying %q (explicit %q): decided under %d, want %d", tc.rule, tc.class, tc.explicit, st.Decision.Limit, tc.want)
		}
	}
	res, err := srv.Decide(t.Context(), "api", []server.Descriptor{{Entries: []config.Entry{{Key: "class", Value: "critical"}}}}, 1)
	if err != nil || res.Statuses[0].Rule == nil || res.Statuses[0].Decision.Limit != 7 {
		t.Errorf("a descriptor of the class entry alone: %+v, %v; want its own rule", res.Statuses, err)
	}
}

// FuzzPriorityEntries sends one descriptor of any three entries to a
// domain with a priority_key: the answer is never an error for non-empty
// keys, and a request matching a rule is decided in a class between the
// rule's lowest (sheddable under its reserves) and its ceiling, whatever
// its class entries say. The decision's Limit is the class's capacity.
func FuzzPriorityEntries(f *testing.F) {
	f.Add("held", "1", "class", "critical", "", "")
	f.Add("class", "critical", "open", "x", "class", "vip")
	f.Add("capped", "", "class", "", "class", "normal")
	f.Add("class", "sheddable", "class", "critical", "raised", "y")
	clock := floodgatetest.NewFakeClock(time.Date(2026, 12, 2, 0, 0, 20, 0, time.UTC))
	m := memstore.New(&memstore.Options{SweepInterval: -1})
	f.Cleanup(func() { m.Close() })
	srv, err := server.New(server.Options{Store: m, Config: parseYAML(f, ceilingYAML), Limiter: floodgate.Options{Clock: clock, Timeout: time.Minute}})
	if err != nil {
		f.Fatal(err)
	}
	// The class bounds of each rule: lowest, highest.
	bounds := map[string][2]int64{"held": {80, 95}, "open": {80, 100}, "capped": {80, 95}, "raised": {70, 100}, "bucket": {100, 100}, "class": {6, 7}}
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2, k3, v3 string) {
		var entries []config.Entry
		for _, e := range [][2]string{{k1, v1}, {k2, v2}, {k3, v3}} {
			if e[0] != "" {
				entries = append(entries, config.Entry{Key: e[0], Value: e[1]})
			}
		}
		if len(entries) == 0 {
			return
		}
		res, err := srv.Decide(t.Context(), "api", []server.Descriptor{{Entries: entries}}, 0)
		if err != nil {
			t.Fatalf("%v: %v", entries, err)
		}
		st := res.Statuses[0]
		if st.Rule == nil || !st.Limited {
			return
		}
		b := bounds[st.Rule.Path[0].Key]
		if l := st.Decision.Limit; len(st.Rule.Path) == 1 && (l < b[0] || l > b[1]) {
			t.Fatalf("%v: rule %s decided under %d, outside its classes' %v", entries, st.Rule.Path[0].Key, l, b)
		}
	})
}
