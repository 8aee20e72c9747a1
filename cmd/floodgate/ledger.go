package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/ledger"
	"github.com/floodgate-rl/floodgate/ledger/postgres"
	"github.com/floodgate-rl/floodgate/ledger/sqlite"
	"github.com/floodgate-rl/floodgate/store/redisstore"
)

const ledgerUsage = `usage: floodgate ledger <report|reconcile> [flags]

  report      print the usage per key and window recorded in a ledger, as CSV or JSON
  reconcile   compare the counters in Redis with a ledger, print the drift, optionally repair it

The ledger is a PostgreSQL URL (postgres://user:password@host:port/db) or the
path of an SQLite file.

Run "floodgate ledger <command> -h" for its flags.
`

// ledgerCmd is "floodgate ledger report|reconcile".
func ledgerCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, ledgerUsage)
		return 2
	}
	switch args[0] {
	case "report":
		return ledgerReport(ctx, args[1:], stdout, stderr)
	case "reconcile":
		return ledgerReconcile(ctx, args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, ledgerUsage)
		return 0
	}
	fmt.Fprintf(stderr, "floodgate ledger: unknown command %q\n\n%s", args[0], ledgerUsage)
	return 2
}

// openLedger opens the ledger at spec: PostgreSQL for a postgres:// or
// postgresql:// URL, else an SQLite file that must exist (a command that
// reads a ledger never makes an empty one from a mistyped path).
func openLedger(ctx context.Context, spec string) (ledger.Store, error) {
	if strings.HasPrefix(spec, "postgres://") || strings.HasPrefix(spec, "postgresql://") {
		return postgres.Open(ctx, spec, nil)
	}
	if _, err := os.Stat(spec); err != nil {
		return nil, fmt.Errorf("no ledger at %s: %w", spec, err)
	}
	return sqlite.Open(ctx, spec, nil)
}

// parseTimeIn reads a -from or -to: RFC 3339 (2026-01-05T00:00:00Z) or a
// date (2026-01-05, midnight in loc: UTC unless -time-zone); empty is the
// zero time.
func parseTimeIn(s string, loc *time.Location) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if t, err := time.ParseInLocation(time.DateOnly, s, loc); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("%q is neither RFC 3339 (2026-01-05T00:00:00Z) nor a date (2026-01-05)", s)
}

