// Command floodgate runs Floodgate from the command line.
//
//	floodgate serve [flags]              run the rate limit service (Envoy gRPC, HTTP JSON API, metrics)
//	floodgate config validate PATH...    check config files without starting (-merge-domain-config: as serve's)
//	floodgate check [flags]              simulate a limit on the embedded store and print each decision
//	floodgate ratelimit [flags]          serve as envoyproxy/ratelimit, from its environment (also: the binary named ratelimit)
//	floodgate bench [flags]              load a running service (Envoy gRPC or HTTP API) and report rate and latency
//	floodgate version                    print the module version, VCS revision and Go version of the binary
//
// Every flag of serve can also be set by an environment variable:
// FLOODGATE_ and the flag's name in capitals, dashes as underscores
// (FLOODGATE_REDIS, FLOODGATE_LOG_LEVEL); a flag on the command line wins.
//
// Run "floodgate help" for the flags of each command.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
	// The IANA time zone tables, for calendar windows (time_zone in a
	// config, the HTTP API, ledger report -time-zone), in the binary: a
	// minimal container image has no /usr/share/zoneinfo.
	_ "time/tzdata"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	args := os.Args[1:]
	if filepath.Base(os.Args[0]) == "ratelimit" {
		// envoyproxy/ratelimit's image starts /bin/ratelimit.
		args = append([]string{"ratelimit"}, args...)
	}
	code := run(ctx, args, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

const usage = `usage: floodgate <command> [flags]

commands:
  serve              run the rate limit service (Envoy gRPC, HTTP JSON API, metrics)
  config validate    check config files (envoyproxy/ratelimit YAML) without starting
  check              simulate a limit on the embedded store and print each decision
  bench              load a running service (Envoy gRPC or the HTTP API); report decisions/s and latency
  ratelimit          serve as envoyproxy/ratelimit does, configured by its environment variables (docs/upstream.md)
  ledger             report the usage a ledger recorded, or reconcile the counters with it
  version            print the version, the VCS revision and the Go version of this binary
  help               print this help

Run "floodgate <command> -h" for a command's flags.
`

// run is the whole CLI: it returns the exit code (0 ok, 1 failure, 2 usage).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], stdout, stderr)
	case "ratelimit":
		return ratelimitCmd(ctx, args[1:], os.LookupEnv, stdout, stderr)
	case "config":
		return configCmd(args[1:], stdout, stderr)
	case "check":
		return check(ctx, args[1:], stdout, stderr)
	case "bench":
		return benchCmd(ctx, args[1:], stdout, stderr)
	case "ledger":
		return ledgerCmd(ctx, args[1:], stdout, stderr)
	case "version", "-version", "--version":
		return versionCmd(args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "floodgate: unknown command %q\n\n%s", args[0], usage)
	return 2
}

// configCmd is "floodgate config validate [-merge-domain-config] PATH...".
func configCmd(args []string, stdout, stderr io.Writer) int {
	const use = "usage: floodgate config validate [-merge-domain-config] FILE_OR_DIR..."
	if len(args) < 1 || args[0] != "validate" {
		fmt.Fprintln(stderr, use)
		return 2
	}
	fs := flag.NewFlagSet("floodgate config validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var ld config.Loader
	mergeFlag(fs, &ld.MergeDomains)
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, use)
		return 2
	}
	if err := ld.Validate(fs.Args()...); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: ok\n", strings.Join(fs.Args(), ", "))
	return 0
}

// check simulates requests against one limit on the memory store, with a
// simulated clock so that it prints at once what a real client would see
// over time.
func check(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	sim, code, ok := parseCheck(args, stderr)
	if !ok {
		return code
	}
	if err := sim.run(ctx, stdout); err != nil {
		fmt.Fprintf(stderr, "floodgate check: %v\n", err)
		return 1
	}
	return 0
}

// simulation is what `floodgate check` simulates: requests of cost units
// for key under lim, one every every.
type simulation struct {
	lim      floodgate.Limit
	key      string
	requests int
	every    time.Duration
	cost     int64
}

