package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/store/memstore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

var updateDoc = flag.Bool("update", false, "rewrite the settings table of docs/upstream.md from upstreamSettings")

// upstreamSettingsFile is a copy of envoyproxy/ratelimit's
// src/settings/settings.go; its first line names the commit.
const upstreamSettingsFile = "testdata/upstream/settings.go.txt"

// upstreamEnvNames are the envconfig names of the Settings struct of
// upstream's settings.go, in order.
func upstreamEnvNames(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), upstreamSettingsFile, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok || ts.Name.Name != "Settings" {
			return true
		}
		for _, field := range ts.Type.(*ast.StructType).Fields.List {
			if field.Tag == nil {
				continue
			}
			tag, err := strconv.Unquote(field.Tag.Value)
			if err != nil {
				t.Fatal(err)
			}
			if name, ok := reflect.StructTag(tag).Lookup("envconfig"); ok {
				names = append(names, name)
			}
		}
		return false
	})
	if len(names) < 100 {
		t.Fatalf("found only %d settings in %s: has its layout changed?", len(names), upstreamSettingsFile)
	}
	return names
}

// TestUpstreamSettingsListed holds upstreamSettings against upstream's
// settings.go: every setting listed once, none that upstream does not have.
// A newer copy of settings.go with a new setting fails it until the setting
// is classed.
func TestUpstreamSettingsListed(t *testing.T) {
	t.Parallel()
	upstream := upstreamEnvNames(t)
	listed := map[string]bool{}
	for _, s := range upstreamSettings {
		if listed[s.Name] {
			t.Errorf("%s is listed twice", s.Name)
		}
		listed[s.Name] = true
		if !slices.Contains(upstream, s.Name) {
			t.Errorf("%s is listed but upstream's settings.go has no such setting", s.Name)
		}
		if s.Class != honoured && s.Class != refused && s.Class != ignored {
			t.Errorf("%s: class %q", s.Name, s.Class)
		}
		if s.Meaning == "" {
			t.Errorf("%s: no meaning", s.Name)
		}
	}
	for _, name := range upstream {
		if !listed[name] {
			t.Errorf("upstream's setting %s is not in upstreamSettings: class it (honoured, refused or ignored)", name)
		}
	}
}

const (
	docFile       = "../../docs/upstream.md"
	docTableStart = "<!-- settings table: go test ./cmd/floodgate -run TestUpstreamDocTable -update -->"
	docTableEnd   = "<!-- end of settings table -->"
)

// settingsTable is the markdown table of upstreamSettings.
func settingsTable() string {
	var b strings.Builder
	b.WriteString("| setting | class | in Floodgate |\n|---|---|---|\n")
	for _, s := range upstreamSettings {
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", s.Name, s.Class, strings.ReplaceAll(s.Meaning, "|", `\|`))
	}
	return b.String()
}

