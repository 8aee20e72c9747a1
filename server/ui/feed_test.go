package ui

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/loop"
	"github.com/floodgate-rl/floodgate/internal/servertest"
	"github.com/prometheus/client_golang/prometheus"
)

// gatherCounter counts the registry's collections: one per frame built.
type gatherCounter struct{ n atomic.Int64 }

func (c *gatherCounter) Describe(chan<- *prometheus.Desc) {}
func (c *gatherCounter) Collect(chan<- prometheus.Metric) { c.n.Add(1) }

// testTicker is a loop.Ticker the test drives.
type testTicker struct{ c chan time.Time }

func (t testTicker) C() <-chan time.Time { return t.c }
func (t testTicker) Stop()               {}

// stream is one subscriber of the feed, read frame by frame.
type stream struct {
	resp *http.Response
	sc   *bufio.Scanner
}

func subscribe(t *testing.T, url string) *stream {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("feed: %d %s", resp.StatusCode, b)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	return &stream{resp, sc}
}

// next is the data of the next frame, as sent.
func (s *stream) next(t *testing.T) string {
	t.Helper()
	for s.sc.Scan() {
		if data, ok := strings.CutPrefix(s.sc.Text(), "data: "); ok {
			return data
		}
	}
	t.Fatalf("the stream ended: %v", s.sc.Err())
	return ""
}

// TestFeedSharedFrames: subscribers share one frame per tick: 20 of them
// cost one reading of the registry to start and one per tick, and all
// get the same bytes. (Each used to build its own: 20 readings to start,
// 20 per tick.)
func TestFeedSharedFrames(t *testing.T) {
	srv := newServer(t)
	counter := &gatherCounter{}
	if err := srv.Registry().Register(counter); err != nil {
		t.Fatal(err)
	}
	ticks := testTicker{make(chan time.Time)}
	const n = 20
	d := New(srv, &Options{Interval: time.Hour, MaxSubscribersPerPeer: n, newTicker: func(time.Duration) loop.Ticker { return ticks }})
	t.Cleanup(d.Close)
	hs := httptest.NewServer(servertest.Handler(t, srv, d.Handlers()))
	t.Cleanup(hs.Close)
	decide(t, srv, "user", "hot", 5)

	streams := make([]*stream, n)
	firsts := make([]string, n)
	for i := range n {
		streams[i] = subscribe(t, hs.URL+"/ui/events")
		firsts[i] = streams[i].next(t)
	}
	if got := counter.n.Load(); got != 1 {
		t.Errorf("%d subscribers' first frames read the registry %d times, want once", n, got)
	}
	for i := range n {
		if firsts[i] != firsts[0] {
			t.Fatalf("subscriber %d got another first frame", i)
		}
	}
	for tick := 1; tick <= 2; tick++ {
		ticks.c <- time.Now()
		var f0 string
		for i, s := range streams {
			f := s.next(t)
			if i == 0 {
				f0 = f
			} else if f != f0 {
				t.Fatalf("tick %d: subscriber %d got another frame", tick, i)
			}
		}
		var fr Frame
		if err := json.Unmarshal([]byte(f0), &fr); err != nil || !fr.Rates || !fr.Admin {
			t.Errorf("tick %d: %v, rates %v, admin %v; want a frame with rates", tick, err, fr.Rates, fr.Admin)
		}
		if got := counter.n.Load(); got != int64(1+tick) {
			t.Errorf("after %d ticks, the registry read %d times, want %d", tick, got, 1+tick)
		}
	}
}

