// Package grant is the protocol by which a home hands out shares of a
// limit to holders that decide on them without asking again: regions
// deciding a global limit (package region), instances of the Redis store
// deciding a token bucket's or GCRA's rate on slices of it
// (floodgate.Limit.LocalBudget), and Envoys enforcing RLQS token buckets
// (package server/rlqs). docs/grant.md has the argument in full.
//
// A holder sends a Request (its share wanted, its demand and floor, its
// clock) to a Home, and gets a Grant back: its share, the end of its term
// (Until), and every live holder's demand, floor and share, from which
// each holder computes the same split (Grant.Target, package share).
//
//	home, _ := grant.OpenHome(ctx, "redis://home.example:6379")
//	g, err := home.Grant(ctx, grant.Request{Key: "k", Limit: limit, Holder: "eu-west#" + grant.Incarnation(),
//		Now: time.Now(), Term: 10 * time.Second, Grace: time.Second, Want: 100})
//
// # What home keeps true
//
// Home runs one atomic step per call (scripts/home.lua on Redis; step,
// its Go twin, in MemHome). For each key and Period:
//
//   - a grant whose Until + Grace is at or before the caller's Now is
//     forgotten, and its share is free again;
//   - the live shares never add up to more than Limit: a holder asking
//     for more gets at most what the others leave free, and never less
//     than it holds; a holder asking for no more than it holds gets what
//     it asks, and one asking with Keep gets exactly what it holds. Home never takes units from a holder; only the holder gives
//     them back (Want below its share, or Release);
//   - Until is a multiple of Period, the first at or after Now + Term, and
//     never earlier than the holder's previous Until.
//
// TestHomeScriptMatchesStep runs home.lua and step on the same random
// calls (late messages, lowered limits, releases) and requires equal
// answers and Σ shares ≤ Limit after each.
//
// # What a holder must keep true
//
// The protocol bounds what holders admit only if each holder
//
//   - uses more than it held only once home granted it;
//   - lowers its own decisions first, then tells home (so a Want below its
//     share is already in force), and counts in the lowered share what its
//     current window already admitted;
//   - stops deciding on a share at Until on its own clock;
//   - names itself anew in each process (Incarnation), so a restarted
//     process never spends its old self's units again;
//   - keeps Grace above the largest difference between holders' clocks.
//
// Then every unit is used by at most one holder per window. A call that
// fails may or may not have run (a timeout cannot tell); that is safe,
// since a holder lowers before it asks for less and raises only after a
// grant. A holder that cannot reach home keeps its share until Until, and
// home keeps it counted until Until + Grace.
//
// # Homes
//
// RedisHome is the home of a deployment, over a rueidis client: OpenHome
// connects and checks, DialHome connects at the first call, NewRedisHome
// takes the caller's client. ScriptHome runs the same script through an
// EvalFunc, the caller's "EVALSHA, then EVAL on NOSCRIPT": the Redis
// store passes its own runner's, so this package imports nothing of
// store/redisstore (which imports it) and the slices share the store's
// client, Cluster routing and WAIT. MemHome runs step under a lock, for
// tests and single processes. All are safe for concurrent use.
//
// Home state is one hash per key and Period, one field per holder
// ("share,until_us,demand,floor"), under
//
//	<prefix>:v1:home:<period µs>:{<key, '%', '{', '}', '#' percent-escaped>}
//
// (a key above 128 bytes is replaced by "#" and its SHA-1), so a call
// touches one key and is Cluster-safe; the script sets the hash's TTL to
// its longest grant plus Grace and a Period. The layout is the one running
// deployments hold: it does not change.
//
// # Holders' helpers
//
// Demand measures a holder's demand (units per Period, each measure
// averaged with the previous); Grant.Target splits the limit over the
// holders of the last grant with the caller's own party replaced;
// Incarnation names a process.
//
// The package imports the root package, share and rueidis only; it never
// imports a store, region, ledger or server (TestLayers).
package grant
