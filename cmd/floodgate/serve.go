package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/ledger"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/floodgate-rl/floodgate/server/httpapi"
	"github.com/floodgate-rl/floodgate/server/tracing"
	"github.com/floodgate-rl/floodgate/server/transport"
	"github.com/floodgate-rl/floodgate/server/ui"
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

// serveConfig is everything `floodgate serve` reads from its flags and
// environment, once, at start.
type serveConfig struct {
	httpAddr, grpcAddr  string
	configPath          string
	redisURL            string
	redisTLS            redisTLSFlags
	logFormat           string
	logLevel            slog.Level
	timeout             time.Duration
	failureMode         string
	instances           int
	denyCache           int
	functions           bool
	coalesce            int
	waitReplicas        int
	waitTimeout         time.Duration
	headers             bool
	headersOld          bool // -response-headers, the deprecated name of -ratelimit-headers
	probeInterval       time.Duration
	shutdownTimeout     time.Duration
	debugAddr           string
	authFile, adminFile string
	idKeyFile           string
	// idKeys are -id-key-file's keys, read at start; nil: a random key.
	idKeys           [][]byte
	tlsCert, tlsKey  string
	tlsClientCA      string
	maxOwnPeriod     time.Duration
	maxKeys          int
	maxMemory        memSize
	maxHoldsPerKey   int
	maxHold          time.Duration
	maxHeld          int
	shadowMode       bool
	independent      bool
	holdRetention    time.Duration
	maxConns         int // 0: derived from the file limit (maxConnsFor)
	maxConnsPerPeer  int
	grpcMaxStreams   uint
	grpcWorkers      int
	writeTimeout     time.Duration
	allowedHosts     string
	uiMaxSubscribers int
	uiMaxPerPeer     int
	grpcMaxIdle      time.Duration
	gogc             int
	// ledger: -ledger and its flags (serveledger.go).
	ledger ledgerFlags
	// overrides: -override-poll (serveoverrides.go); overrideSync is
	// set by serve once the ledger is open.
	overrides    overrideFlags
	overrideSync *server.OverrideSync

	// parity: the settings of envoyproxy/ratelimit's (parity.go).
	parity parityFlags

	dashboard bool // -ui
	region    regionFlags
	rlqs      rlqsFlags

	// otel: -otel (otel.go); tracer: its Tracer, nil while tracing is off.
	otel   bool
	tracer *tracing.Tracer
	// xds: -config-xds and its flags (xds.go).
	xds xdsFlags
	// mode is envoyproxy/ratelimit's contract (upstream.go) when started
	// as `ratelimit`; nil for serve.
	mode *upstreamMode
}

func parseServe(args []string, stderr io.Writer) (serveConfig, int, bool) {
	var c serveConfig
	fs := c.flags(stderr)
	if helpAll(args) {
		printAllFlags(fs)
		return c, 0, false
	}
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
	c.resolveAliases(fs)
	if problem := c.problem(); problem != "" {
		fmt.Fprintf(stderr, "floodgate serve: %s\n", problem)
		return c, 2, false
	}
	return c, 0, true
}

