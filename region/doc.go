// Package region gives one global limit across regions whose decisions
// never wait on another region: each region decides on its own store (its
// own Redis, or memory) on a share of each global limit that home grants
// it (package grant: one Redis every region reaches), and the shares move
// between regions as their demand shifts. docs/regions.md says when to
// use it and how to run it; docs/grant.md has the protocol and its proof.
//
// # Use
//
// Mark the limit Global and put a region's Store under the Limiter, the
// one pipeline every decision goes through:
//
//	home, _ := grant.OpenHome(ctx, "redis://home.example:6379")
//	rs, _ := region.New(regionalStore, home, &region.Options{Name: "eu-west"})
//	lim, _ := floodgate.New(rs, &floodgate.Options{Timeout: 10 * time.Millisecond})
//	d, err := lim.Allow(ctx, "tenant:acme", floodgate.Limit{Limit: 1000, Period: time.Second, Global: true})
//
// A request whose limit is not Global goes to the regional store
// unchanged. A Global request goes to the regional store with its Limit
// set to the region's share, under the key prefixed with
// Options.KeyPrefix: the regional store counts the region's window, and
// the share caps it. The Decision's Limit is the global limit; Remaining
// is what this region can still admit in the window.
//
// # What one global limit means
//
// A global limit is an aligned fixed window (floodgate.Limit.Validate
// refuses any other Global limit): at most Limit units per window of
// Period, windows starting at multiples of Period since the epoch, counted
// by each region on its own clock (Options.Clock). For every window w,
// the units all regions admitted in their window w add up to at most
// Limit while every region reaches home. Clocks that differ by ε shift a
// region's windows by ε against another's; keep them in sync (NTP) and
// set Options.Grace above their largest difference. Buckets are not
// offered: their burst is state in one region's store, which a share
// cannot carry; a fixed window restarts at each boundary, so a share can
// move without state.
//
// # Invariants
//
// Home never lets the live shares of a key add up to more than Limit
// (package grant). On top of that, a region:
//
//   - decides on a share only while its grant's term lasts, and on a share
//     never above what home holds for it: it raises its share only after
//     home granted it, and lowers it before it tells home;
//   - lowers a share to no less than the units its current window already
//     admitted, and only after every decision in flight on it has finished
//     (each decision holds a read lock of its key's entry, a lowering the
//     write lock), so units it gives back were never admitted in the
//     window in which another region takes them;
//   - is a new holder in each process (grant.Incarnation): a restarted
//     process cannot spend its old self's units again.
//
// Hence Σ admitted(w) ≤ Limit for every window while connected.
// TestZeroOverrunConnected checks it with three regions and racing
// rebalances; internal/regionsim on real Redis processes with latency.
//
// # Partitions
//
// A region that cannot reach home keeps deciding on its share until its
// grant's term ends (Options.Term after the last successful renewal,
// rounded up to a window boundary), then on Options.SafeShare of the
// limit (0 by default: it denies). For the regions P cut off from home,
// in every window:
//
//	admitted(w) ≤ Limit + Σ_{p ∈ P} ⌊SafeShare × Limit⌋
//
// and zero overrun in the windows before each cut-off region's term
// ended; with SafeShare 0 a partition costs only utilisation.
// TestPartitionBound checks the bound with an injected clock.
//
// Not covered: home losing its state (a restart without persistence, a
// failover that lost writes) frees every share while regions still use
// theirs, up to Limit more per window until their terms end; run home with
// persistence or WAIT.
//
// # Rebalancing
//
// Every Options.Rebalance a region measures each key's demand (units
// asked per Period, averaged with the previous measure: grant.Demand),
// computes its target with package share over every holder's last
// reported demand and floor (Options.Policy, Options.Floor:
// grant.Grant.Target), lowers its share toward the target if above, and
// asks home for the target: one call per key, at most 64 in flight. Keys
// idle for Options.Idle give their share back. The first decision of a
// key in a process waits for its first grant, at most Options.FirstWait
// and its context; every later decision waits for nothing.
package region