// TestUpstreamDocTable holds the table of docs/upstream.md to
// upstreamSettings.
func TestUpstreamDocTable(t *testing.T) {
	data, err := os.ReadFile(docFile)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	start := strings.Index(doc, docTableStart)
	end := strings.Index(doc, docTableEnd)
	if start < 0 || end < start {
		t.Fatalf("%s has no %q ... %q section", docFile, docTableStart, docTableEnd)
	}
	head, body, tail := doc[:start+len(docTableStart)], doc[start+len(docTableStart):end], doc[end:]
	want := "\n" + settingsTable()
	if *updateDoc {
		if err := os.WriteFile(docFile, []byte(head+want+tail), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if body != want {
		t.Errorf("the settings table of %s is not upstreamSettings'; run go test ./cmd/floodgate -run TestUpstreamDocTable -update", docFile)
	}
}

func lookupIn(env map[string]string) envLookup {
	return func(name string) (string, bool) {
		v, ok := env[name]
		return v, ok
	}
}

// envoyGatewayEnv is the environment Envoy Gateway's managed deployment
// gives the rate limit container (internal/infrastructure/kubernetes/
// ratelimit/resource.go), with CONFIG_TYPE=FILE in place of its xDS and
// without its TLS files, for the tests to start it.
func envoyGatewayEnv(runtimeRoot, redisAddr string) map[string]string {
	env := map[string]string{
		"RUNTIME_ROOT":           runtimeRoot,
		"RUNTIME_SUBDIRECTORY":   "ratelimit",
		"RUNTIME_IGNOREDOTFILES": "true",
		"RUNTIME_WATCH_ROOT":     "false",
		"LOG_LEVEL":              "info",
		"USE_STATSD":             "false",
		"CONFIG_TYPE":            "FILE",
		// Not upstream's name (upstream's is GRPC_CLIENT_TLS_CACERT):
		// Envoy Gateway sets it, and upstream, like Floodgate, ignores it.
		"GRPC_SERVER_TLS_CA_CERT":            "/certs/ca.crt",
		"FORCE_START_WITHOUT_INITIAL_CONFIG": "true",
		"USE_PROMETHEUS":                     "true",
		"PROMETHEUS_ADDR":                    "127.0.0.1:0",
		"PROMETHEUS_MAPPER_YAML":             "/etc/statsd-exporter/conf.yaml",
		// Loopback and any free port, for the test.
		"HOST": "127.0.0.1", "PORT": "0", "GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0",
	}
	if redisAddr != "" {
		env["REDIS_SOCKET_TYPE"] = "tcp"
		env["REDIS_URL"] = redisAddr
	}
	return env
}

func TestParseUpstream(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		env      map[string]string
		args     []string // all of them, sorted
		warnings []string // the settings warned, in table order
	}{
		{
			name: "defaults",
			env:  map[string]string{},
			args: []string{"-config=/srv/runtime_data/current/config", "-grpc=0.0.0.0:8081", "-http=0.0.0.0:8080", "-log-level=warn", "-response-headers=false", "-ui=false"},
		},
		{
			name: "FLOODGATE_ variables keep their say over the mode's defaults",
			env:  map[string]string{"FLOODGATE_HTTP": "127.0.0.1:9", "FLOODGATE_UI": "true", "FLOODGATE_LOG_LEVEL": "debug", "FLOODGATE_GRPC": "x", "FLOODGATE_RESPONSE_HEADERS": "true"},
			args: []string{"-config=/srv/runtime_data/current/config"},
		},
		{
			name:     "Envoy Gateway",
			env:      envoyGatewayEnv("/data", "redis.redis.svc:6379"),
			args:     []string{"-config=/data/ratelimit/config", "-grpc=127.0.0.1:0", "-http=127.0.0.1:0", "-log-level=info", "-redis=redis://redis.redis.svc:6379", "-response-headers=false", "-ui=false"},
			warnings: []string{"PROMETHEUS_MAPPER_YAML"},
		},
		{
			name: "gRPC TLS and the parity settings",
			env: map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "/c/tls.crt", "GRPC_SERVER_TLS_KEY": "/c/tls.key", "GRPC_CLIENT_TLS_CACERT": "/c/ca.crt",
				"SHADOW_MODE": "true", "QUOTA_MODE": "1", "RESPONSE_DYNAMIC_METADATA": "true", "MERGE_DOMAIN_CONFIG": "true",
				"LIMIT_RESPONSE_HEADERS_ENABLED": "true", "LIMIT_RESET_HEADER": "X-Reset", "LOG_FORMAT": "JSON", "LOG_LEVEL": "trace",
				"DEBUG_PORT": "6070", "LOCAL_CACHE_SIZE_IN_BYTES": "1048576", "RUNTIME_ROOT": "/r", "RUNTIME_APPDIRECTORY": "rules"},
			args: []string{"-config=/r/rules", "-debug-addr=0.0.0.0:6070", "-deny-cache=8192", "-grpc=0.0.0.0:8081", "-http=0.0.0.0:8080", "-limit-reset-header=X-Reset", "-limit-response-headers=true",
				"-log-format=json", "-log-level=debug", "-merge-domain-config=true", "-quota-mode=true", "-response-dynamic-metadata=true", "-response-headers=false", "-shadow-mode=true",
				"-tls-cert=/c/tls.crt", "-tls-client-ca=/c/ca.crt", "-tls-key=/c/tls.key", "-ui=false"},
		},
		{
			name: "ignored settings warn once each, off values not at all",
			env: map[string]string{"USE_STATSD": "true", "STATSD_PORT": "9125", "USE_DOG_STATSD": "false", "DISABLE_STATS": "false", "REDIS_POOL_SIZE": "20",
				"REDIS_POOL_ON_EMPTY_BEHAVIOR": "wait", "RUNTIME_IGNOREDOTFILES": "false", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "false", "REDIS_PERSECOND": "false"},
			args:     []string{"-config=/srv/runtime_data/current/config", "-grpc=0.0.0.0:8081", "-http=0.0.0.0:8080", "-log-level=warn", "-response-headers=false", "-ui=false"},
			warnings: []string{"USE_STATSD", "STATSD_PORT", "RUNTIME_IGNOREDOTFILES", "REDIS_POOL_SIZE", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := parseUpstream(lookupIn(tc.env))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(m.args, tc.args) {
				t.Errorf("args:\n got %q\nwant %q", m.args, tc.args)
			}
			var warned []string
			for _, w := range m.warnings {
				name, _, _ := strings.Cut(w, "=")
				warned = append(warned, name)
			}
			if !slices.Equal(warned, tc.warnings) {
				t.Errorf("warnings of %v, want %v: %q", warned, tc.warnings, m.warnings)
			}
			// serve takes every flag the mode makes (the files need not exist
			// until serve runs).
			if _, code, ok := parseServe(m.args, io.Discard); !ok {
				t.Errorf("parseServe(%q): exit %d", m.args, code)
			}
		})
	}
}

func TestParseUpstreamRedisURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "r:6379"}, "redis://r:6379"},
		{map[string]string{"REDIS_URL": "r:6379"}, "redis://r:6379"},
		{map[string]string{"REDIS_URL": "r:6379", "REDIS_AUTH": "p@ss/w#rd"}, "redis://:p@ss%2Fw%23rd@r:6379"},
		{map[string]string{"REDIS_URL": "r:6379", "REDIS_AUTH": "user:pw", "REDIS_TLS": "true", "REDIS_TIMEOUT": "2s"}, "rediss://user:pw@r:6379?dial_timeout=2s&conn_timeout=2s"},
		{map[string]string{"REDIS_URL": "mymaster,s1:26379,s2:26379", "REDIS_TYPE": "SENTINEL", "REDIS_SENTINEL_AUTH": "sp&x"}, "redis-sentinel://s1:26379,s2:26379/mymaster?sentinel_password=sp%26x"},
		{map[string]string{"REDIS_URL": "n1:7000,n2:7001", "REDIS_TYPE": "cluster", "REDIS_TLS": "true"}, "rediss-cluster://n1:7000,n2:7001"},
		{map[string]string{"REDIS_URL": "redis-cluster://n1:7000"}, "redis-cluster://n1:7000"},
	} {
		m, err := parseUpstream(lookupIn(tc.env))
		if err != nil {
			t.Errorf("%v: %v", tc.env, err)
			continue
		}
		if !slices.Contains(m.args, "-redis="+tc.want) {
			t.Errorf("%v: args %q, want -redis=%s", tc.env, m.args, tc.want)
		}
		// redisstore reads it.
		if _, code, ok := parseServe(m.args, io.Discard); !ok {
			t.Errorf("%v: parseServe(%q): exit %d", tc.env, m.args, code)
		}
	}
}