// flags registers every flag of serve, writing to c, on a new FlagSet
// whose -h prints the primary flags (serveUsage); -help-all and
// docs/serve.md have them all.
func (c *serveConfig) flags(stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("floodgate serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { serveUsage(fs) }
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
	fs.BoolVar(&c.functions, "redis-functions", false, "Redis 7+: run the decisions as Redis functions (FUNCTION LOAD once, then FCALL) instead of EVALSHA scripts, so that Redis makes each script's helpers once rather than on every call; less of a gain once calls share runs (-redis-coalesce) (env FLOODGATE_REDIS_FUNCTIONS)")
	fs.IntVar(&c.coalesce, "redis-coalesce", redisstore.DefaultCoalesce, "Redis: script runs in flight before further concurrent decisions wait and share one script run, which costs Redis far less CPU per decision (see store/redisstore); 0 disables (env FLOODGATE_REDIS_COALESCE)")
	fs.IntVar(&c.waitReplicas, "redis-wait-replicas", 0, "Redis: return a decision only once this `number` of replicas hold its writes (WAIT after every script run), else fail the call and answer it by the failure mode, so that a failover loses fewer admitted requests (none, when every replica is waited for; see store/redisstore); 0 disables (env FLOODGATE_REDIS_WAIT_REPLICAS)")
	fs.DurationVar(&c.waitTimeout, "redis-wait-timeout", redisstore.DefaultWaitTimeout, "Redis: how long -redis-wait-replicas waits for the replicas, at most, and never more than half of what is left of -timeout (env FLOODGATE_REDIS_WAIT_TIMEOUT)")
	fs.BoolVar(&c.headers, "ratelimit-headers", true, "add the IETF RateLimit-Policy, RateLimit and Retry-After fields (draft-ietf-httpapi-ratelimit-headers) to Envoy's answers and to POST /json; false leaves them out, as envoyproxy/ratelimit does by default; -limit-response-headers sends upstream's three fields instead (env FLOODGATE_RATELIMIT_HEADERS)")
	fs.BoolVar(&c.headersOld, "response-headers", true, "deprecated name of -ratelimit-headers, still read; -ratelimit-headers wins when both are set (env FLOODGATE_RESPONSE_HEADERS)")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 10*time.Second, "how long to finish in-flight requests on SIGINT/SIGTERM (env FLOODGATE_SHUTDOWN_TIMEOUT)")
	fs.StringVar(&c.debugAddr, "debug-addr", "", "serve Go's profiler, /debug/pprof/, on this `address` of its own (127.0.0.1:6060, say), never on the API's; empty disables (env FLOODGATE_DEBUG_ADDR)")
	fs.StringVar(&c.authFile, "auth-token-file", "", "`file` of client bearer tokens, one per line (# comments), reloaded on change: the HTTP API's decisions, reservations and leases and every gRPC call but health checks need one (Authorization: Bearer <token>); empty leaves them open (env FLOODGATE_AUTH_TOKEN_FILE)")
	fs.StringVar(&c.adminFile, "admin-token-file", "", "`file` of admin bearer tokens, as -auth-token-file: they may do what client tokens do and also POST /v1/reset, GET /v1/config and read /readyz's detail; with either file, those need an admin token (env FLOODGATE_ADMIN_TOKEN_FILE)")
	fs.StringVar(&c.idKeyFile, "id-key-file", "", "`file` of the keys that sign reservation and lease ids (HMAC-SHA256), one per line (# comments), each at least 32 bytes (openssl rand -hex 32): the first signs, every one verifies, so keys rotate; read at start; instances that settle each other's ids need the same file; empty: a random key of this process, whose ids settle only on this instance and only until it restarts (env FLOODGATE_ID_KEY_FILE)")
	fs.StringVar(&c.tlsCert, "tls-cert", "", "PEM `file` of the certificate the HTTP and gRPC listeners present (TLS), with -tls-key; read again when it changes (env FLOODGATE_TLS_CERT)")
	fs.StringVar(&c.tlsKey, "tls-key", "", "PEM `file` of the key of -tls-cert (env FLOODGATE_TLS_KEY)")
	fs.StringVar(&c.tlsClientCA, "tls-client-ca", "", "PEM `file` of the CAs that sign client certificates: with it every client of both listeners must present one (mutual TLS); read again when it changes (env FLOODGATE_TLS_CLIENT_CA)")
	fs.DurationVar(&c.maxOwnPeriod, "max-own-period", server.DefaultMaxOwnPeriod, "the longest period of a limit a request brings (an inline limit of the HTTP API, Envoy's descriptor override); longer is refused as invalid, since each of its keys is kept that long; negative: no bound (env FLOODGATE_MAX_OWN_PERIOD)")
	fs.IntVar(&c.maxKeys, "max-keys", defaultMaxKeys, "memory store: the most keys holding state (docs/serve.md says the memory each takes); a request that would add one more, once expired keys are dropped, is denied whatever its rule's failure mode (503 with \"store_full\" on the HTTP API, OVER_LIMIT over gRPC) and counted in floodgate_memstore_refused_total; 0: no bound (env FLOODGATE_MAX_KEYS)")
	c.maxMemory = memSize{auto: true}
	fs.Var(&c.maxMemory, "max-memory", "memory store: the most `bytes` of state it holds, by an accounted estimate (docs/serve.md): keys, logged and leased units, reservations; a request that would pass it, once expired state is dropped, is denied as at -max-keys; a size (512MiB, 2GiB), auto (a quarter of GOMEMLIMIT, the cgroup's limit or the machine's memory, the least, between 64MiB and 4GiB) or 0 for no bound (env FLOODGATE_MAX_MEMORY)")
	fs.IntVar(&c.maxHoldsPerKey, "max-holds-per-key", defaultMaxHoldsPerKey, "memory store: the most reservations remembered for one key (held, or settled and kept for -hold-retention); one more is denied as at -max-keys; 0: no bound (env FLOODGATE_MAX_HOLDS_PER_KEY)")
	fs.IntVar(&c.maxConns, "max-connections", 0, "the most connections each listener (HTTP, gRPC) holds open at once; more wait to be accepted, so that clients opening thousands cannot take every file descriptor; 0: derived from the process's file limit, so that both listeners together stay under it (docs/serve.md has the formula) (env FLOODGATE_MAX_CONNECTIONS)")
	fs.IntVar(&c.maxConnsPerPeer, "max-connections-per-peer", 0, "the most connections one peer (an IPv4 address, an IPv6 /64) holds open on each listener; more are closed as soon as accepted, so that one client cannot starve the others; never above -max-connections; 0: 1000, or half of -max-connections if less (env FLOODGATE_MAX_CONNECTIONS_PER_PEER)")
	fs.IntVar(&c.grpcWorkers, "grpc-stream-workers", transport.DefaultStreamWorkers, "gRPC: goroutines kept to serve calls, each with its stack grown; about the number of calls in flight is best (more: each garbage collection shrinks every idle worker's stack, which its next call grows again; fewer: a call beyond them grows a new goroutine's) (env FLOODGATE_GRPC_STREAM_WORKERS)")
	fs.UintVar(&c.grpcMaxStreams, "grpc-max-streams", transport.DefaultMaxStreams, "gRPC: the most calls in flight on one connection (HTTP/2 max concurrent streams); more are refused (env FLOODGATE_GRPC_MAX_STREAMS)")
	fs.DurationVar(&c.maxHold, "max-hold", httpapi.DefaultMaxHold, "HTTP API: the longest a response is held until its slot (max_wait_ms on POST /v1/allow, hold on POST /v1/reservations); a longer max_wait_ms is bounded by it; below -write-timeout (env FLOODGATE_MAX_HOLD)")
	fs.IntVar(&c.maxHeld, "max-held", httpapi.DefaultMaxHeld, "HTTP API: the most requests held at once until their slot; one more is answered 503 with Retry-After: 1 before it takes a slot; 0: none is held (env FLOODGATE_MAX_HELD)")
	fs.DurationVar(&c.writeTimeout, "write-timeout", transport.DefaultWriteTimeout, "HTTP: the longest a response may take, from the end of its request's header to its last byte, and the longest each frame of the dashboard's feed may take to send; a client that does not read loses its connection then (env FLOODGATE_WRITE_TIMEOUT)")
	fs.StringVar(&c.allowedHosts, "allowed-hosts", "", "HTTP without token files: comma-separated host `names` the Host header may name besides an IP address and localhost (a name the listener is reached by, behind a proxy, say); any other is refused with 421, against DNS rebinding (env FLOODGATE_ALLOWED_HOSTS)")
	fs.IntVar(&c.uiMaxSubscribers, "ui-max-subscribers", ui.DefaultMaxSubscribers, "the most streams of the dashboard's feed (GET /ui/events) at once; more are answered 503 with Retry-After (env FLOODGATE_UI_MAX_SUBSCRIBERS)")
	fs.IntVar(&c.uiMaxPerPeer, "ui-max-subscribers-per-peer", ui.DefaultMaxSubscribersPerPeer, "the most streams of the dashboard's feed one peer (an IPv4 address, an IPv6 /64) holds at once; more are answered 503 with Retry-After (env FLOODGATE_UI_MAX_SUBSCRIBERS_PER_PEER)")
	fs.DurationVar(&c.grpcMaxIdle, "grpc-max-idle", 5*time.Minute, "gRPC: close a connection that has had no call for this long (Envoy reconnects when it needs to) (env FLOODGATE_GRPC_MAX_IDLE)")
	fs.DurationVar(&c.holdRetention, "hold-retention", floodgate.DefaultHoldRetention, "how long a reservation is remembered after it expires, so that a retried reserve, commit or cancel gets the first answer (env FLOODGATE_HOLD_RETENTION)")
	fs.BoolVar(&c.shadowMode, "shadow-mode", false, "global shadow mode, as envoyproxy/ratelimit's SHADOW_MODE: every request its limits deny is answered OK (its descriptors still say OVER_LIMIT, and it is counted in floodgate_global_shadow_mode_total), to try limits on live traffic; a fail_closed answer stays denied (env FLOODGATE_SHADOW_MODE)")
	c.ledger.register(fs)
	c.overrides.register(fs)
	fs.BoolVar(&c.independent, "independent-descriptors", false, "decide each descriptor of a request on its own, as envoyproxy/ratelimit does: a request denied by one descriptor still spends the others' budget; by default a request's descriptors are decided all or nothing (env FLOODGATE_INDEPENDENT_DESCRIPTORS)")
	c.parity.register(fs)
	fs.BoolVar(&c.dashboard, "ui", true, "serve the live dashboard at /ui on the HTTP listener (server/ui): decisions per rule, top denied keys, store health; its keys and rules need an admin token once token files are set, and so do its actions (env FLOODGATE_UI)")
	fs.IntVar(&c.gogc, "gogc", 0, "the garbage collector's target `percent`, as GOGC: a new cycle once the heap has grown this much since the last; higher spends less CPU per decision and more memory (a memory store's keys are live heap, so they cost up to 1+percent/100 times their size; docs/serve.md has measured figures); GOMEMLIMIT, if set, still bounds the heap; 0 leaves Go's setting (GOGC, else 100) (env FLOODGATE_GOGC)")
	c.region.register(fs)
	c.rlqs.register(fs)
	c.registerOTel(fs)
	c.xds.register(fs)
	return fs
}

