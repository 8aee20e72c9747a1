package regionsim

import (
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/region"
)

var full = flag.Bool("full", false, "run the documented simulation: a minute per mode, then again with a 30 s partition")

// servers starts the home Redis and one per region.
func servers(t *testing.T) (home string, regions []Region) {
	t.Helper()
	home = redistest.Standalone(t).Addr
	for i, name := range []string{"eu", "us", "ap"} {
		regions = append(regions, Region{Name: name, OneWay: []time.Duration{40, 80, 150}[i] * time.Millisecond, Addr: redistest.Standalone(t).Addr})
	}
	return home, regions
}

// TestRegionsSim runs the three modes connected, then with home
// unreachable from one region, and asserts what docs/regions.md promises:
// no window above the limit while every region reaches home (granted
// shares, as the central counter and the static split), and under the
// partition no window above Limit + ⌊SafeShare × Limit⌋. In CI it runs
// shortened (12 s per mode, a 6 s partition, grants of 3 s); -full runs the documented
// minute and 30 s.
func TestRegionsSim(t *testing.T) {
	home, regions := servers(t)
	c := Config{Regions: regions, Home: home, Seed: fmt.Sprint(time.Now().UnixNano()),
		Limit: 200, Duration: 12 * time.Second,
		Options: region.Options{Term: 3 * time.Second, Rebalance: 250 * time.Millisecond, Grace: 500 * time.Millisecond, SafeShare: 0.1}}
	partition, partitionAt := 6*time.Second, 3*time.Second
	if *full {
		c.Limit, c.Duration = 1000, time.Minute
		c.Options = region.Options{SafeShare: 0.1}
		partition, partitionAt = 30*time.Second, 20*time.Second
	}
	ctx := t.Context()
	connected, err := Run(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	report(t, "connected", connected)
	for _, m := range connected.Modes {
		if m.Overrun != 0 {
			t.Errorf("%s, every region connected: %d units above the limit (most in a window %d of %d)", m.Mode, m.Overrun, m.MaxWindow, c.Limit)
		}
	}
	// The shift as a step, granted shares alone: how long they take to
	// follow it.
	step := c
	step.Step, step.Modes, step.Seed = true, []Mode{Granted}, c.Seed+"s"
	if *full {
		step.Duration = 30 * time.Second
	}
	stepped, err := Run(ctx, step)
	if err != nil {
		t.Fatal(err)
	}
	report(t, "step", stepped)
	if m := stepped.Modes[0]; m.Overrun != 0 {
		t.Errorf("granted, demand shifting in one step: %d units above the limit", m.Overrun)
	}
	c.Partition, c.PartitionAt, c.PartitionRegion = partition, partitionAt, 2
	c.Seed += "p"
	parted, err := Run(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	report(t, "partition", parted)
	for _, m := range parted.Modes {
		if m.Mode == Granted && m.MaxWindow > parted.Bound {
			t.Errorf("granted, home unreachable from one region: a window admitted %d, above the bound %d", m.MaxWindow, parted.Bound)
		}
		if m.Mode != Granted && m.Overrun != 0 {
			t.Errorf("%s under the partition: %d units above the limit", m.Mode, m.Overrun)
		}
	}
}

// report logs r as JSON and as the table of docs/regions.md.
func report(t *testing.T, name string, r Report) {
	t.Helper()
	b, _ := json.Marshal(r)
	t.Logf("%s: %s", name, b)
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n| mode | admitted / capacity | utilisation | overrun (windows over, most in one) |")
	for _, rr := range r.Modes[0].Regions {
		fmt.Fprintf(&sb, " %s p50 / p99 ms |", rr.Name)
	}
	sb.WriteString(" shares lag demand by |\n|---|---|---|---|")
	for range r.Modes[0].Regions {
		sb.WriteString("---|")
	}
	sb.WriteString("---|\n")
	for _, m := range r.Modes {
		fmt.Fprintf(&sb, "| %s | %d / %d | %.3f | %d (%d, %d of %d) |", m.Mode, m.InWindows, m.Capacity, m.Utilisation, m.Overrun, m.WindowsOver, m.MaxWindow, r.Limit)
		for _, rr := range m.Regions {
			fmt.Fprintf(&sb, " %.2f / %.2f |", rr.P50MS, rr.P99MS)
		}
		switch {
		case m.Mode != Granted:
			sb.WriteString(" n/a |\n")
		case m.FollowMS < 0:
			sb.WriteString(" more than 10 s |\n")
		default:
			fmt.Fprintf(&sb, " %.0f ms |\n", m.FollowMS)
		}
	}
	t.Logf("%s (%s, limit %d per %d ms, %.0f requests/s)%s", name, r.Duration, r.Limit, r.PeriodMS, r.Demand, sb.String())
}
