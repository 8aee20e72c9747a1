package memstore

import (
	"context"
	"sync"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algorithm"
)

// fairTable holds the states of limits shared by flows, by key and
// period, each with its expiry on the store's clock. It is apart from the
// shards' tables: a state holds up to algorithm.MaxFlows flows, not a
// Small. Expired states are dropped when the table has doubled since the
// last sweep, so it holds at most twice the live states (and, with
// Options.MaxKeys, at most MaxKeys states).
type fairTable struct {
	mu    sync.Mutex
	m     map[mkey]fairEntry
	swept int // len(m) after the last sweep
}

type fairEntry struct {
	st  algorithm.Fair
	exp int64 // µs on the store's clock
}

// ApplyFlow decides r for flow under a limit shared by flows, in one step
// under the table's lock: see floodgate.Sharer and algorithm.Fair.Step.
func (s *Store) ApplyFlow(ctx context.Context, r floodgate.Request, flow string) (floodgate.Decision, error) {
	if err := floodgate.CheckFlow(r, flow); err != nil {
		return floodgate.Decision{}, err
	}
	if err := ctx.Err(); err != nil {
		return floodgate.Decision{}, err
	}
	now, skew := s.times(&r)
	clockNow := now + skew
	p := r.Limit.Params()
	mk := mkey{r.Key, int64(r.Limit.Period / time.Microsecond)}
	t := &s.fair
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = make(map[mkey]fairEntry)
	}
	e, ok := t.m[mk]
	if ok && e.exp <= clockNow {
		e, ok = fairEntry{}, false
		delete(t.m, mk)
	}
	if !ok {
		if len(t.m) >= max(2*t.swept, 1024) {
			t.sweep(clockNow)
		}
		if s.maxKeys > 0 && len(t.m) >= s.maxKeys {
			return floodgate.Decision{}, s.fullError()
		}
	}
	st, d := e.st.Step(p, now, r.Cost, flow)
	if exp := st.Expires(p); exp > 0 {
		t.m[mk] = fairEntry{st: st, exp: exp + skew}
	} else {
		delete(t.m, mk)
	}
	return floodgate.FromAlgorithm(d, now), nil
}

// sweep drops the expired states.
func (t *fairTable) sweep(now int64) {
	for k, e := range t.m {
		if e.exp <= now {
			delete(t.m, k)
		}
	}
	t.swept = len(t.m)
}
