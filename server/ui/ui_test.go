package ui

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/servertest"
	"github.com/floodgate-rl/floodgate/internal/topk"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/floodgate-rl/floodgate/server/httpapi"
	"github.com/floodgate-rl/floodgate/server/transport"
)

const testYAML = `
domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: tenant
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
`

func newServer(t *testing.T) *server.Server {
	t.Helper()
	return servertest.New(t, "api.yaml", testYAML, server.Options{})
}

func decide(t *testing.T, srv *server.Server, key, value string, n int) {
	t.Helper()
	for range n {
		if _, err := srv.Decide(t.Context(), "api", []server.Descriptor{{Entries: []config.Entry{{Key: key, Value: value}}}}, 1); err != nil {
			t.Fatal(err)
		}
	}
}

func event(key string, cost int64, d floodgate.Decision) floodgate.Event {
	return floodgate.Event{Request: floodgate.Request{Key: key, Cost: cost, Limit: floodgate.Limit{Limit: 10, Period: time.Minute}}, Outcome: floodgate.Outcome{Decision: d}}
}

func TestRecorderCounts(t *testing.T) {
	r := newRecorder((&Options{Counters: 4}).withDefaults())
	denied := floodgate.Decision{Limit: 10, RetryAfter: time.Second}
	for _, e := range []floodgate.Event{
		event("d|api|user=1", 1, denied),
		event("d|api|user=1", 1, denied),
		event("d|api|user=2", 1, denied),
		// All or nothing: denied with RetryAfter 0, another key's doing.
		event("d|api|user=3", 1, floodgate.Decision{Limit: 10, Remaining: 5}),
		// A peek, even of a key at its limit.
		event("d|api|user=4", 0, denied),
		// Near the limit: 9 of 10 used.
		event("d|api|user=5", 1, floodgate.Decision{Allowed: true, Limit: 10, Remaining: 1}),
		// Far from it.
		event("d|api|user=6", 1, floodgate.Decision{Allowed: true, Limit: 10, Remaining: 5}),
	} {
		r.Observe(e)
	}
	failOpen := event("d|api|user=7", 1, floodgate.Decision{Allowed: true})
	failOpen.Err, failOpen.Policy = context.DeadlineExceeded, floodgate.FailOpen
	r.Observe(failOpen)
	lease := event("d|api|job=1", 1, floodgate.Decision{Allowed: true, Limit: 1})
	lease.Request.Lease = "abc"
	r.Observe(lease)
	lease.Decision.Allowed = false
	r.Observe(lease)
	lease.Request.Release = true
	r.Observe(lease)
	local := event("d|api|user=8", 1, floodgate.Decision{Allowed: true, Limit: 10, Remaining: 9, Fallback: true})
	local.Policy = floodgate.FailLocal
	r.Observe(local)

	d, n := r.top()
	if got, want := fmt.Sprint(keysOf(d)), "[d|api|user=1:2 d|api|user=2:1]"; got != want {
		t.Errorf("denied: %s, want %s", got, want)
	}
	if got, want := fmt.Sprint(keysOf(n)), "[d|api|user=5:1]"; got != want {
		t.Errorf("near: %s, want %s", got, want)
	}
	if a, dn, rl := r.counts.leaseAcquired.Load(), r.counts.leaseDenied.Load(), r.counts.leaseReleased.Load(); a != 1 || dn != 1 || rl != 1 {
		t.Errorf("leases acquired %d, denied %d, released %d; want 1 each", a, dn, rl)
	}
	if got := r.counts.breakerLocal.Load(); got != 1 {
		t.Errorf("breaker local decisions %d, want 1", got)
	}

	// The next slice keeps the last one; the one after drops it.
	r.rotate()
	r.Observe(event("d|api|user=2", 1, denied))
	if d, _ := r.top(); fmt.Sprint(keysOf(d)) != "[d|api|user=1:2 d|api|user=2:2]" {
		t.Errorf("a slice later: %v", keysOf(d))
	}
	r.rotate()
	if d, _ := r.top(); fmt.Sprint(keysOf(d)) != "[d|api|user=2:1]" {
		t.Errorf("two slices later: %v", keysOf(d))
	}
	r.rotate()
	if d, _ := r.top(); len(d.Items) != 0 || d.Total != 0 {
		t.Errorf("three slices later: %v, total %d", keysOf(d), d.Total)
	}
}

