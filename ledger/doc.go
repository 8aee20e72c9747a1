// Package ledger is the durable record of paid quotas: every committed use
// of a durable quota written once, in a database, so that usage can be
// billed, and a counter that Redis lost (a restart without persistence, a
// failover, an eviction) can be rebuilt instead of admitting a whole
// period again.
//
// Atomic is not durable: the counters in Redis or memory decide fast, and
// may forget. The ledger is the second requirement beside them, written
// after the decision, at the commit of a reservation: an Entry holds the
// key, the quota (a fixed window), the window the units count in, the
// units, the reservation's ID and the time of the commit. This package is
// the contract and the logic that does not depend on a database; the
// stores are ledger/postgres (several instances) and ledger/sqlite (one
// machine, pure Go), and ledgertest is the conformance suite both pass.
//
// # Exactly once
//
// A Store keeps one Entry per (Key, ID). Record writes a batch with the
// database's uniqueness constraint doing the work (INSERT … ON CONFLICT
// DO NOTHING), never a read before the write: a commit retried after a
// timeout, or sent twice by two instances at once, is written once, and
// Record reports which entries it wrote. A batch is one transaction.
//
// # Durable quotas are fixed windows
//
// Only a fixed window (floodgate.FixedWindow, Aligned or FirstHit) has a
// well-defined "units used this period": the sum of the commits in the
// window, which is what a customer is billed for and what a lost counter
// is rebuilt to. A sliding window, a sliding log and the buckets forget
// units gradually, by time, so no sum of commits says what their state
// should be; Entry.Validate rejects them.
//
// # Rebuilding, billing, reconciling
//
// Store.Usage returns what the ledger holds for a key in the window that
// contains a time: what a Limiter rebuilds a missing counter from.
// Store.Report pages through windows by key, for billing; WriteReport
// writes them as CSV or JSON (floodgate ledger report). Reconcile compares
// the counters of a store with the ledger, through a function that reads
// a counter (PeekUsed reads one through a floodgate.Limiter), reports the
// drift per key and window, and can repair a counter that is behind:
// raise it to the ledger's units, never lower it (floodgate ledger
// reconcile).
//
// # Durable quotas
//
// Durable makes a Store the floodgate.Ledger of a Limiter
// (floodgate.Options.Ledger): the Limiter records each commit of a durable
// quota (floodgate.Limit.Durable) with Record before the store settles it,
// and rebuilds a counter that the store lost from Usage before it decides
// on it. Accounts writes concurrent commits together (group commit) and
// counts what it does (Stats) for the service's metrics. See "Durable
// quotas" in the floodgate package doc, and docs/guarantees.md for the
// bound on what a loss re-admits.
package ledger
