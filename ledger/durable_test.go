package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/floodgatetest"
	"github.com/floodgate-rl/floodgate/internal/pgtest"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/ledger"
	"github.com/floodgate-rl/floodgate/ledger/postgres"
	"github.com/floodgate-rl/floodgate/store/memstore"
	"github.com/floodgate-rl/floodgate/store/redisstore"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// paid is the durable quota of these tests: 100 units a day.
var paid = floodgate.Limit{Limit: 100, Period: 24 * time.Hour, Durable: true}

// durableLimiter is a Limiter over s with the ledger lg and clock.
func durableLimiter(t *testing.T, s floodgate.Store, lg ledger.Store, clock floodgate.Clock, policy floodgate.FailurePolicy) (*floodgate.Limiter, *ledger.Accounts) {
	t.Helper()
	acc := ledger.Durable(lg, nil)
	return durableOver(t, s, acc, &ledger.WrapOptions{Policy: policy}, &floodgate.Options{Clock: clock}), acc
}

// durableOver is a Limiter with options lo over s wrapped to account its
// durable quotas in lg with options o.
func durableOver(t *testing.T, s floodgate.Store, lg ledger.Ledger, o *ledger.WrapOptions, lo *floodgate.Options) *floodgate.Limiter {
	t.Helper()
	q, err := ledger.Wrap(s, lg, o)
	if err != nil {
		t.Fatal(err)
	}
	l, err := floodgate.New(q, lo)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// use reserves n units of key, commits actual of them, and reports
// whether the reserve was allowed.
func use(t *testing.T, l *floodgate.Limiter, key string, n, actual int64) bool {
	t.Helper()
	res, d, err := l.Reserve(t.Context(), key, paid, n, nil)
	if err != nil {
		t.Fatalf("reserve %d of %s: %v", n, key, err)
	}
	if !d.Allowed {
		return false
	}
	if _, err := res.Commit(t.Context(), actual); err != nil {
		t.Fatalf("commit %d of %s: %v", actual, key, err)
	}
	return true
}

// ledgerUnits is what lg holds for key in the window of now.
func ledgerUnits(t *testing.T, lg ledger.Store, key string, now time.Time) int64 {
	t.Helper()
	u, err := lg.Usage(t.Context(), key, paid.Period, now)
	if err != nil {
		t.Fatal(err)
	}
	return u.Units
}

// TestDurableRebuildsLostCounter: a durable quota's commits are in the
// ledger, and when the store loses the counter (a new, empty store: a
// Redis restarted without persistence) the next reserve is decided on the
// ledger's units, not on an empty window. Without the ledger, the same
// loss re-admits the whole quota.
func TestDurableRebuildsLostCounter(t *testing.T) {
	clock := floodgatetest.NewFakeClock(base.Add(3 * time.Hour))
	lg := openSQLite(t)
	s1 := memstore.New(&memstore.Options{Clock: clock, SweepInterval: -1})
	defer s1.Close()
	l1, acc := durableLimiter(t, s1, lg, clock, "")
	for i := range 6 {
		if !use(t, l1, "tenant", 20, 10) {
			t.Fatalf("reserve %d of 20 denied with %d committed", i, 10*i)
		}
	}
	if got := ledgerUnits(t, lg, "tenant", clock.Now()); got != 60 {
		t.Fatalf("ledger holds %d units, want 60", got)
	}

	// The store is lost: a new, empty one.
	s2 := memstore.New(&memstore.Options{Clock: clock, SweepInterval: -1})
	defer s2.Close()
	l2, _ := durableLimiter(t, s2, lg, clock, "")
	if use(t, l2, "tenant", 41, 41) {
		t.Fatal("41 units admitted after the loss with 60 of 100 committed: the counter was not rebuilt")
	}
	if !use(t, l2, "tenant", 40, 40) {
		t.Fatal("40 units denied with 60 of 100 committed")
	}
	if use(t, l2, "tenant", 1, 1) {
		t.Fatal("a unit admitted beyond the quota")
	}
	if got := ledgerUnits(t, lg, "tenant", clock.Now()); got != 100 {
		t.Fatalf("ledger holds %d units, want 100", got)
	}
	if st := acc.Stats(); st.Written != 6 || st.RecordFailures != 0 {
		t.Errorf("stats of the first limiter %+v, want 6 entries written", st)
	}

	// The same loss without a ledger: the whole quota again.
	s3 := memstore.New(&memstore.Options{Clock: clock, SweepInterval: -1})
	defer s3.Close()
	plain, err := floodgate.New(s3, &floodgate.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	notDurable := paid
	notDurable.Durable = false
	if d, err := plain.AllowN(t.Context(), "tenant", notDurable, 100); err != nil || !d.Allowed {
		t.Fatalf("without a ledger, a lost counter admits 100 again: %+v, %v", d, err)
	}

	// A new window starts from zero.
	clock.Advance(24 * time.Hour)
	if !use(t, l2, "tenant", 100, 100) {
		t.Fatal("a new window denied the whole quota")
	}
}

// TestDurableNeedsLedger: a durable limit on a Limiter without a ledger is
// an invalid limit naming the field, and so is a durable limit of an
// algorithm other than a fixed window.
func TestDurableNeedsLedger(t *testing.T) {
	s := memstore.New(nil)
	defer s.Close()
	l, err := floodgate.New(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.Allow(t.Context(), "k", paid)
	var fe *floodgate.FieldError
	if !errors.Is(err, floodgate.ErrInvalidLimit) || !errors.As(err, &fe) || fe.Field != "durable" {
		t.Errorf("Allow of a durable limit without a ledger: %v, want an invalid limit naming durable", err)
	}
	for _, lim := range []floodgate.Limit{
		{Algorithm: floodgate.GCRA, Limit: 10, Period: time.Second, Durable: true},
		{Limit: 10, Period: time.Second, Durable: true, LocalBudget: 5},
		{Limit: 10, Period: time.Second, Durable: true, Global: true},
	} {
		err := lim.Validate()
		if !errors.Is(err, floodgate.ErrInvalidLimit) || !errors.As(err, &fe) || fe.Field != "durable" {
			t.Errorf("%v: Validate = %v, want an error naming durable", lim, err)
		}
	}
}

// TestDurableCommitOnce: a commit retried ten times at once, from ten
// goroutines, is one entry in the ledger and one charge in the store.
func TestDurableCommitOnce(t *testing.T) {
	clock := floodgatetest.NewFakeClock(base.Add(time.Hour))
	lg := openSQLite(t)
	s := memstore.New(&memstore.Options{Clock: clock, SweepInterval: -1})
	defer s.Close()
	l, acc := durableLimiter(t, s, lg, clock, "")
	testCommitOnce(t, l, acc, lg, clock)
}

func testCommitOnce(t *testing.T, l *floodgate.Limiter, acc *ledger.Accounts, lg ledger.Store, clock floodgate.Clock) {
	res, d, err := l.Reserve(t.Context(), "once", paid, 30, nil)
	if err != nil || !d.Allowed {
		t.Fatalf("reserve: %+v, %v", d, err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 10)
	for i := range errs {
		wg.Go(func() {
			// Each retry is the reservation as a service rebuilds it from
			// its ID, items and windows.
			r := l.Reservation(res.ID, res.Items, false)
			r.Windows = res.Windows
			_, errs[i] = r.Commit(context.Background(), 25)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("commit %d: %v", i, err)
		}
	}
	u, err := lg.Usage(t.Context(), "once", paid.Period, clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if u.Units != 25 || u.Entries != 1 {
		t.Errorf("ledger holds %d units in %d entries, want 25 in 1", u.Units, u.Entries)
	}
	// Each retry that read the hold settled already records nothing; those
	// that read it held each write, and the ledger keeps one.
	if st := acc.Stats(); st.Written != 1 || st.Records < 1 || st.Records > 10 {
		t.Errorf("stats %+v, want 1 written, in 1 to 10 records", st)
	}
	d, err = l.Peek(t.Context(), "once", paid)
	if err != nil || d.Remaining != 75 {
		t.Errorf("after the commits the counter has %d remaining (%v), want 75", d.Remaining, err)
	}
}

// TestDurableDecide: Allow and Decide of a durable quota record each
// admitted decision in the ledger before answering it; a denied one
// records nothing.
func TestDurableDecide(t *testing.T) {
	clock := floodgatetest.NewFakeClock(base.Add(time.Hour))
	lg := openSQLite(t)
	s := memstore.New(&memstore.Options{Clock: clock, SweepInterval: -1})
	defer s.Close()
	l, _ := durableLimiter(t, s, lg, clock, "")
	for i := range 10 {
		d, err := l.AllowN(t.Context(), "api", paid, 10)
		if err != nil || !d.Allowed {
			t.Fatalf("AllowN %d: %+v, %v", i, d, err)
		}
	}
	if d, err := l.Allow(t.Context(), "api", paid); err != nil || d.Allowed {
		t.Fatalf("Allow beyond the quota: %+v, %v", d, err)
	}
	perSecond := floodgate.Limit{Limit: 1000, Period: time.Second}
	out, err := l.DecideAll(t.Context(), []floodgate.Item{
		{Key: "api2", Limit: paid, Cost: 7},
		{Key: "api2", Limit: perSecond, Cost: 3},
	})
	if err != nil || !out[0].Decision.Allowed || !out[1].Decision.Allowed {
		t.Fatalf("DecideAll: %+v, %v", out, err)
	}
	out, err = l.Decide(t.Context(), []floodgate.Item{
		{Key: "api3", Limit: perSecond, Cost: 1},
		{Key: "api3", Limit: paid, Cost: 5},
		{Key: "api", Limit: paid, Cost: 1},
	})
	if err != nil || !out[0].Decision.Allowed || !out[1].Decision.Allowed || out[2].Decision.Allowed {
		t.Fatalf("Decide: %+v, %v", out, err)
	}
	for key, want := range map[string]int64{"api": 100, "api2": 7, "api3": 5} {
		if got := ledgerUnits(t, lg, key, clock.Now()); got != want {
			t.Errorf("ledger holds %d units of %s, want %d", got, key, want)
		}
	}
	if d, err := l.Peek(t.Context(), "api2", perSecond); err != nil || d.Remaining != 997 {
		t.Errorf("the plain limit of DecideAll has %d remaining (%v), want 997", d.Remaining, err)
	}
}

// TestDurableLedgerDown: with the ledger unreachable, a durable quota's
// counter that must be rebuilt is denied under the default policy and
// decided on the counter under FailOpen; a commit is never acknowledged
// without the ledger, and its retry once the ledger is back records it.
func TestDurableLedgerDown(t *testing.T) {
	clock := floodgatetest.NewFakeClock(base.Add(time.Hour))
	lg := &switchable{Store: openSQLite(t)}
	s := memstore.New(&memstore.Options{Clock: clock, SweepInterval: -1})
	defer s.Close()
	closed, _ := durableLimiter(t, s, lg, clock, "")
	open, _ := durableLimiter(t, s, lg, clock, floodgate.FailOpen)

	res, d, err := closed.Reserve(t.Context(), "k", paid, 10, nil)
	if err != nil || !d.Allowed {
		t.Fatalf("reserve with the ledger up: %+v, %v", d, err)
	}
	lg.down.Store(true)
	if _, err := res.Commit(t.Context(), 10); !errors.Is(err, ledger.ErrLedger) {
		t.Fatalf("commit with the ledger down: %v, want ErrLedger", err)
	}
	// The counter is live (the hold): reserves go on without the ledger.
	if _, d, err := closed.Reserve(t.Context(), "k", paid, 10, nil); err != nil || !d.Allowed {
		t.Fatalf("reserve on a live counter with the ledger down: %+v, %v", d, err)
	}
	// A counter that must be read from the ledger (a new key) is denied
	// by default, and decided on the counter under FailOpen.
	if _, d, err := closed.Reserve(t.Context(), "new", paid, 1, nil); !errors.Is(err, ledger.ErrLedger) || d.Allowed {
		t.Fatalf("reserve of a new window with the ledger down: %+v, %v, want denied with ErrLedger", d, err)
	}
	if d, err := closed.Allow(t.Context(), "new", paid); !errors.Is(err, ledger.ErrLedger) || d.Allowed {
		t.Fatalf("Allow of a new window with the ledger down: %+v, %v, want denied with ErrLedger", d, err)
	}
	if _, d, err := open.Reserve(t.Context(), "new", paid, 1, nil); err != nil || !d.Allowed {
		t.Fatalf("FailOpen reserve of a new window with the ledger down: %+v, %v", d, err)
	}
	// A store failure policy never answers a ledger's failure: fail_open
	// for the store still denies what the ledger must check.
	storeOpen := durableOver(t, s, ledger.Durable(lg, nil), nil, &floodgate.Options{Clock: clock, FailurePolicy: floodgate.FailOpen})
	if _, d, err := storeOpen.Reserve(t.Context(), "new2", paid, 1, nil); !errors.Is(err, ledger.ErrLedger) || d.Allowed {
		t.Fatalf("reserve with the store's policy fail_open and the ledger down: %+v, %v, want denied with ErrLedger", d, err)
	}
	if out, err := storeOpen.Decide(t.Context(), []floodgate.Item{{Key: "new2", Limit: paid, Cost: 1}}); err != nil || out[0].Decision.Allowed || !errors.Is(out[0].Err, ledger.ErrLedger) {
		t.Fatalf("Decide with the store's policy fail_open and the ledger down: %+v, %v, want denied with ErrLedger", out, err)
	}
	lg.down.Store(false)
	if sts, err := res.Commit(t.Context(), 10); err != nil || sts[0].Replayed {
		t.Fatalf("commit retried with the ledger back: %+v, %v", sts, err)
	}
	if got := ledgerUnits(t, lg, "k", clock.Now()); got != 10 {
		t.Errorf("ledger holds %d units, want 10", got)
	}
}

// switchable is a ledger that can be made unreachable.
type switchable struct {
	ledger.Store
	down atomic.Bool
}

var errDown = errors.New("ledger unreachable")

func (s *switchable) Record(ctx context.Context, es []ledger.Entry) ([]bool, error) {
	if s.down.Load() {
		return nil, errDown
	}
	return s.Store.Record(ctx, es)
}

func (s *switchable) Usage(ctx context.Context, key string, period time.Duration, at time.Time) (ledger.Usage, error) {
	if s.down.Load() {
		return ledger.Usage{}, errDown
	}
	return s.Store.Usage(ctx, key, period, at)
}

// TestDurableRedis is the rebuild against real Redis: standalone, where
// the loss is a FLUSHALL, and a Cluster, where one reservation spans two
// slots and only one slot's master lost its counter: the other slot's
// hold, made before the lost one answered, is undone, and after the
// rebuild each key is charged once.
func TestDurableRedis(t *testing.T) {
	t.Run("standalone", func(t *testing.T) {
		r := redistest.Standalone(t)
		s := openRedis(t, "redis://"+r.Addr)
		lg := openSQLite(t)
		l, _ := durableLimiter(t, s, lg, nil, "")
		for range 3 {
			if !use(t, l, "tenant", 20, 20) {
				t.Fatal("denied below the quota")
			}
		}
		r.MustCLI(t, "FLUSHALL")
		if use(t, l, "tenant", 41, 41) {
			t.Fatal("41 units admitted after FLUSHALL with 60 of 100 committed: the counter was not rebuilt")
		}
		if !use(t, l, "tenant", 40, 40) {
			t.Fatal("40 units denied with 60 of 100 committed")
		}
		if got := ledgerUnits(t, lg, "tenant", time.Now()); got != 100 {
			t.Errorf("ledger holds %d, want 100", got)
		}
		testAlteredItems(t, l, lg)
	})
	t.Run("cluster", func(t *testing.T) {
		c := redistest.StartCluster(t)
		s := openRedis(t, "redis-cluster://"+strings.Join(c.Addrs(), ","))
		lg := openSQLite(t)
		l, _ := durableLimiter(t, s, lg, nil, "")
		// Two keys on two masters.
		a := "tenant-a"
		ma, err := c.MasterFor(t.Context(), s.Key(a, paid))
		if err != nil {
			t.Fatal(err)
		}
		var b string
		for i := 0; b == "" && i < 100; i++ {
			k := fmt.Sprintf("tenant-%d", i)
			mk, err := c.MasterFor(t.Context(), s.Key(k, paid))
			if err != nil {
				t.Fatal(err)
			}
			if mk != ma {
				b = k
			}
		}
		if b == "" {
			t.Fatal("no key on another master than tenant-a's in 100")
		}
		items := func(n int64) []floodgate.Item {
			return []floodgate.Item{{Key: a, Limit: paid, Cost: n}, {Key: b, Limit: paid, Cost: n}}
		}
		res, d, _, err := l.ReserveEach(t.Context(), items(30), nil)
		if err != nil || !d.Allowed {
			t.Fatalf("reserve: %+v, %v", d, err)
		}
		if _, err := res.Commit(t.Context(), 30); err != nil {
			t.Fatal(err)
		}
		ma.MustCLI(t, "FLUSHALL") // a's counter is lost, b's is not
		res, d, _, err = l.ReserveEach(t.Context(), items(10), nil)
		if err != nil || !d.Allowed {
			t.Fatalf("reserve after the loss: %+v, %v", d, err)
		}
		if _, err := res.Commit(t.Context(), 10); err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{a, b} {
			d, err := l.Peek(t.Context(), key, paid)
			if err != nil || d.Remaining != 60 {
				t.Errorf("%s has %d remaining after 40 committed (%v), want 60", key, d.Remaining, err)
			}
			if got := ledgerUnits(t, lg, key, time.Now()); got != 40 {
				t.Errorf("ledger holds %d of %s, want 40", got, key)
			}
		}
	})
}

func openRedis(t *testing.T, url string) *redisstore.Store {
	t.Helper()
	s, err := redisstore.Open(t.Context(), url, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// testAlteredItems: a commit whose items say the limit is not durable (a
// service's reservation token altered by its client) is recorded all the
// same, because the store recorded the hold as durable.
func testAlteredItems(t *testing.T, l *floodgate.Limiter, lg ledger.Store) {
	t.Helper()
	res, d, err := l.Reserve(t.Context(), "altered", paid, 10, nil)
	if err != nil || !d.Allowed {
		t.Fatalf("reserve: %+v, %v", d, err)
	}
	items := slices.Clone(res.Items)
	items[0].Limit.Durable = false
	sts, err := l.Reservation(res.ID, items, false).Commit(t.Context(), 7)
	if err != nil || !sts[0].Durable {
		t.Fatalf("commit of altered items: %+v, %v, want a durable settlement", sts, err)
	}
	if got := ledgerUnits(t, lg, "altered", time.Now()); got != 7 {
		t.Errorf("the ledger holds %d units of the altered commit, want 7", got)
	}
}

func TestDurableAlteredItems(t *testing.T) {
	lg := openSQLite(t)
	s := memstore.New(nil)
	defer s.Close()
	l, _ := durableLimiter(t, s, lg, nil, "")
	testAlteredItems(t, l, lg)
}

// TestDurableGroupCommit: commits that arrive while the ledger writes are
// written together: 64 concurrent durable commits on a ledger whose
// writes are slow take fewer writes than commits, and every one is in
// the ledger once.
func TestDurableGroupCommit(t *testing.T) {
	// A write long enough that the 64 callers, started at once, reach the
	// queue while the first is written, however slow the machine.
	lg := &slowLedger{Store: openSQLite(t), delay: 50 * time.Millisecond}
	s := memstore.New(nil)
	defer s.Close()
	acc := ledger.Durable(lg, nil)
	l := durableOver(t, s, acc, nil, nil)
	big := paid
	big.Limit = 1000
	var wg sync.WaitGroup
	errs := make([]error, 64)
	for i := range errs {
		wg.Go(func() {
			res, d, err := l.Reserve(context.Background(), fmt.Sprintf("k%d", i%8), big, 2, nil)
			if err == nil && !d.Allowed {
				err = errors.New("denied")
			}
			if err == nil {
				_, err = res.Commit(context.Background(), 1)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
	}
	st := acc.Stats()
	if st.Written != 64 || st.Records != 64 || st.Writes >= st.Records {
		t.Errorf("stats %+v: want 64 commits written in fewer than 64 writes", st)
	}
	var total int64
	for k := range 8 {
		total += ledgerUnits(t, lg, fmt.Sprintf("k%d", k), time.Now())
	}
	if total != 64 {
		t.Errorf("the ledger holds %d units, want 64", total)
	}
	t.Logf("64 commits in %d writes", st.Writes)
}

// slowLedger is a ledger whose writes take delay longer.
type slowLedger struct {
	ledger.Store
	delay time.Duration
}

func (s *slowLedger) Record(ctx context.Context, es []ledger.Entry) ([]bool, error) {
	time.Sleep(s.delay) // a disk flush or a round trip
	return s.Store.Record(ctx, es)
}

// TestDurablePostgres: the durable quota on a PostgreSQL ledger: ten
// concurrent commits of one reservation are one entry, and a lost counter
// is rebuilt from it.
func TestDurablePostgres(t *testing.T) {
	server := pgtest.Shared(t)
	lg, err := postgres.Open(t.Context(), server.NewDatabase(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	clock := floodgatetest.NewFakeClock(base.Add(time.Hour))
	s := memstore.New(&memstore.Options{Clock: clock, SweepInterval: -1})
	defer s.Close()
	l, acc := durableLimiter(t, s, lg, clock, "")
	testCommitOnce(t, l, acc, lg, clock)

	lost := memstore.New(&memstore.Options{Clock: clock, SweepInterval: -1})
	defer lost.Close()
	l2, _ := durableLimiter(t, lost, lg, clock, "")
	if use(t, l2, "once", 76, 76) {
		t.Fatal("76 units admitted after the loss with 25 of 100 committed")
	}
	if !use(t, l2, "once", 75, 75) {
		t.Fatal("75 units denied after the loss with 25 of 100 committed")
	}
}

// TestDurableStoreClock: the ledger is read at the store's time, by which
// the store counts its windows, not the process's: a memory store whose
// clock is ten days behind a Limiter without a clock (as Redis's TIME may
// differ from the application's) rebuilds a lost counter from its own
// window.
func TestDurableStoreClock(t *testing.T) {
	clock := floodgatetest.NewFakeClock(base.Add(time.Hour)) // 2026-01-05, far from today
	lg := openSQLite(t)
	big := paid
	big.Limit = 300
	s1 := memstore.New(&memstore.Options{Clock: clock, SweepInterval: -1})
	defer s1.Close()
	l1, _ := durableLimiter(t, s1, lg, nil, "")
	if d, err := l1.AllowN(t.Context(), "skew", big, 200); err != nil || !d.Allowed {
		t.Fatalf("AllowN 200: %+v, %v", d, err)
	}
	s2 := memstore.New(&memstore.Options{Clock: clock, SweepInterval: -1})
	defer s2.Close()
	l2, _ := durableLimiter(t, s2, lg, nil, "")
	if d, err := l2.AllowN(t.Context(), "skew", big, 101); err != nil || d.Allowed {
		t.Fatalf("AllowN 101 after the loss with 200 of 300 committed in the store's window: %+v, %v, want denied", d, err)
	}
	if d, err := l2.AllowN(t.Context(), "skew", big, 100); err != nil || !d.Allowed {
		t.Fatalf("AllowN 100 after the loss: %+v, %v", d, err)
	}
}

// TestDurableLedgerLate: a ledger slower than WrapOptions.Timeout
// denies (ErrLedger) and never bills what the counter does not count: the
// hold of a denied decision stays charged; a commit being written when its
// caller gave up may land, charged on the counter too; one that waited
// behind that write is dropped unwritten.
func TestDurableLedgerLate(t *testing.T) {
	lg := &gatedLedger{Store: openSQLite(t)}
	s := memstore.New(nil)
	defer s.Close()
	acc := ledger.Durable(lg, nil)
	l := durableOver(t, s, acc, &ledger.WrapOptions{Timeout: 50 * time.Millisecond}, nil)
	// Give both keys a live counter first (a new window reads the ledger),
	// through a Limiter with the default ledger deadline: an SQLite write
	// that waits for a slow disk must not fail the set-up.
	setup, _ := durableLimiter(t, s, lg, nil, "")
	for _, k := range []string{"late-a", "late-b"} {
		if d, err := setup.AllowN(t.Context(), k, paid, 1); err != nil || !d.Allowed {
			t.Fatalf("AllowN 1 of %s: %+v, %v", k, d, err)
		}
	}
	lg.gate() // from now on a write waits for release
	late := func(k string) {
		d, err := l.AllowN(context.Background(), k, paid, 7)
		if !errors.Is(err, ledger.ErrLedger) || d.Allowed {
			t.Errorf("AllowN 7 of %s on a late ledger: %+v, %v, want denied with ErrLedger", k, d, err)
		}
	}
	late("late-a") // its write is in progress, held at the gate
	<-lg.entered
	late("late-b") // queued behind it, given up before a write takes it
	lg.release()
	deadline := time.Now().Add(10 * time.Second)
	for (acc.Stats().Dropped == 0 || acc.Stats().Writes == 0) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) // polling the write's end, bounded
	}
	if st := acc.Stats(); st.Dropped != 1 || st.Writes != 1 {
		t.Errorf("stats %+v: want the queued commit dropped and the gated one written (1 write)", st)
	}
	for k, want := range map[string]int64{"late-a": 8, "late-b": 1} {
		billed := ledgerUnits(t, lg, k, time.Now())
		d, err := l.Peek(t.Context(), k, paid)
		if err != nil {
			t.Fatal(err)
		}
		if counted := d.Limit - d.Remaining; billed != want || counted != 8 {
			t.Errorf("%s: the ledger bills %d units (want %d), the counter counts %d (want 8: the denied hold stays charged)", k, billed, want, counted)
		}
	}
}

// gatedLedger is a ledger whose writes, once gated, wait for release.
type gatedLedger struct {
	ledger.Store
	mu      sync.Mutex
	gated   chan struct{} // closed by release; nil before gate
	entered chan struct{}
}

func (g *gatedLedger) gate() {
	g.mu.Lock()
	g.gated, g.entered = make(chan struct{}), make(chan struct{}, 1)
	g.mu.Unlock()
}

func (g *gatedLedger) release() { close(g.gated) }

func (g *gatedLedger) Record(ctx context.Context, es []ledger.Entry) ([]bool, error) {
	g.mu.Lock()
	gated, entered := g.gated, g.entered
	g.mu.Unlock()
	if gated != nil {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-gated
	}
	return g.Store.Record(ctx, es)
}
