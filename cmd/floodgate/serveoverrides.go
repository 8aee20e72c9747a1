package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/floodgate-rl/floodgate/ledger"
	"github.com/floodgate-rl/floodgate/server"
)

// overrideFlags are serve's flags of the overrides of limits (the admin
// API's /v1/overrides, docs/plans.md), kept in the ledger.
type overrideFlags struct {
	poll time.Duration
}

func (f *overrideFlags) register(fs *flag.FlagSet) {
	fs.DurationVar(&f.poll, "override-poll", server.DefaultOverridePoll, "with -ledger: how often to read the version of the overrides of limits (POST /v1/overrides) from the ledger, and every override when it moved, so that a change made on any instance is in force on this one within this long (env FLOODGATE_OVERRIDE_POLL)")
}

// problem is the first problem of the override flags, or "".
func (f *overrideFlags) problem() string {
	if f.poll <= 0 {
		return fmt.Sprintf("-override-poll: %v must be above zero", f.poll)
	}
	return ""
}

// start loads the overrides of acc's ledger into srv and keeps them in
// step until ctx ends; nil without a ledger (the admin routes of
// overrides then answer 501). A ledger that cannot be read at start is an
// error: serving without the overrides an operator set would apply the
// wrong limits.
func (f *overrideFlags) start(ctx context.Context, srv *server.Server, acc *ledger.Accounts, log *slog.Logger) (*server.OverrideSync, error) {
	if acc == nil {
		return nil, nil
	}
	store, ok := acc.Store().(ledger.OverrideStore)
	if !ok {
		return nil, nil
	}
	sync, err := server.NewOverrideSync(srv, store, nil)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := sync.Refresh(rctx); err != nil {
		return nil, fmt.Errorf("overrides: %w", err)
	}
	log.Info("overrides loaded", "overrides", len(srv.Overrides()), "version", sync.Version(), "poll", f.poll)
	go sync.Run(ctx, f.poll)
	return sync, nil
}
