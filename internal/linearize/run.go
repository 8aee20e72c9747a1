package linearize

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/floodgate-rl/floodgate"
)

// Workload is a history to record: Goroutines callers, spread over Stores
// (each store its own client and connections), each making requests of
// Limit on a few Keys, so that they contend, until the history spans
// MinPeriods periods of the limit and OpsPerKey calls per key have been
// made on average.
//
// What ends a history is time, not a count: the callers go on until the
// decisions' times (Decision.Now, the clock the history is checked
// against: the store's, or the callers' with OwnNow) span MinPeriods
// periods. So that a fast machine does not reach that span with many more
// calls than a slow one (porcupine's check grows fast with the calls on a
// key), the callers are paced by the wall clock: all of them make a burst
// of calls together at instants spaced so that OpsPerKey calls per key
// take MinPeriods periods, and a caller that is behind does not wait. A
// history then has about OpsPerKey calls per key on a machine of any
// speed. MaxCalls and MaxDuration bound a history whose clock does not
// move on.
type Workload struct {
	// Stores are the stores the callers use, round robin; at least one.
	Stores []floodgate.Store
	// Limit is the limit of every request.
	Limit floodgate.Limit
	// Keys are the keys, picked at random by each call; few, to contend.
	Keys []string
	// Goroutines is the number of concurrent callers; default 8.
	Goroutines int
	// OpsPerKey is the number of calls per key the callers plan, and
	// make at least; default 200. Paced, they make about that many on any
	// machine: 150 on each of 3 keys over 5 periods of 20 ms, with 12
	// callers, is a burst of 2 calls from each caller every 5.6 ms.
	OpsPerKey int
	// MinPeriods is how many periods of the limit the history must span,
	// from the earliest to the latest Decision.Now: the callers go on past
	// OpsPerKey until it does. Default 5. Record fails the test if
	// MaxCalls or MaxDuration stopped the callers short of it.
	MinPeriods int
	// MaxCalls bounds the calls of the history, failed ones included;
	// default maxCallsFactor times OpsPerKey per key.
	MaxCalls int
	// MaxDuration bounds the wall time the callers take; default 20s.
	MaxDuration time.Duration
	// Until, if set, must hold too before the callers stop: something the
	// history must exercise besides time, such as calls that failed, or
	// (redisstore) calls that shared a script run. The callers ask it only
	// once they have made their planned calls and spanned MinPeriods, after
	// each call, until it holds or a bound stops them.
	Until func(*Recorder) bool
	// Unpaced lets every caller call as fast as it can, for a store whose
	// clock is not the wall clock: a TickClock moves on with calls, not
	// with waiting, so a history's length in calls is its length in time.
	// (On the wall clock nothing would then keep a fast machine from
	// making up to MaxCalls calls.)
	Unpaced bool
	// OwnNow stamps every request with the process clock (Request.Now),
	// instead of letting the store decide by its own.
	OwnNow bool
	// TimeoutShare is the share of calls made with the deadline Timeout
	// instead of Deadline: short enough that some fail after Redis ran
	// their script, or before it.
	TimeoutShare float64
	// Timeout is the short deadline; default 100µs.
	Timeout time.Duration
	// Deadline is the deadline of every other call; default 10s. In a
	// workload without short deadlines (TimeoutShare 0) a call that fails
	// fails the test.
	Deadline time.Duration
	// Seed seeds the choice of keys, costs and deadlines, and the instants
	// of the calls.
	Seed uint64
}

// Result is what Run measured.
type Result struct {
	Stats
	// Check is how long porcupine took.
	Check time.Duration
	// Periods is how many of the limit's periods the decisions' times
	// span, from the first to the last.
	Periods float64
}

// Run records w's history and checks it with Verify.
func Run(t *testing.T, w Workload, opts Options) Result {
	t.Helper()
	return Verify(t, Record(t, w), w.Limit, opts)
}

// Verify checks a recorded history of calls under l against the model: it
// fails t if the history is not linearizable (writing porcupine's HTML
// visualisation into t.ArtifactDir(), kept with go test -artifacts), if
// the check ran out of time, or if the history spans fewer than three of
// l's periods.
func Verify(t *testing.T, rec *Recorder, l floodgate.Limit, opts Options) Result {
	t.Helper()
	res := Result{Stats: rec.Stats()}
	if res.Calls == 0 {
		t.Fatal("linearize: no call recorded")
	}
	res.Periods = float64(rec.Span()) / float64(l.Period)
	if res.Periods < minPeriods {
		t.Errorf("linearize: the history spans %.1f periods of %v, want at least %d: windows did not roll over often enough to test it",
			res.Periods, l.Period, minPeriods)
	}
	start := time.Now()
	verdict, info, err := Check(rec.Operations(), opts, checkTimeout)
	res.Check = time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	switch verdict {
	case porcupine.Ok:
	case porcupine.Unknown:
		t.Fatalf("linearize: the check of %d calls ran out of its %v: inconclusive", res.Calls, checkTimeout)
	default:
		t.Errorf("linearize: %d calls on %d keys (%d failed) are not linearizable under %s: %s",
			res.Calls, res.Keys, res.Failed, l, WriteVisualization(t, opts, info))
	}
	t.Logf("%d calls on %d keys (%d failed, %d of them without a short deadline) over %.1f periods, checked in %v",
		res.Calls, res.Keys, res.Failed, res.Collateral, res.Periods, res.Check)
	return res
}

