package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config/xds"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/floodgate-rl/floodgate/server/transport"
	"github.com/floodgate-rl/floodgate/store/redisstore"
)

// ratelimitCmd is `floodgate ratelimit [serve flags]`, and the binary
// started as `ratelimit`: envoyproxy/ratelimit's contract. It reads
// upstream's settings from the environment (upstreamSettings says what
// becomes of each), turns them into serve's flags and the few things serve
// has no flag for (upstreamMode), and serves. Flags given as arguments win
// over upstream's variables, which win over FLOODGATE_ variables.
func ratelimitCmd(ctx context.Context, args []string, lookup envLookup, stdout, stderr io.Writer) int {
	m, err := parseUpstream(lookup)
	if err != nil {
		fmt.Fprintf(stderr, "floodgate ratelimit: refusing to start:\n%v\n", err)
		return 2
	}
	return serveMode(ctx, append(m.args, args...), m, stdout, stderr)
}

// envLookup is os.LookupEnv, or a test's environment.
type envLookup func(string) (string, bool)

// upstreamMode is what the upstream settings ask of serve beyond its flags.
// A nil *upstreamMode is plain `floodgate serve`: every method is then a
// no-op.
type upstreamMode struct {
	// args are serve's flags, from the settings.
	args []string
	// warnings are logged once each at start: one per ignored setting
	// whose value asks for something.
	warnings []string
	// grpcOnlyTLS: -tls-cert applies to the gRPC listener only
	// (GRPC_SERVER_USE_TLS); the HTTP listener stays plain.
	grpcOnlyTLS bool
	// redisPrefix is CACHE_KEY_PREFIX; "" keeps redisstore's.
	redisPrefix string
	// needConfig: HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED.
	needConfig bool
	// activeConn: REDIS_HEALTH_CHECK_ACTIVE_CONNECTION.
	activeConn bool
	// promAddr and promPath: USE_PROMETHEUS's listener; promAddr "" is off.
	promAddr, promPath string
	// promBound is the address the listener got (PROMETHEUS_ADDR's port
	// may be 0).
	promBound string
	// xds is CONFIG_TYPE=GRPC_XDS_SOTW's settings; nil for FILE.
	xds *xdsSettings
	// tracing is TRACING_ENABLED's settings; nil when off.
	tracing *tracingSettings

	// store is serve's store, once open (for /healthcheck).
	store atomic.Pointer[floodgate.Store]
	// stopping is set when shutdown starts (upstream's sigterm component).
	stopping atomic.Bool
}

// xdsSettings are what CONFIG_TYPE=GRPC_XDS_SOTW asks of serve's xDS
// client beyond its -config-xds flags: the fields of xds.Options that have
// no flag (configure puts them on serve's xdsFlags).
type xdsSettings struct {
	NodeMetadata   map[string]string // CONFIG_GRPC_XDS_NODE_METADATA
	Headers        map[string]string // CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS
	MaxRecvMsgSize int               // XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES; 0: gRPC's default
	Backoff        xds.Backoff       // XDS_CLIENT_BACKOFF_*, by upstreamBackoff
}

// tracingSettings are upstream's TRACING_* settings, parsed, when
// TRACING_ENABLED=true (which sets -otel). Each is a default of the
// OpenTelemetry SDK's settings that an OTEL_* variable, when set, overrides
// (tracingDefaults); the exporter's endpoint and the rest come from the
// OTEL_* variables alone, as upstream's.
type tracingSettings struct {
	ServiceName       string  // TRACING_SERVICE_NAME: service.name
	ServiceNamespace  string  // TRACING_SERVICE_NAMESPACE: service.namespace, if set
	ServiceInstanceID string  // TRACING_SERVICE_INSTANCE_ID: service.instance.id, else a random UUID as upstream's
	Protocol          string  // TRACING_EXPORTER_PROTOCOL: http/protobuf or grpc
	SamplingRate      float64 // TRACING_SAMPLING_RATE, 0 to 1: parentbased_traceidratio
}