// resolveAliases settles the flags that have a deprecated second name
// (-response-headers for -ratelimit-headers, -rlqs-off for -rlqs), after
// the command line and the environment: the new name wins when it is set,
// else the old one when it is set, else the default.
func (c *serveConfig) resolveAliases(fs *flag.FlagSet) {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["ratelimit-headers"] && set["response-headers"] {
		c.headers = c.headersOld
	}
	c.rlqs.resolve(set)
}

// problem is the first problem of the flags, naming the flag, or "".
func (c serveConfig) problem() string {
	tlsProblem := c.redisTLS.check(c.redisURL)
	switch {
	case c.logFormat != "text" && c.logFormat != "json":
		return fmt.Sprintf("-log-format: %q is not text or json", c.logFormat)
	case c.failureMode != string(floodgate.FailOpen) && c.failureMode != string(floodgate.FailClosed) && c.failureMode != string(floodgate.FailLocal):
		return fmt.Sprintf("-failure-mode: %q is not fail_open, fail_closed or local", c.failureMode)
	case c.instances < 0:
		return fmt.Sprintf("-instances: %d is negative", c.instances)
	case c.failureMode == string(floodgate.FailLocal) && c.instances == 0:
		return "-instances: failure mode local needs the number of replicas sharing the Redis (at least 1)"
	case c.denyCache < 0:
		return fmt.Sprintf("-deny-cache: %d is negative", c.denyCache)
	case (c.tlsCert == "") != (c.tlsKey == ""):
		return "-tls-cert and -tls-key: give both (the listeners' certificate and its key) or neither"
	case c.tlsClientCA != "" && c.tlsCert == "":
		return "-tls-client-ca: needs -tls-cert and -tls-key (mutual TLS is TLS first)"
	case c.coalesce < 0:
		return fmt.Sprintf("-redis-coalesce: %d is negative", c.coalesce)
	case c.waitReplicas < 0:
		return fmt.Sprintf("-redis-wait-replicas: %d is negative", c.waitReplicas)
	case c.waitTimeout <= 0:
		return fmt.Sprintf("-redis-wait-timeout: %v must be above zero", c.waitTimeout)
	case c.waitReplicas > 0 && c.redisURL == "":
		return "-redis-wait-replicas: needs -redis (the embedded memory store has no replicas)"
	case c.probeInterval <= 0:
		return fmt.Sprintf("-probe-interval: %v must be above zero", c.probeInterval)
	case c.timeout <= 0:
		return fmt.Sprintf("-timeout: %v must be above zero", c.timeout)
	case c.maxConns < 0:
		return fmt.Sprintf("-max-connections: %d is negative (0 derives it from the file limit)", c.maxConns)
	case c.maxConnsPerPeer < 0:
		return fmt.Sprintf("-max-connections-per-peer: %d is negative (0 derives it from -max-connections)", c.maxConnsPerPeer)
	case c.grpcWorkers < 1 || c.grpcWorkers > maxStreamWorkers:
		return fmt.Sprintf("-grpc-stream-workers: %d is not from 1 to %d", c.grpcWorkers, maxStreamWorkers)
	case c.grpcMaxStreams < 1 || c.grpcMaxStreams > math.MaxUint32:
		return fmt.Sprintf("-grpc-max-streams: %d is not from 1 to %d", c.grpcMaxStreams, uint64(math.MaxUint32))
	case c.writeTimeout <= 0:
		return fmt.Sprintf("-write-timeout: %v must be above zero", c.writeTimeout)
	case c.maxHold <= 0 || c.maxHold >= c.writeTimeout || c.maxHold > floodgate.MaxWait:
		return fmt.Sprintf("-max-hold: %v is not above zero and below -write-timeout %v (a held answer must be written before the connection's deadline), at most %v", c.maxHold, c.writeTimeout, floodgate.MaxWait)
	case c.maxHeld < 0:
		return fmt.Sprintf("-max-held: %d is negative (0 holds none)", c.maxHeld)
	case c.uiMaxSubscribers < 1:
		return fmt.Sprintf("-ui-max-subscribers: %d must be at least 1", c.uiMaxSubscribers)
	case c.uiMaxPerPeer < 1:
		return fmt.Sprintf("-ui-max-subscribers-per-peer: %d must be at least 1", c.uiMaxPerPeer)
	case hostsProblem(c.allowedHosts) != "":
		return hostsProblem(c.allowedHosts)
	case c.maxKeys < 0:
		return fmt.Sprintf("-max-keys: %d is negative (0 means no bound)", c.maxKeys)
	case c.maxHoldsPerKey < 0:
		return fmt.Sprintf("-max-holds-per-key: %d is negative (0 means no bound)", c.maxHoldsPerKey)
	case c.gogc < 0:
		return fmt.Sprintf("-gogc: %d is negative (0 leaves Go's setting)", c.gogc)
	case c.grpcMaxIdle <= 0:
		return fmt.Sprintf("-grpc-max-idle: %v must be above zero", c.grpcMaxIdle)
	case c.holdRetention <= 0:
		return fmt.Sprintf("-hold-retention: %v must be above zero", c.holdRetention)
	case c.region.problem() != "":
		return c.region.problem()
	case c.rlqs.problem() != "":
		return c.rlqs.problem()
	case c.xds.problem(c.configPath) != "":
		return c.xds.problem(c.configPath)
	case tlsProblem != "":
		return tlsProblem
	case c.ledger.problem() != "":
		return c.ledger.problem()
	case c.overrides.problem() != "":
		return c.overrides.problem()
	case c.httpAddr == "":
		return "-http: empty"
	case tracingProblem(c.otel, os.Getenv) != "":
		return tracingProblem(c.otel, os.Getenv)
	}
	return ""
}

