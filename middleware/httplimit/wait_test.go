package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/limitcheck/limitchecktest"
	"github.com/floodgate-rl/floodgate/middleware/httplimit"
)

// get sends a GET with ctx to url over a real client, and returns the
// status, or -1 when the client gave up.
func get(ctx context.Context, url string, header ...string) int {
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestWait: with MaxWait, over a real HTTP server on loopback, a request
// that finds no unit free waits for its slot (exactly its delay) and is
// then passed on; a client that goes away while it waits gets its slot
// given back, exactly once (the next request waits for that same slot),
// and never reaches the handler; a request with no slot within MaxWait
// is refused 429 at once.
func TestWait(t *testing.T) {
	t.Parallel()
	limiter, _ := newLimiter(t, memStore(t), "")
	m, err := httplimit.New(httplimit.Config{
		Limiter: limiter,
		Limits:  []floodgate.Limit{{Algorithm: floodgate.GCRA, Limit: 1, Period: time.Second, Burst: 1}},
		Key:     func(*http.Request) string { return "crawler" },
		MaxWait: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	timer := limitchecktest.NewTimer()
	httplimit.SetWaitTimer(m, timer.After)
	var served atomic.Int64
	var waited atomic.Int64
	srv := httptest.NewServer(m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res, _ := httplimit.FromContext(r.Context())
		waited.Store(int64(res.Waited))
		served.Add(1)
	})))
	t.Cleanup(srv.Close)

	if got := get(t.Context(), srv.URL); got != 200 || served.Load() != 1 {
		t.Fatalf("first: %d, served %d; want 200 at once", got, served.Load())
	}
	done := make(chan int, 1)
	go func() { done <- get(t.Context(), srv.URL) }()
	if d := timer.Next(t); d < time.Second || d > time.Second+2*time.Microsecond {
		t.Fatalf("waits %v, want its slot 1 s ahead", d)
	}
	if served.Load() != 1 {
		t.Fatal("passed on before its slot")
	}
	timer.Fire <- start
	if got := <-done; got != 200 || served.Load() != 2 || time.Duration(waited.Load()) != time.Second {
		t.Fatalf("after its slot: %d, served %d, Waited %v", got, served.Load(), time.Duration(waited.Load()))
	}
	<-timer.Stopped // that wait's end

	// A client that goes away: its slot, 2 s ahead, is given back.
	ctx, cancel := context.WithCancel(t.Context())
	go func() { done <- get(ctx, srv.URL) }()
	if d := timer.Next(t); d < 2*time.Second {
		t.Fatalf("waits %v, want 2 s", d)
	}
	cancel()
	if got := <-done; got != -1 {
		t.Fatalf("a gone client got %d", got)
	}
	<-timer.Stopped // the wait ended, its slot given back
	go func() { done <- get(t.Context(), srv.URL) }()
	if d := timer.Next(t); d < 2*time.Second || d > 2*time.Second+2*time.Microsecond {
		t.Fatalf("after a slot was given back: waits %v, want that slot, 2 s ahead", d)
	}
	timer.Fire <- start
	if got := <-done; got != 200 || served.Load() != 3 {
		t.Fatalf("the slot given back: %d, served %d", got, served.Load())
	}
	// The next slot, 3 s ahead, is beyond MaxWait: refused at once.
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || served.Load() != 3 {
		t.Fatalf("beyond MaxWait: %d, Retry-After %q, served %d; want 429", resp.StatusCode, resp.Header.Get("Retry-After"), served.Load())
	}
}

// TestPriority: with Priority, near the limit lower classes are refused
// first: of 10 per minute, sheddable requests take 8 (2 kept), normal 9,
// critical all 10, counted on one budget.
func TestPriority(t *testing.T) {
	t.Parallel()
	for _, alg := range []floodgate.Algorithm{floodgate.GCRA, floodgate.FixedWindow} {
		t.Run(string(alg), func(t *testing.T) {
			t.Parallel()
			limiter, _ := newLimiter(t, memStore(t), "")
			h, next := newHandler(t, httplimit.Config{
				Limiter:  limiter,
				Limits:   []floodgate.Limit{{Algorithm: alg, Limit: 10, Period: time.Minute}},
				Key:      func(*http.Request) string { return "upstream" },
				Priority: func(r *http.Request) floodgate.Priority { return floodgate.Priority(r.Header.Get("X-Class")) },
			})
			for i, step := range []struct {
				class string
				want  int
			}{
				{"sheddable", 200}, {"sheddable", 200}, {"sheddable", 200}, {"sheddable", 200},
				{"sheddable", 200}, {"sheddable", 200}, {"sheddable", 200}, {"sheddable", 200},
				{"sheddable", 429},               // 2 of 10 left: kept
				{"normal", 200}, {"normal", 429}, // 1 left: kept for critical
				{"critical", 200}, {"critical", 429},
			} {
				w := do(h, "192.0.2.1:1", "X-Class", step.class)
				if w.Code != step.want {
					t.Fatalf("step %d (%s): %d, want %d", i, step.class, w.Code, step.want)
				}
			}
			if next.calls != 10 {
				t.Errorf("%d passed, want the whole 10", next.calls)
			}
			if w := do(h, "192.0.2.1:1", "X-Class", "urgent"); w.Code != 400 || !strings.Contains(problem(t, w).Detail, "priority class is not valid") {
				t.Errorf("unknown class: %d %s, want 400", w.Code, w.Body)
			}
		})
	}
}

func TestWaitNewErrors(t *testing.T) {
	t.Parallel()
	limiter, _ := newLimiter(t, memStore(t), "")
	gcra := floodgate.Limit{Algorithm: floodgate.GCRA, Limit: 1, Period: time.Second}
	window := floodgate.Limit{Limit: 1, Period: time.Second}
	class := func(*http.Request) floodgate.Priority { return floodgate.Critical }
	for _, tc := range []struct {
		name string
		c    httplimit.Config
		want string
	}{
		{"negative wait", httplimit.Config{Limiter: limiter, Limits: []floodgate.Limit{gcra}, MaxWait: -1}, "MaxWait -1ns is not between 0 and 1h0m0s"},
		{"wait on a window", httplimit.Config{Limiter: limiter, Limits: []floodgate.Limit{window}, MaxWait: time.Second}, "one gcra or token_bucket limit"},
		{"wait on two limits", httplimit.Config{Limiter: limiter, Limits: []floodgate.Limit{gcra, {Algorithm: floodgate.GCRA, Limit: 10, Period: time.Minute}}, MaxWait: time.Second}, "not of 2 limits"},
		{"wait with classes", httplimit.Config{Limiter: limiter, Limits: []floodgate.Limit{gcra}, MaxWait: time.Second, Priority: class}, "takes no class"},
		{"classes on a token bucket", httplimit.Config{Limiter: limiter, Limits: []floodgate.Limit{{Algorithm: floodgate.TokenBucket, Limit: 1, Period: time.Second}}, Priority: class}, "limits[0]: Priority:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := httplimit.New(tc.c)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