// TestParseUpstreamRefused: each refusal names its setting, and all of
// them are said at once.
func TestParseUpstreamRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env  map[string]string
		want []string
	}{
		{map[string]string{"GRPC_UDS": "/tmp/rl.sock"}, []string{"GRPC_UDS=/tmp/rl.sock"}},
		{map[string]string{"BACKEND_TYPE": "memcache", "MEMCACHE_HOST_PORT": "m:11211"}, []string{"BACKEND_TYPE=memcache", "MEMCACHE_HOST_PORT=m:11211"}},
		{map[string]string{"REDIS_URL": "/var/run/nutcracker/ratelimit.sock"}, []string{"REDIS_SOCKET_TYPE=unix"}},
		{map[string]string{"REDIS_URL": "r:1", "REDIS_SOCKET_TYPE": "unix"}, []string{"REDIS_SOCKET_TYPE=unix"}},
		{map[string]string{"REDIS_URL": "r:1", "REDIS_TYPE": "SENTINEL"}, []string{"REDIS_URL=r:1"}},
		{map[string]string{"REDIS_URL": "redis://r:1", "REDIS_AUTH": "x"}, []string{"REDIS_AUTH=x"}},
		{map[string]string{"REDIS_PERSECOND": "true", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": "true", "GRPC_CLIENT_TLS_SAN": "envoy"},
			[]string{"REDIS_PERSECOND=true", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION=true", "GRPC_CLIENT_TLS_SAN=envoy"}},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_DELTA", "LOG_LEVEL": "loud", "PORT": "http", "USE_PROMETHEUS": "yes"},
			[]string{"CONFIG_TYPE=GRPC_XDS_DELTA", "LOG_LEVEL=loud", "PORT=http", "USE_PROMETHEUS=yes"}},
		{map[string]string{"GRPC_SERVER_USE_TLS": "true"}, []string{"GRPC_SERVER_USE_TLS=true"}},
		{map[string]string{"CACHE_KEY_PREFIX": "{rl}", "LIMIT_LIMIT_HEADER": "a b"}, []string{"CACHE_KEY_PREFIX={rl}", "LIMIT_LIMIT_HEADER=a b"}},
	} {
		_, err := parseUpstream(lookupIn(tc.env))
		if err == nil {
			t.Errorf("%v: no error", tc.env)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w+": ") {
				t.Errorf("%v: error %q does not name %s", tc.env, err, w)
			}
		}
	}
}

// ratelimitInstance is a running `ratelimit`: in process or a binary.
type ratelimitInstance struct {
	httpURL, grpcAddr, promURL string
	stderr                     *syncBuffer
	// grpcTLS is the TLS of the gRPC listener (GRPC_SERVER_USE_TLS) as its
	// clients see it; nil for plaintext.
	grpcTLS *tls.Config
}

var promLine = regexp.MustCompile(`serving Prometheus metrics on (\S+)`)

// readServing reads the lines ratelimit prints when it serves: serve's,
// then the Prometheus listener's when withProm.
func readServing(t *testing.T, stdout io.Reader, withProm bool, exited <-chan int, stderr *syncBuffer) *ratelimitInstance {
	t.Helper()
	lines := make(chan string, 2)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	in := &ratelimitInstance{stderr: stderr}
	next := func() string {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("stdout ended; stderr:\n%s", stderr)
			}
			return line
		case c := <-exited:
			t.Fatalf("exited with %d before serving; stderr:\n%s", c, stderr)
		case <-time.After(20 * time.Second):
			t.Fatalf("not serving within 20s; stderr:\n%s", stderr)
		}
		return ""
	}
	line := next()
	m := servingLine.FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("unexpected first line %q; stderr:\n%s", line, stderr)
	}
	in.httpURL, in.grpcAddr = "http://"+m[1], m[2]
	if withProm {
		line = next()
		p := promLine.FindStringSubmatch(line)
		if p == nil {
			t.Fatalf("unexpected second line %q; stderr:\n%s", line, stderr)
		}
		in.promURL = "http://" + p[1]
	}
	go func() {
		for range lines {
		}
	}()
	return in
}

