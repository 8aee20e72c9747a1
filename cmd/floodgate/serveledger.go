package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/loop"
	"github.com/floodgate-rl/floodgate/ledger"
	"github.com/floodgate-rl/floodgate/ledger/postgres"
	"github.com/floodgate-rl/floodgate/ledger/sqlite"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/prometheus/client_golang/prometheus"
)

// ledgerFlags are serve's flags of the ledger of durable quotas.
type ledgerFlags struct {
	spec      string
	policy    string
	reconcile time.Duration
	timeout   time.Duration
	// trace traces the ledger's calls (ledger.WrapOptions.Trace); nil
	// while tracing is off.
	trace func(ctx context.Context, op string, commits int) (context.Context, func(error))
}

func (f *ledgerFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.spec, "ledger", "", "the ledger of durable quotas (rules with durable: true): a PostgreSQL `URL` (postgres://user:password@host:5432/db) for several instances, or the path of an SQLite file for one machine, made if missing; its schema is migrated at start. Each commit of a durable quota is acknowledged once the ledger holds it, and a counter the store lost is rebuilt from it (env FLOODGATE_LEDGER)")
	fs.StringVar(&f.policy, "ledger-policy", string(floodgate.FailClosed), "when the ledger cannot be read to check a durable quota's counter (a new window, or a counter the store lost): fail_closed denies, as a paid quota should; fail_open decides on the counter as it is. Commits always need the ledger (env FLOODGATE_LEDGER_POLICY)")
	fs.DurationVar(&f.timeout, "ledger-timeout", ledger.DefaultTimeout, "deadline of each ledger call (a commit's write, a rebuild's read), apart from -timeout, which bounds the store's (env FLOODGATE_LEDGER_TIMEOUT)")
	fs.DurationVar(&f.reconcile, "ledger-reconcile", 0, "compare the counters of the current windows with the ledger this often, exporting the drift as floodgate_ledger_drift_*; repair with floodgate ledger reconcile -repair. 0 disables (env FLOODGATE_LEDGER_RECONCILE)")
}

// problem is the first problem of the ledger flags, or "".
func (f *ledgerFlags) problem() string {
	switch {
	case f.policy != string(floodgate.FailClosed) && f.policy != string(floodgate.FailOpen):
		return fmt.Sprintf("-ledger-policy: %q is not fail_closed or fail_open", f.policy)
	case f.timeout <= 0:
		return fmt.Sprintf("-ledger-timeout: %v must be above zero", f.timeout)
	case f.reconcile < 0:
		return fmt.Sprintf("-ledger-reconcile: %v is negative", f.reconcile)
	case f.reconcile > 0 && f.spec == "":
		return "-ledger-reconcile: needs -ledger"
	}
	return ""
}

// open opens the ledger of -ledger, migrating its schema; nil without
// one. An SQLite file is made if missing: serve is where a ledger starts.
func (f *ledgerFlags) open(ctx context.Context) (*ledger.Accounts, func(), error) {
	if f.spec == "" {
		return nil, func() {}, nil
	}
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var s ledger.Store
	var err error
	// Concurrent commits are written together (ledger.Accounts' group
	// commit): SQLite takes one writer at a time, PostgreSQL as many as
	// pgxpool's default pool.
	o := ledger.DurableOptions{MaxWrites: 1}
	if isPostgres(f.spec) {
		s, err = postgres.Open(octx, f.spec, nil)
		o.MaxWrites = max(4, runtime.NumCPU())
	} else {
		s, err = sqlite.Open(octx, f.spec, nil)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("ledger %s: %w", f.name(), err)
	}
	return ledger.Durable(s, &o), func() { s.Close() }, nil
}

// name is the ledger for logs: a URL without its password.
func (f *ledgerFlags) name() string {
	if isPostgres(f.spec) {
		return redactURL(f.spec)
	}
	return f.spec
}

func isPostgres(spec string) bool {
	return strings.HasPrefix(spec, "postgres://") || strings.HasPrefix(spec, "postgresql://")
}

// wrap is s with its durable quotas accounted in acc (ledger.Wrap) under
// the ledger flags; s itself without a ledger. local marks the local
// store of the failure mode local.
func (f *ledgerFlags) wrap(s floodgate.Store, acc *ledger.Accounts, local bool) (floodgate.Store, error) {
	if acc == nil {
		return s, nil
	}
	return ledger.Wrap(s, acc, &ledger.WrapOptions{Policy: floodgate.FailurePolicy(f.policy), Timeout: f.timeout, Local: local, Trace: f.trace})
}

// watchDrift runs ledger.Reconcile every f.reconcile until ctx ends,
// exporting what it finds in srv's registry: the windows whose counter is
// behind the ledger (units the store lost, which it would admit again) or
// ahead of it (units held and not yet committed, or commits whose ledger
// write failed), and their units.
func (f *ledgerFlags) watchDrift(ctx context.Context, srv *server.Server, acc *ledger.Accounts, log *slog.Logger) error {
	if acc == nil || f.reconcile == 0 {
		return nil
	}
	windows := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "floodgate_ledger_drift_windows",
		Help: "Windows of durable quotas whose counter disagrees with the ledger at the last reconcile, by direction: behind (the store lost units it would admit again) or ahead (units held and not yet committed, or commits the ledger did not take)."},
		[]string{"direction"})
	units := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "floodgate_ledger_drift_units",
		Help: "Units by which the counters of durable quotas disagree with the ledger at the last reconcile, by direction."},
		[]string{"direction"})
	runs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "floodgate_ledger_reconciles_total",
		Help: "Reconciles of the counters with the ledger (-ledger-reconcile), by result."}, []string{"result"})
	for _, c := range []prometheus.Collector{windows, units, runs} {
		if err := srv.Registry().Register(c); err != nil {
			return err
		}
	}
	used := ledger.PeekUsed(srv.Limiter())
	var drift loop.Loop
	drift.Start(f.reconcile, func(context.Context) bool {
		drifts, err := ledger.Reconcile(ctx, acc.Store(), used, nil)
		if err != nil {
			runs.WithLabelValues("failed").Inc()
			log.Warn("ledger reconcile failed", "error", err)
			return true
		}
		runs.WithLabelValues("ok").Inc()
		var behind, ahead, behindUnits, aheadUnits float64
		for _, d := range drifts {
			if d.Behind() {
				behind++
				behindUnits += float64(d.Missing())
			} else {
				ahead++
				aheadUnits += float64(d.Counter - d.Expected())
			}
		}
		windows.WithLabelValues("behind").Set(behind)
		windows.WithLabelValues("ahead").Set(ahead)
		units.WithLabelValues("behind").Set(behindUnits)
		units.WithLabelValues("ahead").Set(aheadUnits)
		return true
	})
	context.AfterFunc(ctx, drift.Stop)
	return nil
}
