package redisstore

import (
	"context"
	"fmt"
	"sync"

	"github.com/floodgate-rl/floodgate"
)

var (
	_ floodgate.Pipeliner = (*Store)(nil)
	_ floodgate.Pinger    = (*Store)(nil)
)

// ApplyPipelined decides independent requests, each atomically on its own,
// in as few round trips as the client allows: see floodgate.Pipeliner. The
// requests are sent concurrently; rueidis pipelines concurrent calls on
// one connection, so on standalone Redis and Sentinel they share one round
// trip, and on a Cluster one per node involved. Unlike ApplyBatch, the keys
// may differ and a denial of one takes nothing back from the others.
func (s *Store) ApplyPipelined(ctx context.Context, rs []floodgate.Request) ([]floodgate.Decision, []error) {
	ds, errs := make([]floodgate.Decision, len(rs)), make([]error, len(rs))
	if len(rs) == 1 {
		ds[0], errs[0] = s.Apply(ctx, rs[0])
		return ds, errs
	}
	var wg sync.WaitGroup
	for i := range rs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ds[i], errs[i] = s.Apply(ctx, rs[i])
		}()
	}
	wg.Wait()
	return ds, errs
}

// Ping checks that Redis answers, for readiness checks.
func (s *Store) Ping(ctx context.Context) error {
	if s.closed.Load() {
		return floodgate.ErrClosed
	}
	if err := s.c.ping(ctx); err != nil {
		return fmt.Errorf("redisstore: ping: %w", err)
	}
	return nil
}
