package server

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/loop"
	"github.com/floodgate-rl/floodgate/ledger"
	"github.com/floodgate-rl/floodgate/ledger/sqlite"
	"github.com/floodgate-rl/floodgate/store/memstore"
	dto "github.com/prometheus/client_model/go"
)

const syncYAML = `
domain: api
descriptors:
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 1000}
`

// testTicker is a loop.Ticker the test drives: a send on c is one tick,
// received by the loop only once its previous task has returned.
type testTicker struct {
	every   time.Duration
	c       chan time.Time
	stopped chan struct{}
}

func (k *testTicker) C() <-chan time.Time { return k.c }
func (k *testTicker) Stop()               { close(k.stopped) }

// failingStore is a real OverrideStore whose reads of the version fail
// while fail is set, as a ledger that is down.
type failingStore struct {
	ledger.OverrideStore
	fail atomic.Bool
}

var errLedgerDown = errors.New("ledger down (test)")

func (f *failingStore) OverrideVersion(ctx context.Context) (int64, error) {
	if f.fail.Load() {
		return 0, errLedgerDown
	}
	return f.OverrideStore.OverrideVersion(ctx)
}

// lockedBuffer is a bytes.Buffer safe for the logger's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *lockedBuffer) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
}

func newSyncServer(t *testing.T, log *slog.Logger) *Server {
	t.Helper()
	ms := memstore.New(nil)
	t.Cleanup(func() { ms.Close() })
	d, err := config.Parse("api.yaml", []byte(syncYAML))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.New(d)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Store: ms, Config: cfg, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestOverrideSyncRun drives Run's loop (run) tick by tick on a real
// SQLite ledger: the default interval is DefaultOverridePoll; a change
// another instance made is in force at the first tick after it and not
// before; while the ledger's reads fail, the overrides in force stay,
// each failure is counted, and the run of failures is logged once; the
// first read after it is logged once and applies what changed
// meanwhile; the end of the context stops the loop and its ticker.
func TestOverrideSyncRun(t *testing.T) {
	l, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "ledger.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	var logs lockedBuffer
	srv := newSyncServer(t, slog.New(slog.NewTextHandler(&logs, nil)))
	store := &failingStore{OverrideStore: l}
	s, err := NewOverrideSync(srv, store, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The other instance, which takes the changes.
	other, err := NewOverrideSync(newSyncServer(t, nil), l, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}

	tickers := make(chan *testTicker, 1)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		s.run(ctx, 0, func(d time.Duration) loop.Ticker {
			k := &testTicker{every: d, c: make(chan time.Time), stopped: make(chan struct{})}
			tickers <- k
			return k
		})
		close(done)
	}()
	k := <-tickers
	if k.every != DefaultOverridePoll {
		t.Errorf("run with interval 0 ticks every %v, want DefaultOverridePoll %v", k.every, DefaultOverridePoll)
	}
	// Two ticks: the loop receives the second only after the first's
	// refresh returned.
	tick := func() {
		t.Helper()
		for range 2 {
			select {
			case k.c <- time.Now():
			case <-time.After(10 * time.Second):
				t.Fatal("the loop took no tick within 10s")
			}
		}
	}

	acme := Override{Domain: "api", Entries: []config.Entry{{Key: "tenant", Value: "acme"}}, Limits: []floodgate.Limit{{Limit: 5000, Period: time.Hour}}}
	if _, err := other.Set(t.Context(), acme, "test"); err != nil {
		t.Fatal(err)
	}
	if n := len(srv.Overrides()); n != 0 || s.Version() != 0 {
		t.Fatalf("before a tick: %d overrides at version %d, want none at 0", n, s.Version())
	}
	tick()
	if n := len(srv.Overrides()); n != 1 || s.Version() != 1 {
		t.Fatalf("after a tick: %d overrides at version %d, want 1 at 1", n, s.Version())
	}

	store.fail.Store(true)
	if _, _, err := other.Remove(t.Context(), "api", acme.Entries, "test"); err != nil {
		t.Fatal(err)
	}
	tick()
	tick()
	if n := len(srv.Overrides()); n != 1 || s.Version() != 1 {
		t.Errorf("while the ledger fails: %d overrides at version %d, want the one in force at 1", n, s.Version())
	}
	var m dto.Metric
	if err := s.failures.Write(&m); err != nil {
		t.Fatal(err)
	}
	if got := m.GetCounter().GetValue(); got < 3 {
		t.Errorf("floodgate_override_poll_failures_total after at least 3 failed ticks: %v", got)
	}
	if n := logs.count("overrides not read"); n != 1 {
		t.Errorf("a run of failures logged %d times, want once:\n%s", n, logs.String())
	}

	store.fail.Store(false)
	tick()
	if n := len(srv.Overrides()); n != 0 || s.Version() != 2 {
		t.Errorf("once the ledger answers: %d overrides at version %d, want the removal (none, at 2)", n, s.Version())
	}
	if n := logs.count("overrides read again"); n != 1 {
		t.Errorf("the end of the failures logged %d times, want once", n)
	}

	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return within 10s of the end of its context")
	}
	select {
	case <-k.stopped:
	default:
		t.Error("run returned without stopping its ticker")
	}
}