// serve runs the service until ctx ends (SIGINT/SIGTERM), then shuts down
// gracefully: it stops accepting, finishes in-flight requests, and closes
// the store. Each step is a function of its own: the logger, the store,
// the server (its Limiter and metrics), the config and its reloads, the
// listeners, and the shutdown.
func serve(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return serveMode(ctx, args, nil, stdout, stderr)
}

// serveMode is serve, with the additions of mode (nil for none).
func serveMode(ctx context.Context, args []string, mode *upstreamMode, stdout, stderr io.Writer) int {
	c, code, ok := parseServe(args, stderr)
	if !ok {
		return code
	}
	c.mode = mode
	c.mode.configure(&c)
	if c.gogc > 0 {
		// Restored on return, for a serve run inside a test's process.
		defer debug.SetGCPercent(debug.SetGCPercent(c.gogc))
	}
	handler := logHandler(c, stderr)
	log := slog.New(handler)
	c.mode.logWarnings(log)

	auth, err := c.loadAuth(ctx, log)
	if err != nil {
		log.Error("cannot start", "error", err)
		fmt.Fprintf(stderr, "floodgate serve: %v\n", err)
		return 1
	}
	if c.idKeys, err = c.loadIDKeys(log); err != nil {
		log.Error("cannot start", "error", err)
		fmt.Fprintf(stderr, "floodgate serve: %v\n", err)
		return 1
	}
	ltls, err := transport.NewTLSFiles(c.tlsCert, c.tlsKey, c.tlsClientCA, log)
	if err != nil {
		log.Error("cannot start", "error", err)
		fmt.Fprintf(stderr, "floodgate serve: %v\n", err)
		return 1
	}
	tracer, stopTracing, err := c.startTracing(ctx, log)
	if err != nil {
		log.Error("cannot start", "error", err)
		fmt.Fprintf(stderr, "floodgate serve: %v\n", err)
		return 1
	}
	defer stopTracing()
	c.tracer = tracer
	store, closeStore, err := c.openStore(ctx, log)
	if err != nil {
		log.Error("store unavailable", "error", err)
		return 1
	}
	defer closeStore()
	c.mode.setStore(store)
	acc, closeLedger, err := c.ledger.open(ctx)
	if err != nil {
		log.Error("ledger unavailable", "error", err)
		fmt.Fprintf(stderr, "floodgate serve: %v\n", err)
		return 1
	}
	defer closeLedger()
	store, closeRegion, err := c.region.wrap(store, log)
	if err != nil {
		log.Error("cannot start", "error", err)
		return 1
	}
	defer closeRegion()
	srv, closeServer, err := c.newServer(store, acc, log)
	if err != nil {
		log.Error("cannot start", "error", err)
		return 1
	}
	defer closeServer()
	if err := c.ledger.watchDrift(ctx, srv, acc, log); err != nil {
		log.Error("cannot start", "error", err)
		return 1
	}
	if c.configPath != "" {
		if err := watchConfig(ctx, srv, c.configPath, log); err != nil {
			log.Error("config rejected", "error", err)
			fmt.Fprintf(stderr, "%v\n", err)
			return 1
		}
	}
	if c.overrideSync, err = c.overrides.start(ctx, srv, acc, log); err != nil {
		log.Error("ledger unavailable", "error", err)
		fmt.Fprintf(stderr, "floodgate serve: %v\n", err)
		return 1
	}
	if c.xds.addr != "" {
		if err := c.xds.start(ctx, srv, c.parity.loader(), log); err != nil {
			log.Error("cannot start", "error", err)
			fmt.Fprintf(stderr, "floodgate serve: %v\n", err)
			return 1
		}
	}
	quota, closeQuota, err := c.openRLQS(srv, auth, log)
	if err != nil {
		log.Error("cannot start", "error", err)
		return 1
	}
	defer closeQuota()
	l, err := c.listen(srv, auth, ltls, log)
	if err != nil {
		log.Error("cannot listen", "error", err)
		return 1
	}
	attachRLQS(l, quota)
	closeProm, err := c.mode.startPrometheus(srv, log)
	if err != nil {
		log.Error("cannot listen", "error", err)
		return 1
	}
	defer closeProm()
	if auth == nil {
		for _, ln := range []net.Listener{l.httpLn, l.grpcLn} {
			if ln != nil && !loopback(ln.Addr()) {
				log.Warn("listening beyond loopback without auth: whoever reaches this address can spend and reset any budget and read the config; set -auth-token-file and -admin-token-file", "addr", ln.Addr().String())
			}
		}
	}
	errc := l.serve()
	storeName := "memory"
	if c.redisURL != "" {
		storeName = redactURL(c.redisURL)
	}
	if c.ledger.spec != "" {
		storeName += ", ledger " + c.ledger.name()
	}
	log.Info("serving", "http_addr", l.httpAddr(), "grpc_addr", l.grpcAddr(), "store", storeName)
	fmt.Fprintf(stdout, "floodgate: serving HTTP on %s, gRPC on %s, store %s\n", l.httpAddr(), l.grpcAddr(), storeName)
	c.mode.announce(stdout)

	select {
	case <-ctx.Done():
	case err := <-errc:
		log.Error("server failed", "error", err)
		return 1
	}
	c.mode.stop()
	if !l.shutdown(c.shutdownTimeout, log) {
		// Requests were cut off: a supervisor should know.
		return 1
	}
	return 0
}

