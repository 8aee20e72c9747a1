package server_test

import (
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/floodgatetest"
	"github.com/floodgate-rl/floodgate/server"
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
