// Package region gives one global limit across regions whose decisions
// never wait on another region: each region decides on its own store (its
// own Redis, or memory) on a share of each global limit that it holds as a
// lease from a home store (one Redis every region reaches), and the shares
// move between regions as their demand shifts.
//
// It is the Redis store's local budgets (floodgate.Limit.LocalBudget) one
// level up: there an instance claims units of a key's budget from Redis
// and gives back what it did not use; here a region claims a share of a
// limit from home, renews it, and returns what its demand no longer needs.
// The Redis store's rate slices (a token bucket or GCRA with a
// LocalBudget) lease their slices with this package's protocol: a
// ScriptHome runs home.lua on the store's own Redis.
//
// # Use
//
// Mark the limit Global and put a region's Store under the Limiter, the
// one pipeline every decision goes through:
//
//	home, _ := region.OpenHome(ctx, "redis://home.example:6379")
//	rs, _ := region.New(regionalStore, home, &region.Options{Name: "eu-west"})
//	lim, _ := floodgate.New(rs, &floodgate.Options{Timeout: 10 * time.Millisecond})
//	d, err := lim.Allow(ctx, "tenant:acme", floodgate.Limit{Limit: 1000, Period: time.Second, Global: true})
//
// A request whose limit is not Global goes to the regional store
// unchanged, so a deployment without Global limits behaves as before. A
// Global request goes to the regional store with its Limit set to the
// region's share, under the key prefixed with Options.KeyPrefix: the
// regional store keeps the region's count of the window, as it keeps any
// fixed window, and the share caps it. The Decision's Limit is the global
// limit; Remaining is what this region can still admit in the window.
//
// # What one global limit means
//
// A global limit is an aligned fixed window (floodgate.Limit.Validate
// refuses any other Global limit): at most Limit units per window of
// Period, windows starting at multiples of Period since the epoch, counted
// by each region on its own clock (Options.Clock). "Zero overrun" is the
// promise that for every window w, the units all regions admitted in their
// window w add up to at most Limit. Clocks that differ by ε make a
// region's window w start up to ε before or after another's; in real time
// a window then sees at most the admissions of two neighbouring windows in
// those ε slivers, much as any fixed window admits up to twice its limit
// across a boundary. Keep the regions' clocks in sync (NTP) and set
// Options.Grace above their largest difference.
//
// Token buckets and GCRA are not offered as global limits: a share of a
// bucket's rate can be moved, but its burst is state that lives in one
// region's store, and moving units of it safely needs the bucket's level,
// not just its count; fixed windows restart at each boundary, which is
// what lets a share move without carrying state.
//
// # Why zero overrun while connected holds by construction
//
// Home holds, per global key, each holder's lease: share, until (a window
// boundary on the holder's clock), demand and floor. Its one script
// (scripts/home.lua, mirrored by step in Go and checked against it by
// TestHomeScriptMatchesStep) purges leases whose until+Grace has passed on
// the caller's clock, then grants a holder that asks for more at most what
// the other live leases leave free, and a holder that asks for less
// exactly that. So at every moment the live shares at home add up to at
// most Limit.
//
// A region's decisions use its share only while its lease lasts, and the
// share they use is never above what home holds for it: a region raises
// its share only after home granted it, and lowers it before it tells
// home, to no less than the units its current window already admitted,
// after every decision in flight on the share has finished (each decision
// holds a read lock of its key's lease, a lowering takes the write lock).
// Units a region gives back were therefore never admitted in the window in
// which another region takes them, and a region admits at most its share
// per window. Units of an expired lease are free only once the caller's
// clock has passed until+Grace, so whoever takes them counts a window at
// or after until (clocks within Grace), while the holder stopped using
// them at until. Each unit is thus used by at most one region per
// window: Σ admitted(w) ≤ Limit. TestZeroOverrunConnected checks it with
// three regions, demand moving between them and decisions racing the
// rebalances; internal/regionsim checks it on real Redis processes with
// network latency.
//
// Not covered: home losing its state (a restart without persistence, a
// failover that lost writes) frees every share while regions still use
// theirs, up to Limit more per window until the leases end; run home with
// persistence or WAIT, as for any Redis state that must not be forgotten.
// A process that restarts is a new holder (its leases carry an
// incarnation of the process): its old lease stays counted until it
// ends, so the new process cannot spend the old one's units again.
//
// # Rebalancing and the allocation policy
//
// Every Options.Rebalance (500 ms by default) a region measures each
// key's demand (units asked, admitted or not, per Period, averaged with
// the previous measure), and computes its target share with package share
// over every live holder's last reported demand and floor
// (Options.Policy, Proportional by default, and Options.Floor). It then
// lowers its share toward the target, if above, and calls home with the
// target: one call per key, all keys at once. A shift is followed in about
// two rebalances plus a round trip to home: one to report the new demand
// (the others learn it at their next call), one to act on it.
//
// Proportional splits by demand: utilisation close to a central counter's
// when demand is steady, at the price of fairness under overload (the
// region with most demand gets most of the limit). share.MaxMin fills
// small demands first and splits the rest evenly; share.Equal is the
// static split. A floor keeps units with a quiet region so its first
// request is admitted at once, and costs up to the sum of idle regions'
// floors in utilisation. The share package doc has the trade-off in full.
//
// The first decision of a key in a process waits for its first lease, at
// most Options.FirstWait and its context; every later decision waits for
// nothing.
//
// What it costs home: one script run per global key (and Period) per
// Rebalance per process, at most 64 in flight at once, and one hash per
// key holding a field per holder. Three regions deciding one hot key
// make 12 calls a second at the default 500 ms (the simulation's 250 ms:
// about 4 per second per region); a thousand keys of one tenant each in
// three regions, 6000 a second. Keys idle for Options.Idle give their
// share back and stop costing anything. For many global keys, raise
// Rebalance: shares then follow demand more slowly.
//
// # Partitions
//
// A region that cannot reach home keeps deciding on the share it holds
// until its lease ends (Options.Term after the last successful renewal,
// rounded up to a window boundary), and then on Options.SafeShare of the
// limit (0 by default: it denies). Home keeps its share counted until the
// lease's end plus Grace, so until then nothing is overrun; after it, the
// other regions take the share back, and the cut-off region's safe share
// is counted nowhere. For the regions P cut off from home, in every window:
//
//	admitted(w) ≤ Limit + Σ_{p ∈ P} ⌊SafeShare × Limit⌋
//
// and zero overrun in the windows before each cut-off region's lease
// ended. Over a partition of length D that began at t0, the overrun is at
// most Σ_p ⌊SafeShare × Limit⌋ × (number of windows that start between the
// end of p's lease and the end of the partition), at most ⌈D/Period⌉ + 1
// windows each. With SafeShare 0 the partition costs only utilisation:
// the cut-off region admits nothing after its lease, and its share sits
// unused from its last renewal until its lease ends plus Grace.
// TestPartitionBound checks the bound with an injected clock, and
// internal/regionsim measures it on real Redis with home unreachable from
// one region for 30 s (docs/regions.md).
package region
