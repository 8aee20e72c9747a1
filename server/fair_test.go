package server_test

import (
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/floodgatetest"
	"github.com/floodgate-rl/floodgate/server"
)

const fairYAML = `domain: api
descriptors:
  - key: upstream
    value: llm
    descriptors:
      - key: tenant
        rate_limit: {unit: minute, requests_per_unit: 100, share_by: tenant}
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 3600000}
`

// TestFairShareBy: a rule with share_by on three instances of the service
// over memory and a real Redis, on one injected clock stepped a thousandth
// of the shared window (60 ms) at a time. Each request carries the
// tenant's descriptor of the shared upstream (100 per minute, share_by:
// tenant) and a user's descriptor of its own (3.6 million an hour, never
// binding). The windows are long (a minute, an hour) so that their Redis
// keys outlive the test's real time: Redis expires a key in its own clock,
// at least a second after its window's end on the injected one, and on a
// loaded machine the 920 refused steps of a window, or the 50 steps
// between two of the quiet tenant's requests, took longer than a second.
// The busy tenant asks every step, the quiet one every 50 steps: from the
// second window on, the quiet tenant gets exactly 20 and the busy one
// exactly 80 per window; no window admits more than 100; and a request the
// shared upstream refuses spends nothing of its user's limit (the
// descriptors are all or nothing).
func TestFairShareBy(t *testing.T) {
	for name, open := range sharedStores(t) {
		t.Run(name, func(t *testing.T) {
			clock := floodgatetest.NewFakeClock(time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC))
			srvs := instances(t, open(t), clock, 3, fairYAML)
			call := 0
			ask := func(tenant, user string) server.Result {
				t.Helper()
				ds := []server.Descriptor{
					{Entries: []config.Entry{{Key: "upstream", Value: "llm"}, {Key: "tenant", Value: tenant}}},
					{Entries: []config.Entry{{Key: "user", Value: user}}},
				}
				res, err := srvs[call%3].Decide(t.Context(), "api", ds, 1)
				call++
				if err != nil {
					t.Fatal(err)
				}
				for _, st := range res.Statuses {
					if st.Err != nil {
						t.Fatalf("store failed: %v", st.Err)
					}
				}
				return res
			}
			const windows = 3
			var busy, quiet [windows]int
			busyTotal := 0
			for ms := range windows * 1000 {
				w := ms / 1000
				if ms%50 == 0 && ask("quiet", "q").Code == server.OK {
					quiet[w]++
				}
				res := ask("busy", "b")
				if res.Code == server.OK {
					busy[w]++
					busyTotal++
				}
				if ms%1000 == 999 {
					// The user's limit counted only the admitted requests.
					if got, want := res.Statuses[1].Decision.Remaining, int64(3600000-busyTotal); got != want {
						t.Errorf("window %d: the busy user's limit has %d left, want %d (only admitted requests counted)", w, got, want)
					}
				}
				clock.Advance(time.Minute / 1000)
			}
			t.Logf("per window: quiet %v, busy %v", quiet, busy)
			for w := range windows {
				if quiet[w]+busy[w] > 100 {
					t.Errorf("window %d admitted %d, above 100", w, quiet[w]+busy[w])
				}
				if w > 0 && (quiet[w] != 20 || busy[w] != 80) {
					t.Errorf("window %d: quiet %d, busy %d; want 20 and 80", w, quiet[w], busy[w])
				}
			}
		})
	}
}