// minPeriods is the fewest periods a history must span.
const minPeriods = 3

// checkTimeout bounds one check, so that a history too hard to check
// cannot hang a test.
const checkTimeout = 30 * time.Second

// WriteVisualization writes porcupine's visualisation of info into
// t.ArtifactDir() and returns a sentence that says where, or why not.
func WriteVisualization(t *testing.T, opts Options, info porcupine.LinearizationInfo) string {
	t.Helper()
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()) + ".html"
	path := filepath.Join(t.ArtifactDir(), name)
	if err := Visualize(opts, info, path); err != nil {
		return fmt.Sprintf("no visualisation: %v", err)
	}
	return fmt.Sprintf("visualisation in %s (kept with go test -artifacts)", path)
}

// Record runs w and returns the recorder that holds its history. It fails
// t if a bound (MaxCalls, MaxDuration) stopped the callers before the
// history spanned MinPeriods periods, or before w.Until held.
func Record(t *testing.T, w Workload) *Recorder {
	t.Helper()
	if len(w.Stores) == 0 || len(w.Keys) == 0 {
		t.Fatal("linearize: a workload needs stores and keys")
	}
	if w.Goroutines <= 0 {
		w.Goroutines = 8
	}
	if w.OpsPerKey <= 0 {
		w.OpsPerKey = 200
	}
	if w.Timeout <= 0 {
		w.Timeout = 100 * time.Microsecond
	}
	if w.Deadline <= 0 {
		w.Deadline = 10 * time.Second
	}
	if w.MinPeriods <= 0 {
		w.MinPeriods = 5
	}
	total := w.OpsPerKey * len(w.Keys)
	if w.MaxCalls <= 0 {
		w.MaxCalls = maxCallsFactor * total
	}
	if w.MaxDuration <= 0 {
		w.MaxDuration = 20 * time.Second
	}
	rec := NewRecorder()
	pl := &plan{w: w, span: time.Duration(w.MinPeriods) * w.Limit.Period, start: time.Now()}
	if !w.Unpaced {
		// The busiest caller's last planned burst is due about a span
		// after its first.
		last := ((total+w.Goroutines-1)/w.Goroutines - 1) / burst
		pl.spacing = pl.span / time.Duration(max(1, last))
	}
	var wg sync.WaitGroup
	errs := make(chan error, w.Goroutines)
	for g := range w.Goroutines {
		n := total / w.Goroutines
		if g < total%w.Goroutines {
			n++
		}
		wg.Go(func() {
			c := caller{plan: pl, w: w, rec: rec, id: g, store: w.Stores[g%len(w.Stores)],
				rng: rand.New(rand.NewPCG(w.Seed, uint64(g)))}
			if err := c.run(t.Context(), n); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if stop := pl.stopped.Load(); stop != nil {
		span, until := rec.Span(), "is unset"
		if w.Until != nil {
			until = "holds"
			if !w.Until(rec) {
				until = "does not hold"
			}
		}
		if span < pl.span || until == "does not hold" {
			t.Errorf("linearize: the history spans %.1f periods of %v (want at least %d) and the workload's Until %s: the callers stopped at %s, after %d calls in %v (bounds: %d calls, %v)",
				float64(span)/float64(w.Limit.Period), w.Limit.Period, w.MinPeriods, until,
				*stop, rec.Stats().Calls, time.Since(pl.start).Round(time.Millisecond), w.MaxCalls, w.MaxDuration)
		}
	}
	return rec
}

// maxCallsFactor bounds the calls of a history, as a multiple of those
// planned. Paced callers span MinPeriods within two bursts past the
// planned calls on a fast machine, and with the planned calls on a slow
// one; the bound ends a history whose clock does not move on while it is
// still small enough for porcupine.
const maxCallsFactor = 4

// plan is what the callers of one history share.
type plan struct {
	w     Workload
	span  time.Duration // MinPeriods periods
	start time.Time
	// spacing is the wall time between the bursts of calls; 0 if unpaced.
	spacing time.Duration
	calls   atomic.Int64
	// stopped says which bound stopped the callers, if one did.
	stopped atomic.Pointer[string]
}

// next reserves a call, or says which bound forbids it.
func (r *plan) next() (stop string) {
	if r.calls.Add(1) > int64(r.w.MaxCalls) {
		return "the bound on calls"
	}
	if time.Since(r.start) > r.w.MaxDuration {
		return "the bound on time"
	}
	return ""
}

// slot is the instant of every caller's burst i: the i-th of the instants
// spacing apart from the start, each moved on by a random part of spacing
// that all callers share, so that they call together (and contend as if
// none of them waited), at times that fall anywhere in a window.
func (r *plan) slot(i int) time.Time {
	u := rand.New(rand.NewPCG(r.w.Seed, slotStream+uint64(i))).Float64()
	return r.start.Add(time.Duration((float64(i) + u) * float64(r.spacing)))
}

// slotStream sets the random stream of the slots apart from the callers'.
const slotStream = 1 << 32

// burst is how many calls a paced caller makes back to back from each of
// its slots. Callers woken at one instant make a call each at about the
// same time, but on a machine with few cores they soon drift apart: with
// a single call each, a history of 450 calls on a 2-core machine shared 2
// to 12 script runs (redisstore's coalescing); with two, 40 to 70, as
// many as with four, and twice as many bursts fall in each period.
const burst = 2

// wait waits for the slot of call i, if it is the first of its burst,
// unless the caller is behind it.
func (r *plan) wait(ctx context.Context, i int) {
	if r.spacing <= 0 || i%burst != 0 {
		return
	}
	d := time.Until(r.slot(i / burst))
	if d <= 0 {
		return
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
	}
}

type caller struct {
	plan  *plan
	w     Workload
	rec   *Recorder
	id    int
	store floodgate.Store
	rng   *rand.Rand
	// held is the lease this caller holds on each key (Concurrency).
	held  map[string]floodgate.Request
	lease int
}

// run makes at least n calls, and more until the history spans the
// workload's periods and its Until holds, unless a bound stops it.
func (c *caller) run(ctx context.Context, n int) error {
	c.held = make(map[string]floodgate.Request)
	for i := 0; i < n || c.rec.Span() < c.plan.span || c.w.Until != nil && !c.w.Until(c.rec); i++ {
		if stop := c.plan.next(); stop != "" {
			c.plan.stopped.CompareAndSwap(nil, &stop)
			return nil
		}
		c.plan.wait(ctx, i)
		r := c.request()
		deadline, short := c.w.Deadline, false
		if c.w.TimeoutShare > 0 && c.rng.Float64() < c.w.TimeoutShare {
			deadline, short = c.w.Timeout, true
		}
		cctx, cancel := context.WithTimeout(ctx, deadline)
		if c.w.OwnNow {
			r.Now = time.Now()
		}
		d, err := c.rec.apply(cctx, c.store, c.id, Input{Req: r, Short: short})
		cancel()
		switch {
		case err != nil && c.w.TimeoutShare == 0:
			return fmt.Errorf("linearize: caller %d: a call failed in a workload without short deadlines: %w", c.id, err)
		case r.Lease == "":
		case err == nil && d.Allowed && !r.Release && r.Cost > 0:
			c.held[r.Key] = r
		case r.Release:
			delete(c.held, r.Key)
		}
	}
	return nil
}

// request is a random request: mostly cost 1, some peeks (cost 0), some
// larger costs, a few above the capacity; for Concurrency, a caller
// acquires a lease on a key and then releases it, renews it, or forgets it
// (to let it expire).
func (c *caller) request() floodgate.Request {
	r := floodgate.Request{Key: c.w.Keys[c.rng.IntN(len(c.w.Keys))], Limit: c.w.Limit, Cost: 1}
	switch x := c.rng.IntN(20); {
	case x == 0:
		r.Cost = 0
	case x == 1:
		r.Cost = c.w.Limit.Capacity() + 1
	case x <= 4:
		r.Cost = 2 + c.rng.Int64N(2)
	}
	if c.w.Limit.EffectiveAlgorithm() != floodgate.Concurrency {
		return r
	}
	if h, ok := c.held[r.Key]; ok {
		switch x := c.rng.IntN(8); {
		case x == 0: // renew
			return h
		case x == 1: // forget: it expires after Period
			delete(c.held, r.Key)
		default:
			h.Release = true
			return h
		}
	}
	c.lease++
	r.Lease = fmt.Sprintf("c%d-%d", c.id, c.lease)
	if r.Cost == 0 && c.rng.IntN(2) == 0 {
		r.Lease = ""
	}
	return r
}