// loadAuth reads -auth-token-file and -admin-token-file and watches them
// until ctx ends; nil without either.
func (c serveConfig) loadAuth(ctx context.Context, log *slog.Logger) (*transport.Auth, error) {
	if c.authFile == "" && c.adminFile == "" {
		return nil, nil
	}
	auth, err := transport.LoadAuth(c.authFile, c.adminFile)
	if err != nil {
		return nil, err
	}
	go auth.Watch(ctx, authWatchEvery, log)
	return auth, nil
}

// loadIDKeys reads -id-key-file; without it, nil (the HTTP API then
// signs with a random key of this process), which it logs once.
func (c serveConfig) loadIDKeys(log *slog.Logger) ([][]byte, error) {
	if c.idKeyFile == "" {
		log.Info("no -id-key-file: reservation and lease ids are signed with a random key of this process, and settle only on this instance until it restarts; several instances need the same -id-key-file")
		return nil, nil
	}
	return httpapi.LoadIDKeys(c.idKeyFile)
}

// authWatchEvery is how often the token files are looked at for a change.
const authWatchEvery = time.Second

// loopback reports whether addr is a TCP address on a loopback interface.
func loopback(addr net.Addr) bool {
	ta, ok := addr.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// logHandler is the handler of serve's logs, in the format and at the
// level of the flags.
func logHandler(c serveConfig, stderr io.Writer) slog.Handler {
	hopts := &slog.HandlerOptions{Level: c.logLevel}
	if c.logFormat == "json" {
		return slog.NewJSONHandler(stderr, hopts)
	}
	return slog.NewTextHandler(stderr, hopts)
}

// openStore opens the store of the flags: the memory store, or Redis for
// -redis with its TLS files and options.
func (c serveConfig) openStore(ctx context.Context, log *slog.Logger) (floodgate.Store, func(), error) {
	if c.redisURL == "" {
		s := memstore.New(&memstore.Options{HoldRetention: c.holdRetention, MaxKeys: c.maxKeys, MaxBytes: c.maxMemory.resolve(), MaxHoldsPerKey: c.maxHoldsPerKey})
		return s, func() { s.Close() }, nil
	}
	tlsConf, err := c.redisTLS.config(log)
	if err != nil {
		return nil, nil, fmt.Errorf("cannot read the Redis TLS files: %w", err)
	}
	ro := redisstore.Options{DenyCache: c.denyCache, Functions: c.functions, Coalesce: c.coalesce,
		WaitReplicas: c.waitReplicas, WaitTimeout: c.waitTimeout, TLS: tlsConf, HoldRetention: c.holdRetention, Prefix: c.mode.prefix()}
	if c.coalesce == 0 {
		ro.Coalesce = -1
	}
	octx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	store, closeStore, err := openRedis(octx, c.redisURL, ro)
	if err != nil && redisstore.Retryable(err) {
		// Redis is not up (yet): serve anyway, answering by the failure
		// modes, and connect when it comes.
		log.Warn("store unreachable at start; serving by the failure modes and retrying", "store", redactURL(c.redisURL), "error", err)
		p := openPending(c.redisURL, ro, err, log)
		return p, func() { p.Close() }, nil
	}
	return store, closeStore, err
}

// newServer is the server of the flags over store: its Limiter's failure
// policy, deadline and, with -instances, the local store of the failure
// mode local; and the Redis store's own counters in its registry. The
// returned func closes the local store.
func (c serveConfig) newServer(store floodgate.Store, acc *ledger.Accounts, log *slog.Logger) (*server.Server, func(), error) {
	lo := floodgate.Options{FailurePolicy: floodgate.FailurePolicy(c.failureMode), Timeout: c.timeout}
	closeLocal := func() {}
	if c.instances > 0 {
		local := memstore.New(nil)
		closeLocal = func() { local.Close() }
		lo.Local, lo.Instances, lo.ProbeInterval = local, c.instances, c.probeInterval
	}
	if c.tracer != nil {
		c.ledger.trace = c.tracer.Ledger
	}
	// With a ledger, both stores account for durable quotas in it.
	shared, err := c.ledger.wrap(store, acc, false)
	if err == nil && lo.Local != nil {
		lo.Local, err = c.ledger.wrap(lo.Local, acc, true)
	}
	if err != nil {
		closeLocal()
		return nil, nil, err
	}
	srv, err := server.New(server.Options{Store: shared, Limiter: lo, Logger: log, IndependentDescriptors: c.independent, MaxOwnPeriod: c.maxOwnPeriod, GlobalShadowMode: c.shadowMode,
		GlobalQuotaMode: c.parity.quotaMode, ConfigLoader: c.parity.loader(), Tracer: c.tracer})
	if err == nil {
		switch rs := regionalStore(store).(type) {
		case *redisstore.Store:
			err = registerLocalStats(srv.Registry(), func() *redisstore.Store { return rs })
		case *redisstore.Pending:
			err = registerLocalStats(srv.Registry(), rs.Store)
		case *memstore.Store:
			err = registerMemStats(srv.Registry(), rs)
		}
	}
	if err != nil {
		closeLocal()
		return nil, nil, err
	}
	return srv, closeLocal, nil
}

// watchConfig loads the config at path into srv and keeps it loaded: on
// every change of its files (once the watch is in place, so that whoever
// sees the service up can rely on every later change being reloaded) and
// on SIGHUP, until ctx ends. A config that cannot be loaded at start is an
// error.
func watchConfig(ctx context.Context, srv *server.Server, path string, log *slog.Logger) error {
	reloader, err := server.NewReloader(srv, path)
	if err != nil {
		return err
	}
	if len(srv.Config().Domains()) == 0 {
		// `config validate` fails on it (nothing to validate is most
		// often a wrong path); serve warns and keeps watching, since a
		// directory filled after the start (a volume, a sidecar, xDS) is
		// loaded when its first file appears.
		log.Warn("no config files (*.yaml or *.yml) found: serving with no rules, every request is allowed; a file added there is loaded", "config", path)
	}
	watchErr := make(chan error, 1)
	go func() { watchErr <- reloader.Watch(ctx) }()
	select {
	case <-reloader.Watching():
	case err := <-watchErr:
		if err != nil {
			log.Error("config watch failed; reload with SIGHUP", "error", err)
		}
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				_ = reloader.Reload()
			}
		}
	}()
	return nil
}

