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
// requests are sent concurrently, so they coalesce (see "Coalescing" in
// docs/redis.md): on standalone Redis and Sentinel most of them share one
// script run, and rueidis pipelines the rest on one connection; on a
// Cluster they take one round trip per node involved. Unlike ApplyBatch, the keys
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
	if err := s.conn.Ping(ctx); err != nil {
		return fmt.Errorf("redisstore: ping: %w: %w", floodgate.ErrStore, err)
	}
	return nil
}