// parseCheck reads and checks the flags; ok is false when the command
// should exit with code.
func parseCheck(args []string, stderr io.Writer) (sim simulation, code int, ok bool) {
	fs := flag.NewFlagSet("floodgate check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	alg := fs.String("algorithm", string(floodgate.DefaultAlgorithm), "algorithm: fixed_window, sliding_window_log, sliding_window, token_bucket, gcra, concurrency")
	window := fs.String("window", string(floodgate.Aligned), "fixed_window alignment: aligned or first_hit")
	fs.StringVar(&sim.key, "key", "demo", "the key being limited")
	fs.IntVar(&sim.requests, "requests", 10, "number of requests to simulate (1 to 100000)")
	fs.DurationVar(&sim.every, "every", 100*time.Millisecond, "simulated time between requests")
	fs.Int64Var(&sim.cost, "cost", 1, "units each request takes")
	fs.Int64Var(&sim.lim.Limit, "limit", 5, "units per period")
	fs.DurationVar(&sim.lim.Period, "period", time.Second, "period (window, refill period or lease TTL)")
	fs.Int64Var(&sim.lim.Burst, "burst", 0, "capacity of token_bucket and gcra (0: the limit)")
	fs.BoolVar(&sim.lim.CountRejected, "count-rejected", false, "denied requests still count (fixed_window, sliding_window)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return sim, 0, false
		}
		return sim, 2, false
	}
	sim.lim.Algorithm, sim.lim.Window = floodgate.Algorithm(*alg), floodgate.Window(*window)
	var problem string
	switch err := sim.lim.Validate(); {
	case fs.NArg() > 0:
		problem = fmt.Sprintf("unexpected argument %q", fs.Arg(0))
	case err != nil:
		problem = err.Error()
	case sim.requests < 1 || sim.requests > 100_000:
		problem = fmt.Sprintf("-requests: %d is not between 1 and 100000", sim.requests)
	case sim.every < 0:
		problem = fmt.Sprintf("-every: %v is negative", sim.every)
	}
	if problem != "" {
		fmt.Fprintf(stderr, "floodgate check: %s\n", problem)
		return sim, 2, false
	}
	return sim, 0, true
}

// run simulates the requests on a memory store with a simulated clock and
// prints a table of the decisions.
func (sim simulation) run(ctx context.Context, stdout io.Writer) error {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := &simClock{now: start}
	store := memstore.New(&memstore.Options{Clock: clock, SweepInterval: -1})
	defer store.Close()
	limiter, err := floodgate.New(store, &floodgate.Options{Clock: clock})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "limit %v, key %q, %d requests of cost %d every %v\n\n", sim.lim, sim.key, sim.requests, sim.cost, sim.every)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "#\tt\tallowed\tremaining\treset_after\tretry_after\t")
	allowed := 0
	for i := range sim.requests {
		if err := ctx.Err(); err != nil {
			return err
		}
		var d floodgate.Decision
		if sim.lim.Algorithm == floodgate.Concurrency {
			// Each simulated request holds its lease until it expires.
			_, d, err = limiter.AcquireN(ctx, sim.key, sim.lim, sim.cost)
		} else {
			d, err = limiter.AllowN(ctx, sim.key, sim.lim, sim.cost)
		}
		if err != nil {
			return err
		}
		if d.Allowed {
			allowed++
		}
		retry := d.RetryAfter.String()
		if d.RetryAfter == floodgate.Never {
			retry = "never"
		}
		fmt.Fprintf(tw, "%d\t%v\t%v\t%d\t%v\t%s\t\n", i+1, clock.Now().Sub(start), d.Allowed, d.Remaining, d.ResetAfter, retry)
		clock.now = clock.now.Add(sim.every)
	}
	tw.Flush()
	fmt.Fprintf(stdout, "\n%d of %d allowed\n", allowed, sim.requests)
	return nil
}

// simClock is the simulated time of `floodgate check`: it moves only when
// the simulation moves it, between decisions, on one goroutine (the memory
// store's sweeper is off).
type simClock struct{ now time.Time }

func (c *simClock) Now() time.Time { return c.now }