// startRatelimit runs ratelimitCmd in process with env and serve's args; the returned func
// stops it (as SIGTERM would) and returns its exit code.
func startRatelimit(t *testing.T, env map[string]string, args ...string) (*ratelimitInstance, func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	stderr := &syncBuffer{}
	code := make(chan int, 1)
	go func() {
		code <- ratelimitCmd(ctx, args, lookupIn(env), pw, stderr)
		pw.Close()
	}()
	var once sync.Once
	exit := -1
	stop := func() int {
		once.Do(func() {
			cancel()
			select {
			case exit = <-code:
			case <-time.After(15 * time.Second):
				t.Errorf("ratelimit did not stop within 15s")
			}
		})
		return exit
	}
	t.Cleanup(func() { stop() })
	_, withProm := env["USE_PROMETHEUS"]
	return readServing(t, pr, withProm, code, stderr), stop
}

// runtimeTree lays a config out as upstream's file provider reads it:
// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config/*.yaml (and a dotfile it skips).
func runtimeTree(t *testing.T, yaml string) string {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".hidden.yaml"), []byte("not: [yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

const upstreamYAML = `
domain: gateway
descriptors:
  - key: client
    rate_limit:
      unit: hour
      requests_per_unit: 2
`

// checkRatelimit checks what a manager of upstream's image relies on: the
// probe, Envoy's RLS decided by the files, the metrics on their own
// listener.
func checkRatelimit(t *testing.T, in *ratelimitInstance, client string) {
	t.Helper()
	status, body := httpGet(t, in.httpURL+"/healthcheck")
	if status != http.StatusOK || body != "OK" {
		t.Errorf("/healthcheck: %d %q, want 200 \"OK\"", status, body)
	}
	creds := insecure.NewCredentials()
	if in.grpcTLS != nil {
		creds = credentials.NewTLS(in.grpcTLS)
	}
	conn, err := grpc.NewClient(in.grpcAddr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rls := rlsv3.NewRateLimitServiceClient(conn)
	var codes []rlsv3.RateLimitResponse_Code
	for range 3 {
		resp, err := rls.ShouldRateLimit(t.Context(), rlsRequest("gateway", "client", client))
		if err != nil {
			t.Fatal(err)
		}
		codes = append(codes, resp.OverallCode)
		if len(resp.ResponseHeadersToAdd) != 0 {
			t.Errorf("headers %v on an answer, want none (upstream's default)", resp.ResponseHeadersToAdd)
		}
	}
	want := []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT}
	if !slices.Equal(codes, want) {
		t.Errorf("codes %v, want %v (2 an hour); stderr:\n%s", codes, want, in.stderr)
	}
	if in.promURL != "" {
		status, body := httpGet(t, in.promURL)
		if status != http.StatusOK || !strings.Contains(body, "floodgate_decisions_total") {
			t.Errorf("Prometheus listener: %d, want 200 with floodgate_decisions_total:\n%.500s", status, body)
		}
	}
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestRatelimitEnvoyGateway runs the mode with Envoy Gateway's environment
// on the memory store and on Redis.
func TestRatelimitEnvoyGateway(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		in, stop := startRatelimit(t, envoyGatewayEnv(runtimeTree(t, upstreamYAML), ""))
		checkRatelimit(t, in, "a")
		if code := stop(); code != 0 {
			t.Errorf("exit %d; stderr:\n%s", code, in.stderr)
		}
		if got := strings.Count(in.stderr.String(), "setting ignored"); got != 1 {
			t.Errorf("%d warnings of ignored settings, want 1 (PROMETHEUS_MAPPER_YAML):\n%s", got, in.stderr)
		}
	})
	t.Run("redis", func(t *testing.T) {
		redis := redistest.Standalone(t)
		env := envoyGatewayEnv(runtimeTree(t, upstreamYAML), redis.Addr)
		env["CACHE_KEY_PREFIX"] = "rl_"
		env["REDIS_HEALTH_CHECK_ACTIVE_CONNECTION"] = "true"
		// Each decision's deadline (-timeout, 10ms by default) is
		// Floodgate's own: long here, so that Redis, not the failure mode,
		// decides on a loaded machine.
		in, _ := startRatelimit(t, env, "-timeout=5s")
		checkRatelimit(t, in, "b")
		if keys := redis.MustCLI(t, "--scan", "--pattern", "rl_*"); !strings.Contains(keys, "rl_") {
			t.Errorf("no key under CACHE_KEY_PREFIX rl_ in Redis: %q", keys)
		}
		// REDIS_HEALTH_CHECK_ACTIVE_CONNECTION: the probe fails while Redis
		// does not answer.
		if err := redis.Stop(); err != nil {
			t.Fatal(err)
		}
		if status, body := httpGet(t, in.httpURL+"/healthcheck"); status != http.StatusInternalServerError || body != "" {
			t.Errorf("/healthcheck with Redis down: %d %q, want 500 and no body", status, body)
		}
	})
}

