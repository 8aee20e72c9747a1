package loadgen

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// counter admits the first limit calls and fails every failEvery-th one.
type counter struct {
	mu        sync.Mutex
	calls     int64
	limit     int64
	failEvery int64
	keys      map[int]int
}

func (c *counter) call(_ context.Context, key int) (Outcome, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	c.keys[key]++
	if c.failEvery > 0 && c.calls%c.failEvery == 0 {
		return 0, errors.New("boom")
	}
	if c.calls <= c.limit {
		return OK, nil
	}
	return OverLimit, nil
}

func TestRunCounts(t *testing.T) {
	c := &counter{limit: 100, failEvery: 50, keys: map[int]int{}}
	res, err := Run(t.Context(), TargetFunc(c.call), Config{Callers: 8, Requests: 1000, Keys: 10, Hot: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	if res.Total() != 1000 || c.calls != 1000 || res.Hist.TotalCount() != 1000 {
		t.Fatalf("total %d, calls %d, histogram %d; want 1000 each", res.Total(), c.calls, res.Hist.TotalCount())
	}
	if res.Errors != 20 || res.OK+res.OverLimit != 980 || res.FirstError == nil {
		t.Errorf("errors %d (first %v), ok+over %d; want 20 and 980", res.Errors, res.FirstError, res.OK+res.OverLimit)
	}
	// About half the calls are hot; the rest spread over keys 0 to 9.
	if h := c.keys[HotKey]; h < 400 || h > 600 {
		t.Errorf("%d hot calls of 1000, want about 500", h)
	}
	for k := range 10 {
		if c.keys[k] == 0 {
			t.Errorf("key %d never drawn: %v", k, c.keys)
		}
	}
}

func TestRunDuration(t *testing.T) {
	var calls atomic.Int64
	var snaps atomic.Int64
	f := func(context.Context, int) (Outcome, error) {
		calls.Add(1)
		time.Sleep(time.Millisecond) // stands in for a call's latency
		return OK, nil
	}
	res, err := Run(t.Context(), TargetFunc(f), Config{Callers: 4, Duration: 150 * time.Millisecond, Keys: 1,
		Progress: func(Snapshot) { snaps.Add(1) }, ProgressEvery: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Total() != calls.Load() || res.Total() == 0 || res.Elapsed < 150*time.Millisecond {
		t.Errorf("total %d, calls %d, elapsed %v", res.Total(), calls.Load(), res.Elapsed)
	}
	if snaps.Load() == 0 {
		t.Error("no progress snapshot")
	}
}

// TestRunRate checks that an open-loop run does not send faster than its
// rate: 30 calls at 300/s cannot finish in less than 29 intervals.
func TestRunRate(t *testing.T) {
	f := func(context.Context, int) (Outcome, error) { return OK, nil }
	res, err := Run(t.Context(), TargetFunc(f), Config{Callers: 4, Requests: 30, Rate: 300, Keys: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Total() != 30 || res.Elapsed < 29*time.Second/300 {
		t.Errorf("total %d in %v; want 30 in at least %v", res.Total(), res.Elapsed, 29*time.Second/300)
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Callers: 0, Requests: 1, Keys: 1}, "callers: 0"},
		{Config{Callers: 1, Keys: 1}, "neither a duration nor a number of requests"},
		{Config{Callers: 1, Requests: 1, Keys: 0}, "keys: 0"},
		{Config{Callers: 1, Requests: 1, Keys: 1, Hot: -0.1}, "hot: -0.1"},
		{Config{Callers: 1, Requests: 1, Keys: 1, Rate: -1}, "rate: -1"},
	} {
		_, err := Run(context.Background(), TargetFunc(nil), tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

func TestReport(t *testing.T) {
	res := Result{Hist: newHist()}
	for _, v := range []time.Duration{3 * time.Microsecond, 40 * time.Microsecond, 40 * time.Microsecond, 7 * time.Millisecond} {
		res.Hist.RecordValue(int64(v))
	}
	res.OK, res.OverLimit, res.Elapsed = 3, 1, time.Second
	s := Summarize(res, "test", Config{Callers: 2, Keys: 1})
	var sum int64
	for _, b := range s.Histogram {
		sum += b.Count
	}
	if sum != 4 || s.Histogram[0].UpToMS != 0.005 || s.Histogram[len(s.Histogram)-1].UpToMS != 10 {
		t.Errorf("buckets %+v: want 4 calls from ≤5µs to ≤10ms", s.Histogram)
	}
	var text bytes.Buffer
	s.WriteText(&text)
	for _, want := range []string{"4 in 1.00s; decisions (OK or OVER_LIMIT) 4/s", "OK 3 (75.0%), OVER_LIMIT 1 (25.0%)", "one hot key",
		"<=      50µs |########################################|  50.00%  2"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, &text)
		}
	}
	var p bytes.Buffer
	pr := NewProgress(&p)
	pr.Update(Snapshot{Elapsed: time.Second, OK: 5, P99: time.Millisecond})
	pr.Done()
	if got := p.String(); !strings.Contains(got, "5 decisions/s  OK 5  OVER_LIMIT 0  errors 0  p99 1ms\n") || strings.Contains(got, "\r") {
		t.Errorf("progress to a non-terminal: %q", got)
	}
}
