package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/floodgatetest"
	"github.com/floodgate-rl/floodgate/ledger"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

// TestWrapOptions: Wrap refuses what it cannot serve, naming it.
func TestWrapOptions(t *testing.T) {
	s := memstore.New(nil)
	defer s.Close()
	lg := ledger.Durable(openSQLite(t), nil)
	for _, c := range []struct {
		name  string
		store floodgate.Store
		l     ledger.Ledger
		o     *ledger.WrapOptions
		want  string
	}{
		{"nil store", nil, lg, nil, "nil store"},
		{"nil ledger", s, nil, nil, "nil store or ledger"},
		{"no reservations", applyOnly{s}, lg, nil, "no reservations"},
		{"local policy", s, lg, &ledger.WrapOptions{Policy: floodgate.FailLocal}, `ledger policy "local"`},
		{"negative timeout", s, lg, &ledger.WrapOptions{Timeout: -time.Second}, "negative ledger timeout"},
	} {
		if _, err := ledger.Wrap(c.store, c.l, c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Wrap = %v, want an error naming %q", c.name, err, c.want)
		}
	}
	q, err := ledger.Wrap(s, lg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if q.Policy() != floodgate.FailClosed || q.Ledger() != lg || q.Store() != s || !q.DurableQuotas() {
		t.Errorf("Wrap(s, lg, nil): policy %q, ledger %v, store %v", q.Policy(), q.Ledger(), q.Store())
	}
}

// applyOnly hides every ability of a store but Apply.
type applyOnly struct{ s floodgate.Store }

func (a applyOnly) Apply(ctx context.Context, r floodgate.Request) (floodgate.Decision, error) {
	return a.s.Apply(ctx, r)
}

// TestQuotasDeadlines: under a Limiter with a Timeout, each call of the
// wrapped store gets the Limiter's deadline, and each ledger call its own
// (WrapOptions.Timeout), never the store's: a ledger write slower than the
// store's deadline is not a failure.
func TestQuotasDeadlines(t *testing.T) {
	clock := floodgatetest.NewFakeClock(base.Add(time.Hour))
	s := memstore.New(&memstore.Options{Clock: clock, SweepInterval: -1})
	defer s.Close()
	watch := &deadlines{Store: s}
	lg := &deadlineLedger{Ledger: ledger.Durable(openSQLite(t), nil)}
	q, err := ledger.Wrap(watch, lg, &ledger.WrapOptions{Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	l, err := floodgate.New(q, &floodgate.Options{Clock: clock, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if d, err := l.AllowN(t.Context(), "k", paid, 3); err != nil || !d.Allowed {
		t.Fatalf("AllowN: %+v, %v", d, err)
	}
	res, d, err := l.Reserve(t.Context(), "k", paid, 5, nil)
	if err != nil || !d.Allowed {
		t.Fatalf("Reserve: %+v, %v", d, err)
	}
	if _, err := res.Commit(t.Context(), 4); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	now := time.Now()
	watch.mu.Lock()
	defer watch.mu.Unlock()
	lg.mu.Lock()
	defer lg.mu.Unlock()
	// AllowN: reserve (Lost), reserve, settle; Reserve: reserve; Commit: settle.
	if len(watch.got) != 5 || lg.records != 2 || len(lg.got) != 3 {
		t.Fatalf("%d store calls, %d ledger writes, %d ledger calls; want 5, 2 and 3", len(watch.got), lg.records, len(lg.got))
	}
	for i, dl := range watch.got {
		if dl.IsZero() || dl.After(now.Add(time.Minute)) {
			t.Errorf("store call %d: deadline %v, want one within the Limiter's Timeout of a minute", i, dl)
		}
	}
	for i, dl := range lg.got {
		if dl.Before(now.Add(50 * time.Minute)) {
			t.Errorf("ledger call %d: deadline %v, want WrapOptions.Timeout's hour, not the store's minute", i, dl)
		}
	}
}

// deadlines records the deadline of each Reserve and Settle of a store.
type deadlines struct {
	floodgate.Store
	mu  sync.Mutex
	got []time.Time
}

func (d *deadlines) note(ctx context.Context) {
	dl, _ := ctx.Deadline()
	d.mu.Lock()
	d.got = append(d.got, dl)
	d.mu.Unlock()
}

func (d *deadlines) Reserve(ctx context.Context, r floodgate.HoldRequest) (floodgate.HoldResult, error) {
	d.note(ctx)
	return d.Store.(floodgate.Reserver).Reserve(ctx, r)
}

func (d *deadlines) Settle(ctx context.Context, r floodgate.SettleRequest) ([]floodgate.Settlement, error) {
	d.note(ctx)
	return d.Store.(floodgate.Reserver).Settle(ctx, r)
}

// deadlineLedger records the deadline of each call of a ledger.
type deadlineLedger struct {
	ledger.Ledger
	mu      sync.Mutex
	got     []time.Time
	records int
}

func (d *deadlineLedger) note(ctx context.Context, record bool) {
	dl, _ := ctx.Deadline()
	d.mu.Lock()
	d.got = append(d.got, dl)
	if record {
		d.records++
	}
	d.mu.Unlock()
}

func (d *deadlineLedger) Record(ctx context.Context, cs []ledger.Commit) error {
	d.note(ctx, true)
	return d.Ledger.Record(ctx, cs)
}

func (d *deadlineLedger) Used(ctx context.Context, key string, limit floodgate.Limit, at time.Time) (time.Time, int64, error) {
	d.note(ctx, false)
	return d.Ledger.Used(ctx, key, limit, at)
}

// TestQuotasStoreFailure: a failure of the wrapped store is the store's,
// answered by the Limiter's failure policy; the ledger's never is.
func TestQuotasStoreFailure(t *testing.T) {
	q, err := ledger.Wrap(downStore{}, ledger.Durable(openSQLite(t), nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	open, err := floodgate.New(q, &floodgate.Options{FailurePolicy: floodgate.FailOpen})
	if err != nil {
		t.Fatal(err)
	}
	if d, err := open.AllowN(t.Context(), "k", paid, 1); !errors.Is(err, floodgate.ErrStore) || errors.Is(err, ledger.ErrLedger) || !d.Allowed {
		t.Errorf("AllowN over a store that is down, fail_open: %+v, %v; want allowed with the store's error", d, err)
	}
}

// downStore is a store that cannot reach its server.
type downStore struct{}

var errStoreDown = fmt.Errorf("%w: connection refused", floodgate.ErrStore)

func (downStore) Apply(context.Context, floodgate.Request) (floodgate.Decision, error) {
	return floodgate.Decision{}, errStoreDown
}

func (downStore) Reserve(context.Context, floodgate.HoldRequest) (floodgate.HoldResult, error) {
	return floodgate.HoldResult{}, errStoreDown
}

func (downStore) Settle(context.Context, floodgate.SettleRequest) ([]floodgate.Settlement, error) {
	return nil, errStoreDown
}

// TestQuotasKeepStoreDeadlineRule: under a Limiter's Timeout, Quotas
// keeps the wrapped store's own rule for its deadline (issue 30 item 1:
// the first reserve of a durable key, two scripts and a ledger read,
// failed against the store's deadline on a busy machine): the memory
// store gets none, however short the Timeout, and a store that bounds its
// calls itself (WithTimeout, as the Redis store does from each script's
// send) is given the Timeout that way, with no deadline of Quotas' own.
func TestQuotasKeepStoreDeadlineRule(t *testing.T) {
	clock := floodgatetest.NewFakeClock(base.Add(time.Hour))
	s := memstore.New(&memstore.Options{Clock: clock, SweepInterval: -1})
	defer s.Close()
	q, err := ledger.Wrap(s, ledger.Durable(openSQLite(t), nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := floodgate.New(q, &floodgate.Options{Clock: clock, Timeout: time.Nanosecond, FailurePolicy: floodgate.FailClosed})
	if err != nil {
		t.Fatal(err)
	}
	if d, err := l.AllowN(t.Context(), "k", paid, 3); err != nil || !d.Allowed {
		t.Errorf("the first units of a durable key on the memory store under a 1 ns Timeout: %+v, %v; want the store's admission", d, err)
	}

	s2 := memstore.New(&memstore.Options{Clock: clock, SweepInterval: -1})
	defer s2.Close()
	own := &timedStore{deadlines: deadlines{Store: s2}}
	q2, err := ledger.Wrap(own, ledger.Durable(openSQLite(t), nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	l2, err := floodgate.New(q2, &floodgate.Options{Clock: clock, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if d, err := l2.AllowN(t.Context(), "k", paid, 3); err != nil || !d.Allowed {
		t.Fatalf("AllowN: %+v, %v", d, err)
	}
	if own.timeout != time.Minute {
		t.Errorf("the store's WithTimeout got %v, want the Limiter's minute", own.timeout)
	}
	own.mu.Lock()
	defer own.mu.Unlock()
	if len(own.got) == 0 {
		t.Fatal("no call reached the store WithTimeout returned")
	}
	for i, dl := range own.got {
		if !dl.IsZero() {
			t.Errorf("store call %d: deadline %v from Quotas, want none: the store bounds its calls itself", i, dl)
		}
	}
}

// timedStore is a store that bounds its own calls: WithTimeout records
// the timeout and returns the store, whose Reserve and Settle record the
// deadline they got.
type timedStore struct {
	deadlines
	timeout time.Duration
}

func (s *timedStore) WithTimeout(d time.Duration) floodgate.Store {
	s.timeout = d
	return &s.deadlines
}
