package faults

import "testing"

// TestBoundsCatch shows that the bounds the fault tests and
// TestGuaranteesDoc apply reject a row that breaks each of them.
func TestBoundsCatch(t *testing.T) {
	good := Row{
		Test: "TestFaultKill", Package: "./internal/faults", Calls: 100, Errors: 10,
		TimeoutMS: 100, MaxLatencyMS: 120, StallMS: 10, RecoveryMS: 50, Limit: 50, MaxWindow: 80,
	}
	if v := violations(good); len(v) != 0 {
		t.Fatalf("a good row breaks %v", v)
	}
	for name, breakIt := range map[string]func(*Row){
		"late call":                 func(r *Row) { r.MaxLatencyMS = 211 },
		"late call, stall at limit": func(r *Row) { r.StallMS, r.MaxLatencyMS = 50, 251 },
		"policy ignored":            func(r *Row) { r.WrongPolicy = 1 },
		"error after recovery":      func(r *Row) { r.ErrorsAfterRecovery = 1 },
		"NOSCRIPT seen":             func(r *Row) { r.NoScript = 1 },
		"window over 2x limit":      func(r *Row) { r.MaxWindow = 101 },
		"overrun outside the fault": func(r *Row) { r.BadWindows = 1 },
		"goroutine leak":            func(r *Row) { r.GoroutinesLeaked = 1 },
		"connection leak":           func(r *Row) { r.ConnsLeaked = 1 },
		"double count":              func(r *Row) { r.DoubleCounted = 1 },
		"healthy shard failed":      func(r *Row) { r.OtherShardErrors = 1 },
		"no fault seen":             func(r *Row) { r.Errors = 0 },
		"no recovery":               func(r *Row) { r.RecoveryMS = -1 },
		"unknown test":              func(r *Row) { r.Test = "TestFaultNothing" },
	} {
		r := good
		breakIt(&r)
		if v := violations(r); len(v) == 0 {
			t.Errorf("%s: no bound broken", name)
		}
	}
}
