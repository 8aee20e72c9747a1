package redisstore

import (
	"context"
	"fmt"

	"github.com/floodgate-rl/floodgate"
)

var _ floodgate.Sharer = (*Store)(nil)

// fairAlgorithm names the state of a limit shared by flows in its key:
// <prefix>:v1:fair:<period µs>:{<encoded subject>}, apart from a plain
// fixed window's of the same key.
const fairAlgorithm floodgate.Algorithm = "fair"

// ApplyFlow decides r for flow under a limit shared by flows in one run of
// fair.lua, the twin of algorithm.Fair.Step (see floodgate.Sharer): one
// hash per key and period holds the window and every live flow's demand
// and use, so the split and the decision are one atomic step whichever
// instance asks. The time is r.Now, the store's clock with ClientTime, or
// the server's TIME, as in Apply. An error from Redis is returned wrapped
// with the key; the request may then have been counted or not.
func (s *Store) ApplyFlow(ctx context.Context, r floodgate.Request, flow string) (floodgate.Decision, error) {
	if err := floodgate.CheckFlow(r, flow); err != nil {
		return floodgate.Decision{}, err
	}
	if s.closed.Load() {
		return floodgate.Decision{}, floodgate.ErrClosed
	}
	return s.runner.fair(ctx, r, s.fairKey(r.Key, r.Limit), flow)
}

// fairKey is the key of key's state under a limit shared by flows.
func (s *Store) fairKey(key string, limit floodgate.Limit) string {
	return redisKey(s.prefix, fairAlgorithm, limit.Period, key)
}

// fair runs fair.lua for r of flow on key.
func (rn *runner) fair(ctx context.Context, r floodgate.Request, key, flow string) (floodgate.Decision, error) {
	now := rn.stamp(&r)
	args := appendRequest(make([]string, 0, argsPerRequest+1), &r, floodgate.FixedWindow, now)
	args = append(args, flow)
	vals, err := rn.run(ctx, scripts.fair, []string{key}, args)
	if err != nil {
		return floodgate.Decision{}, fmt.Errorf("redisstore: fair %s: %w", key, err)
	}
	if len(vals) != replyLen {
		return floodgate.Decision{}, fmt.Errorf("redisstore: fair %s: %w: %d integers, want %d", key, floodgate.ErrUnexpectedReply, len(vals), replyLen)
	}
	d, err := decode(vals, now)
	if err != nil {
		return floodgate.Decision{}, fmt.Errorf("redisstore: fair %s: %w", key, err)
	}
	return d, nil
}
