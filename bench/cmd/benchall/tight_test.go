package main

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/bench"
)

// TestTightLoop: the loop grows until a run lasts dur, reports the calls
// of that last run, and ends at the first error.
func TestTightLoop(t *testing.T) {
	var calls atomic.Int64
	var keys atomic.Value
	allow := func(_ context.Context, key string) (bool, error) {
		calls.Add(1)
		keys.Store(key)
		return true, nil
	}
	const dur = 20 * time.Millisecond
	rw, err := tightLoop(context.Background(), "fake", allow, "k", 4, dur)
	if err != nil {
		t.Fatal(err)
	}
	if rw.sum.ElapsedSeconds < dur.Seconds() {
		t.Errorf("last run lasted %vs, want at least %v", rw.sum.ElapsedSeconds, dur)
	}
	if rw.sum.Decisions <= 0 || rw.sum.Decisions%4 != 0 || rw.sum.Decisions > calls.Load() {
		t.Errorf("decisions %d of %d calls, want a positive multiple of 4 callers, at most the calls", rw.sum.Decisions, calls.Load())
	}
	if got := float64(rw.sum.Decisions) / rw.sum.ElapsedSeconds; got != rw.sum.DecisionsPerSec {
		t.Errorf("decisions/s %v, want decisions ÷ elapsed %v", rw.sum.DecisionsPerSec, got)
	}
	if keys.Load() != "k" || rw.keys != 1 || rw.callers != 4 || rw.lib != "fake" {
		t.Errorf("row %+v, key %v", rw, keys.Load())
	}

	boom := errors.New("boom")
	var n atomic.Int64
	failing := func(context.Context, string) (bool, error) {
		if n.Add(1) > 100 {
			return false, boom
		}
		return true, nil
	}
	if _, err := tightLoop(context.Background(), "fails", failing, "k", 2, time.Hour); !errors.Is(err, boom) || !strings.Contains(err.Error(), "fails") {
		t.Errorf("error %v, want boom naming the library", err)
	}
}

// TestTightRounds: every library at every caller count, the median round
// of each.
func TestTightRounds(t *testing.T) {
	allows := map[string]bench.AllowFunc{}
	for _, lib := range tightLibs {
		allows[lib] = func(context.Context, string) (bool, error) { return true, nil }
	}
	rows, err := tightRounds(context.Background(), allows, "k", 3, time.Millisecond, func(string, ...any) {})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(tightLibs)*len(tightCallers) {
		t.Fatalf("%d rows, want %d", len(rows), len(tightLibs)*len(tightCallers))
	}
	for _, lib := range tightLibs {
		for _, c := range tightCallers {
			if _, ok := find(rows, lib, 1, c); !ok {
				t.Errorf("no row for %s at %d callers", lib, c)
			}
		}
	}
	delete(allows, "x/time/rate")
	if _, err := tightRounds(context.Background(), allows, "k", 1, time.Millisecond, func(string, ...any) {}); err == nil {
		t.Error("a missing library gave no error")
	}
}
