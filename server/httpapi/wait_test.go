package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/floodgatetest"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/servertest"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/floodgate-rl/floodgate/server/httpapi"
	"github.com/floodgate-rl/floodgate/store/memstore"
	"github.com/floodgate-rl/floodgate/store/redisstore"
)

// waitYAML has one gcra rule of 1 per second (burst 1: one slot a
// second), and rules that cannot wait or hold nothing.
const waitYAML = `
domain: api
descriptors:
  - key: crawler
    rate_limit: {unit: second, requests_per_unit: 1, algorithm: gcra}
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 1, algorithm: gcra}
  - key: window
    rate_limit: {unit: second, requests_per_unit: 1, algorithm: sliding_window}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1, algorithm: gcra}
`

// waitStores open a store shared by the instances of a test: memory, and
// a real Redis.
func waitStores(t *testing.T) map[string]func(t *testing.T, clock floodgate.Clock) floodgate.Store {
	redis := sync.OnceValue(func() *redistest.Server { return redistest.Standalone(t) })
	return map[string]func(t *testing.T, clock floodgate.Clock) floodgate.Store{
		"memory": func(t *testing.T, clock floodgate.Clock) floodgate.Store {
			s := memstore.New(&memstore.Options{Clock: clock, SweepInterval: -1})
			t.Cleanup(func() { s.Close() })
			return s
		},
		"redis": func(t *testing.T, _ floodgate.Clock) floodgate.Store {
			s, err := redisstore.Open(t.Context(), "redis://"+redis().Addr, &redisstore.Options{Prefix: fmt.Sprintf("wait%d", time.Now().UnixNano())})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
	}
}

// holdTimer is the timer of an API's holds (httpapi.SetHoldTimer): each
// hold's delay arrives on asked as it starts; a send on fire ends one
// hold; stopped receives as each hold ends.
type holdTimer struct {
	asked   chan time.Duration
	fire    chan time.Time
	stopped chan struct{}
}

func newHoldTimer() *holdTimer {
	return &holdTimer{asked: make(chan time.Duration, 64), fire: make(chan time.Time), stopped: make(chan struct{}, 64)}
}

func (h *holdTimer) after(d time.Duration) (<-chan time.Time, func() bool) {
	h.asked <- d
	return h.fire, func() bool { h.stopped <- struct{}{}; return true }
}

// waitInstance is one instance of floodgate serve on loopback.
type waitInstance struct {
	url   string
	timer *holdTimer
}

// waitInstances starts n API servers over store on loopback, on clock,
// with opts.
func waitInstances(t *testing.T, store floodgate.Store, clock floodgate.Clock, n int, opts httpapi.Options) []waitInstance {
	t.Helper()
	var out []waitInstance
	for range n {
		srv := servertest.New(t, "api.yaml", waitYAML, server.Options{Store: store,
			Limiter: floodgate.Options{Clock: clock, Timeout: 5 * time.Second, FailurePolicy: floodgate.FailClosed}})
		o := opts
		o.IDKeys = [][]byte{httpapi.TestIDKey}
		api, err := httpapi.New(srv, &o)
		if err != nil {
			t.Fatal(err)
		}
		timer := newHoldTimer()
		httpapi.SetHoldTimer(api, timer.after)
		ts := httptest.NewServer(api.Handler(nil))
		t.Cleanup(ts.Close)
		out = append(out, waitInstance{url: ts.URL, timer: timer})
	}
	return out
}

// waitAnswer is the fields of an answer the tests look at.
type waitAnswer struct {
	status       int
	Allowed      bool   `json:"allowed"`
	RetryAfterMS int64  `json:"retry_after_ms"`
	ID           string `json:"id"`
	WaitMS       *int64 `json:"wait_ms"`
	WaitedMS     *int64 `json:"waited_ms"`
	Field        string `json:"field"`
	Detail       string `json:"detail"`
	Replayed     bool   `json:"replayed"`
	Settlements  []struct {
		Refunded int64 `json:"refunded"`
	} `json:"settlements"`
	retryAfter string
}

func post(ctx context.Context, t *testing.T, url, body string) waitAnswer {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	a := waitAnswer{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After")}
	if err := json.Unmarshal(b, &a); err != nil {
		t.Fatalf("POST %s: %v: %s", url, err, b)
	}
	return a
}

func crawler(maxWaitMS int64, extra string) string {
	return fmt.Sprintf(`{"domain": "api", "descriptors": [{"entries": [{"key": "crawler", "value": "c"}]}], "max_wait_ms": %d%s}`, maxWaitMS, extra)
}

// TestWaitDescriptorsFleet: max_wait_ms on the descriptors form of
// POST /v1/reservations, on three instances over one store (memory, and
// a real Redis), a frozen clock. With one slot a second and 5 s to wait,
// callers in turn (over the instances) get the slots 0, 1, ..., 5 s
// ahead in their order, the seventh none (denied, retry_after_ms); a
// cancel of the last slot gives back exactly one unit, its retry
// nothing, and the next caller takes exactly that slot.
func TestWaitDescriptorsFleet(t *testing.T) {
	for name, open := range waitStores(t) {
		t.Run(name, func(t *testing.T) {
			clock := floodgatetest.NewFakeClock(start)
			fleet := waitInstances(t, open(t, clock), clock, 3, httpapi.Options{})
			at := func(i int) string { return fleet[i%len(fleet)].url }
			var ids []string
			var waits []int64
			for i := range 6 {
				a := post(t.Context(), t, at(i)+"/v1/reservations", crawler(5000, ""))
				if a.status != 200 || !a.Allowed || a.WaitMS == nil || a.ID == "" {
					t.Fatalf("caller %d: %+v, want allowed with wait_ms and an id", i, a)
				}
				// A slot is never early and at most 2 µs late: rounded up
				// to milliseconds, k s or k s + 1 ms.
				if w := *a.WaitMS; w < int64(i)*1000 || w > int64(i)*1000+1 {
					t.Fatalf("caller %d: wait_ms %d, want %d s", i, w, i)
				}
				ids = append(ids, a.ID)
				waits = append(waits, *a.WaitMS)
			}
			t.Logf("wait_ms of callers 0-5: %v", waits)
			a := post(t.Context(), t, at(6)+"/v1/reservations", crawler(5000, ""))
			if a.status != 200 || a.Allowed || a.ID != "" || a.RetryAfterMS <= 0 {
				t.Fatalf("caller 6: %+v, want denied with retry_after_ms and no id", a)
			}
			last := ids[5]
			for try, want := range []bool{false, true} {
				c := post(t.Context(), t, at(try)+"/v1/reservations/"+last+"/cancel", `{}`)
				if c.status != 200 || c.Replayed != want || len(c.Settlements) != 1 || c.Settlements[0].Refunded != 1 {
					t.Fatalf("cancel %d: %+v, want refunded 1, replayed %v", try, c, want)
				}
			}
			a = post(t.Context(), t, at(7)+"/v1/reservations", crawler(5000, ""))
			if !a.Allowed || a.WaitMS == nil || *a.WaitMS < 5000 || *a.WaitMS > 5001 {
				t.Fatalf("after the cancel: %+v, want the slot given back, 5 s ahead", a)
			}
			t.Logf("after the cancel: wait_ms %d", *a.WaitMS)
			if a := post(t.Context(), t, at(8)+"/v1/reservations", crawler(5000, "")); a.Allowed {
				t.Fatalf("after the slot was taken again: %+v, want denied (the retried cancel gave nothing)", a)
			}
		})
	}
}

// TestWaitDescriptorsInvalid: each request a wait cannot take is a 400
// naming the field, and takes nothing.
func TestWaitDescriptorsInvalid(t *testing.T) {
	clock := floodgatetest.NewFakeClock(start)
	api := waitInstances(t, memstore.New(&memstore.Options{Clock: clock}), clock, 1, httpapi.Options{})[0]
	for _, tc := range []struct {
		name, path, body, field, detail string
	}{
		{"negative", "/v1/reservations", crawler(-1, ""), "max_wait_ms", "between 0 and 3600000"},
		{"above an hour", "/v1/allow", crawler(3600001, ""), "max_wait_ms", "between 0 and 3600000"},
		{"sliding window rule", "/v1/reservations", `{"domain": "api", "descriptors": [{"entries": [{"key": "window", "value": "w"}]}], "max_wait_ms": 1000}`, "max_wait_ms", "rule api|window: only gcra and token_bucket"},
		{"own fixed window", "/v1/reservations", `{"domain": "api", "descriptors": [{"entries": [{"key": "x", "value": "y"}], "limit": {"limit": 5, "period": "1s"}}], "max_wait_ms": 1000}`, "descriptors[0].limit.algorithm", "only gcra"},
		{"two limits", "/v1/allow", `{"domain": "api", "descriptors": [{"entries": [{"key": "crawler", "value": "c"}]}, {"entries": [{"key": "tenant", "value": "t"}]}], "max_wait_ms": 1000}`, "max_wait_ms", "descriptors[0] and descriptors[1] are limited"},
		{"hits above the burst", "/v1/reservations", `{"domain": "api", "descriptors": [{"entries": [{"key": "crawler", "value": "c"}]}], "hits": 2, "max_wait_ms": 1000}`, "hits", "above the capacity"},
		{"own hits above the burst", "/v1/reservations", `{"domain": "api", "descriptors": [{"entries": [{"key": "crawler", "value": "c"}], "hits": 2}], "max_wait_ms": 1000}`, "descriptors[0].hits", "above the capacity"},
		{"ttl shorter than the wait", "/v1/reservations", crawler(5000, `, "ttl_ms": 1000`), "ttl_ms", "shorter than max_wait"},
		{"inline ttl shorter than the wait", "/v1/reservations", `{"key": "k", "limit": {"algorithm": "gcra", "limit": 1, "period": "1s"}, "max_wait_ms": 5000, "ttl_ms": 1000}`, "ttl_ms", "shorter than max_wait"},
		{"hold without a wait", "/v1/reservations", `{"key": "k", "limit": {"algorithm": "gcra", "limit": 1, "period": "1s"}, "hold": true}`, "hold", "give max_wait_ms"},
		{"class on a wait", "/v1/allow", crawler(1000, `, "priority": "critical"`), "priority", "whole limit"},
		{"lease", "/v1/leases", `{"key": "k", "limit": {"algorithm": "concurrency", "limit": 1, "period": "1m"}, "max_wait_ms": 1000}`, "max_wait_ms", "a lease takes no wait"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := post(t.Context(), t, api.url+tc.path, tc.body)
			if a.status != 400 || a.Field != tc.field || !strings.Contains(a.Detail, tc.detail) {
				t.Errorf("%d field %q detail %q, want 400 naming %q with %q", a.status, a.Field, a.Detail, tc.field, tc.detail)
			}
		})
	}
	// Nothing was taken: the first wait is for now.
	if a := post(t.Context(), t, api.url+"/v1/reservations", crawler(1000, "")); !a.Allowed || a.WaitMS == nil || *a.WaitMS != 0 {
		t.Errorf("after the refusals: %+v, want the slot now", a)
	}
}

// TestWaitNothingHeld: a wait of descriptors that hold nothing (shadow
// mode, no rule) is answered at once, allowed, without an id or a hold.
func TestWaitNothingHeld(t *testing.T) {
	clock := floodgatetest.NewFakeClock(start)
	api := waitInstances(t, memstore.New(&memstore.Options{Clock: clock}), clock, 1, httpapi.Options{})[0]
	body := `{"domain": "api", "descriptors": [{"entries": [{"key": "shadow", "value": "s"}]}, {"entries": [{"key": "nothing", "value": "n"}]}], "max_wait_ms": 1000}`
	for _, path := range []string{"/v1/reservations", "/v1/allow"} {
		if a := post(t.Context(), t, api.url+path, body); a.status != 200 || !a.Allowed || a.ID != "" || a.WaitedMS != nil {
			t.Errorf("%s: %+v, want allowed at once, holding nothing", path, a)
		}
	}
}

// postLater posts in a goroutine; the answer comes on the channel.
func postLater(ctx context.Context, t *testing.T, url, body string) <-chan waitAnswer {
	out := make(chan waitAnswer, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			out <- waitAnswer{status: -1, Detail: err.Error()}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		a := waitAnswer{status: resp.StatusCode}
		if err := json.Unmarshal(b, &a); err != nil {
			a.Detail = string(b)
		}
		out <- a
	}()
	return out
}

// asked is the delay of the next hold an instance's timer saw start.
func (h *holdTimer) next(t *testing.T) time.Duration {
	t.Helper()
	select {
	case d := <-h.asked:
		return d
	case <-time.After(30 * time.Second): // a bound on a hung test, not a synchronisation
		t.Fatal("no hold started")
		return 0
	}
}

// TestHoldAllow: POST /v1/allow with max_wait_ms, over a real HTTP
// client on loopback: the service holds the response until the slot (the
// timer is asked for exactly the slot's delay, and until it fires the
// client has no answer), then answers allowed with waited_ms; the slot
// was committed, so the next caller waits behind it. A slot now is
// answered at once.
func TestHoldAllow(t *testing.T) {
	for _, form := range []string{"descriptors", "inline"} {
		t.Run(form, func(t *testing.T) {
			clock := floodgatetest.NewFakeClock(start)
			api := waitInstances(t, memstore.New(&memstore.Options{Clock: clock}), clock, 1, httpapi.Options{})[0]
			body := crawler(5000, "")
			if form == "inline" {
				body = `{"key": "crawler", "limit": {"algorithm": "gcra", "limit": 1, "period": "1s"}, "max_wait_ms": 5000}`
			}
			if a := post(t.Context(), t, api.url+"/v1/allow", body); a.status != 200 || !a.Allowed || a.WaitedMS == nil || *a.WaitedMS != 0 {
				t.Fatalf("first: %+v, want allowed now, waited_ms 0", a)
			}
			later := postLater(t.Context(), t, api.url+"/v1/allow", body)
			if d := api.timer.next(t); d < time.Second || d > time.Second+2*time.Microsecond {
				t.Fatalf("held for %v, want the slot 1 s ahead", d)
			}
			select {
			case a := <-later:
				t.Fatalf("answered before the slot: %+v", a)
			default:
			}
			clock.Advance(time.Second)
			api.timer.fire <- clock.Now()
			a := <-later
			if a.status != 200 || !a.Allowed || a.WaitedMS == nil || *a.WaitedMS < 1000 || *a.WaitedMS > 1001 || a.ID != "" {
				t.Fatalf("held: %+v, want allowed, waited_ms 1000, no id", a)
			}
			// The slot 1 s on was used: the next is 1 s after it.
			later = postLater(t.Context(), t, api.url+"/v1/allow", body)
			if d := api.timer.next(t); d < time.Second || d > time.Second+2*time.Microsecond {
				t.Fatalf("the next held for %v, want 1 s", d)
			}
			api.timer.fire <- clock.Now()
			if a := <-later; !a.Allowed {
				t.Fatalf("the next: %+v", a)
			}
		})
	}
}

// TestHoldClientGone: a client that goes away while its response is held
// gets its slot given back, exactly once: the next caller takes that
// slot, and the one after it the slot after.
func TestHoldClientGone(t *testing.T) {
	for _, path := range []string{"/v1/allow", "/v1/reservations"} {
		t.Run(path, func(t *testing.T) {
			clock := floodgatetest.NewFakeClock(start)
			api := waitInstances(t, memstore.New(&memstore.Options{Clock: clock}), clock, 1, httpapi.Options{})[0]
			body := crawler(5000, `, "hold": true`)
			if path == "/v1/allow" {
				body = crawler(5000, "")
			}
			if a := post(t.Context(), t, api.url+path, body); !a.Allowed {
				t.Fatalf("first: %+v", a)
			}
			ctx, cancel := context.WithCancel(t.Context())
			later := postLater(ctx, t, api.url+path, body)
			if d := api.timer.next(t); d < time.Second {
				t.Fatalf("held for %v, want 1 s", d)
			}
			cancel()
			if a := <-later; a.status != -1 {
				t.Fatalf("a gone client got %+v", a)
			}
			<-api.timer.stopped // the hold ended, its slot given back
			// The slot 1 s ahead is free again.
			a := post(t.Context(), t, api.url+"/v1/reservations", crawler(5000, ""))
			if !a.Allowed || a.WaitMS == nil || *a.WaitMS < 1000 || *a.WaitMS > 1001 {
				t.Fatalf("after the client went: %+v, want the slot 1 s ahead given back", a)
			}
			a = post(t.Context(), t, api.url+"/v1/reservations", crawler(5000, ""))
			if !a.Allowed || a.WaitMS == nil || *a.WaitMS < 2000 || *a.WaitMS > 2001 {
				t.Fatalf("the next: %+v, want 2 s ahead (one slot given back, once)", a)
			}
			if got := metric(t, api.url, `floodgate_http_holds_total{result="gone"}`); got != "1" {
				t.Errorf("holds gone = %s, want 1", got)
			}
		})
	}
}

// TestHoldReservation: "hold": true on POST /v1/reservations answers when
// the slot comes, with wait_ms 0, waited_ms and the id, which cancels as
// any reservation's.
func TestHoldReservation(t *testing.T) {
	clock := floodgatetest.NewFakeClock(start)
	api := waitInstances(t, memstore.New(&memstore.Options{Clock: clock}), clock, 1, httpapi.Options{})[0]
	post(t.Context(), t, api.url+"/v1/reservations", crawler(5000, ""))
	later := postLater(t.Context(), t, api.url+"/v1/reservations", crawler(5000, `, "hold": true`))
	api.timer.next(t)
	api.timer.fire <- clock.Now()
	a := <-later
	if a.status != 200 || !a.Allowed || a.WaitMS == nil || *a.WaitMS != 0 || a.WaitedMS == nil || *a.WaitedMS < 1000 || a.ID == "" {
		t.Fatalf("%+v, want allowed, wait_ms 0, waited_ms 1000 and an id", a)
	}
	if c := post(t.Context(), t, api.url+"/v1/reservations/"+a.ID+"/cancel", `{}`); c.status != 200 || c.Settlements[0].Refunded != 1 {
		t.Fatalf("cancel: %+v", c)
	}
}

// TestHoldFull: with MaxHeld 1, a second request to be held while one is
// is refused 503 with Retry-After, before it takes a slot; and MaxHold
// bounds the wait: no slot later than it is taken.
func TestHoldFull(t *testing.T) {
	clock := floodgatetest.NewFakeClock(start)
	api := waitInstances(t, memstore.New(&memstore.Options{Clock: clock}), clock, 1, httpapi.Options{MaxHeld: 1, MaxHold: 1500 * time.Millisecond})[0]
	post(t.Context(), t, api.url+"/v1/allow", crawler(5000, ""))
	later := postLater(t.Context(), t, api.url+"/v1/allow", crawler(5000, ""))
	api.timer.next(t)
	for _, path := range []string{"/v1/allow", "/v1/reservations"} {
		body := crawler(5000, "")
		if path == "/v1/reservations" {
			body = crawler(5000, `, "hold": true`)
		}
		a := post(t.Context(), t, api.url+path, body)
		if a.status != 503 || a.retryAfter != "1" || a.Field != "max_wait_ms" {
			t.Errorf("%s while one is held: %+v, want 503, Retry-After 1", path, a)
		}
	}
	// Without hold, a reservation is not held: it takes the slot 2 s
	// ahead (the refused took none).
	if a := post(t.Context(), t, api.url+"/v1/reservations", crawler(5000, "")); !a.Allowed || *a.WaitMS < 2000 || *a.WaitMS > 2001 {
		t.Errorf("a reservation not held: %+v, want the slot 2 s ahead", a)
	}
	api.timer.fire <- clock.Now()
	if a := <-later; !a.Allowed {
		t.Fatalf("held: %+v", a)
	}
	// The next slot is 3 s ahead, beyond MaxHold's 1.5 s: denied now.
	if a := post(t.Context(), t, api.url+"/v1/allow", crawler(5000, "")); a.status != 200 || a.Allowed || a.RetryAfterMS <= 0 {
		t.Errorf("beyond MaxHold: %+v, want denied with retry_after_ms", a)
	}
	if got := metric(t, api.url, `floodgate_http_holds_total{result="full"}`); got != "2" {
		t.Errorf("holds full = %s, want 2", got)
	}
}

// metric is the value of the sample named (with its labels) in GET
// /metrics, "" if absent.
func metric(t *testing.T, url, name string) string {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for line := range bytes.Lines(b) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(string(line)), name+" "); ok {
			return v
		}
	}
	return ""
}