// TestHealthcheckComponents: /healthcheck fails, with 500 and no body,
// while a component is unhealthy, as upstream's: a config with a domain
// under HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED, Redis reached at start,
// and no shutdown started.
func TestHealthcheckComponents(t *testing.T) {
	t.Run("config", func(t *testing.T) {
		root := runtimeTree(t, "domain: empty\n")
		rules := filepath.Join(root, "ratelimit", "config", "rules.yaml")
		if err := os.Remove(rules); err != nil {
			t.Fatal(err)
		}
		env := envoyGatewayEnv(root, "")
		env["HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED"] = "true"
		in, _ := startRatelimit(t, env)
		if status, body := httpGet(t, in.httpURL+"/healthcheck"); status != http.StatusInternalServerError || body != "" {
			t.Errorf("/healthcheck with no domain: %d %q, want 500 and no body", status, body)
		}
		if err := os.WriteFile(rules, []byte(upstreamYAML), 0o644); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, 10*time.Second, func() bool {
			status, _ := httpGet(t, in.httpURL+"/healthcheck")
			return status == http.StatusOK
		})
	})
	t.Run("redis not reached", func(t *testing.T) {
		redis := redistest.Standalone(t)
		addr := redis.Addr
		if err := redis.Stop(); err != nil {
			t.Fatal(err)
		}
		in, _ := startRatelimit(t, envoyGatewayEnv(runtimeTree(t, upstreamYAML), addr))
		if status, body := httpGet(t, in.httpURL+"/healthcheck"); status != http.StatusInternalServerError || body != "" {
			t.Errorf("/healthcheck before Redis was reached: %d %q, want 500 and no body", status, body)
		}
	})
	t.Run("shutdown", func(t *testing.T) {
		m := &upstreamMode{}
		store := memstore.New(nil)
		t.Cleanup(func() { store.Close() })
		m.setStore(store)
		h := &healthcheck{m: m}
		if !h.healthy(t.Context()) {
			t.Fatal("unhealthy before shutdown")
		}
		m.stop()
		if h.healthy(t.Context()) {
			t.Error("healthy once shutdown started")
		}
	})
}