// listeners are serve's HTTP and gRPC servers and their listeners; grpc is
// nil when -grpc is empty.
type listeners struct {
	httpLn, grpcLn net.Listener
	http           *http.Server
	grpc           *grpc.Server
	// debug serves the profiler on -debug-addr; nil without it.
	debugLn net.Listener
	debug   *http.Server
	// drain, if set, runs before the gRPC server stops: the quota
	// service's Drain.
	drain func(context.Context)
}

// listen opens the HTTP and gRPC listeners of the flags, with the handlers
// of srv, within their bounds: connections per listener and per peer,
// gRPC streams per connection, HTTP read and write deadlines, the
// dashboard's subscribers.
func (c serveConfig) listen(srv *server.Server, auth *transport.Auth, ltls *transport.TLSFiles, log *slog.Logger) (*listeners, error) {
	rls := envoyService(srv, c.headers, c.parity)
	maxHeld := c.maxHeld
	if maxHeld == 0 {
		maxHeld = -1 // httpapi: none held
	}
	api, err := httpapi.New(srv, &httpapi.Options{Auth: auth, GuardBrowsers: true, AllowedHosts: c.hosts(), IDKeys: c.idKeys, Overrides: c.overrideSync,
		MaxHold: c.maxHold, MaxHeld: maxHeld})
	if err != nil {
		return nil, err
	}
	n := 2
	if c.grpcAddr == "" {
		n = 1
	}
	maxConns, nofile := c.maxConns, fileLimit()
	if maxConns == 0 {
		maxConns = maxConnsFor(nofile, n)
	} else if nofile > 0 && uint64(maxConns)*uint64(n)+reservedFiles(nofile) > nofile {
		log.Warn("-max-connections: the listeners together may hold more connections than the file limit allows, leaving none for the store; lower it, or leave it 0 to derive it", "max_connections", maxConns, "listeners", n, "file_limit", nofile)
	}
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "floodgate_connections_refused_total",
		Help: "Connections closed as soon as accepted because their peer held -max-connections-per-peer already, by listener (http, grpc).",
	}, []string{"listener"})
	if err := srv.Registry().Register(refused); err != nil {
		return nil, err
	}
	throttle := server.NewLogThrottle(time.Second)
	bounds := func(name string, tls *transport.TLSFiles, protos ...string) *transport.ListenOptions {
		count := refused.WithLabelValues(name)
		return &transport.ListenOptions{MaxConns: maxConns, MaxConnsPerPeer: c.maxConnsPerPeer, TLS: tls, Protos: protos,
			OnRefused: func(peer string) {
				count.Inc()
				throttle.Log(log, slog.LevelWarn, "refused_"+name, "connection refused: its peer holds -max-connections-per-peer already", "listener", name, "peer", peer)
			}}
	}
	httpLn, err := transport.Listen(c.httpAddr, bounds("http", c.mode.httpTLS(ltls), "h2", "http/1.1"))
	if err != nil {
		return nil, fmt.Errorf("-http %s: %w", c.httpAddr, err)
	}
	extras := httpExtras(rls)
	c.mode.addExtras(extras, srv)
	var dash *ui.Dashboard
	if c.dashboard {
		dash = ui.New(srv, &ui.Options{Auth: auth, MaxSubscribers: c.uiMaxSubscribers, MaxSubscribersPerPeer: c.uiMaxPerPeer, WriteTimeout: c.writeTimeout})
		maps.Copy(extras, dash.Handlers())
	}
	l := &listeners{httpLn: httpLn, http: transport.NewHTTPServer(api.Handler(extras), &transport.HTTPOptions{
		WriteTimeout: c.writeTimeout, ErrorLog: throttledErrorLog(log, throttle)})}
	if dash != nil {
		// The feed's streams never go idle: end them when Shutdown starts.
		l.http.RegisterOnShutdown(dash.Close)
	}
	if c.debugAddr != "" {
		if l.debugLn, err = net.Listen("tcp", c.debugAddr); err != nil {
			httpLn.Close()
			return nil, fmt.Errorf("-debug-addr %s: %w", c.debugAddr, err)
		}
		l.debug = &http.Server{Handler: transport.DebugHandler(), ReadHeaderTimeout: 5 * time.Second}
	}
	if c.grpcAddr == "" {
		return l, nil
	}
	if l.grpcLn, err = transport.Listen(c.grpcAddr, bounds("grpc", nil)); err != nil {
		httpLn.Close()
		if l.debugLn != nil {
			l.debugLn.Close()
		}
		return nil, fmt.Errorf("-grpc %s: %w", c.grpcAddr, err)
	}
	l.grpc = grpc.NewServer(transport.GRPCServerOptions(&transport.GRPCOptions{
		MaxIdle: c.grpcMaxIdle, MaxStreams: uint32(c.grpcMaxStreams), StreamWorkers: c.grpcWorkers, TLS: ltls, Auth: auth})...)
	registerGRPC(l.grpc, rls)
	healthpb.RegisterHealthServer(l.grpc, health.NewServer())
	return l, nil
}

