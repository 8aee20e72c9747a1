package server_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/floodgatetest"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/servertest"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/floodgate-rl/floodgate/store/memstore"
	"github.com/floodgate-rl/floodgate/store/redisstore"
)

const localYAML = `
domain: api
descriptors:
  - key: local
    rate_limit: {unit: minute, requests_per_unit: 10, failure_mode: local}
  - key: closed
    rate_limit: {unit: minute, requests_per_unit: 10, failure_mode: fail_closed}
`

func parseConfig(t *testing.T, yaml string) *config.Config {
	t.Helper()
	d, err := config.Parse("api.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	c, err := config.New(d)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestFailureModeLocal kills Redis under a server of a fleet of 3: the
// rule with failure_mode local is decided in memory with 10/3 = 3 per
// minute, without waiting on Redis once the breaker is open, while the
// fail_closed rule in the same request still waits and denies; metrics say
// local_allowed and local_denied; after Redis restarts, a probe sends the
// rule back to Redis.
func TestFailureModeLocal(t *testing.T) {
	const timeout, probe = time.Second, time.Minute // generous, for a loaded machine
	redis := redistest.Standalone(t)
	shared, err := redisstore.Open(t.Context(), "redis://"+redis.Addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer shared.Close()
	clock := floodgatetest.NewFakeClock(start)
	local := memstore.New(&memstore.Options{Clock: clock, SweepInterval: -1})
	defer local.Close()
	srv, err := server.New(server.Options{
		Store: shared, Config: parseConfig(t, localYAML), Limiter: floodgate.Options{
			Clock: clock, Timeout: timeout, FailurePolicy: floodgate.FailClosed,
			Instances: 3, Local: local, ProbeInterval: probe,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	desc := func(key string) server.Descriptor {
		return server.Descriptor{Entries: []config.Entry{{Key: key, Value: "x"}}}
	}
	decide := func(keys ...string) ([]server.Status, time.Duration) {
		t.Helper()
		ds := make([]server.Descriptor, len(keys))
		for i, k := range keys {
			ds[i] = desc(k)
		}
		begin := time.Now()
		res, err := srv.Decide(t.Context(), "api", ds, 1)
		if err != nil {
			t.Fatal(err)
		}
		return res.Statuses, time.Since(begin)
	}
	outcome := func(o string) float64 { return decisions(t, srv, "api|local", o) }

	if st, _ := decide("local"); st[0].Decision.Fallback || st[0].Decision.Remaining != 9 {
		t.Fatalf("with Redis up: %+v", st[0])
	}
	if err := redis.Kill(); err != nil {
		t.Fatal(err)
	}
	// The first call asks Redis and fails over; the next ones do not ask.
	var allowed int
	for i := range 5 {
		st, took := decide("local")
		s := st[0]
		if s.Err != nil || !s.Decision.Fallback || s.FailurePolicy != floodgate.FailLocal || s.Decision.Limit != 3 || s.Limit.Limit != 3 {
			t.Fatalf("call %d with Redis down: %+v, want a local decision with limit 3", i, s)
		}
		if i > 0 && took >= timeout {
			t.Errorf("call %d with the breaker open took %v, past the %v deadline", i, took, timeout)
		}
		if s.Code == server.OK {
			allowed++
		}
	}
	if allowed != 3 {
		t.Errorf("%d of 5 admitted locally, want the share 3", allowed)
	}
	if got, want := outcome("local_allowed"), 3.0; got != want {
		t.Errorf("local_allowed = %v, want %v", got, want)
	}
	if got, want := outcome("local_denied"), 2.0; got != want {
		t.Errorf("local_denied = %v, want %v", got, want)
	}
	// One request with both rules: the fail_closed one still asks Redis
	// and is denied with its error; the local one is decided locally.
	st, _ := decide("closed", "local")
	if st[0].Err == nil || st[0].Code != server.OverLimit || st[0].FailurePolicy != floodgate.FailClosed {
		t.Errorf("fail_closed rule with Redis down: %+v", st[0])
	}
	if st[1].Err != nil || !st[1].Decision.Fallback {
		t.Errorf("local rule beside it: %+v", st[1])
	}

	if err := redis.Restart(t); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute) // a new window, and past the probe interval
	// Back on Redis: each decision Redis made takes one of its 10 in this
	// window. A connection the client has not yet remade after the restart
	// can fail one more call, which the breaker then answers locally for a
	// probe interval: count Redis's decisions rather than expect them in a
	// row.
	onRedis, fellBack := int64(0), true
	for n := 0; onRedis < 2; n++ {
		if n == 40 {
			t.Fatalf("%d decisions on Redis in 40 calls with Redis back", onRedis)
		}
		if fellBack {
			clock.Advance(probe) // let the breaker probe Redis
		}
		st, _ := decide("local")
		d := st[0].Decision
		fellBack = d.Fallback
		if !fellBack {
			onRedis++
			if d.Limit != 10 || d.Remaining < 10-onRedis || d.Remaining > 10-1 {
				t.Errorf("back on Redis: %+v, want Redis's limit 10 and at most %d taken", d, onRedis)
			}
		}
	}
}

func TestFailureModeLocalNeedsInstances(t *testing.T) {
	local := memstore.New(&memstore.Options{SweepInterval: -1})
	defer local.Close()
	for _, tt := range []struct {
		name string
		opts server.Options
		want string
	}{
		{"default local without instances", server.Options{Store: local, Limiter: floodgate.Options{FailurePolicy: floodgate.FailLocal}}, "Instances:"},
		{"instances without a local store", server.Options{Store: local, Limiter: floodgate.Options{Instances: 2}}, "Local:"},
		{"negative instances", server.Options{Store: local, Limiter: floodgate.Options{Instances: -1}}, "Instances: -1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := server.New(tt.opts); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New: %v, want an error naming %q", err, tt.want)
			}
		})
	}
	srv, err := server.New(server.Options{Store: local})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.CheckConfig(parseConfig(t, localYAML)); err == nil || !strings.Contains(err.Error(), "api.yaml:4: rule api|local: failure_mode local needs the number of instances") {
		t.Errorf("CheckConfig without Instances: %v", err)
	}
	// Set anyway, the rule answers a failure as fail_closed.
	srv, err = server.New(server.Options{Store: downStore{}, Config: parseConfig(t, localYAML)})
	if err != nil {
		t.Fatal(err)
	}
	res, err := srv.Decide(context.Background(), "api", []server.Descriptor{{Entries: []config.Entry{{Key: "local", Value: "x"}}}}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if st := res.Statuses[0]; st.Code != server.OverLimit || st.FailurePolicy != floodgate.FailClosed {
		t.Errorf("local rule without Instances, store down: %+v, want fail_closed", st)
	}
}

// decisions is floodgate_decisions_total of rule and outcome.
func decisions(t *testing.T, srv *server.Server, rule, outcome string) float64 {
	t.Helper()
	mfs, err := srv.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "floodgate_decisions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["rule"] == rule && labels["outcome"] == outcome {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// unreachable is a store whose ping fails, as a Redis store's does while
// Redis is down.
type unreachable struct{ *memstore.Store }

func (unreachable) Ping(context.Context) error { return errors.New("dial tcp: connection refused") }

// TestReadyWhileStoreDown: with the default failure mode local, an
// unreachable store leaves the server ready (every instance shares the
// store, and local is there to go on deciding), and /readyz says why;
// with fail_open it is not ready.
func TestReadyWhileStoreDown(t *testing.T) {
	for _, mode := range []floodgate.FailurePolicy{floodgate.FailLocal, floodgate.FailOpen} {
		t.Run(string(mode), func(t *testing.T) {
			shared := memstore.New(nil)
			defer shared.Close()
			local := memstore.New(nil)
			defer local.Close()
			srv, err := server.New(server.Options{
				Store: unreachable{shared}, Config: parseConfig(t, localYAML),
				Limiter: floodgate.Options{FailurePolicy: mode, Instances: 2, Local: local},
			})
			if err != nil {
				t.Fatal(err)
			}
			rec := httptest.NewRecorder()
			servertest.Handler(t, srv, nil).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
			err = srv.Ready(t.Context())
			switch mode {
			case floodgate.FailLocal:
				if err != nil || rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "failure mode local decides in memory, store unreachable: dial tcp") {
					t.Errorf("Ready %v; /readyz %d %q; want ready, saying it decides locally", err, rec.Code, rec.Body.String())
				}
			default:
				if err == nil || rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "not ready: store unreachable") {
					t.Errorf("Ready %v; /readyz %d %q; want not ready", err, rec.Code, rec.Body.String())
				}
			}
		})
	}
}
