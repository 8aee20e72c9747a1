package linearize

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/floodgate-rl/floodgate"
)

// TestFailedCall checks the model of a failed call on hand-made histories
// of a limit of one per second: a failed call may have taken the unit or
// not, so a later call may be admitted or denied, but two admitted calls
// in one window are illegal, and so is a decision at a time the request
// did not ask for.
func TestFailedCall(t *testing.T) {
	lim := floodgate.Limit{Limit: 1, Period: time.Second}
	t0 := time.Unix(1_800_000_000, 0)
	req := func(now time.Time) Input {
		return Input{Req: floodgate.Request{Key: "k", Limit: lim, Cost: 1, Now: now}}
	}
	at := func(now time.Time, allowed bool) Output {
		d := floodgate.Decision{Allowed: allowed, Limit: 1, Now: now}
		if allowed {
			d.ResetAfter = time.Second - now.Sub(t0)
		} else {
			d.ResetAfter = time.Second - now.Sub(t0)
			d.RetryAfter = d.ResetAfter
		}
		return Output{Known: true, D: d}
	}
	failed := Output{Err: "context deadline exceeded"}
	t1 := t0.Add(time.Millisecond)
	for _, tc := range []struct {
		name string
		ops  []porcupine.Operation
		want porcupine.CheckResult
	}{
		{"failed then denied", []porcupine.Operation{
			{Input: req(t0), Output: failed, Call: 0, Return: 100},
			{Input: req(t1), Output: at(t1, false), Call: 1, Return: 2},
		}, porcupine.Ok},
		{"failed then allowed", []porcupine.Operation{
			{Input: req(t0), Output: failed, Call: 0, Return: 100},
			{Input: req(t1), Output: at(t1, true), Call: 1, Return: 2},
		}, porcupine.Ok},
		{"allowed twice", []porcupine.Operation{
			{Input: req(t0), Output: at(t0, true), Call: 0, Return: 1},
			{Input: req(t1), Output: at(t1, true), Call: 2, Return: 3},
		}, porcupine.Illegal},
		{"decided at another time", []porcupine.Operation{
			{Input: req(t0), Output: at(t1, true), Call: 0, Return: 1},
		}, porcupine.Illegal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _, err := Check(tc.ops, Options{}, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("Check = %s, want %s", got, tc.want)
			}
		})
	}
}

// TestUnmodelled checks that a failed call whose time the model cannot
// enumerate (a GCRA decided by the store's clock) is refused, not guessed.
func TestUnmodelled(t *testing.T) {
	lim := floodgate.Limit{Algorithm: floodgate.GCRA, Limit: 1, Period: time.Second}
	ops := []porcupine.Operation{{Input: Input{Req: floodgate.Request{Key: "k", Limit: lim, Cost: 1}}, Output: Output{Err: "timeout"}}}
	if _, _, err := Check(ops, Options{Monotonic: true}, time.Second); err == nil {
		t.Error("Check accepted a failed GCRA call without its own Now")
	}
}