// keysOf lists a summary's items as key:count.
func keysOf(s topk.Summary[last]) []string {
	var out []string
	for _, it := range s.Items {
		out = append(out, fmt.Sprintf("%s:%d", it.Key, it.Count))
	}
	return out
}

func TestQuantile(t *testing.T) {
	inf := math.Inf(1)
	bounds := []float64{0.001, 0.01, 0.1, inf}
	for _, tc := range []struct {
		name       string
		cumulative []float64
		q, want    float64
	}{
		{"all in the first bucket", []float64{10, 10, 10, 10}, 0.5, 0.0005},
		{"median in the second", []float64{2, 10, 10, 10}, 0.5, 0.001 + 0.009*3/8},
		{"p99 in the third", []float64{0, 0, 100, 100}, 0.99, 0.01 + 0.09*0.99},
		{"beyond the last bound", []float64{0, 0, 0, 5}, 0.5, 0.1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := quantile(tc.q, bounds, tc.cumulative); math.Abs(got-tc.want) > 1e-12 {
				t.Errorf("quantile(%v) = %v, want %v", tc.q, got, tc.want)
			}
		})
	}
}

func TestDescribeKey(t *testing.T) {
	cfg := servertest.Config(t, "api.yaml", testYAML)
	rule := cfg.Match("api", []config.Entry{{Key: "user", Value: "x"}})
	inline := floodgate.Limit{Limit: 5, Period: time.Second}
	for _, tc := range []struct {
		name, storeKey string
		limit          floodgate.Limit
		wantKey        string
		wantRef        string
	}{
		{"inline", "i|user:42", inline, "user:42", `{"key":"user:42","limit":{"algorithm":"fixed_window","limit":5,"period":"1s"}}`},
		{"rule", "d|api|user=42", rule.Limit, "api|user=42", `{"domain":"api","entries":[{"key":"user","value":"42"}]}`},
		{"escapes", "d|api|user=a%7Cb%3Dc%25d", rule.Limit, "api|user=a%7Cb%3Dc%25d", `{"domain":"api","entries":[{"key":"user","value":"a|b=c%d"}]}`},
		{"own limit", "d|api|plan=x", inline, "api|plan=x", `{"limit":{"algorithm":"fixed_window","limit":5,"period":"1s"},"domain":"api","entries":[{"key":"plan","value":"x"}]}`},
		{"limit changed by a reload", "d|api|user=1", inline, "api|user=1", `{"limit":{"algorithm":"fixed_window","limit":5,"period":"1s"},"domain":"api","entries":[{"key":"user","value":"1"}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key, ref := describeKey(tc.storeKey, tc.limit, cfg)
			b, err := json.Marshal(ref)
			if err != nil {
				t.Fatal(err)
			}
			if key != tc.wantKey || string(b) != tc.wantRef {
				t.Errorf("describeKey(%q) = %q, %s; want %q, %s", tc.storeKey, key, b, tc.wantKey, tc.wantRef)
			}
		})
	}
}

// readFrames reads n frames of the feed at url.
func readFrames(t *testing.T, url, token string, n int) []Frame {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("feed: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var out []Frame
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() && len(out) < n {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var f Frame
			if err := json.Unmarshal([]byte(data), &f); err != nil {
				t.Fatalf("frame %d: %v", len(out), err)
			}
			out = append(out, f)
		}
	}
	if len(out) < n {
		t.Fatalf("%d frames, want %d: %v", len(out), n, sc.Err())
	}
	return out
}

func TestFeed(t *testing.T) {
	srv := newServer(t)
	d := New(srv, &Options{Interval: 50 * time.Millisecond})
	t.Cleanup(d.Close)
	hs := httptest.NewServer(servertest.Handler(t, srv, d.Handlers()))
	t.Cleanup(hs.Close)

	decide(t, srv, "user", "hot", 10)   // 3 allowed (the third near its limit), 7 denied
	decide(t, srv, "tenant", "acme", 3) // 1 allowed (near), 2 shadow-denied
	frames := readFrames(t, hs.URL+"/ui/events?frames=1", "", 1)
	f := frames[0]
	// Whether this first frame has rates depends on whether the 50 ms
	// ticker sampled before the stream began (on a loaded machine it can):
	// TestFeedHistory checks a fresh dashboard's first frame on an
	// injected ticker.
	if !f.Admin {
		t.Errorf("first frame: admin %v; want true", f.Admin)
	}
	if f.TopDenied == nil || len(f.TopDenied.Keys) != 2 {
		t.Fatalf("top denied: %+v", f.TopDenied)
	}
	top := f.TopDenied.Keys[0]
	if top.Key != "api|user=hot" || top.Count != 7 || top.Err != 0 || top.Rule != "api|user" || top.Remaining != 0 || top.RetryAfterMS <= 0 {
		t.Errorf("top denied key: %+v", top)
	}
	if k := f.TopDenied.Keys[1]; k.Key != "api|tenant=acme" || !k.Shadow || k.Count != 2 {
		t.Errorf("second denied key: %+v, want the shadow rule's key, twice", k)
	}
	if f.TopDenied.Total != 9 || f.TopDenied.Counters != DefaultCounters {
		t.Errorf("top denied total %d, counters %d", f.TopDenied.Total, f.TopDenied.Counters)
	}
	if f.NearLimit == nil || len(f.NearLimit.Keys) != 2 || f.NearLimit.Keys[0].Key != "api|tenant=acme" && f.NearLimit.Keys[0].Key != "api|user=hot" {
		t.Errorf("near limit: %+v", f.NearLimit)
	}
	if f.Config.Rules != 2 || len(f.Config.List) != 2 || f.Config.List[0].Source != "api.yaml:4" {
		t.Errorf("config: %+v", f.Config)
	}

	// Rates: decisions made while six frames are read.
	done := make(chan []Frame, 1)
	go func() { done <- readFramesAsync(hs.URL+"/ui/events?frames=6", 6) }()
	var got []Frame
	deadline := time.Now().Add(10 * time.Second)
	for got == nil {
		if time.Now().After(deadline) {
			t.Fatal("six frames of 50 ms took more than 10 s")
		}
		select {
		case got = <-done:
		case <-time.After(5 * time.Millisecond):
			decide(t, srv, "user", "hot", 5)
			decide(t, srv, "tenant", "acme", 1)
		}
	}
	if len(got) != 6 {
		t.Fatalf("%d frames, want 6", len(got))
	}
	var denied, shadow float64
	for _, f := range got {
		for _, s := range f.Series {
			if s.Rule == "api|user" {
				denied += s.Rates["denied"]
			}
			if s.Rule == "api|tenant" {
				shadow += s.Rates["shadow_denied"]
			}
		}
		if f.Rates && f.Store.P50MS == nil && f.Store.Calls > 0 {
			t.Errorf("store calls without latency: %+v", f.Store)
		}
	}
	if denied <= 0 || shadow <= 0 {
		t.Errorf("denied %v/s and shadow-denied %v/s summed over the frames; want both above 0", denied, shadow)
	}
}

func readFramesAsync(url string, n int) []Frame {
	resp, err := http.Get(url)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var out []Frame
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() && len(out) < n {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var f Frame
			if json.Unmarshal([]byte(data), &f) == nil {
				out = append(out, f)
			}
		}
	}
	return out
}

func TestCloseEndsStreams(t *testing.T) {
	srv := newServer(t)
	d := New(srv, &Options{Interval: time.Hour})
	hs := httptest.NewServer(servertest.Handler(t, srv, d.Handlers()))
	t.Cleanup(hs.Close)
	resp, err := http.Get(hs.URL + "/ui/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	ended := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
		}
		close(ended)
	}()
	d.Close()
	d.Close() // twice is harmless
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream did not end within 10 s of Close")
	}
	// Closed: decisions are no longer counted.
	decide(t, srv, "user", "x", 5)
	if top, _ := d.rec.top(); top.Total != 0 {
		t.Errorf("%d denials counted after Close", top.Total)
	}
}

// TestTopBound: with more keys than counters, every shard full, the top
// list still holds every heavy key, and its bound is at most N/k. The
// guarantee is per shard (a key above its shard's N/k is listed), so the
// recorder is one whose random seed puts the three heavy keys in three
// shards: three in one shard of this stream would be 999 of about 1,500
// decisions, each under that shard's N/k.
func TestTopBound(t *testing.T) {
	const k = 4
	var r *recorder
	for try := 0; ; try++ {
		if try == 1000 {
			t.Fatal("no seed in 1,000 put the three heavy keys in three shards")
		}
		r = newRecorder((&Options{Counters: k}).withDefaults())
		seen := map[uint64]bool{}
		for h := range 3 {
			seen[maphash.String(r.seed, fmt.Sprintf("i|heavy%d", h))%shards] = true
		}
		if len(seen) == 3 {
			break
		}
	}
	denied := floodgate.Decision{Limit: 10, RetryAfter: time.Second}
	var n int64
	for i := range 5000 {
		key := fmt.Sprintf("i|tail%d", i)
		if i%5 == 0 {
			key = fmt.Sprintf("i|heavy%d", i%3)
		}
		r.Observe(event(key, 1, denied))
		n++
	}
	d, _ := r.top()
	if d.Total != n || d.Bound*k > n {
		t.Fatalf("total %d (want %d), bound %d above N/k", d.Total, n, d.Bound)
	}
	found := 0
	for _, it := range d.Items {
		if strings.HasPrefix(it.Key, "i|heavy") {
			found++
			if it.Count-it.Err > 334 || it.Count < 333 || it.Err > d.Bound {
				t.Errorf("%s: count %d err %d, true 333 or 334", it.Key, it.Count, it.Err)
			}
		}
	}
	if found != 3 {
		t.Errorf("%d of the 3 heavy keys listed: %v", found, keysOf(d)[:min(10, len(d.Items))])
	}
	if len(d.Items) > shards*k {
		t.Errorf("%d keys listed from %d counters", len(d.Items), shards*k)
	}
}

// TestFeedRedacted: with token files, a client token gets the rates and
// the store's health but neither the keys nor the rules; an admin token
// gets them; no token gets a 401.
func TestFeedRedacted(t *testing.T) {
	dir := t.TempDir()
	const client, admin = "client-0123456789abcdef", "admin-0123456789abcdef"
	for name, tok := range map[string]string{"client": client, "admin": admin} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	auth, err := transport.LoadAuth(filepath.Join(dir, "client"), filepath.Join(dir, "admin"))
	if err != nil {
		t.Fatal(err)
	}
	srv := servertest.New(t, "api.yaml", testYAML, server.Options{})
	dash := New(srv, &Options{Auth: auth})
	t.Cleanup(dash.Close)
	api, err := httpapi.New(srv, &httpapi.Options{Auth: auth})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(api.Handler(dash.Handlers()))
	t.Cleanup(hs.Close)
	decide(t, srv, "user", "hot", 5)

	if resp, err := http.Get(hs.URL + "/ui/events?frames=1"); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no token: %v %v, want 401", resp.StatusCode, err)
	}
	if resp, err := http.Get(hs.URL + "/ui"); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the page without a token: %v %v, want 200", resp.StatusCode, err)
	}
	f := readFrames(t, hs.URL+"/ui/events?frames=1", client, 1)[0]
	if f.Admin || f.TopDenied != nil || f.NearLimit != nil || len(f.Config.List) != 0 || f.Config.Rules != 2 {
		t.Errorf("client frame: admin %v, top denied %v, near %v, rules %d listed of %d", f.Admin, f.TopDenied, f.NearLimit, len(f.Config.List), f.Config.Rules)
	}
	f = readFrames(t, hs.URL+"/ui/events?frames=1", admin, 1)[0]
	if !f.Admin || f.TopDenied == nil || len(f.TopDenied.Keys) != 1 || len(f.Config.List) != 2 {
		t.Errorf("admin frame: admin %v, top denied %+v, rules %d", f.Admin, f.TopDenied, len(f.Config.List))
	}
}