// TestFeedCaps: beyond MaxSubscribers, or MaxSubscribersPerPeer from one
// peer, a stream is refused 503 with Retry-After and a problem body;
// another peer is served while one is at its cap, and a slot is free
// again once a stream ends.
func TestFeedCaps(t *testing.T) {
	srv := newServer(t)
	d := New(srv, &Options{Interval: time.Hour, MaxSubscribers: 3, MaxSubscribersPerPeer: 2})
	t.Cleanup(d.Close)
	left := make(chan struct{}, 1)
	d.feed.onLeave = func() {
		select {
		case left <- struct{}{}:
		default:
		}
	}
	hs := httptest.NewServer(servertest.Handler(t, srv, d.Handlers()))
	t.Cleanup(hs.Close)
	refused := func(client *http.Client, want string) {
		t.Helper()
		resp, err := client.Get(hs.URL + "/ui/events")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
			resp.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(string(b), want) {
			t.Errorf("a stream beyond the cap: %d, Retry-After %q, %s; want 503 naming %s", resp.StatusCode, resp.Header.Get("Retry-After"), b, want)
		}
	}
	a := subscribe(t, hs.URL+"/ui/events")
	a.next(t)
	subscribe(t, hs.URL+"/ui/events").next(t)
	refused(http.DefaultClient, "-ui-max-subscribers-per-peer")

	other := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}).DialContext}}
	resp, err := other.Get(hs.URL + "/ui/events")
	if err != nil {
		t.Skipf("cannot dial from 127.0.0.2: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("another peer: %d, want served", resp.StatusCode)
	}
	bufio.NewReader(resp.Body).ReadString('\n')
	refused(other, "-ui-max-subscribers")

	// One ends: its slot is free again (the server sees the close once it
	// next writes; the feed's count is what says it left).
	a.resp.Body.Close()
	ticks := 0
	for done := false; !done; {
		d.feed.tick(t.Context())
		select {
		case <-left:
			done = true
		case <-time.After(10 * time.Millisecond):
			if ticks++; ticks > 3000 {
				t.Fatal("a closed stream still counted after 3000 frames")
			}
		}
	}
	subscribe(t, hs.URL+"/ui/events").next(t)
}

// TestFeedHistory: the feed keeps the totals of past intervals whether or
// not anyone subscribes, and a stream's first frame brings them, oldest
// first; on a fresh dashboard the first frame has neither rates nor
// history (the page says it is waiting).
func TestFeedHistory(t *testing.T) {
	srv := newServer(t)
	ticks := testTicker{make(chan time.Time)}
	d := New(srv, &Options{Interval: time.Second, newTicker: func(time.Duration) loop.Ticker { return ticks }})
	t.Cleanup(d.Close)
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	d.feed.mu.Lock() // joins read d.now under the feed's lock
	d.now = func() time.Time { return time.Unix(0, now.Load()) }
	d.feed.mu.Unlock()
	hs := httptest.NewServer(servertest.Handler(t, srv, d.Handlers()))
	t.Cleanup(hs.Close)
	firstFrame := func() Frame {
		t.Helper()
		s := subscribe(t, hs.URL+"/ui/events?frames=1")
		var fr Frame
		if err := json.Unmarshal([]byte(s.next(t)), &fr); err != nil {
			t.Fatal(err)
		}
		return fr
	}
	if fr := firstFrame(); fr.Rates || len(fr.History) != 0 {
		t.Fatalf("fresh dashboard: rates %v, %d history points; want neither", fr.Rates, len(fr.History))
	}
	// The feed's tick, called here rather than by the ticker (which never
	// fires), so that each reading follows the decisions before it.
	tick := func() {
		now.Add(int64(time.Second))
		d.feed.tick(t.Context())
	}
	tick() // the first reading: no interval yet
	for _, n := range []int{3, 2, 7} {
		decide(t, srv, "user", "hist", n)
		tick()
	}
	tick()
	now.Add(int64(600 * time.Millisecond))
	fr := firstFrame()
	var got []float64
	for _, p := range fr.History {
		sum := 0.0
		for _, v := range p.Totals {
			sum += v
		}
		got = append(got, sum)
	}
	if want := []float64{3, 2, 7, 0}; !slices.Equal(got, want) {
		t.Errorf("history of decisions per second: %v, want %v", got, want)
	}
	if !fr.Rates {
		t.Errorf("a first frame 0.6 s after a reading has no rates")
	}
}
