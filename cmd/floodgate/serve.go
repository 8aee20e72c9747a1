package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/floodgate-rl/floodgate/store/memstore"
	"github.com/floodgate-rl/floodgate/store/redisstore"
	"github.com/peterbourgon/ff/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// defaultDenyCache is serve's default -deny-cache: on, because a cached
// denial never refuses what Redis would admit (its entry ends no later than
// Redis's own RetryAfter), and a client hammering a denied key then costs
// no round trip. 65,536 entries take a few MiB.
const defaultDenyCache = 1 << 16

// grpcStreamWorkers is the number of goroutines kept to serve gRPC calls;
// see grpc.NumStreamWorkers.
const grpcStreamWorkers = 256

// serveConfig is everything `floodgate serve` reads from its flags and
// environment, once, at start.
type serveConfig struct {
	httpAddr, grpcAddr string
	configPath         string
	redisURL           string
	redisTLS           redisTLSFlags
	logFormat          string
	logLevel           slog.Level
	timeout            time.Duration
	failureMode        string
	instances          int
	denyCache          int
	functions          bool
	coalesce           int
	waitReplicas       int
	waitTimeout        time.Duration
	headers            bool
	probeInterval      time.Duration
	shutdownTimeout    time.Duration
	pprof              bool
}

func parseServe(args []string, stderr io.Writer) (serveConfig, int, bool) {
	var c serveConfig
	fs := flag.NewFlagSet("floodgate serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.httpAddr, "http", "127.0.0.1:8080", "HTTP API, /metrics and health `address` (env FLOODGATE_HTTP)")
	fs.StringVar(&c.grpcAddr, "grpc", "127.0.0.1:8081", "Envoy rate limit gRPC `address`; empty disables (env FLOODGATE_GRPC)")
	fs.StringVar(&c.configPath, "config", "", "config `file or directory` in envoyproxy/ratelimit's YAML format, reloaded on change and on SIGHUP (env FLOODGATE_CONFIG)")
	fs.StringVar(&c.redisURL, "redis", "", "Redis `URL`: redis://, redis-sentinel://, redis-cluster://, or rediss://, rediss-sentinel://, rediss-cluster:// for TLS; empty runs on the embedded memory store (env FLOODGATE_REDIS)")
	fs.StringVar(&c.redisTLS.ca, "redis-tls-ca", "", "rediss: PEM `file` of the CAs that verify the Redis server's certificate, in place of the system roots; read at start (env FLOODGATE_REDIS_TLS_CA)")
	fs.StringVar(&c.redisTLS.cert, "redis-tls-cert", "", "rediss: PEM `file` of the client certificate, for a Redis that requires one (tls-auth-clients yes), with -redis-tls-key; read again at each new connection, so a renewed one needs no restart (env FLOODGATE_REDIS_TLS_CERT)")
	fs.StringVar(&c.redisTLS.key, "redis-tls-key", "", "rediss: PEM `file` of the client certificate's private key, with -redis-tls-cert (env FLOODGATE_REDIS_TLS_KEY)")
	fs.StringVar(&c.redisTLS.serverName, "redis-tls-server-name", "", "rediss: the `name` the Redis server's certificate must hold, when it is not the host in -redis (an IP address there, a DNS name in the certificate); empty: each node's own host (env FLOODGATE_REDIS_TLS_SERVER_NAME)")
	fs.StringVar(&c.logFormat, "log-format", "text", "log format: text or json (env FLOODGATE_LOG_FORMAT)")
	fs.TextVar(&c.logLevel, "log-level", slog.LevelInfo, "log level: debug (explains every denial), info, warn, error (env FLOODGATE_LOG_LEVEL)")
	fs.DurationVar(&c.timeout, "timeout", server.DefaultTimeout, "deadline of each store call (env FLOODGATE_TIMEOUT)")
	fs.StringVar(&c.failureMode, "failure-mode", string(floodgate.FailOpen), "answer when the store fails, for rules without failure_mode: fail_open, fail_closed or local (env FLOODGATE_FAILURE_MODE)")
	fs.IntVar(&c.instances, "instances", 0, "`number` of replicas sharing the Redis; failure mode local divides every limit by it while Redis fails, and needs it (env FLOODGATE_INSTANCES)")
	fs.DurationVar(&c.probeInterval, "probe-interval", floodgate.DefaultProbeInterval, "failure mode local: how long to decide locally after a Redis failure before one request tries Redis again (env FLOODGATE_PROBE_INTERVAL)")
	fs.IntVar(&c.denyCache, "deny-cache", defaultDenyCache, "Redis: the most `keys` remembered as over their limit until their retry time, answered without a round trip (exact: see store/redisstore); 0 disables (env FLOODGATE_DENY_CACHE)")
	fs.BoolVar(&c.functions, "redis-functions", false, "Redis 7+: run the decisions as Redis functions (FUNCTION LOAD once, then FCALL) instead of EVALSHA scripts: 10-32% less Redis CPU per script call, less of a gain once calls share runs (-redis-coalesce) (env FLOODGATE_REDIS_FUNCTIONS)")
	fs.IntVar(&c.coalesce, "redis-coalesce", redisstore.DefaultCoalesce, "Redis: script runs in flight before further concurrent decisions wait and share one script run, which costs Redis far less CPU per decision (see store/redisstore); 0 disables (env FLOODGATE_REDIS_COALESCE)")
	fs.IntVar(&c.waitReplicas, "redis-wait-replicas", 0, "Redis: return a decision only once this `number` of replicas hold its writes (WAIT after every script run), else fail the call and answer it by the failure mode, so that a failover loses fewer admitted requests (none, when every replica is waited for; see store/redisstore); 0 disables (env FLOODGATE_REDIS_WAIT_REPLICAS)")
	fs.DurationVar(&c.waitTimeout, "redis-wait-timeout", redisstore.DefaultWaitTimeout, "Redis: how long -redis-wait-replicas waits for the replicas, at most, and never more than half of what is left of -timeout (env FLOODGATE_REDIS_WAIT_TIMEOUT)")
	fs.BoolVar(&c.headers, "response-headers", true, "add the RateLimit response headers (draft-ietf-httpapi-ratelimit-headers, Retry-After) to Envoy's answers and to POST /json; false leaves them out, as envoyproxy/ratelimit does by default (env FLOODGATE_RESPONSE_HEADERS)")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 10*time.Second, "how long to finish in-flight requests on SIGINT/SIGTERM (env FLOODGATE_SHUTDOWN_TIMEOUT)")
	fs.BoolVar(&c.pprof, "pprof", false, "serve /debug/pprof/ on the HTTP address (env FLOODGATE_PPROF)")
	if err := ff.Parse(fs, args, ff.WithEnvVarPrefix("FLOODGATE")); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return c, 0, false
		}
		fmt.Fprintf(stderr, "floodgate serve: %v\n", err)
		return c, 2, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "floodgate serve: unexpected argument %q\n", fs.Arg(0))
		return c, 2, false
	}
	tlsProblem := c.redisTLS.check(c.redisURL)
	switch {
	case c.logFormat != "text" && c.logFormat != "json":
		fmt.Fprintf(stderr, "floodgate serve: -log-format: %q is not text or json\n", c.logFormat)
		return c, 2, false
	case c.failureMode != string(floodgate.FailOpen) && c.failureMode != string(floodgate.FailClosed) && c.failureMode != string(floodgate.FailLocal):
		fmt.Fprintf(stderr, "floodgate serve: -failure-mode: %q is not fail_open, fail_closed or local\n", c.failureMode)
		return c, 2, false
	case c.instances < 0:
		fmt.Fprintf(stderr, "floodgate serve: -instances: %d is negative\n", c.instances)
		return c, 2, false
	case c.failureMode == string(floodgate.FailLocal) && c.instances == 0:
		fmt.Fprintf(stderr, "floodgate serve: -instances: failure mode local needs the number of replicas sharing the Redis (at least 1)\n")
		return c, 2, false
	case c.denyCache < 0:
		fmt.Fprintf(stderr, "floodgate serve: -deny-cache: %d is negative\n", c.denyCache)
		return c, 2, false
	case c.coalesce < 0:
		fmt.Fprintf(stderr, "floodgate serve: -redis-coalesce: %d is negative\n", c.coalesce)
		return c, 2, false
	case c.waitReplicas < 0:
		fmt.Fprintf(stderr, "floodgate serve: -redis-wait-replicas: %d is negative\n", c.waitReplicas)
		return c, 2, false
	case c.waitTimeout <= 0:
		fmt.Fprintf(stderr, "floodgate serve: -redis-wait-timeout: %v must be above zero\n", c.waitTimeout)
		return c, 2, false
	case c.waitReplicas > 0 && c.redisURL == "":
		fmt.Fprintf(stderr, "floodgate serve: -redis-wait-replicas: needs -redis (the embedded memory store has no replicas)\n")
		return c, 2, false
	case c.probeInterval <= 0:
		fmt.Fprintf(stderr, "floodgate serve: -probe-interval: %v must be above zero\n", c.probeInterval)
		return c, 2, false
	case c.timeout <= 0:
		fmt.Fprintf(stderr, "floodgate serve: -timeout: %v must be above zero\n", c.timeout)
		return c, 2, false
	case tlsProblem != "":
		fmt.Fprintf(stderr, "floodgate serve: %s\n", tlsProblem)
		return c, 2, false
	case c.httpAddr == "":
		fmt.Fprintf(stderr, "floodgate serve: -http: empty\n")
		return c, 2, false
	}
	return c, 0, true
}

