package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

func TestApplyPipelined(t *testing.T) {
	s, _ := testStore(t, standaloneAddr(t), nil)
	one := limitOf(floodgate.FixedWindow, 1, time.Minute)
	rs := []floodgate.Request{
		request("a", one, t0),
		request("b", one, t0),
		request("a", one, t0), // the same key again: exactly one of the two "a" is admitted
		{Key: "c", Limit: floodgate.Limit{Limit: 1}, Cost: 1, Now: t0}, // invalid: no period
	}
	ds, errs := s.ApplyPipelined(t.Context(), rs)
	if len(ds) != len(rs) || len(errs) != len(rs) {
		t.Fatalf("%d decisions and %d errors for %d requests", len(ds), len(errs), len(rs))
	}
	for i := range 3 {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
	}
	if !ds[1].Allowed {
		t.Error("b denied")
	}
	if ds[0].Allowed == ds[2].Allowed {
		t.Errorf("both requests for a were %v; want exactly one admitted", ds[0].Allowed)
	}
	if !errors.Is(errs[3], floodgate.ErrInvalidLimit) {
		t.Errorf("invalid request: %v, want ErrInvalidLimit", errs[3])
	}
}

func TestPing(t *testing.T) {
	srv := redistest.Standalone(t)
	// Not testStore: its TTL scan at the end would wait for the killed server.
	s, err := New(newRueidis(t, srv.Addr), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(t.Context()); err != nil {
		t.Fatalf("Ping with Redis up: %v", err)
	}
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	// A client reconnects until its context ends: Ping must end with it.
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := s.Ping(ctx); err == nil {
		t.Error("Ping with Redis killed succeeded")
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Ping with Redis killed took %v, past its 500ms deadline", took)
	}
}
