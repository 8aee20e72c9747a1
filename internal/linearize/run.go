package linearize

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/floodgate-rl/floodgate"
)

// Workload is a history to record: Goroutines callers, spread over Stores
// (each store its own client and connections), each making requests of
// Limit on a few Keys, so that they contend, until OpsPerKey calls per key
// have been made on average.
type Workload struct {
	// Stores are the stores the callers use, round robin; at least one.
	Stores []floodgate.Store
	// Limit is the limit of every request.
	Limit floodgate.Limit
	// Keys are the keys, picked at random by each call; few, to contend.
	Keys []string
	// Goroutines is the number of concurrent callers; default 8.
	Goroutines int
	// OpsPerKey is the number of calls per key; default 200.
	OpsPerKey int
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
	// MinPeriods is how many periods of the limit the history should span:
	// the callers go on past OpsPerKey, up to maxCallsFactor times as many calls,
	// until the decisions' times span this many periods. Default 5.
	MinPeriods int
	// Seed seeds the choice of keys, costs and deadlines.
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

// Record runs w and returns the recorder that holds its history.
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
	rec := NewRecorder()
	total := w.OpsPerKey * len(w.Keys)
	var wg sync.WaitGroup
	errs := make(chan error, w.Goroutines)
	for g := range w.Goroutines {
		n := total / w.Goroutines
		if g < total%w.Goroutines {
			n++
		}
		wg.Go(func() {
			c := caller{w: w, rec: rec, id: g, store: w.Stores[g%len(w.Stores)],
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
	return rec
}

// maxCallsFactor bounds how far callers go past OpsPerKey for the history
// to span MinPeriods: on a fast machine 3× was too few for 3 periods.
const maxCallsFactor = 10

type caller struct {
	w     Workload
	rec   *Recorder
	id    int
	store floodgate.Store
	rng   *rand.Rand
	// held is the lease this caller holds on each key (Concurrency).
	held  map[string]floodgate.Request
	lease int
}

func (c *caller) run(ctx context.Context, n int) error {
	c.held = make(map[string]floodgate.Request)
	long := time.Duration(c.w.MinPeriods) * c.w.Limit.Period
	for i := 0; i < n || (i < maxCallsFactor*n && c.rec.Span() < long); i++ {
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
	if algorithmOf(c.w.Limit) != floodgate.Concurrency {
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
