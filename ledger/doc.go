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
// # Durable quotas
//
// Wrap makes a floodgate.Store account for durable quotas
// (floodgate.Limit.Durable) in a Ledger: put the Quotas it returns under a
// floodgate.Limiter as its store. It records each commit of a durable
// quota with Ledger.Record before the store settles it, and rebuilds a
// counter that the store lost from Ledger.Used before it decides on it;
// an Allow or Decide of a durable quota is a reserve and a commit of its
// cost. Durable makes a Store the Ledger: Accounts writes concurrent
// commits together (group commit) and counts what it does (Stats) for the
// service's metrics. docs/guarantees.md states the bound on what a loss
// re-admits.
package ledger