// serve runs the service until ctx ends (SIGINT/SIGTERM), then shuts down
// gracefully: it stops accepting, finishes in-flight requests, and closes
// the store.
func serve(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c, code, ok := parseServe(args, stderr)
	if !ok {
		return code
	}
	var handler slog.Handler
	hopts := &slog.HandlerOptions{Level: c.logLevel}
	if c.logFormat == "json" {
		handler = slog.NewJSONHandler(stderr, hopts)
	} else {
		handler = slog.NewTextHandler(stderr, hopts)
	}
	log := slog.New(handler)

	tlsConf, err := c.redisTLS.config(log)
	if err != nil {
		log.Error("cannot read the Redis TLS files", "error", err)
		return 1
	}
	ro := redisstore.Options{DenyCache: c.denyCache, Functions: c.functions, Coalesce: c.coalesce,
		WaitReplicas: c.waitReplicas, WaitTimeout: c.waitTimeout, TLS: tlsConf}
	if c.coalesce == 0 {
		ro.Coalesce = -1
	}
	store, closeStore, err := openStore(ctx, c.redisURL, ro)
	if err != nil {
		log.Error("store unavailable", "error", err)
		return 1
	}
	defer closeStore()
	opts := server.Options{
		Store: store, FailureMode: floodgate.FailurePolicy(c.failureMode), Timeout: c.timeout,
		Logger: log, Pprof: c.pprof, Instances: c.instances, ProbeInterval: c.probeInterval,
	}
	if c.instances > 0 {
		local := memstore.New(nil)
		defer local.Close()
		opts.Local = local
	}
	srv, err := server.New(opts)
	if err != nil {
		log.Error("cannot start", "error", err)
		return 1
	}
	if rs, ok := store.(*redisstore.Store); ok {
		if err := registerLocalStats(srv.Registry(), rs); err != nil {
			log.Error("cannot start", "error", err)
			return 1
		}
	}
	if c.configPath != "" {
		reloader, err := server.NewReloader(srv, c.configPath)
		if err != nil {
			log.Error("config rejected", "error", err)
			fmt.Fprintf(stderr, "%v\n", err)
			return 1
		}
		watchErr := make(chan error, 1)
		go func() { watchErr <- reloader.Watch(ctx) }()
		// Serve only once the watch is in place, so that whoever sees the
		// service up can rely on every later change being reloaded.
		select {
		case <-reloader.Watching():
		case err := <-watchErr:
			if err != nil {
				log.Error("config watch failed; reload with SIGHUP", "error", err)
			}
		}
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-hup:
					_ = reloader.Reload()
				}
			}
		}()
	}

	rls := envoyService(srv, c.headers)
	httpLn, err := net.Listen("tcp", c.httpAddr)
	if err != nil {
		log.Error("cannot listen", "addr", c.httpAddr, "error", err)
		return 1
	}
	httpSrv := &http.Server{
		Handler:           srv.Handler(httpExtras(rls)),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(handler, slog.LevelWarn),
	}
	errc := make(chan error, 2)
	go func() { errc <- httpSrv.Serve(httpLn) }()

	var grpcSrv *grpc.Server
	grpcAddr := "disabled"
	if c.grpcAddr != "" {
		grpcLn, err := net.Listen("tcp", c.grpcAddr)
		if err != nil {
			httpLn.Close()
			log.Error("cannot listen", "addr", c.grpcAddr, "error", err)
			return 1
		}
		// A pool of stream workers serves each call on a goroutine whose
		// stack has already grown: with a goroutine per call (gRPC's
		// default), growing and copying the stack of every new handler
		// goroutine took 19-25% of the server's CPU under 64 concurrent
		// callers (pprof, 2026-11-29). Calls beyond the pool's size still
		// get a goroutine of their own, so the pool bounds nothing.
		grpcSrv = grpc.NewServer(grpc.NumStreamWorkers(grpcStreamWorkers))
		registerGRPC(grpcSrv, rls)
		hs := health.NewServer()
		healthpb.RegisterHealthServer(grpcSrv, hs)
		go func() { errc <- grpcSrv.Serve(grpcLn) }()
		grpcAddr = grpcLn.Addr().String()
	}
	storeName := "memory"
	if c.redisURL != "" {
		storeName = redactURL(c.redisURL)
	}
	log.Info("serving", "http_addr", httpLn.Addr().String(), "grpc_addr", grpcAddr, "store", storeName)
	fmt.Fprintf(stdout, "floodgate: serving HTTP on %s, gRPC on %s, store %s\n", httpLn.Addr(), grpcAddr, storeName)

	select {
	case <-ctx.Done():
	case err := <-errc:
		log.Error("server failed", "error", err)
		return 1
	}
	log.Info("shutting down", "timeout", c.shutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), c.shutdownTimeout)
	defer cancel()
	done := make(chan struct{})
	go func() {
		if grpcSrv != nil {
			grpcSrv.GracefulStop()
		}
		close(done)
	}()
	if err := httpSrv.Shutdown(sctx); err != nil {
		log.Warn("HTTP shutdown incomplete", "error", err)
	}
	select {
	case <-done:
	case <-sctx.Done():
		if grpcSrv != nil {
			grpcSrv.Stop()
		}
	}
	return 0
}

