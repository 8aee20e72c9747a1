package redistest

import "testing"

// TestParseCommandStats reads INFO commandstats as Redis 7 prints it,
// subcommands and CRLF line ends included.
func TestParseCommandStats(t *testing.T) {
	info := "# Commandstats\r\n" +
		"cmdstat_evalsha:calls=12,usec=340,usec_per_call=28.33,rejected_calls=0,failed_calls=2\r\n" +
		"cmdstat_function|load:calls=1,usec=90,usec_per_call=90.00,rejected_calls=0,failed_calls=0\r\n" +
		"\r\n"
	got := ParseCommandStats(info)
	if want := (CommandStat{Calls: 12, Usec: 340, FailedCalls: 2}); got["evalsha"] != want {
		t.Errorf("evalsha: %+v, want %+v", got["evalsha"], want)
	}
	if got["function|load"].Calls != 1 {
		t.Errorf("function|load: %+v", got["function|load"])
	}
	if len(got) != 2 {
		t.Errorf("%d commands, want 2: %v", len(got), got)
	}
}
