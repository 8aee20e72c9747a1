package server_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/floodgatetest"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/floodgate-rl/floodgate/store/memstore"
	"github.com/floodgate-rl/floodgate/store/redisstore"
)

// severalYAML puts two limits on one descriptor, and a plain monthly
// quota with plans to move a tenant between.
const severalYAML = `
domain: api
descriptors:
  - key: tenant
    rate_limits:
      - {unit: second, requests_per_unit: 10}
      - {unit: day, requests_per_unit: 10000}
  - key: account
    rate_limit: {unit: month, requests_per_unit: 1000}
plans:
  pro:
    - {unit: month, requests_per_unit: 10000}
  daily:
    - {unit: day, requests_per_unit: 50}
`

func parseYAML(t testing.TB, yaml string) *config.Config {
	t.Helper()
	d, err := config.Parse("api.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.New(d)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// sharedStores are the stores three instances share: one memory store,
// or one real redis-server.
func sharedStores(t *testing.T) map[string]func(t *testing.T) floodgate.Store {
	redis := sync.OnceValue(func() *redistest.Server { return redistest.Standalone(t) })
	return map[string]func(t *testing.T) floodgate.Store{
		"memory": func(t *testing.T) floodgate.Store {
			s := memstore.New(&memstore.Options{SweepInterval: -1})
			t.Cleanup(func() { s.Close() })
			return s
		},
		"redis": func(t *testing.T) floodgate.Store {
			s, err := redisstore.Open(t.Context(), "redis://"+redis().Addr, &redisstore.Options{Prefix: fmt.Sprintf("sev%d", time.Now().UnixNano())})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
	}
}

// instances are n servers over one store and one clock, as n replicas of
// floodgate serve.
func instances(t *testing.T, store floodgate.Store, clock *floodgatetest.FakeClock, n int, yaml string) []*server.Server {
	t.Helper()
	var out []*server.Server
	for range n {
		srv, err := server.New(server.Options{Store: store, Config: parseYAML(t, yaml),
			// A deadline far above the default: a fail_open answer of a
			// slow call on a loaded host would admit.
			Limiter: floodgate.Options{Clock: clock, Timeout: 5 * time.Second, FailurePolicy: floodgate.FailClosed}})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, srv)
	}
	return out
}

func tenant(v string, hits int64) []server.Descriptor {
	return []server.Descriptor{{Entries: []config.Entry{{Key: "tenant", Value: v}}, Hits: &hits}}
}

// race has ten clients, spread over the instances, each ask for one unit
// at once, and returns how many were admitted.
func race(t *testing.T, srvs []*server.Server, tenantID string) int {
	t.Helper()
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		allowed int
		start   = make(chan struct{})
	)
	for c := range 10 {
		wg.Go(func() {
			<-start
			res, err := srvs[c%len(srvs)].Decide(t.Context(), "api", tenant(tenantID, 1), 1)
			if err != nil {
				t.Error(err)
				return
			}
			if st := res.Statuses[0]; st.Err != nil {
				t.Errorf("store failed: %v", st.Err)
			}
			if res.Code == server.OK {
				mu.Lock()
				allowed++
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()
	return allowed
}

// TestSeveralLimitsSeedRace: a descriptor with [10/s, 10000/day] admits
// exactly what both allow, when ten clients on three instances race for
// the last five units of either limit; a request one limit denies takes
// nothing from the other; and each limit is reported, the most
// restrictive in the Status's own fields.
func TestSeveralLimitsSeedRace(t *testing.T) {
	for name, open := range sharedStores(t) {
		t.Run(name, func(t *testing.T) {
			clock := floodgatetest.NewFakeClock(time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC))
			srvs := instances(t, open(t), clock, 3, severalYAML)
			ctx := t.Context()
			decide := func(i int, id string, hits int64) server.Status {
				t.Helper()
				res, err := srvs[i%3].Decide(ctx, "api", tenant(id, hits), 1)
				if err != nil {
					t.Fatal(err)
				}
				return res.Statuses[0]
			}

			// The day binds: 9,995 of 10,000 used, ten units a second
			// (the per-second limit's whole budget, so each second's
			// window is full and the next is fresh).
			for s := range 999 {
				if st := decide(s, "day", 10); st.Code != server.OK {
					t.Fatalf("second %d: %+v", s, st)
				}
				clock.Advance(time.Second)
			}
			if st := decide(0, "day", 5); st.Code != server.OK {
				t.Fatalf("the 9,995th unit: %+v", st)
			}
			clock.Advance(time.Second)
			if got := race(t, srvs, "day"); got != 5 {
				t.Errorf("day binding: %d of 10 admitted, want 5", got)
			}
			st := decide(1, "day", 0)
			if len(st.Limits) != 2 || st.Limits[1].Decision.Remaining != 0 || st.Limits[0].Decision.Remaining != 5 {
				t.Fatalf("after the race, limits %+v", st.Limits)
			}
			if st.Decision.Remaining != 0 || st.Limit.Period != 24*time.Hour {
				t.Errorf("the most restrictive is not the day: %v remaining %d", st.Limit, st.Decision.Remaining)
			}

			// The second binds: 5 of this second's 10 used, the day far
			// from full; the five denied take nothing from the day.
			if st := decide(2, "sec", 5); st.Code != server.OK {
				t.Fatalf("%+v", st)
			}
			if got := race(t, srvs, "sec"); got != 5 {
				t.Errorf("second binding: %d of 10 admitted, want 5", got)
			}
			st = decide(0, "sec", 1)
			if st.Code != server.OverLimit || st.Limit.Period != time.Second || st.Decision.RetryAfter <= 0 {
				t.Errorf("an eleventh unit this second: %+v", st)
			}
			if got := st.Limits[1].Decision; got.Allowed || got.RetryAfter != 0 || got.Remaining != 10000-10 {
				t.Errorf("the day under the denial: %+v; want room, untouched: 9,990 remaining", got)
			}
		})
	}
}

// TestOverrideKeepsUsage: a 1,000/month account that used 900 and moves
// to a plan of 10,000/month has 9,100 left, on every instance, on memory
// and on Redis: stores keep a key's state by algorithm and period, and an
// override keeps the rule's key. Moving back to the rule keeps it too.
func TestOverrideKeepsUsage(t *testing.T) {
	for name, open := range sharedStores(t) {
		t.Run(name, func(t *testing.T) {
			clock := floodgatetest.NewFakeClock(time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC))
			srvs := instances(t, open(t), clock, 3, severalYAML)
			ctx := t.Context()
			acct := func(i int, hits int64) server.Status {
				t.Helper()
				res, err := srvs[i].Decide(ctx, "api", []server.Descriptor{{Entries: []config.Entry{{Key: "account", Value: "acme"}}, Hits: &hits}}, 1)
				if err != nil {
					t.Fatal(err)
				}
				return res.Statuses[0]
			}
			for i := range 9 {
				if st := acct(i%3, 100); st.Code != server.OK {
					t.Fatalf("use %d: %+v", i, st)
				}
			}
			if st := acct(0, 101); st.Code != server.OverLimit || st.Decision.Remaining != 100 {
				t.Fatalf("101 more of 1,000 with 900 used: %+v", st)
			}
			o := server.Override{Domain: "api", Entries: []config.Entry{{Key: "account", Value: "acme"}}, Plan: "pro"}
			for _, srv := range srvs {
				if err := srv.CheckOverride(o); err != nil {
					t.Fatal(err)
				}
				srv.SetOverrides([]server.Override{o})
			}
			for i, srv := range srvs {
				_ = srv
				st := acct(i, 0)
				if !st.Override || st.Plan != "pro" || st.Decision.Limit != 10000 || st.Decision.Remaining != 9100 {
					t.Errorf("instance %d on plan pro: override %v plan %q, %d of %d remaining; want 9,100 of 10,000", i, st.Override, st.Plan, st.Decision.Remaining, st.Decision.Limit)
				}
			}
			if st := acct(1, 9100); st.Code != server.OK {
				t.Errorf("the 9,100 left: %+v", st)
			}
			if st := acct(2, 1); st.Code != server.OverLimit {
				t.Errorf("one over 10,000: %+v", st)
			}
			for _, srv := range srvs {
				srv.SetOverrides(nil)
			}
			if st := acct(0, 0); st.Override || st.Decision.Limit != 1000 || st.Decision.Remaining != 0 {
				t.Errorf("back on the rule: %+v", st)
			}
		})
	}
}

// TestCheckOverride: what an override may not be, each naming its field.
func TestCheckOverride(t *testing.T) {
	ms := memstore.New(nil)
	t.Cleanup(func() { ms.Close() })
	srv := instances(t, ms, floodgatetest.NewFakeClock(time.Now()), 1, strings.Replace(severalYAML, "plans:", `  - key: shared
    value: "a*"
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 5}
plans:`, 1))[0]
	acme := []config.Entry{{Key: "account", Value: "acme"}}
	month := floodgate.Limit{Limit: 5, Period: 30 * 24 * time.Hour}
	for _, tc := range []struct {
		name  string
		o     server.Override
		field string
	}{
		{"plan", server.Override{Domain: "api", Entries: acme, Plan: "pro"}, ""},
		{"limits", server.Override{Domain: "api", Entries: acme, Limits: []floodgate.Limit{month}}, ""},
		{"no domain", server.Override{Domain: "", Entries: acme, Plan: "pro"}, "domain"},
		{"unknown domain", server.Override{Domain: "nope", Entries: acme, Plan: "pro"}, "domain"},
		{"no rule", server.Override{Domain: "api", Entries: []config.Entry{{Key: "user", Value: "u"}}, Plan: "pro"}, "entries"},
		{"empty key", server.Override{Domain: "api", Entries: []config.Entry{{Key: "", Value: "u"}}, Plan: "pro"}, "entries[0].key"},
		{"shared counter", server.Override{Domain: "api", Entries: []config.Entry{{Key: "shared", Value: "ab"}}, Plan: "pro"}, "entries"},
		{"unknown plan", server.Override{Domain: "api", Entries: acme, Plan: "gold"}, "plan"},
		{"both", server.Override{Domain: "api", Entries: acme, Plan: "pro", Limits: []floodgate.Limit{month}}, "plan"},
		{"neither", server.Override{Domain: "api", Entries: acme}, "plan"},
		{"bad limit", server.Override{Domain: "api", Entries: acme, Limits: []floodgate.Limit{{Limit: -1, Period: time.Second}}}, "limits[0]"},
		{"same counter", server.Override{Domain: "api", Entries: acme, Limits: []floodgate.Limit{month, month}}, "limits[1]"},
		{"durable without ledger", server.Override{Domain: "api", Entries: acme, Limits: []floodgate.Limit{{Limit: 5, Period: time.Hour, Durable: true}}}, "limits[0].durable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := srv.CheckOverride(tc.o)
			if tc.field == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			fe, ok := err.(*floodgate.FieldError)
			if !ok || fe.Field != tc.field {
				t.Fatalf("error %v, want one of field %q", err, tc.field)
			}
		})
	}
}

// TestOverrideJSONCalendar checks that an override's calendar limit
// survives the ledger's encoding: unit, zone and anchor, not a limit of
// period 0 that no store would take.
func TestOverrideJSONCalendar(t *testing.T) {
	t.Parallel()
	cal, err := floodgate.ParseCalendar("month", "America/New_York", "15")
	if err != nil {
		t.Fatal(err)
	}
	in := server.Override{Domain: "api", Entries: []config.Entry{{Key: "tenant", Value: "acme"}},
		Limits: []floodgate.Limit{{Limit: 10, Period: time.Second}, {Limit: 1000, Calendar: cal, Durable: true}}}
	b, err := in.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var out server.Override
	if err := out.UnmarshalJSON(b); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	if len(out.Limits) != 2 || out.Limits[0] != in.Limits[0] || out.Limits[1] != in.Limits[1] {
		t.Fatalf("limits %+v from %s, want %+v", out.Limits, b, in.Limits)
	}
	if err := out.Limits[1].Validate(); err != nil {
		t.Fatalf("decoded calendar limit: %v", err)
	}
	if err := out.UnmarshalJSON([]byte(`{"domain":"api","entries":[],"limits":[{"limit":1,"period":"0s","unit":"fortnight"}]}`)); err == nil || !strings.Contains(err.Error(), "limits[0]") {
		t.Fatalf("a bad unit: %v, want an error naming limits[0]", err)
	}
}
