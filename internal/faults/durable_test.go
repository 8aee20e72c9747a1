package faults

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/ledger"
	"github.com/floodgate-rl/floodgate/ledger/sqlite"
)

const (
	// paidQuota is the durable quota of the ledger faults, and
	// paidWorkers × paidCost bounds what they hold at once: the most a
	// loss of Redis can re-admit with the ledger.
	paidQuota = 100
	paidCost  = 3
	// paidWorkers reserve, hold for paidHold, and commit, in a loop.
	paidWorkers = 8
	paidHold    = 20 * time.Millisecond
)

// paidLimit is a quota of 100 units in an hour from the first hit: the
// test stays in its window.
var paidLimit = floodgate.Limit{Limit: paidQuota, Period: time.Hour, Window: floodgate.FirstHit}

// TestFaultDurableKill SIGKILLs Redis (no persistence) while a durable
// quota of 100 is half used, restarts it empty, and goes on until the
// quota is spent: with the ledger, the units admitted across the restart
// are at most 100 plus what was held but not committed at the kill (the
// stated bound, at most paidWorkers × paidCost).
func TestFaultDurableKill(t *testing.T) {
	r := redistest.Standalone(t)
	durableKill(t, "redis://"+r.Addr, true, killRestart(t, r),
		"Redis SIGKILLed while a durable quota of 100 is half committed, restarted empty; the counter is rebuilt from the ledger (SQLite)")
}

// TestFaultDurableKillNoLedger is the same load and fault on a quota that
// is not durable: the restart admits the quota again, which the ledger
// prevents.
func TestFaultDurableKillNoLedger(t *testing.T) {
	r := redistest.Standalone(t)
	durableKill(t, "redis://"+r.Addr, false, killRestart(t, r),
		"the same, the quota not durable (no ledger): the comparison")
}

func killRestart(t *testing.T, r *redistest.Server) func() {
	return func() {
		if err := r.Kill(); err != nil {
			t.Fatal(err)
		}
		if err := r.Restart(t); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFaultDurableFailover: the same across a Sentinel failover (the
// master SIGKILLed, its replica promoted) where the promoted replica had
// not received the counter: it is flushed once promoted, the worst an
// asynchronous replica can have missed.
func TestFaultDurableFailover(t *testing.T) {
	d := redistest.StartSentinel(t)
	durableKill(t, "redis-sentinel://"+strings.Join(d.SentinelAddrs(), ",")+"/"+d.MasterName, true, func() {
		if err := d.Master.Kill(); err != nil {
			t.Fatal(err)
		}
		promoted := waitPromoted(t, d)
		promoted.MustCLI(t, "FLUSHALL")
	}, "Sentinel master SIGKILLed while a durable quota of 100 is half committed; the promoted replica flushed (it had not received the counter); rebuilt from the ledger")
}

// durableKill runs the paid load on the Redis at url, calls fault once the
// callers have committed half the quota, and checks the units admitted
// against the bound.
func durableKill(t *testing.T, url string, durable bool, fault func(), what string) {
	lg, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "ledger.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	insts := instances(t, url, 4)
	limit := paidLimit
	lims := make([]*floodgate.Limiter, len(insts))
	for i, in := range insts {
		o := floodgate.Options{Timeout: timeout, FailurePolicy: floodgate.FailClosed}
		var store floodgate.Store = in.store
		if durable {
			if store, err = ledger.Wrap(in.store, ledger.Durable(lg, nil), nil); err != nil {
				t.Fatal(err)
			}
			limit.Durable = true
		}
		if lims[i], err = floodgate.New(store, &o); err != nil {
			t.Fatal(err)
		}
	}

	var mu sync.Mutex
	var admitted, committed, heldNow, heldAtFault int64
	var calls, failed int
	stop := make(chan struct{})
	var wg sync.WaitGroup
	deadline := time.Now().Add(60 * time.Second)
	for w := range paidWorkers {
		wg.Go(func() {
			l := lims[w%len(lims)]
			n := int64(1 + w%paidCost)
			for time.Now().Before(deadline) {
				select {
				case <-stop:
					return
				default:
				}
				res, d, err := l.Reserve(context.Background(), "tenant", limit, n, &floodgate.ReserveOptions{TTL: 10 * time.Second})
				mu.Lock()
				calls++
				if err != nil {
					failed++
				}
				mu.Unlock()
				if err != nil || !d.Allowed {
					time.Sleep(paidHold) // a denied or failed caller comes back later
					continue
				}
				mu.Lock()
				admitted += n
				heldNow += n
				mu.Unlock()
				time.Sleep(paidHold) // the work the reservation pays for
				// Commit until it is answered for good, as a caller retries.
				for time.Now().Before(deadline) {
					_, err := res.Commit(context.Background(), n)
					if err == nil || errors.Is(err, floodgate.ErrUnknownReservation) || errors.Is(err, floodgate.ErrExpired) {
						break
					}
					time.Sleep(10 * time.Millisecond)
				}
				mu.Lock()
				heldNow -= n
				committed += n
				mu.Unlock()
			}
		})
	}
	waitFor(t, 20*time.Second, "half the quota committed", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return committed >= paidQuota/2
	})
	mu.Lock()
	heldAtFault = heldNow
	before := admitted
	mu.Unlock()
	fault()
	// Run until the quota is spent again: no admission for a while.
	var last int64 = -1
	quiet := time.Now()
	waitFor(t, 40*time.Second, "the quota spent after the fault", func() bool {
		mu.Lock()
		defer mu.Unlock()
		if admitted != last {
			last, quiet = admitted, time.Now()
		}
		return admitted > before && time.Since(quiet) > 500*time.Millisecond
	})
	close(stop)
	wg.Wait()

	overrun := admitted - paidQuota
	t.Logf("durable=%v: %d units admitted for a quota of %d (%d before the fault, %d held at it): overrun %d", durable, admitted, paidQuota, before, heldAtFault, overrun)
	row := Row{Fault: what, Calls: calls, Errors: failed, Limit: paidQuota, Overrun: max(0, overrun), HeldAtFault: heldAtFault, Durable: durable,
		Saw: fmt.Sprintf("%d units admitted for the quota of %d across the fault (%d before it, %d held and not committed at it): %d above the quota; %d of %d reserves failed during the outage, denied (fail_closed)",
			admitted, paidQuota, before, heldAtFault, max(0, overrun), failed, calls)}
	if durable {
		u, err := lg.Usage(t.Context(), "tenant", limit.Period, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if u.Units != committed {
			t.Errorf("the ledger holds %d units, the callers committed %d", u.Units, committed)
		}
		row.Saw += fmt.Sprintf("; the ledger holds the %d units committed, once each", u.Units)
	}
	record(t, row)
}