// maxStreamWorkers bounds -grpc-stream-workers: each worker is a
// goroutine kept for the process's life.
const maxStreamWorkers = 1 << 16

// hosts are the names the HTTP API takes in a Host header without token
// files besides IP addresses and localhost: -allowed-hosts, and the
// host of -http when it is a name.
func (c serveConfig) hosts() []string {
	var out []string
	for h := range strings.SplitSeq(c.allowedHosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			out = append(out, h)
		}
	}
	if h, _, err := net.SplitHostPort(c.httpAddr); err == nil && h != "" {
		out = append(out, h)
	}
	return out
}

// hostsProblem is the problem of an -allowed-hosts value, or "".
func hostsProblem(list string) string {
	for h := range strings.SplitSeq(list, ",") {
		if h = strings.TrimSpace(h); strings.ContainsAny(h, " /:@[]") {
			return fmt.Sprintf("-allowed-hosts: %q is not a host name (give names without scheme or port, separated by commas)", h)
		}
	}
	return ""
}

// serve serves both listeners; the channel gets the error of the first to
// fail.
func (l *listeners) serve() <-chan error {
	errc := make(chan error, 3)
	go func() { errc <- l.http.Serve(l.httpLn) }()
	if l.debug != nil {
		go func() { errc <- l.debug.Serve(l.debugLn) }()
	}
	if l.grpc != nil {
		go func() { errc <- l.grpc.Serve(l.grpcLn) }()
	}
	return errc
}

