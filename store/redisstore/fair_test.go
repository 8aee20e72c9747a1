package redisstore

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

// TestFairDifferential runs the same random requests of flows under a
// shared limit against memstore (algorithm.Fair.Step in Go) and redisstore
// (fair.lua), through EVALSHA and through FCALL, and requires identical
// decisions at every step: several flows, more flows than MaxFlows (the
// overflow flow), peeks, costs above the limit, a limit changed under a
// live state, windows skipped, and a clock that goes backwards. The period
// is an hour and the clock moves by minutes, so no key expires in real
// time while a sequence runs.
func TestFairDifferential(t *testing.T) {
	addr := standaloneAddr(t)
	c := newRueidis(t, addr)
	prefix := testPrefix(t)
	checkTTLsAtEnd(t, c, prefix)
	for _, fn := range []bool{false, true} {
		t.Run(fmt.Sprintf("functions=%v", fn), func(t *testing.T) {
			rs, err := New(c, &Options{Prefix: prefix, Functions: fn})
			if err != nil {
				t.Fatal(err)
			}
			ms := memstore.New(&memstore.Options{SweepInterval: -1})
			defer ms.Close()
			rng := rand.New(rand.NewPCG(29, uint64(len(fmt.Sprint(fn)))))
			const period = time.Hour
			admitted, overflowed := 0, false
			for seq := range 24 {
				key := fmt.Sprintf("fair/%v/%d", fn, seq)
				flows, moves := 1+rng.IntN(6), int64(period/30)
				if seq%6 == 5 {
					// Enough flows in one window to fill MaxFlows.
					flows, moves = floodgate.MaxFlows+30, int64(period/3000)
				}
				limit := floodgate.Limit{Limit: rng.Int64N(60), Period: period}
				now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC).Add(time.Duration(rng.Int64N(int64(period))))
				for step := range 200 {
					x := rng.IntN(40)
					if flows > floodgate.MaxFlows && x < 2 && step < 150 {
						x = 40 // no new window until the flows filled it
					}
					switch {
					case x == 0:
						now = now.Add(period)
					case x == 1:
						now = now.Add(2*period + time.Minute)
					case x == 2:
						now = now.Add(-time.Duration(rng.Int64N(int64(10 * time.Minute))))
					case x == 3:
						limit.Limit = rng.Int64N(60)
					default:
						now = now.Add(time.Duration(rng.Int64N(moves)))
					}
					cost := rng.Int64N(limit.Limit/4 + 2)
					if rng.IntN(10) == 0 {
						cost = 0
					}
					if rng.IntN(50) == 0 {
						cost = limit.Limit + 1
					}
					flow := fmt.Sprintf("tenant:%d", rng.IntN(flows))
					r := floodgate.Request{Key: key, Limit: limit, Cost: cost, Now: now}
					dm, errm := ms.ApplyFlow(t.Context(), r, flow)
					dr, errr := rs.ApplyFlow(t.Context(), r, flow)
					if errm != nil || errr != nil {
						t.Fatalf("%s step %d: memstore %v, redis %v", key, step, errm, errr)
					}
					if dm != dr {
						t.Fatalf("%s step %d (%s, cost %d, limit %d, at %v):\nmemstore %+v\nredis    %+v", key, step, flow, cost, limit.Limit, now, dm, dr)
					}
					if dm.Allowed && cost > 0 {
						admitted++
					}
					if flows > floodgate.MaxFlows {
						// The overflow flow is the field "f" and an empty name.
						if ok, _ := c.Do(t.Context(), c.B().Hexists().Key(rs.fairKey(key, limit)).Field("f").Build()).AsBool(); ok {
							overflowed = true
						}
					}
				}
			}
			if !overflowed {
				t.Error("no sequence filled MaxFlows: the overflow flow is untested")
			}
			if admitted == 0 {
				t.Error("no request was admitted: the sequences test nothing")
			}
		})
	}
}