// parseUpstream reads upstream's settings through lookup. Its error joins
// every refusal, each naming its setting.
func parseUpstream(lookup envLookup) (*upstreamMode, error) {
	p := upstreamParser{lookup: lookup, flags: map[string]string{}}
	m := p.parse()
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs...)
	}
	m.warnings = append(m.warnings, p.warnings...)
	for _, name := range slices.Sorted(maps.Keys(p.flags)) {
		m.args = append(m.args, "-"+name+"="+p.flags[name])
	}
	return m, nil
}

// upstreamParser gathers serve's flags, warnings and refusals from the
// settings.
type upstreamParser struct {
	lookup   envLookup
	flags    map[string]string // serve flag name -> value
	errs     []error
	warnings []string // beyond the table's ignored settings
}

// get is the value of a setting; an empty value is unset, as nothing
// upstream reads means anything by an empty string that its default
// does not.
func (p *upstreamParser) get(name string) (string, bool) {
	v, ok := p.lookup(name)
	if !ok || v == "" {
		return "", false
	}
	return v, true
}

func (p *upstreamParser) refuse(name, v, format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf("%s=%s: %s", name, v, fmt.Sprintf(format, args...)))
}

// str is a setting's value, or def.
func (p *upstreamParser) str(name, def string) string {
	if v, ok := p.get(name); ok {
		return v
	}
	return def
}

// boolean parses a setting as upstream does (strconv.ParseBool).
func (p *upstreamParser) boolean(name string, def bool) bool {
	v, ok := p.get(name)
	if !ok {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		p.refuse(name, v, "not true or false")
		return def
	}
	return b
}

func (p *upstreamParser) integer(name string, def int) int {
	v, ok := p.get(name)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		p.refuse(name, v, "not an integer")
		return def
	}
	return n
}

func (p *upstreamParser) duration(name string, def time.Duration) time.Duration {
	v, ok := p.get(name)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		p.refuse(name, v, "not a duration such as 10s")
		return def
	}
	return d
}