func (l *listeners) httpAddr() string { return l.httpLn.Addr().String() }

func (l *listeners) grpcAddr() string {
	if l.grpcLn == nil {
		return "disabled"
	}
	return l.grpcLn.Addr().String()
}

// shutdown stops accepting and finishes in-flight requests on both
// listeners, for at most timeout; then it stops what is left, and reports
// false: requests were cut off.
func (l *listeners) shutdown(timeout time.Duration, log *slog.Logger) (complete bool) {
	log.Info("shutting down", "timeout", timeout)
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if l.debug != nil {
		l.debug.Close()
	}
	if l.drain != nil {
		l.drain(sctx)
	}
	done := make(chan struct{})
	go func() {
		if l.grpc != nil {
			l.grpc.GracefulStop()
		}
		close(done)
	}()
	complete = true
	if err := l.http.Shutdown(sctx); err != nil {
		log.Warn("HTTP shutdown incomplete", "error", err)
		complete = false
	}
	select {
	case <-done:
		// Finished, even if the HTTP side used up the time: a select of
		// both would pick either when both are ready.
		return complete
	default:
	}
	select {
	case <-done:
	case <-sctx.Done():
		if l.grpc != nil {
			l.grpc.Stop()
		}
		log.Warn("gRPC shutdown incomplete", "error", sctx.Err())
		complete = false
	}
	return complete
}

// redactURL hides every secret of a URL for logs: the password of its
// user information, and the value of every query parameter whose name
// says it holds one (sentinel_password, and any *password, *token or
// *secret).
func redactURL(u string) string {
	scheme, rest, ok := strings.Cut(u, "://")
	if !ok {
		return u
	}
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		if user, _, ok := strings.Cut(rest[:at], ":"); ok {
			rest = user + ":xxxxx@" + rest[at+1:]
		}
	}
	base, query, hasQuery := strings.Cut(rest, "?")
	if !hasQuery {
		return scheme + "://" + rest
	}
	params := strings.Split(query, "&")
	for i, p := range params {
		name, _, _ := strings.Cut(p, "=")
		lower := strings.ToLower(name)
		if strings.Contains(lower, "password") || strings.Contains(lower, "token") || strings.Contains(lower, "secret") {
			params[i] = name + "=xxxxx"
		}
	}
	return scheme + "://" + base + "?" + strings.Join(params, "&")
}

// registerLocalStats exports the decisions the Redis store made in process
// as floodgate_local_decisions_total{kind}: the deny cache's denials and the
// admissions from local budgets, neither of which reached Redis; and
// how many script runs it shared between concurrent descriptors, and how
// many descriptors those carried.
// defaultMaxKeys is -max-keys' default: about 120 MiB of state for keys
// of a dozen bytes.
const defaultMaxKeys = 1_000_000

// defaultMaxHoldsPerKey is -max-holds-per-key's default: a key
// reserving 25 times a second, each reservation remembered for the
// default hour of -hold-retention after its TTL, keeps 90,000; the bound
// costs at most about 35 MiB of accounted bytes per key.
const defaultMaxHoldsPerKey = 100_000

// registerMemStats exports the memory store's key count and its ErrFull
// refusals.
func registerMemStats(reg *prometheus.Registry, s *memstore.Store) error {
	return errors.Join(
		reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "floodgate_memstore_keys",
			Help: "Keys the memory store holds state for, live or expired but not yet swept (-max-keys bounds them).",
		}, func() float64 { return float64(s.Len()) })),
		reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "floodgate_memstore_bytes",
			Help: "Bytes the memory store holds by its accounted estimate (keys, logged and leased units, reservations; -max-memory bounds them).",
		}, func() float64 { return float64(s.Bytes()) })),
		reg.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "floodgate_memstore_refused_total",
			Help: "Requests the memory store refused because they would exceed -max-keys, -max-memory or -max-holds-per-key; each was denied, whatever its rule's failure mode.",
		}, func() float64 { return float64(s.Refused()) })),
	)
}

func registerLocalStats(reg *prometheus.Registry, get func() *redisstore.Store) error {
	local := func() redisstore.LocalStats {
		if rs := get(); rs != nil {
			return rs.LocalStats()
		}
		return redisstore.LocalStats{}
	}
	coalesce := func() redisstore.CoalesceStats {
		if rs := get(); rs != nil {
			return rs.CoalesceStats()
		}
		return redisstore.CoalesceStats{}
	}
	for _, k := range []struct {
		kind string
		get  func(redisstore.LocalStats) int64
	}{
		{"deny_cache", func(st redisstore.LocalStats) int64 { return st.DenyCache }},
		{"local_budget", func(st redisstore.LocalStats) int64 { return st.LocalBudget }},
	} {
		c := prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "floodgate_local_decisions_total",
			Help:        "Descriptors the Redis store decided in process, without a round trip, by kind: deny_cache (a denial remembered until its retry time) or local_budget (units claimed from Redis beforehand, for a fixed or sliding window; a granted slice of the rate, for a token bucket or GCRA).",
			ConstLabels: prometheus.Labels{"kind": k.kind},
		}, func() float64 { return float64(k.get(local())) })
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
			func() float64 { return float64(m.get(coalesce())) })
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
