package main

import (
	"flag"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
)

// servePrimary are the flags `floodgate serve -h` shows, in this order, each
// with one line of help: what a first deployment sets. The others are in
// `floodgate serve -help-all` and docs/serve.md, which lists every flag
// (TestServeDocListsEveryFlag).
var servePrimary = []struct{ name, help string }{
	{"http", "HTTP API, /metrics, /healthz, /readyz and the dashboard"},
	{"grpc", "Envoy's rate limit and quota services (gRPC); empty disables"},
	{"config", "rules in envoyproxy/ratelimit's YAML: a file or a directory, reloaded on change"},
	{"redis", "redis://, redis-sentinel://, redis-cluster:// (rediss… for TLS); empty: the embedded store"},
	{"timeout", "deadline of each store call; past it the failure mode answers"},
	{"failure-mode", "answer when the store fails: fail_open, fail_closed or local"},
	{"instances", "replicas sharing the Redis (failure mode local needs it)"},
	{"auth-token-file", "client bearer tokens, one per line; without it the API is open"},
	{"admin-token-file", "admin bearer tokens: reset, inspect, config, the dashboard's keys"},
	{"tls-cert", "certificate of both listeners (PEM), with -tls-key"},
	{"tls-key", "key of -tls-cert (PEM)"},
	{"tls-client-ca", "CAs of client certificates: mutual TLS on both listeners"},
	{"ledger", "ledger of durable quotas: a PostgreSQL URL or an SQLite file"},
	{"region", "this instance's region: rules marked global: true take its share"},
	{"home", "with -region: the home Redis that leases the regions' shares"},
	{"ui", "the live dashboard at /ui"},
	{"log-format", "text or json"},
	{"log-level", "debug (explains every denial), info, warn or error"},
	{"debug-addr", "Go's profiler, /debug/pprof/, on an address of its own"},
	{"shutdown-timeout", "how long SIGINT or SIGTERM waits for requests in flight"},
}

// serveUsage prints the help of `floodgate serve -h`: the primary flags, and
// how many more there are and where.
func serveUsage(fs *flag.FlagSet) {
	w := fs.Output()
	fmt.Fprint(w, `usage: floodgate serve [flags]

Runs the rate limit service: Envoy's gRPC protocols and a JSON HTTP API, on
the embedded memory store or on Redis. Every flag can also be set in the
environment: FLOODGATE_ and its name in capitals, dashes as underscores
(FLOODGATE_REDIS); a flag on the command line wins.

Primary flags:
`)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, p := range servePrimary {
		f := fs.Lookup(p.name)
		if f == nil {
			continue // TestServeUsage fails on it
		}
		arg, _ := flag.UnquoteUsage(f)
		fmt.Fprintf(tw, "  -%s %s\t%s%s\n", f.Name, arg, p.help, defaultNote(f))
	}
	tw.Flush()
	fmt.Fprintf(w, "\n%d more flags (Redis tuning and TLS, the ledger, regions, Envoy's quota service,\n"+
		"envoyproxy/ratelimit's settings, bounds): floodgate serve -help-all, or docs/serve.md.\n",
		countFlags(fs)-len(servePrimary))
}

// printAllFlags prints the help of `floodgate serve -help-all`: every flag
// with its whole help, as the flag package prints it.
func printAllFlags(fs *flag.FlagSet) {
	fmt.Fprintf(fs.Output(), "usage: floodgate serve [flags]\n\nEvery flag (docs/serve.md has them by topic; env FLOODGATE_ and the name):\n")
	fs.PrintDefaults()
}

// helpAll reports whether args ask for -help-all before a "--". It is read
// before the flags are parsed, so it is not a flag of the FlagSet (nor an
// environment variable).
func helpAll(args []string) bool {
	end := slices.Index(args, "--")
	if end < 0 {
		end = len(args)
	}
	return slices.Contains(args[:end], "-help-all") || slices.Contains(args[:end], "--help-all")
}

// defaultNote is " (default V)" for a flag whose default is not its type's
// zero value, as flag.PrintDefaults writes it.
func defaultNote(f *flag.Flag) string {
	switch f.DefValue {
	case "", "0", "false", "0s":
		return ""
	}
	return fmt.Sprintf(" (default %s)", strings.TrimSpace(f.DefValue))
}

func countFlags(fs *flag.FlagSet) int {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n
}