// openStore opens the memory store, or Redis for a URL.
func openStore(ctx context.Context, url string, ro redisstore.Options) (floodgate.Store, func(), error) {
	if url == "" {
		s := memstore.New(nil)
		return s, func() { s.Close() }, nil
	}
	return openRedis(ctx, url, ro)
}

// redactURL hides a password in a URL for logs.
func redactURL(u string) string {
	scheme, rest, ok := strings.Cut(u, "://")
	if !ok {
		return u
	}
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		if user, _, ok := strings.Cut(rest[:at], ":"); ok {
			return scheme + "://" + user + ":xxxxx@" + rest[at+1:]
		}
	}
	return u
}

// registerLocalStats exports the decisions the Redis store made in process
// as floodgate_local_decisions_total{kind}: the deny cache's denials and the
// admissions from local budgets, neither of which reached Redis; and
// how many script runs it shared between concurrent descriptors, and how
// many descriptors those carried.
func registerLocalStats(reg *prometheus.Registry, rs *redisstore.Store) error {
	for _, k := range []struct {
		kind string
		get  func(redisstore.LocalStats) int64
	}{
		{"deny_cache", func(st redisstore.LocalStats) int64 { return st.DenyCache }},
		{"local_budget", func(st redisstore.LocalStats) int64 { return st.LocalBudget }},
	} {
		c := prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "floodgate_local_decisions_total",
			Help:        "Descriptors the Redis store decided in process, without a round trip, by kind: deny_cache (a denial remembered until its retry time) or local_budget (units claimed from Redis beforehand).",
			ConstLabels: prometheus.Labels{"kind": k.kind},
		}, func() float64 { return float64(k.get(rs.LocalStats())) })
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	for _, m := range []struct {
		name, help string
		get        func(redisstore.CoalesceStats) int64
	}{
		{"floodgate_coalesced_runs_total", "Redis script runs that decided several concurrent descriptors at once (coalescing, -redis-coalesce).",
			func(st redisstore.CoalesceStats) int64 { return st.Runs }},
		{"floodgate_coalesced_decisions_total", "Descriptors decided in shared script runs; divided by floodgate_coalesced_runs_total, the mean run size.",
			func(st redisstore.CoalesceStats) int64 { return st.Decisions }},
	} {
		c := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: m.name, Help: m.help},
			func() float64 { return float64(m.get(rs.CoalesceStats())) })
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
