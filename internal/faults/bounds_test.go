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

// TestReserveBoundsCatch shows that the bounds of the reservation faults
// reject a row that breaks each of them.
func TestReserveBoundsCatch(t *testing.T) {
	wait := Row{
		Test: "TestFaultReserveSentinelFailoverWait", Package: "./internal/faults", Calls: 100, Errors: 10,
		TimeoutMS: 100, MaxLatencyMS: 90, StallMS: 10, RecoveryMS: -1, Limit: 50, MaxWindow: 50,
		Instances: 4, Followed: 8, Holds: 80, HoldsAcross: acrossHolds,
	}
	flush := Row{
		Test: "TestFaultReserveFunctionFlush", Package: "./internal/faults", Calls: 1000, Errors: 30, NotRun: 25, Deadlines: 5,
		TimeoutMS: 100, MaxLatencyMS: 90, StallMS: 10, RecoveryMS: -1, Limit: 1000, MaxWindow: 300, Holds: 400,
	}
	kill := Row{
		Test: "TestFaultReserveKill", Package: "./internal/faults", Calls: 100, Errors: 10,
		TimeoutMS: 100, MaxLatencyMS: 90, StallMS: 10, RecoveryMS: 50, Limit: 50, MaxWindow: 100,
		Holds: 80, HoldsAcross: 50, HoldsLost: 50,
	}
	for _, good := range []Row{wait, flush, kill} {
		if v := violations(good); len(v) != 0 {
			t.Fatalf("a good %s row breaks %v", good.Test, v)
		}
	}
	for name, c := range map[string]struct {
		good    Row
		breakIt func(*Row)
	}{
		"WAIT: hold lost":                {wait, func(r *Row) { r.HoldsLost = 1 }},
		"WAIT: commit lost":              {wait, func(r *Row) { r.CommitsLost = 1 }},
		"WAIT: overrun":                  {wait, func(r *Row) { r.Overrun, r.MaxWindow = 5, 55 }},
		"WAIT: count off":                {wait, func(r *Row) { r.SettleMismatch = 1 }},
		"WAIT: nothing held across":      {wait, func(r *Row) { r.HoldsAcross = 0 }},
		"flush: count off":               {flush, func(r *Row) { r.SettleMismatch = 3 }},
		"flush: settled twice":           {flush, func(r *Row) { r.DoubleCounted = 1 }},
		"flush: another error":           {flush, func(r *Row) { r.Errors++ }},
		"flush: deadlines on calm host":  {flush, func(r *Row) { r.Deadlines, r.Errors = 25, 50 }},
		"flush: no hold":                 {flush, func(r *Row) { r.Holds = 0 }},
		"kill: a hold survived":          {kill, func(r *Row) { r.HoldsLost = 49 }},
		"kill: more than a window extra": {kill, func(r *Row) { r.MaxWindow = 101 }},
	} {
		r := c.good
		c.breakIt(&r)
		if v := violations(r); len(v) == 0 {
			t.Errorf("%s: no bound broken", name)
		}
	}
}
