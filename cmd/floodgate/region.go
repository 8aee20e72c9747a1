package main

import (
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/grant"
	"github.com/floodgate-rl/floodgate/region"
	"github.com/floodgate-rl/floodgate/share"
)

// regionFlags are serve's flags of global limits across regions (package
// region): without -region, a rule marked global is decided as a local
// one, today's behaviour.
type regionFlags struct {
	name      string
	homeURL   string
	safeShare float64
	floor     float64
	term      time.Duration
	policy    string
}

func (f *regionFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.name, "region", "", "`name` of this instance's region ([A-Za-z0-9_.-]): rules marked global: true are decided on this region's share of the limit, granted by -home; every instance holds its own share; empty: global rules are decided as local ones (env FLOODGATE_REGION)")
	fs.StringVar(&f.homeURL, "home", "", "with -region: `URL` of the home Redis that leases the shares of every global limit to the regions, redis:// or rediss://; serve starts while it is down and decides global rules on their safe share until it answers (env FLOODGATE_HOME)")
	fs.Float64Var(&f.safeShare, "region-safe-share", 0, "with -region: `fraction` of a global limit this region decides on once its lease has ended without home answering (a partition); 0 denies global rules until home answers, and adds nothing to the overrun bound (env FLOODGATE_REGION_SAFE_SHARE)")
	fs.Float64Var(&f.floor, "region-floor", 0, "with -region: `fraction` of each global limit every region keeps whatever its demand (env FLOODGATE_REGION_FLOOR)")
	fs.StringVar(&f.policy, "region-policy", share.Proportional.String(), "with -region: how each global limit is split among the regions by their demand: proportional, max_min or equal (the static split); see package share (env FLOODGATE_REGION_POLICY)")
	fs.DurationVar(&f.term, "region-term", region.DefaultTerm, "with -region: how long a lease of a share lasts at least: how long a region cut off from home keeps deciding on its share (env FLOODGATE_REGION_TERM)")
}

// problem is the first problem of the flags, naming the flag, or "".
func (f *regionFlags) problem() string {
	switch {
	case f.name == "" && (f.homeURL != "" || f.safeShare != 0 || f.floor != 0 || f.term != region.DefaultTerm || f.policy != share.Proportional.String()):
		return "-home, -region-safe-share, -region-floor, -region-policy and -region-term need -region"
	case f.name == "":
		return ""
	case region.CheckName(f.name) != nil:
		return "-region: " + region.CheckName(f.name).Error()
	case f.homeURL == "":
		return "-region: needs -home, the Redis that leases the shares"
	case !(f.safeShare >= 0 && f.safeShare <= 1):
		return fmt.Sprintf("-region-safe-share: %v is outside [0, 1]", f.safeShare)
	case !(f.floor >= 0 && f.floor <= 1):
		return fmt.Sprintf("-region-floor: %v is outside [0, 1]", f.floor)
	case policyProblem(f.policy) != "":
		return "-region-policy: " + policyProblem(f.policy)
	case f.term < 2*region.DefaultRebalance:
		return fmt.Sprintf("-region-term: %v is below %v, twice the rebalance interval", f.term, 2*region.DefaultRebalance)
	}
	return ""
}

func policyProblem(s string) string {
	if _, err := share.ParsePolicy(s); err != nil {
		return err.Error()
	}
	return ""
}

// wrap puts the region's Store over store when -region is set; close
// gives the shares back and closes the home client (before the store
// closes, since defers run in reverse).
func (f *regionFlags) wrap(store floodgate.Store, log *slog.Logger) (floodgate.Store, func(), error) {
	if f.name == "" {
		return store, func() {}, nil
	}
	home, err := grant.DialHome(f.homeURL)
	if err != nil {
		return nil, nil, fmt.Errorf("-home: %w", err)
	}
	policy, _ := share.ParsePolicy(f.policy) // checked by problem
	rs, err := region.New(store, home, &region.Options{Name: f.name, SafeShare: f.safeShare, Floor: f.floor, Term: f.term, Policy: policy})
	if err != nil {
		home.Close()
		return nil, nil, err
	}
	log.Info("global rules decided on this region's granted share", "region", f.name, "holder", rs.Holder(), "home", redactURL(f.homeURL))
	return rs, func() {
		rs.Close()
		home.Close()
	}, nil
}

// regionalStore is the store under a region's Store, for the metrics of
// the store itself; any other store as it is.
func regionalStore(s floodgate.Store) floodgate.Store {
	if rs, ok := s.(*region.Store); ok {
		return rs.Regional()
	}
	return s
}
