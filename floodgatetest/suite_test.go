package floodgatetest_test

import (
	"context"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algorithm"
	"github.com/floodgate-rl/floodgate/floodgatetest"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

// A mutant is a store with one bug, and the part of the suite that must
// catch it.
type mutant struct {
	name    string
	catcher string // the subtest of Run that must fail
	wrap    func(inner *memstore.Store) floodgate.Store
}

var mutants = []mutant{
	{"admits_one_more", "tables", func(in *memstore.Store) floodgate.Store { return &overAdmit{Store: in} }},
	{"peek_consumes", "tables", func(in *memstore.Store) floodgate.Store { return &peekConsumes{Store: in} }},
	{"ignores_now", "tables", func(in *memstore.Store) floodgate.Store { return &ignoresNow{Store: in} }},
	{"not_atomic", "race", func(in *memstore.Store) floodgate.Store { return &notAtomic{Store: in} }},
	{"batch_not_atomic", "batch", func(in *memstore.Store) floodgate.Store { return &batchOneByOne{Store: in} }},
	{"panics_on_invalid", "invalid", func(in *memstore.Store) floodgate.Store { return &panicky{Store: in} }},
	{"ignores_period", "tables", func(in *memstore.Store) floodgate.Store { return &ignoresPeriod{Store: in} }},
}

// TestRunCatchesMutants runs the suite on each mutant in a child process
// (a failing Run cannot be caught in this one) and wants it to fail in the
// subtest meant to catch it.
func TestRunCatchesMutants(t *testing.T) {
	if os.Getenv("FLOODGATETEST_MUTANT") != "" {
		t.Skip("in a child process")
	}
	for _, m := range mutants {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.CommandContext(t.Context(), os.Args[0],
				"-test.run=^TestMutant$/^"+m.catcher+"$", "-test.count=1", "-test.short", "-test.v")
			cmd.Env = append(os.Environ(), "FLOODGATETEST_MUTANT="+m.name)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite passed a store that %s:\n%s", strings.ReplaceAll(m.name, "_", " "), out)
			}
			if want := "--- FAIL: TestMutant/" + m.catcher; !strings.Contains(string(out), want) {
				t.Fatalf("the child failed, but not with %q:\n%s", want, out)
			}
		})
	}
}

// TestMutant runs the suite on the mutant named by FLOODGATETEST_MUTANT;
// it is the child of TestRunCatchesMutants.
func TestMutant(t *testing.T) {
	name := os.Getenv("FLOODGATETEST_MUTANT")
	if name == "" {
		t.Skip("run by TestRunCatchesMutants")
	}
	for _, m := range mutants {
		if m.name == name {
			floodgatetest.Run(t, func(t *testing.T) floodgate.Store {
				s := memstore.New(nil)
				t.Cleanup(func() { s.Close() })
				return m.wrap(s)
			})
			return
		}
	}
	t.Fatalf("no mutant %q", name)
}

// overAdmit admits every fifth request that the store denies.
type overAdmit struct {
	*memstore.Store
	mu sync.Mutex
	n  int
}

func (s *overAdmit) Apply(ctx context.Context, r floodgate.Request) (floodgate.Decision, error) {
	d, err := s.Store.Apply(ctx, r)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !d.Allowed && err == nil {
		if s.n++; s.n%5 == 0 {
			d.Allowed, d.RetryAfter = true, 0
		}
	}
	return d, err
}

// peekConsumes takes one unit for a peek.
type peekConsumes struct{ *memstore.Store }

func (s *peekConsumes) Apply(ctx context.Context, r floodgate.Request) (floodgate.Decision, error) {
	if r.Cost == 0 && r.Limit.Algorithm != floodgate.Concurrency {
		r.Cost = 1
	}
	return s.Store.Apply(ctx, r)
}

// ignoresNow decides every request at the store's clock.
type ignoresNow struct{ *memstore.Store }

func (s *ignoresNow) Apply(ctx context.Context, r floodgate.Request) (floodgate.Decision, error) {
	r.Now = time.Time{}
	return s.Store.Apply(ctx, r)
}

// ignoresPeriod keeps one state per key and algorithm: every limit gets
// the period of the first one seen on the key.
type ignoresPeriod struct {
	*memstore.Store
	mu      sync.Mutex
	periods map[string]algorithm.Params
}

func (s *ignoresPeriod) Apply(ctx context.Context, r floodgate.Request) (floodgate.Decision, error) {
	s.mu.Lock()
	if s.periods == nil {
		s.periods = map[string]algorithm.Params{}
	}
	k := r.Key + "|" + string(r.Limit.Algorithm)
	p, seen := s.periods[k]
	if !seen {
		p = r.Limit.Params()
		s.periods[k] = p
	}
	s.mu.Unlock()
	period := r.Limit.Period
	r.Limit.Period = time.Duration(p.Period) * time.Microsecond
	if r.Limit.Validate() != nil {
		r.Limit.Period = period
	}
	return s.Store.Apply(ctx, r)
}

// notAtomic reads the state, decides, and writes it back in three steps,
// as two instances counting in one Redis with GET and SET would.
type notAtomic struct {
	*memstore.Store
	mu    sync.Mutex
	state map[string]algorithm.FixedWindow
}

func (s *notAtomic) Apply(ctx context.Context, r floodgate.Request) (floodgate.Decision, error) {
	if r.Limit.Algorithm != floodgate.FixedWindow || r.Now.IsZero() || r.Validate() != nil {
		return s.Store.Apply(ctx, r)
	}
	s.mu.Lock()
	if s.state == nil {
		s.state = map[string]algorithm.FixedWindow{}
	}
	st := s.state[r.Key]
	s.mu.Unlock()
	runtime.Gosched()
	st, d := st.Step(r.Limit.Params(), r.Now.UnixMicro(), r.Cost)
	s.mu.Lock()
	s.state[r.Key] = st
	s.mu.Unlock()
	return floodgate.FromAlgorithm(d, r.Now.UnixMicro()), nil
}

// batchOneByOne applies a batch one request after the other.
type batchOneByOne struct{ *memstore.Store }

func (s *batchOneByOne) ApplyBatch(ctx context.Context, rs []floodgate.Request) ([]floodgate.Decision, error) {
	ds := make([]floodgate.Decision, len(rs))
	for i, r := range rs {
		d, err := s.Apply(ctx, r)
		if err != nil {
			return nil, err
		}
		ds[i] = d
	}
	return ds, nil
}

// panicky panics on a negative cost.
type panicky struct{ *memstore.Store }

func (s *panicky) Apply(ctx context.Context, r floodgate.Request) (floodgate.Decision, error) {
	if r.Cost < 0 {
		panic("negative cost")
	}
	return s.Store.Apply(ctx, r)
}