// TestRatelimitGRPCTLS: GRPC_SERVER_USE_TLS puts the gRPC listener, and
// only it, behind TLS (mutual with GRPC_CLIENT_TLS_CACERT), as upstream's:
// the HTTP listener stays plain for the kubelet's probe.
func TestRatelimitGRPCTLS(t *testing.T) {
	certs := redistest.NewCerts(t)
	env := envoyGatewayEnv(runtimeTree(t, upstreamYAML), "")
	env["GRPC_SERVER_USE_TLS"] = "true"
	env["GRPC_SERVER_TLS_CERT"] = certs.ServerCertFile
	env["GRPC_SERVER_TLS_KEY"] = certs.ServerKeyFile
	env["GRPC_CLIENT_TLS_CACERT"] = certs.CAFile
	in, _ := startRatelimit(t, env)
	if status, body := httpGet(t, in.httpURL+"/healthcheck"); status != http.StatusOK || body != "OK" {
		t.Errorf("plain HTTP /healthcheck: %d %q, want 200 \"OK\"", status, body)
	}
	call := func(creds credentials.TransportCredentials) error {
		conn, err := grpc.NewClient(in.grpcAddr, grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_, err = rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(t.Context(), rlsRequest("gateway", "client", "tls"))
		return err
	}
	if err := call(credentials.NewTLS(tlsClient(t, certs, true))); err != nil {
		t.Errorf("gRPC over mutual TLS: %v", err)
	}
	if err := call(credentials.NewTLS(tlsClient(t, certs, false))); err == nil {
		t.Error("gRPC over TLS without a client certificate: no error")
	}
	if err := call(insecure.NewCredentials()); err == nil {
		t.Error("plain gRPC on the TLS listener: no error")
	}
}

// fuzzedSettings are the settings FuzzParseUpstream gives values to: those
// parsed beyond a boolean, and the Redis URL's parts.
var fuzzedSettings = []string{"REDIS_URL", "REDIS_TYPE", "REDIS_AUTH", "REDIS_SENTINEL_AUTH", "REDIS_TLS", "REDIS_TIMEOUT",
	"REDIS_SOCKET_TYPE", "HOST", "PORT", "LOG_LEVEL", "PROMETHEUS_ADDR", "PROMETHEUS_PATH", "CACHE_KEY_PREFIX",
	"LIMIT_LIMIT_HEADER", "LOCAL_CACHE_SIZE_IN_BYTES", "CONFIG_TYPE", "CONFIG_GRPC_XDS_NODE_METADATA", "USE_STATSD",
	"CONFIG_GRPC_XDS_SERVER_URL", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL",
	"TRACING_ENABLED", "TRACING_EXPORTER_PROTOCOL", "TRACING_SAMPLING_RATE"}

// FuzzParseUpstream: any environment is refused with every line naming a
// setting, or gives flags that serve takes; never a panic. The input's
// lines are the values of fuzzedSettings, in order (USE_PROMETHEUS is
// true, so that its address counts).
func FuzzParseUpstream(f *testing.F) {
	f.Add("r:6379\nSINGLE\nu:p")
	f.Add("m,s1:26379\nsentinel\n\nx&y\ntrue\n2s\ntcp")
	f.Add("redis-cluster://a,b\n\n\n\n\n\n\n::1\n65536\nTRACE\n:19001\nmetrics")
	f.Add("\n\n\n\n\n\n\n\n\n\n\n\na{b\nX R\n-1\nFILE\na:b,c\nfalse")
	f.Add("\n\n\n\n\n\n\n\n\n\n\n\n\n\n\nGRPC_XDS_SOTW\nzone=a,b:c\nfalse\neg:18001\nauthorization:Bearer x\n2\n0s\ntrue\ngrpc\n0.5")
	f.Fuzz(func(t *testing.T, text string) {
		env := map[string]string{"USE_PROMETHEUS": "true"}
		for i, v := range strings.Split(text, "\n") {
			if i < len(fuzzedSettings) {
				env[fuzzedSettings[i]] = v
			}
		}
		m, err := parseUpstream(lookupIn(env))
		if err != nil {
			for line := range strings.SplitSeq(err.Error(), "\n") {
				name, _, _ := strings.Cut(line, "=")
				if !slices.ContainsFunc(upstreamSettings, func(s upstreamSetting) bool { return s.Name == name }) {
					t.Fatalf("refusal %q does not start with a setting's name", line)
				}
			}
			return
		}
		if _, code, ok := parseServe(m.args, io.Discard); !ok {
			t.Fatalf("env %q: serve refuses the flags %q (exit %d)", env, m.args, code)
		}
	})
}