func (p *upstreamParser) float(name string, def, lo, hi float64) float64 {
	v, ok := p.get(name)
	if !ok {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < lo || f > hi {
		p.refuse(name, v, "not a number from %g to %g", lo, hi)
		return def
	}
	return f
}

// pairs parses upstream's "k1:v1,k2=v2" maps.
func (p *upstreamParser) pairs(name string) map[string]string {
	v, ok := p.get(name)
	if !ok {
		return nil
	}
	out := map[string]string{}
	for kv := range strings.SplitSeq(v, ",") {
		i := strings.IndexAny(kv, ":=")
		if i <= 0 {
			p.refuse(name, v, "%q is not key:value", kv)
			return nil
		}
		out[strings.TrimSpace(kv[:i])] = strings.TrimSpace(kv[i+1:])
	}
	return out
}

// flag sets serve's flag from a setting.
func (p *upstreamParser) flag(name, value string) { p.flags[name] = value }

// flagDefault sets serve's flag to the mode's default unless its FLOODGATE_
// variable is set.
func (p *upstreamParser) flagDefault(name, value string) {
	if _, ok := p.lookup("FLOODGATE_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))); !ok {
		p.flags[name] = value
	}
}

// sameValue reports whether v says what quiet says: equal booleans, or
// equal strings but for case.
func sameValue(v, quiet string) bool {
	a, errA := strconv.ParseBool(v)
	b, errB := strconv.ParseBool(quiet)
	if errA == nil && errB == nil {
		return a == b
	}
	return strings.EqualFold(v, quiet)
}

func (p *upstreamParser) parse() *upstreamMode {
	m := &upstreamMode{}
	// The generic classes: refused and ignored settings whose value asks
	// for something.
	for _, s := range upstreamSettings {
		v, ok := p.get(s.Name)
		if !ok || (s.quiet != "" && sameValue(v, s.quiet)) {
			continue
		}
		switch s.Class {
		case refused:
			p.refuse(s.Name, v, "%s", s.Meaning)
		case ignored:
			m.warnings = append(m.warnings, fmt.Sprintf("%s=%s is ignored: %s", s.Name, v, s.Meaning))
		}
	}

	// Listeners.
	p.listener("http", "HOST", "PORT", 8080)
	p.listener("grpc", "GRPC_HOST", "GRPC_PORT", 8081)
	_, dh := p.get("DEBUG_HOST")
	_, dp := p.get("DEBUG_PORT")
	if dh || dp {
		p.listener("debug-addr", "DEBUG_HOST", "DEBUG_PORT", 6070)
	}
	if p.boolean("GRPC_SERVER_USE_TLS", false) {
		m.grpcOnlyTLS = true
		cert, okc := p.get("GRPC_SERVER_TLS_CERT")
		key, okk := p.get("GRPC_SERVER_TLS_KEY")
		if !okc || !okk {
			p.refuse("GRPC_SERVER_USE_TLS", "true", "needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY")
		}
		p.flag("tls-cert", cert)
		p.flag("tls-key", key)
		if ca, ok := p.get("GRPC_CLIENT_TLS_CACERT"); ok {
			p.flag("tls-client-ca", ca)
		}
	}

	// Logs: upstream's default level is warn.
	if v, ok := p.get("LOG_LEVEL"); ok {
		switch strings.ToLower(v) {
		case "trace", "debug":
			p.flag("log-level", "debug")
		case "info":
			p.flag("log-level", "info")
		case "warn", "warning":
			p.flag("log-level", "warn")
		case "error", "fatal", "panic":
			p.flag("log-level", "error")
		default:
			p.refuse("LOG_LEVEL", v, "not one of trace, debug, info, warn, error, fatal, panic")
		}
	} else {
		p.flagDefault("log-level", "warn")
	}
	if v, ok := p.get("LOG_FORMAT"); ok {
		if strings.EqualFold(v, "json") {
			p.flag("log-format", "json")
		} else {
			p.flag("log-format", "text")
		}
	}
	// The dashboard is Floodgate's own: off unless asked for
	// (FLOODGATE_UI), as upstream's pod has no such page to guard.
	p.flagDefault("ui", "false")

	// Config.
	if p.boolean("MERGE_DOMAIN_CONFIG", false) {
		p.flag("merge-domain-config", "true")
	}
	forceStart := p.boolean("FORCE_START_WITHOUT_INITIAL_CONFIG", false)
	switch v := p.str("CONFIG_TYPE", "FILE"); strings.ToUpper(v) {
	case "FILE":
		p.flag("config", filepath.Join(p.str("RUNTIME_ROOT", "/srv/runtime_data/current"), p.str("RUNTIME_SUBDIRECTORY", ""), p.str("RUNTIME_APPDIRECTORY", "config")))
	case "GRPC_XDS_SOTW":
		m.xds = p.xds(forceStart)
	default:
		p.refuse("CONFIG_TYPE", v, "not FILE or GRPC_XDS_SOTW")
	}
	m.needConfig = p.boolean("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", false)
	p.boolean("RUNTIME_WATCH_ROOT", true)
	p.boolean("RUNTIME_IGNOREDOTFILES", false)

	// Decisions and answers.
	for _, b := range []struct{ name, flag string }{
		{"SHADOW_MODE", "shadow-mode"},
		{"QUOTA_MODE", "quota-mode"},
		{"RESPONSE_DYNAMIC_METADATA", "response-dynamic-metadata"},
		{"LIMIT_RESPONSE_HEADERS_ENABLED", "limit-response-headers"},
	} {
		if p.boolean(b.name, false) {
			p.flag(b.flag, "true")
		}
	}
	// Envoy's answers carry no headers unless asked, as upstream's.
	p.flagDefault("response-headers", "false")
	for _, h := range []struct{ name, flag string }{
		{"LIMIT_LIMIT_HEADER", "limit-limit-header"},
		{"LIMIT_REMAINING_HEADER", "limit-remaining-header"},
		{"LIMIT_RESET_HEADER", "limit-reset-header"},
	} {
		if v, ok := p.get(h.name); ok {
			if !isToken(v) {
				p.refuse(h.name, v, "not a header field name")
			}
			p.flag(h.flag, v)
		}
	}
	if v, ok := p.get("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT"); ok && !p.boolean("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", true) {
		m.warnings = append(m.warnings, "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT="+v+": denied requests do not count in Floodgate; set count_rejected: true on the rules that should count them (docs/service.md)")
	}

	// Store.
	switch v := p.str("BACKEND_TYPE", "redis"); strings.ToLower(v) {
	case "redis":
	case "memcache":
		p.refuse("BACKEND_TYPE", v, "Memcached is not a store of Floodgate's; use redis")
	default:
		p.refuse("BACKEND_TYPE", v, "not redis")
	}
	if u := p.redisURL(); u != "" {
		p.flag("redis", u)
	}
	if v, ok := p.get("CACHE_KEY_PREFIX"); ok {
		if strings.ContainsAny(v, "{}") {
			p.refuse("CACHE_KEY_PREFIX", v, "a brace would change the keys' Redis Cluster slot")
		}
		m.redisPrefix = v
	}
	if v, ok := p.get("LOCAL_CACHE_SIZE_IN_BYTES"); ok {
		n := p.integer("LOCAL_CACHE_SIZE_IN_BYTES", 0)
		switch {
		case n < 0:
			p.refuse("LOCAL_CACHE_SIZE_IN_BYTES", v, "negative")
		case n == 0:
			p.flag("deny-cache", "0")
		default:
			p.flag("deny-cache", strconv.Itoa(max(1, n/denyCacheEntryBytes)))
		}
	}
	m.activeConn = p.boolean("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", false)

	// Metrics.
	if p.boolean("USE_PROMETHEUS", false) {
		m.promAddr = p.str("PROMETHEUS_ADDR", ":9090")
		m.promPath = p.str("PROMETHEUS_PATH", "/metrics")
		if !strings.HasPrefix(m.promPath, "/") {
			p.refuse("PROMETHEUS_PATH", m.promPath, "does not start with /")
		}
		if _, _, err := net.SplitHostPort(m.promAddr); err != nil {
			p.refuse("PROMETHEUS_ADDR", m.promAddr, "not host:port (%v)", err)
		}
	}

	// Tracing.
	if p.boolean("TRACING_ENABLED", false) {
		p.flag("otel", "true")
		m.tracing = &tracingSettings{
			ServiceName:       p.str("TRACING_SERVICE_NAME", "RateLimit"),
			ServiceNamespace:  p.str("TRACING_SERVICE_NAMESPACE", ""),
			ServiceInstanceID: p.str("TRACING_SERVICE_INSTANCE_ID", ""),
			SamplingRate:      p.float("TRACING_SAMPLING_RATE", 1, 0, 1),
		}
		switch pr := p.str("TRACING_EXPORTER_PROTOCOL", "http"); strings.ToLower(pr) {
		case "http":
			m.tracing.Protocol = "http/protobuf"
		case "grpc":
			m.tracing.Protocol = "grpc"
		default:
			p.refuse("TRACING_EXPORTER_PROTOCOL", pr, "not http or grpc")
		}
		if m.tracing.ServiceInstanceID == "" {
			m.tracing.ServiceInstanceID = randomUUID()
		}
		// The OTEL_* variables that turn traces off would contradict it
		// (serve would stop with -otel named, which the user did not set).
		if v, _ := p.lookup("OTEL_SDK_DISABLED"); strings.EqualFold(strings.TrimSpace(v), "true") {
			p.refuse("TRACING_ENABLED", "true", "OTEL_SDK_DISABLED=true says not to trace; unset one of them")
		}
		if v, _ := p.lookup("OTEL_TRACES_EXPORTER"); strings.EqualFold(strings.TrimSpace(v), "none") {
			p.refuse("TRACING_ENABLED", "true", "OTEL_TRACES_EXPORTER=none says not to export traces; unset one of them")
		}
	}
	return m
}

// denyCacheEntryBytes is what LOCAL_CACHE_SIZE_IN_BYTES is divided by to
// give -deny-cache's keys: about what one remembered denial takes.
const denyCacheEntryBytes = 128

// listener sets serve's flag to upstream's host and port settings, each
// defaulting as upstream's (host 0.0.0.0).
func (p *upstreamParser) listener(flag, hostName, portName string, defPort int) {
	_, hostSet := p.get(hostName)
	_, portSet := p.get(portName)
	port := p.integer(portName, defPort)
	if port < 0 || port > 65535 {
		v, _ := p.get(portName)
		p.refuse(portName, v, "not a port")
	}
	addr := net.JoinHostPort(p.str(hostName, "0.0.0.0"), strconv.Itoa(port))
	if hostSet || portSet {
		p.flag(flag, addr)
	} else {
		p.flagDefault(flag, addr)
	}
}

// redisURL is the -redis URL of upstream's REDIS_* settings: "" for the
// memory store when REDIS_URL is unset.
func (p *upstreamParser) redisURL() string {
	raw, ok := p.get("REDIS_URL")
	if !ok {
		return ""
	}
	useTLS := p.boolean("REDIS_TLS", false)
	auth, hasAuth := p.get("REDIS_AUTH")
	sentinelAuth, hasSentinelAuth := p.get("REDIS_SENTINEL_AUTH")
	timeout, hasTimeout := p.get("REDIS_TIMEOUT")
	if hasTimeout {
		p.duration("REDIS_TIMEOUT", 0)
	}
	kind := strings.ToUpper(p.str("REDIS_TYPE", "SINGLE"))
	if strings.Contains(raw, "://") {
		// A URL of docs/redis.md says all itself.
		for _, name := range []string{"REDIS_AUTH", "REDIS_SENTINEL_AUTH", "REDIS_TIMEOUT", "REDIS_TYPE"} {
			if v, ok := p.get(name); ok {
				p.refuse(name, v, "REDIS_URL is a URL: say it in the URL (docs/redis.md)")
			}
		}
		if useTLS {
			if s, _, _ := strings.Cut(raw, "://"); !strings.HasPrefix(strings.ToLower(s), "rediss") {
				p.refuse("REDIS_TLS", "true", "REDIS_URL is a %s:// URL; use rediss://, rediss-sentinel:// or rediss-cluster://", s)
			}
		}
		p.redisTLSFiles(useTLS || strings.HasPrefix(strings.ToLower(raw), "rediss"))
		return raw
	}
	socket, socketSet := p.get("REDIS_SOCKET_TYPE")
	switch {
	case socketSet && strings.EqualFold(socket, "unix"), !socketSet && strings.HasPrefix(raw, "/"):
		p.refuse("REDIS_SOCKET_TYPE", cmpOr(socket, "unix"), "Unix sockets are not supported; set REDIS_SOCKET_TYPE=tcp and REDIS_URL=host:port")
		return ""
	case socketSet && !strings.EqualFold(socket, "tcp"):
		p.refuse("REDIS_SOCKET_TYPE", socket, "not tcp")
		return ""
	}
	userinfo := ""
	if hasAuth {
		user, pass, found := strings.Cut(auth, ":")
		if !found {
			user, pass = "", auth
		}
		userinfo = url.PathEscape(user) + ":" + url.PathEscape(pass) + "@"
	}
	scheme, hosts, path := "redis", raw, ""
	var query []string
	switch kind {
	case "SINGLE":
		if strings.Contains(raw, ",") {
			p.refuse("REDIS_URL", raw, "REDIS_TYPE=SINGLE takes one host:port")
		}
	case "SENTINEL":
		parts := strings.Split(raw, ",")
		if len(parts) < 2 {
			p.refuse("REDIS_URL", raw, "REDIS_TYPE=SENTINEL wants <master name>,<sentinel1>,...,<sentinelN>")
			return ""
		}
		scheme, hosts, path = "redis-sentinel", strings.Join(parts[1:], ","), "/"+url.PathEscape(parts[0])
		if hasSentinelAuth {
			query = append(query, "sentinel_password="+url.QueryEscape(sentinelAuth))
		}
	case "CLUSTER":
		scheme = "redis-cluster"
	default:
		p.refuse("REDIS_TYPE", kind, "not SINGLE, SENTINEL or CLUSTER")
		return ""
	}
	if useTLS {
		scheme = strings.Replace(scheme, "redis", "rediss", 1)
	}
	if hasTimeout {
		query = append(query, "dial_timeout="+timeout, "conn_timeout="+timeout)
	}
	p.redisTLSFiles(useTLS)
	u := scheme + "://" + userinfo + hosts + path
	if len(query) > 0 {
		u += "?" + strings.Join(query, "&")
	}
	return u
}

// redisTLSFiles maps REDIS_TLS_* onto serve's -redis-tls-* when TLS is on
// (upstream reads them only then).
func (p *upstreamParser) redisTLSFiles(useTLS bool) {
	if !useTLS {
		return
	}
	for _, f := range []struct{ name, flag string }{
		{"REDIS_TLS_CACERT", "redis-tls-ca"},
		{"REDIS_TLS_CLIENT_CERT", "redis-tls-cert"},
		{"REDIS_TLS_CLIENT_KEY", "redis-tls-key"},
	} {
		if v, ok := p.get(f.name); ok {
			p.flag(f.flag, v)
		}
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// xds maps CONFIG_TYPE=GRPC_XDS_SOTW's settings, with upstream's
// defaults, onto serve's -config-xds flags, and returns the rest.
func (p *upstreamParser) xds(forceStart bool) *xdsSettings {
	addr := p.str("CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000")
	if _, _, err := net.SplitHostPort(addr); err != nil {
		p.refuse("CONFIG_GRPC_XDS_SERVER_URL", addr, "not host:port")
	}
	p.flag("config-xds", addr)
	p.flag("config-xds-node", p.str("CONFIG_GRPC_XDS_NODE_ID", "default"))
	if forceStart {
		p.flag("config-xds-start-without-config", "true")
	}
	// Upstream reads the TLS files only with
	// CONFIG_GRPC_XDS_SERVER_USE_TLS=true; serve's flags would turn TLS
	// on by themselves.
	tlsFiles := []struct{ name, flag string }{
		{"CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "config-xds-tls-cert"},
		{"CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "config-xds-tls-key"},
		{"CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "config-xds-tls-ca"},
		{"CONFIG_GRPC_XDS_SERVER_TLS_SAN", "config-xds-tls-server-name"},
	}
	if p.boolean("CONFIG_GRPC_XDS_SERVER_USE_TLS", false) {
		p.flag("config-xds-tls", "true")
		for _, f := range tlsFiles {
			if v, ok := p.get(f.name); ok {
				p.flag(f.flag, v)
			}
		}
		_, cert := p.get("CONFIG_GRPC_XDS_CLIENT_TLS_CERT")
		_, key := p.get("CONFIG_GRPC_XDS_CLIENT_TLS_KEY")
		if cert != key {
			v, _ := p.get("CONFIG_GRPC_XDS_CLIENT_TLS_CERT")
			p.refuse("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", v, "give it and CONFIG_GRPC_XDS_CLIENT_TLS_KEY, or neither")
		}
	} else {
		for _, f := range tlsFiles {
			if v, ok := p.get(f.name); ok {
				p.warn(f.name, v, "read only with CONFIG_GRPC_XDS_SERVER_USE_TLS=true, as upstream's: the xDS connection is plaintext")
			}
		}
	}
	s := &xdsSettings{
		NodeMetadata:   p.pairs("CONFIG_GRPC_XDS_NODE_METADATA"),
		Headers:        p.pairs("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS"),
		MaxRecvMsgSize: p.integer("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", 0),
		Backoff: upstreamBackoff(
			p.duration("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", 10*time.Second),
			p.duration("XDS_CLIENT_BACKOFF_MAX_INTERVAL", 60*time.Second),
			p.float("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", 0.5, 0, 1000),
			p.boolean("XDS_CLIENT_BACKOFF_JITTER", true)),
	}
	for k, v := range s.Headers {
		if problem := grpcMetadataProblem(k, v); problem != "" {
			raw, _ := p.get("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS")
			p.refuse("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", raw, "%s", problem)
		}
	}
	if s.MaxRecvMsgSize < 0 {
		p.refuse("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", strconv.Itoa(s.MaxRecvMsgSize), "negative")
	}
	return s
}

// warn logs, once at start, that a setting's value is not acted on.
func (p *upstreamParser) warn(name, v, why string) {
	p.warnings = append(p.warnings, fmt.Sprintf("%s=%s is ignored: %s", name, v, why))
}

// upstreamBackoff is upstream's reconnect backoff in xds.Backoff's terms.
// Upstream's xDS provider waits, before its nth attempt in a row (n from
// 0), jpillora/backoff's initial*factor^n, kept within [initial, max];
// with jitter, a draw between initial and that. Its "random factor" is
// that factor, so its default of 0.5 keeps every wait at the initial
// interval (10s), unjittered since the draw's range is empty. Here: a
// factor of 1 or less is no growth and no jitter (upstream's waits
// exactly); above 1 it is the Multiplier, and jitter is xds.Backoff's
// default ±20% of each wait (upstream draws from initial up to the wait,
// a wider spread). A zero interval or factor takes jpillora/backoff's
// default (100ms, 10s, 2), and an initial above the max is the max, as
// there.
func upstreamBackoff(initial, maxWait time.Duration, factor float64, jitter bool) xds.Backoff {
	if initial <= 0 {
		initial = 100 * time.Millisecond
	}
	if maxWait <= 0 {
		maxWait = 10 * time.Second
	}
	if factor <= 0 {
		factor = 2
	}
	b := xds.Backoff{Initial: min(initial, maxWait), Max: maxWait, Multiplier: max(factor, 1), Jitter: -1}
	if jitter && factor > 1 && initial < maxWait {
		b.Jitter = 0 // xds.Backoff's default
	}
	return b
}

// grpcMetadataProblem is why gRPC would not send k: v as metadata, or "".
func grpcMetadataProblem(k, v string) string {
	if k == "" || strings.HasPrefix(strings.ToLower(k), "grpc-") || strings.HasPrefix(k, ":") {
		return fmt.Sprintf("%q is not a header gRPC sends", k)
	}
	for _, c := range k {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Sprintf("header %q: gRPC metadata names are letters, digits, -, _ and .", k)
		}
	}
	if strings.HasSuffix(strings.ToLower(k), "-bin") {
		return ""
	}
	for _, c := range v {
		if c < 0x20 || c > 0x7e {
			return fmt.Sprintf("header %q: its value is not printable ASCII", k)
		}
	}
	return ""
}

// randomUUID is a random (version 4) UUID: upstream's service.instance.id
// when TRACING_SERVICE_INSTANCE_ID is unset.
func randomUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// configure puts on c what the mode asks of serve beyond its flags: the
// xds.Options fields of CONFIG_TYPE=GRPC_XDS_SOTW that have no flag.
func (m *upstreamMode) configure(c *serveConfig) {
	if m == nil || m.xds == nil {
		return
	}
	c.xds.nodeMetadata = m.xds.NodeMetadata
	c.xds.headers = m.xds.Headers
	c.xds.maxRecvMsgSize = m.xds.MaxRecvMsgSize
	c.xds.backoff = m.xds.Backoff
}

// tracingDefaults are the OpenTelemetry settings of TRACING_*, each one
// applied only where no OTEL_* variable says otherwise (startTracing);
// the zero value, for serve, changes nothing.
func (m *upstreamMode) tracingDefaults() tracingDefaults {
	if m == nil || m.tracing == nil {
		return tracingDefaults{}
	}
	t := m.tracing
	attrs := []attribute.KeyValue{attribute.String("service.name", t.ServiceName), attribute.String("service.instance.id", t.ServiceInstanceID)}
	if t.ServiceNamespace != "" {
		attrs = append(attrs, attribute.String("service.namespace", t.ServiceNamespace))
	}
	return tracingDefaults{
		protocol:    t.Protocol,
		attrs:       attrs,
		sampler:     sdktrace.ParentBased(sdktrace.TraceIDRatioBased(t.SamplingRate)),
		samplerName: fmt.Sprintf("parentbased_traceidratio %g", t.SamplingRate),
	}
}

// logWarnings logs the ignored settings, once each.
func (m *upstreamMode) logWarnings(log *slog.Logger) {
	if m == nil {
		return
	}
	for _, w := range m.warnings {
		log.Warn("envoyproxy/ratelimit setting ignored", "setting", w)
	}
}

// setStore tells /healthcheck which store serve opened.
func (m *upstreamMode) setStore(s floodgate.Store) {
	if m != nil {
		m.store.Store(&s)
	}
}

// stop marks the start of shutdown: /healthcheck fails from then on, as
// upstream's does after SIGTERM.
func (m *upstreamMode) stop() {
	if m != nil {
		m.stopping.Store(true)
	}
}

// httpTLS is the TLS of the HTTP listener: none under GRPC_SERVER_USE_TLS,
// as upstream's.
func (m *upstreamMode) httpTLS(t *transport.TLSFiles) *transport.TLSFiles {
	if m != nil && m.grpcOnlyTLS {
		return nil
	}
	return t
}

// prefix is CACHE_KEY_PREFIX, or "" (redisstore's default).
func (m *upstreamMode) prefix() string {
	if m == nil {
		return ""
	}
	return m.redisPrefix
}

// addExtras adds upstream's GET /healthcheck to the HTTP listener.
func (m *upstreamMode) addExtras(extras map[string]http.Handler, srv *server.Server) {
	if m != nil {
		extras["GET /healthcheck"] = &healthcheck{m: m, srv: srv}
	}
}

// healthcheck is upstream's /healthcheck: 200 with the body "OK" while
// every component is healthy, else 500 with no body. The components, as
// upstream's src/server/health.go: the store (Redis reached at least once,
// or, with REDIS_HEALTH_CHECK_ACTIVE_CONNECTION, answering a PING now);
// with HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED, a config with a domain in
// force; and no shutdown started.
type healthcheck struct {
	m   *upstreamMode
	srv *server.Server
}

// Scope: the probe needs no token, as upstream's.
func (h *healthcheck) Scope() transport.Scope { return transport.ScopeOpen }

func (h *healthcheck) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !h.healthy(r.Context()) {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	io.WriteString(w, "OK")
}

// healthPingTimeout bounds REDIS_HEALTH_CHECK_ACTIVE_CONNECTION's PING,
// within a kubelet probe's default second.
const healthPingTimeout = 500 * time.Millisecond

func (h *healthcheck) healthy(ctx context.Context) bool {
	if h.m.stopping.Load() {
		return false
	}
	if h.m.needConfig {
		if c := h.srv.Config(); c == nil || len(c.Domains()) == 0 {
			return false
		}
	}
	sp := h.m.store.Load()
	if sp == nil {
		return false
	}
	store := *sp
	if p, ok := store.(*redisstore.Pending); ok && p.Store() == nil {
		return false // Redis not reached yet
	}
	if h.m.activeConn {
		if pinger, ok := store.(floodgate.Pinger); ok {
			ctx, cancel := context.WithTimeout(ctx, healthPingTimeout)
			defer cancel()
			if pinger.Ping(ctx) != nil {
				return false
			}
		}
	}
	return true
}

// startPrometheus serves srv's metrics on USE_PROMETHEUS's own listener,
// if asked; the returned func closes it.
func (m *upstreamMode) startPrometheus(srv *server.Server, log *slog.Logger) (func(), error) {
	if m == nil || m.promAddr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", m.promAddr)
	if err != nil {
		return nil, fmt.Errorf("PROMETHEUS_ADDR %s: %w", m.promAddr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET "+m.promPath, promhttp.HandlerFor(srv.Registry(), promhttp.HandlerOpts{Registry: srv.Registry()}))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, WriteTimeout: 30 * time.Second}
	go func() {
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("Prometheus listener failed", "addr", m.promAddr, "error", err)
		}
	}()
	m.promBound = ln.Addr().String()
	return func() { hs.Close() }, nil
}

// announce prints, after serve's line, where the mode's own listeners are.
func (m *upstreamMode) announce(stdout io.Writer) {
	if m != nil && m.promBound != "" {
		fmt.Fprintf(stdout, "floodgate: serving Prometheus metrics on %s%s\n", m.promBound, m.promPath)
	}
}