// ledgerReport is "floodgate ledger report".
func ledgerReport(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("floodgate ledger report", flag.ContinueOnError)
	fs.SetOutput(stderr)
	spec := fs.String("ledger", "", "the ledger: a PostgreSQL `URL` (postgres://…) or the path of an SQLite file (required)")
	from := fs.String("from", "", "the windows that start at or after this `time`: RFC 3339 or a date (UTC); default the first")
	to := fs.String("to", "", "the windows that start before this `time`: RFC 3339 or a date (UTC); default no end")
	prefix := fs.String("key", "", "the keys that start with this `prefix`; default every key")
	format := fs.String("format", "csv", "output format: csv or json")
	period := fs.String("period", "", "one row per key and calendar `unit` (day, week, month or year) of -time-zone, summing the windows that start in it; default a row per recorded window")
	zone := fs.String("time-zone", "", "the IANA time `zone` of -period's calendar and of -from and -to given as dates; default UTC")
	anchor := fs.String("anchor", "", "where -period's windows start: a weekday (monday), a day of the month (15) or MM-DD for a year; default the first")
	fs.Usage = func() {
		fmt.Fprint(stderr, `usage: floodgate ledger report -ledger URL_OR_PATH [flags]

Prints the usage per key and window recorded in the ledger, on stdout, one
row per window in key order: the quota, the window, the units committed in
it and the number of commits. A window belongs to the range it starts in.

  floodgate ledger report -ledger /var/lib/floodgate/ledger.db -from 2026-01-01 -to 2026-02-01
  floodgate ledger report -ledger postgres://floodgate@db/floodgate -key 'd|billing|' -format json
  floodgate ledger report -ledger ledger.db -period month -time-zone America/New_York -from 2026-12-01 -to 2027-01-01

flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	q := ledger.Query{KeyPrefix: *prefix}
	var problem string
	var errFrom, errTo, errCal error
	var cal floodgate.Calendar
	loc := time.UTC
	switch {
	case *period != "":
		if cal, errCal = floodgate.ParseCalendar(*period, *zone, *anchor); errCal == nil && cal.Location != nil {
			loc = cal.Location
		}
	case *zone != "" || *anchor != "":
		errCal = errors.New("-time-zone and -anchor go with -period")
	}
	q.From, errFrom = parseTimeIn(*from, loc)
	q.To, errTo = parseTimeIn(*to, loc)
	switch {
	case errCal != nil:
		problem = errCal.Error()
	case fs.NArg() > 0:
		problem = fmt.Sprintf("unexpected argument %q", fs.Arg(0))
	case *spec == "":
		problem = "-ledger: required"
	case errFrom != nil:
		problem = fmt.Sprintf("-from: %v", errFrom)
	case errTo != nil:
		problem = fmt.Sprintf("-to: %v", errTo)
	case *format != string(ledger.CSV) && *format != string(ledger.JSON):
		problem = fmt.Sprintf("-format: %q is not csv or json", *format)
	default:
		if err := q.Validate(); err != nil {
			problem = err.Error()
		}
	}
	if problem != "" {
		fmt.Fprintf(stderr, "floodgate ledger report: %s\n", problem)
		return 2
	}
	l, err := openLedger(ctx, *spec)
	if err != nil {
		fmt.Fprintf(stderr, "floodgate ledger report: %v\n", err)
		return 1
	}
	defer l.Close()
	report := ledger.WriteReport
	if !cal.IsZero() {
		report = func(ctx context.Context, w io.Writer, s ledger.Store, q ledger.Query, f ledger.Format) error {
			return ledger.WriteCalendarReport(ctx, w, s, q, f, cal)
		}
	}
	if err := report(ctx, stdout, l, q, ledger.Format(*format)); err != nil {
		fmt.Fprintf(stderr, "floodgate ledger report: %v\n", err)
		return 1
	}
	return 0
}

// parseLimitSpec reads a -limit: "UNITS/PERIOD", the period a Go duration
// (720h) or a config file's unit (second, minute, hour, day, week, month,
// year), and optionally ",first_hit": "10000/month", "500/24h,first_hit".
func parseLimitSpec(s string) (floodgate.Limit, error) {
	spec, window, hasWindow := strings.Cut(s, ",")
	units, period, ok := strings.Cut(spec, "/")
	if !ok {
		return floodgate.Limit{}, fmt.Errorf("%q is not UNITS/PERIOD[,first_hit] (10000/month, 500/24h,first_hit)", s)
	}
	l := floodgate.Limit{Algorithm: floodgate.FixedWindow}
	var err error
	if l.Limit, err = strconv.ParseInt(units, 10, 64); err != nil {
		return l, fmt.Errorf("%q: units %q are not an integer", s, units)
	}
	if d, ok := config.UnitLength(period); ok {
		l.Period = d
	} else if l.Period, err = time.ParseDuration(period); err != nil {
		return l, fmt.Errorf("%q: period %q is neither a unit (second … year) nor a duration (720h)", s, period)
	}
	switch {
	case !hasWindow:
	case window == string(floodgate.FirstHit) || window == string(floodgate.Aligned):
		l.Window = floodgate.Window(window)
	default:
		return l, fmt.Errorf("%q: %q is not first_hit or aligned", s, window)
	}
	return l, l.Validate()
}

// serveKeyPrefix starts the key of every counter that floodgate serve
// keeps for a config rule: "d|" and the rule's Key (server.Server).
const serveKeyPrefix = "d|"

// ruleOf finds the config rule whose counter is key, a key that floodgate
// serve made for one of cfg's rules: "d|" + Rule.Key(entries). It reads
// the domain and entries back from the key (escaped as config.Key
// escapes them) and matches them, and returns nil when the key is not
// one of the rules'.
func ruleOf(cfg *config.Config, key string) *config.Rule {
	body, ok := strings.CutPrefix(key, serveKeyPrefix)
	if !ok {
		return nil
	}
	parts := strings.Split(body, "|")
	domain, err := unescapeKey(parts[0])
	if err != nil {
		return nil
	}
	entries := make([]config.Entry, 0, len(parts)-1)
	for _, p := range parts[1:] {
		k, v, ok := strings.Cut(p, "=")
		if !ok {
			return nil
		}
		var e config.Entry
		if e.Key, err = unescapeKey(k); err != nil {
			return nil
		}
		if e.Value, err = unescapeKey(v); err != nil {
			return nil
		}
		entries = append(entries, e)
	}
	r := cfg.Match(domain, entries)
	if r == nil || r.Unlimited || serveKeyPrefix+r.Key(entries) != key {
		return nil
	}
	return r
}

// unescapeKey undoes config.Key's escaping of '%', '|' and '=' (%25,
// %7C, %3D).
func unescapeKey(s string) (string, error) {
	if !strings.Contains(s, "%") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", fmt.Errorf("a %% at the end of %q", s)
		}
		n, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil {
			return "", err
		}
		b.WriteByte(byte(n))
		i += 2
	}
	return b.String(), nil
}

// ledgerReconcile is "floodgate ledger reconcile". It exits 0 when no
// counter drifts, 1 when some do (repaired or not), 2 for bad flags or a
// failure that stopped the comparison.
func ledgerReconcile(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("floodgate ledger reconcile", flag.ContinueOnError)
	fs.SetOutput(stderr)
	spec := fs.String("ledger", "", "the ledger: a PostgreSQL `URL` (postgres://…) or the path of an SQLite file (required)")
	redisURL := fs.String("redis", "", "the Redis `URL` of the counters, as given to floodgate serve -redis; empty: the counters are in a serve process's memory, out of reach, and there is nothing to reconcile")
	limitSpec := fs.String("limit", "", "the quota the counters run under now, for every key: `UNITS/PERIOD[,first_hit]` (10000/month, 500/24h); default the quota recorded with each window's latest commit")
	configPath := fs.String("config", "", "config `file or directory` of floodgate serve: each key whose counter is a rule's takes that rule's limit; other keys the recorded one")
	var ld config.Loader
	mergeFlag(fs, &ld.MergeDomains)
	prefix := fs.String("key", "", "the keys that start with this `prefix`; default every key")
	repair := fs.Bool("repair", false, "raise each counter that is behind the ledger to the ledger's units (a counter is never lowered)")
	timeout := fs.Duration("timeout", 5*time.Second, "deadline of each Redis call")
	fs.Usage = func() {
		fmt.Fprint(stderr, `usage: floodgate ledger reconcile -ledger URL_OR_PATH -redis URL [flags]

Compares each counter in Redis with the ledger, for every window of the
ledger that is open now, and prints the windows where they differ:

  behind   the counter holds fewer units than the ledger: Redis lost them (a
           restart without persistence, a failover, an eviction) and would
           admit them again; -repair raises the counter to the ledger's units
  ahead    the counter holds more: reservations still held, commits whose
           ledger write failed, or admissions outside durable commits;
           reported, never lowered

Exit status: 0 when no counter drifts, 1 when some do (repaired or not), 2
for bad flags or a failure that stopped the comparison.

  floodgate ledger reconcile -ledger /var/lib/floodgate/ledger.db -redis redis://localhost:6379 -config /etc/floodgate
  floodgate ledger reconcile -ledger postgres://floodgate@db/floodgate -redis redis://cache:6379 -limit 10000/month -repair

flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	var (
		problem string
		limit   floodgate.Limit
		cfg     *config.Config
		err     error
	)
	switch {
	case fs.NArg() > 0:
		problem = fmt.Sprintf("unexpected argument %q", fs.Arg(0))
	case *spec == "":
		problem = "-ledger: required"
	case *limitSpec != "" && *configPath != "":
		problem = "-limit and -config: give one"
	case *timeout <= 0:
		problem = fmt.Sprintf("-timeout: %v must be above zero", *timeout)
	case *limitSpec != "":
		if limit, err = parseLimitSpec(*limitSpec); err != nil {
			problem = fmt.Sprintf("-limit: %v", err)
		}
	case *configPath != "":
		if cfg, err = ld.Load(*configPath); err != nil {
			problem = fmt.Sprintf("-config: %v", err)
		}
	}
	if problem != "" {
		fmt.Fprintf(stderr, "floodgate ledger reconcile: %s\n", problem)
		return 2
	}
	if *redisURL == "" {
		fmt.Fprintln(stderr, "floodgate ledger reconcile: no -redis: the counters of floodgate serve without -redis live in its memory, out of reach of another process; nothing to reconcile")
		return 0
	}

	l, err := openLedger(ctx, *spec)
	if err != nil {
		fmt.Fprintf(stderr, "floodgate ledger reconcile: %v\n", err)
		return 2
	}
	defer l.Close()
	store, err := redisstore.Open(ctx, *redisURL, nil)
	if err != nil {
		fmt.Fprintf(stderr, "floodgate ledger reconcile: %v\n", err)
		return 2
	}
	defer store.Close()
	limiter, err := floodgate.New(store, &floodgate.Options{Timeout: *timeout})
	if err != nil {
		fmt.Fprintf(stderr, "floodgate ledger reconcile: %v\n", err)
		return 2
	}
	o := &ledger.ReconcileOptions{KeyPrefix: *prefix}
	switch {
	case *limitSpec != "":
		o.Limit = func(string, floodgate.Limit) floodgate.Limit { return limit }
	case cfg != nil:
		o.Limit = func(key string, recorded floodgate.Limit) floodgate.Limit {
			if r := ruleOf(cfg, key); r != nil {
				// The counter is read and raised as a plain limit: this
				// command has no ledger to rebuild it from.
				lim := r.Limit
				lim.Durable = false
				return lim
			}
			return recorded
		}
	}
	if *repair {
		o.Repair = ledger.Raise(limiter)
	}
	drifts, err := ledger.Reconcile(ctx, l, ledger.PeekUsed(limiter), o)
	printDrifts(stdout, drifts)
	if err != nil {
		fmt.Fprintf(stderr, "floodgate ledger reconcile: %v\n", err)
		return 2
	}
	if len(drifts) > 0 {
		return 1
	}
	return 0
}

// printDrifts prints one line per drift and a summary.
func printDrifts(w io.Writer, drifts []ledger.Drift) {
	if len(drifts) == 0 {
		fmt.Fprintln(w, "no drift: every open window's counter holds the ledger's units")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "key\twindow\tlimit\tledger\tcounter\tstate")
	behind, repaired := 0, 0
	for _, d := range drifts {
		state := "ahead"
		switch {
		case !d.Behind():
		case d.Repaired:
			state = fmt.Sprintf("behind by %d, repaired", d.Missing())
			repaired++
		case d.RepairErr != nil:
			state = fmt.Sprintf("behind by %d, repair failed: %v", d.Missing(), d.RepairErr)
		default:
			state = fmt.Sprintf("behind by %d", d.Missing())
		}
		if d.Behind() {
			behind++
		}
		fmt.Fprintf(tw, "%s\t%v\t%d\t%d\t%d\t%s\n", strconv.Quote(d.Key), d.Window, d.Limit.Limit, d.Units, d.Counter, state)
	}
	tw.Flush()
	fmt.Fprintf(w, "%d drifting: %d behind (%d repaired), %d ahead\n", len(drifts), behind, repaired, len(drifts)-behind)
}
