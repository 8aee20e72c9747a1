package redisstore

// CoalesceStats counts the script runs a Store shared between concurrent
// calls (see "Coalescing" in docs/redis.md) since it was opened.
type CoalesceStats struct {
	// Runs is the script runs that decided several calls at once.
	Runs int64
	// Decisions is the calls sent in those runs; Decisions/Runs is the
	// mean number of calls a shared run decided.
	Decisions int64
}

// CoalesceStats returns how many script runs s shared and how many calls
// they carried, for metrics: `floodgate serve` exports them as
// floodgate_coalesced_runs_total and floodgate_coalesced_decisions_total.
// Both are 0 with coalescing off.
func (s *Store) CoalesceStats() CoalesceStats {
	if s.co == nil {
		return CoalesceStats{}
	}
	return CoalesceStats{Runs: s.co.sharedRuns.Load(), Decisions: s.co.sharedDecisions.Load()}
}

// LocalStats counts the decisions a Store made in process, without a round
// trip to Redis, since it was opened.
type LocalStats struct {
	// DenyCache is the requests denied from the deny cache
	// (Options.DenyCache), including those a key with a local budget
	// denied from its last denial.
	DenyCache int64
	// LocalBudget is the requests admitted from units this instance
	// claimed from Redis, or on the slice of a rate it leased
	// (floodgate.Limit.LocalBudget).
	LocalBudget int64
}

// LocalStats returns how many decisions s made without Redis, for metrics:
// `floodgate serve` exports them as floodgate_local_decisions_total.
func (s *Store) LocalStats() LocalStats {
	st := LocalStats{DenyCache: s.budgets.denied.Load(), LocalBudget: s.budgets.admitted.Load() + s.slices.admitted.Load()}
	if s.deny != nil {
		st.DenyCache += s.deny.hits.Load()
	}
	return st
}
