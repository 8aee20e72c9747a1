package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// instance is one `floodgate serve` started through run, on loopback ports
// chosen by the kernel.
type instance struct {
	httpURL  string
	grpcAddr string
	stderr   *syncBuffer
	stop     func() int
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var servingLine = regexp.MustCompile(`serving HTTP on (\S+), gRPC on (\S+),`)

// startServe runs `floodgate serve args...` until the test ends.
func startServe(t *testing.T, args ...string) *instance {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	inst := &instance{stderr: &syncBuffer{}}
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, append([]string{"serve", "-http", "127.0.0.1:0", "-grpc", "127.0.0.1:0"}, args...), pw, inst.stderr)
		pw.Close()
	}()
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
	}()
	var once sync.Once
	exit := -1
	inst.stop = func() int {
		once.Do(func() {
			cancel()
			select {
			case exit = <-code:
			case <-time.After(15 * time.Second):
				t.Errorf("serve did not stop within 15s")
			}
		})
		return exit
	}
	t.Cleanup(func() { inst.stop() })
	select {
	case line := <-lines:
		m := servingLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("unexpected first line %q; stderr:\n%s", line, inst.stderr)
		}
		inst.httpURL, inst.grpcAddr = "http://"+m[1], m[2]
	case c := <-code:
		t.Fatalf("serve exited with %d before serving; stderr:\n%s", c, inst.stderr)
	case <-time.After(15 * time.Second):
		t.Fatalf("serve did not start within 15s; stderr:\n%s", inst.stderr)
	}
	return inst
}

func (in *instance) allow(t *testing.T, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(in.httpURL+"/v1/allow", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (in *instance) rls(t *testing.T) rlsv3.RateLimitServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(in.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

const e2eYAML = `
domain: edge
descriptors:
  - key: remote_address
    rate_limit:
      unit: minute
      requests_per_unit: 5
  - key: path
    value: /login
    rate_limit:
      name: login
      algorithm: gcra
      unit: minute
      requests_per_unit: 2
`

func writeConfig(t *testing.T, yaml string) (dir, file string) {
	t.Helper()
	dir = t.TempDir()
	file = filepath.Join(dir, "edge.yaml")
	if err := os.WriteFile(file, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, file
}

func rlsRequest(domain string, entries ...string) *rlsv3.RateLimitRequest {
	d := &commonrl.RateLimitDescriptor{}
	for i := 0; i+1 < len(entries); i += 2 {
		d.Entries = append(d.Entries, &commonrl.RateLimitDescriptor_Entry{Key: entries[i], Value: entries[i+1]})
	}
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*commonrl.RateLimitDescriptor{d}}
}

func TestServeMemory(t *testing.T) {
	dir, _ := writeConfig(t, e2eYAML)
	in := startServe(t, "-config", dir)
	rls := in.rls(t)
	ctx := t.Context()
	for i := range 7 {
		resp, err := rls.ShouldRateLimit(ctx, rlsRequest("edge", "remote_address", "10.0.0.1"))
		if err != nil {
			t.Fatal(err)
		}
		want := rlsv3.RateLimitResponse_OK
		if i >= 5 {
			want = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if resp.OverallCode != want {
			t.Errorf("request %d: %v, want %v", i, resp.OverallCode, want)
		}
	}
	if _, err := rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("no descriptors: %v, want InvalidArgument", err)
	}
	code, body := in.allow(t, `{"key": "k", "limit": {"limit": 1, "period": "1m"}}`)
	if code != 200 || !strings.Contains(body, `"allowed":true`) {
		t.Errorf("inline allow: %d %s", code, body)
	}
	code, body = in.allow(t, `{"domain": "edge", "descriptors": [{"entries": [{"key": "path", "value": "/login"}]}]}`)
	if code != 200 || !strings.Contains(body, `"remaining":1`) {
		t.Errorf("descriptor allow: %d %s", code, body)
	}
	resp, err := http.Get(in.httpURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `floodgate_decisions_total{algorithm="fixed_window",domain="edge",outcome="denied",rule="edge|remote_address"} 2`) {
		t.Errorf("metrics lack the two denials:\n%s", grepLines(string(b), "floodgate_decisions_total"))
	}
	if got := in.stop(); got != 0 {
		t.Errorf("exit code %d after SIGTERM-like cancel; stderr:\n%s", got, in.stderr)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestServeBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"serve", "-log-format", "xml"},
		{"serve", "-failure-mode", "maybe"},
		{"serve", "-timeout", "0s"},
		{"serve", "extra"},
		{"serve", "-failure-mode", "local"},
		{"serve", "-instances", "-1"},
		{"serve", "-probe-interval", "0s"},
		{"serve", "-deny-cache", "-1"},
		{"serve", "-redis-coalesce", "-1"},
		{"serve", "-redis", "redis://127.0.0.1:1", "-redis-wait-replicas", "-1"},
		{"serve", "-redis", "redis://127.0.0.1:1", "-redis-wait-replicas", "1", "-redis-wait-timeout", "0s"},
		{"serve", "-redis-wait-replicas", "1"},
		{"serve", "-gogc", "-1"},
		{"serve", "-max-hold", "30s"}, // not below -write-timeout's 30s
		{"serve", "-max-hold", "0s"},
		{"serve", "-max-held", "-1"},
	} {
		var stdout, stderr strings.Builder
		if code := run(t.Context(), args, &stdout, &stderr); code != 2 {
			t.Errorf("%v: exit %d, want 2; stderr %s", args, code, stderr.String())
		}
	}
	var stdout, stderr strings.Builder
	dir, _ := writeConfig(t, "domain: edge\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	if code := run(t.Context(), []string{"serve", "-http", "127.0.0.1:0", "-grpc", "", "-config", dir}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "edge.yaml:4") {
		t.Errorf("bad config: exit %d, stderr %s", code, stderr.String())
	}
	dir, _ = writeConfig(t, "domain: edge\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 1, failure_mode: local}\n")
	if code := run(t.Context(), []string{"serve", "-http", "127.0.0.1:0", "-grpc", "", "-config", dir}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "failure_mode local needs the number of instances") {
		t.Errorf("local rule without -instances: exit %d, stderr %s", code, stderr.String())
	}
	t.Setenv("FLOODGATE_LOG_FORMAT", "yaml")
	if code := run(t.Context(), []string{"serve"}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), `"yaml" is not text or json`) {
		t.Errorf("env var: exit %d, stderr %s", code, stderr.String())
	}
}

func TestConfigValidate(t *testing.T) {
	_, good := writeConfig(t, e2eYAML)
	_, bad := writeConfig(t, "domain: edge\ndescriptors:\n  - key: a\n    colour: red\n")
	var stdout, stderr strings.Builder
	if code := run(t.Context(), []string{"config", "validate", good}, &stdout, &stderr); code != 0 {
		t.Errorf("good config: exit %d: %s", code, stderr.String())
	}
	if code := run(t.Context(), []string{"config", "validate", bad}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "edge.yaml:4") {
		t.Errorf("bad config: exit %d: %s", code, stderr.String())
	}
}

// TestServeRedisShared starts three serve instances on one Redis and sends
// concurrent requests for one key through all of them: exactly the limit is
// admitted in total.
func TestServeRedisShared(t *testing.T) {
	redis := redistest.Standalone(t)
	dir, _ := writeConfig(t, `
domain: edge
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 50}
`)
	var ins []*instance
	for range 3 {
		ins = append(ins, startServe(t, "-config", dir, "-redis", "redis://"+redis.Addr, "-timeout", "2s"))
	}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for i := range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rls := ins[i%3].rls(t)
			for range 5 {
				resp, err := rls.ShouldRateLimit(t.Context(), rlsRequest("edge", "user", "shared"))
				if err != nil {
					t.Error(err)
					return
				}
				if resp.OverallCode == rlsv3.RateLimitResponse_OK {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if got, want := admitted.Load(), int64(50); got != want {
		t.Errorf("admitted %d of 150 across three instances, want exactly %d", got, want)
	}
	_ = fmt.Sprint()
}

// TestServeRedisDown stops Redis under a fail_closed and a fail_open rule:
// every answer comes within the deadline, by the rule's failure mode, and
// the service recovers by itself when Redis is back.
func TestServeRedisDown(t *testing.T) {
	redis := redistest.Standalone(t)
	dir, _ := writeConfig(t, `
domain: edge
descriptors:
  - key: closed
    rate_limit: {unit: hour, requests_per_unit: 1000, failure_mode: fail_closed}
  - key: open
    rate_limit: {unit: hour, requests_per_unit: 1000, failure_mode: fail_open}
`)
	// 500ms: the first call loads the script, and on a loaded CI machine
	// 100ms was once too short with Redis up.
	in := startServe(t, "-config", dir, "-redis", "redis://"+redis.Addr, "-timeout", "500ms")
	rls := in.rls(t)
	ask := func(key string) (rlsv3.RateLimitResponse_Code, time.Duration) {
		t.Helper()
		start := time.Now()
		resp, err := rls.ShouldRateLimit(t.Context(), rlsRequest("edge", key, "x"))
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		return resp.OverallCode, time.Since(start)
	}
	if c, _ := ask("closed"); c != rlsv3.RateLimitResponse_OK {
		t.Fatalf("with Redis up: %v", c)
	}
	if err := redis.Kill(); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		c, took := ask("closed")
		if c != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Errorf("fail_closed with Redis down: %v", c)
		}
		if took > 2*time.Second {
			t.Errorf("fail_closed answer took %v, want within the 500ms deadline (plus scheduling)", took)
		}
		if c, _ := ask("open"); c != rlsv3.RateLimitResponse_OK {
			t.Errorf("fail_open with Redis down: %v", c)
		}
	}
	if err := redis.Restart(t); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if c, _ := ask("closed"); c == rlsv3.RateLimitResponse_OK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the service did not recover within 20s of Redis restarting")
		}
		waitTick()
	}
}

// TestServeRedisDownLocal kills Redis under two instances whose rule has
// failure_mode local (one told the fleet size by -instances, the other by
// FLOODGATE_INSTANCES): each admits exactly its share, 10/2, answered
// within the deadline and marked fallback; after Redis restarts both go
// back to it by themselves.
func TestServeRedisDownLocal(t *testing.T) {
	redis := redistest.Standalone(t)
	dir, _ := writeConfig(t, `
domain: edge
descriptors:
  - key: user
    rate_limit: {period: 8760h, requests_per_unit: 10, failure_mode: local}
`)
	args := []string{"-config", dir, "-redis", "redis://" + redis.Addr, "-timeout", "500ms", "-probe-interval", "50ms"}
	a := startServe(t, append(args, "-instances", "2")...)
	t.Setenv("FLOODGATE_INSTANCES", "2")
	b := startServe(t, args...)
	type answer struct {
		Allowed  bool  `json:"allowed"`
		Limit    int64 `json:"limit"`
		Fallback bool  `json:"fallback"`
	}
	ask := func(in *instance) (answer, time.Duration) {
		t.Helper()
		begin := time.Now()
		code, body := in.allow(t, `{"domain": "edge", "descriptors": [{"entries": [{"key": "user", "value": "u"}]}]}`)
		took := time.Since(begin)
		var out answer
		if err := json.Unmarshal([]byte(body), &out); err != nil || code != http.StatusOK {
			t.Fatalf("allow: %d %s", code, body)
		}
		return out, took
	}
	if out, _ := ask(a); !out.Allowed || out.Fallback || out.Limit != 10 {
		t.Fatalf("with Redis up: %+v", out)
	}
	if err := redis.Kill(); err != nil {
		t.Fatal(err)
	}
	for name, in := range map[string]*instance{"-instances": a, "FLOODGATE_INSTANCES": b} {
		allowed := 0
		for range 8 {
			out, took := ask(in)
			if !out.Fallback || out.Limit != 5 {
				t.Errorf("%s, Redis down: %+v, want a local decision with limit 5", name, out)
			}
			if took > time.Second {
				t.Errorf("%s, Redis down: answered in %v, want within the 500ms deadline (plus scheduling)", name, took)
			}
			if out.Allowed {
				allowed++
			}
		}
		if allowed != 5 {
			t.Errorf("%s, Redis down: %d of 8 admitted, want the share 5", name, allowed)
		}
	}
	// Envoy's protocol: the same local share, over the limit once spent.
	resp, err := b.rls(t).ShouldRateLimit(t.Context(), rlsRequest("edge", "user", "u"))
	if err != nil {
		t.Fatal(err)
	}
	if s := resp.Statuses[0]; resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || s.CurrentLimit.GetRequestsPerUnit() != 5 || s.LimitRemaining != 0 {
		t.Errorf("Envoy, Redis down, share spent: %v", resp)
	}
	if err := redis.Restart(t); err != nil {
		t.Fatal(err)
	}
	for _, in := range []*instance{a, b} {
		waitUntil(t, 20*time.Second, func() bool {
			out, _ := ask(in)
			return !out.Fallback && out.Limit == 10
		})
	}
}

// TestServeReloadUnderLoad rewrites the config, good and bad, while clients
// keep asking: no request fails, a good file takes effect, a bad one is
// rejected and the old rules keep serving.
func TestServeReloadUnderLoad(t *testing.T) {
	dir, file := writeConfig(t, e2eYAML)
	in := startServe(t, "-config", dir)
	rls := in.rls(t)
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	var sent, failed atomic.Int64
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < 20000 && ctx.Err() == nil; n++ {
				_, err := rls.ShouldRateLimit(ctx, rlsRequest("edge", "remote_address", fmt.Sprint(n)))
				if ctx.Err() != nil {
					return
				}
				sent.Add(1)
				if err != nil {
					failed.Add(1)
				}
			}
		}()
	}
	rewrite := func(yaml string) {
		tmp := file + ".tmp"
		if err := os.WriteFile(tmp, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil {
			t.Fatal(err)
		}
	}
	limitOf := func() string {
		_, body := in.allow(t, `{"domain": "edge", "hits": 0, "descriptors": [{"entries": [{"key": "path", "value": "/login"}]}]}`)
		return body
	}
	rewrite(strings.Replace(e2eYAML, "requests_per_unit: 2", "requests_per_unit: 7", 1))
	waitUntil(t, 30*time.Second, func() bool { return strings.Contains(limitOf(), `"limit":7`) })
	rewrite("domain: edge\ndescriptors: [ {key: oops\n")
	waitUntil(t, 30*time.Second, func() bool { return strings.Contains(in.stderr.String(), "config rejected") })
	if body := limitOf(); !strings.Contains(body, `"limit":7`) {
		t.Errorf("after a bad file: %s, want the previous rules still serving", body)
	}
	cancel()
	wg.Wait()
	if sent.Load() == 0 || failed.Load() != 0 {
		t.Errorf("%d of %d requests failed during reloads", failed.Load(), sent.Load())
	}
}

// get sends GET path to serve's HTTP address and returns the response,
// whose body it has read and closed, and the body.
func (in *instance) get(t *testing.T, path string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Get(in.httpURL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// metric is the value of a counter or gauge on serve's /metrics (the whole
// line's name and labels), -1 if absent.
func (in *instance) metric(t *testing.T, series string) int64 {
	t.Helper()
	_, b := in.get(t, "/metrics")
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return int64(n)
		}
	}
	return -1
}

// scriptCalls is the script runs the server made (EVALSHA, EVAL and FCALL
// calls, from INFO commandstats, without those that failed, such as an
// EVALSHA answered NOSCRIPT) and how many of them were FCALL.
func scriptCalls(t *testing.T, redis *redistest.Server) (calls, fcalls int64) {
	t.Helper()
	info, err := redis.CLI(t.Context(), "INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	stats := redistest.ParseCommandStats(info)
	for _, cmd := range redistest.ScriptCommands {
		ok := stats[cmd].Calls - stats[cmd].FailedCalls
		calls += ok
		if cmd == "fcall" {
			fcalls += ok
		}
	}
	return calls, fcalls
}

// TestServeCoalesce sends 64 concurrent gRPC requests at a time through
// serve on Redis: by default they share script runs, so far fewer scripts
// run than requests are decided; with -redis-coalesce 0 each runs its own.
func TestServeCoalesce(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"default", nil},
		{"off", []string{"-redis-coalesce", "0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			redis := redistest.Standalone(t)
			dir, _ := writeConfig(t, "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 1000000}\n")
			args := append([]string{"-config", dir, "-redis", "redis://" + redis.Addr, "-timeout", "10s"}, tc.args...)
			in := startServe(t, args...)
			rls := in.rls(t)
			if _, err := rls.ShouldRateLimit(t.Context(), rlsRequest("edge", "user", "warm")); err != nil {
				t.Fatal(err)
			}
			before, _ := scriptCalls(t, redis)
			const goroutines, each = 64, 10
			start := make(chan struct{})
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Go(func() {
					<-start
					for i := range each {
						resp, err := rls.ShouldRateLimit(t.Context(), rlsRequest("edge", "user", fmt.Sprint(g*each+i)))
						if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
							t.Errorf("request %d: %v, %v", g*each+i, resp, err)
							return
						}
					}
				})
			}
			close(start)
			wg.Wait()
			after, _ := scriptCalls(t, redis)
			calls := after - before
			const requests = goroutines * each
			runs, shared := in.metric(t, "floodgate_coalesced_runs_total"), in.metric(t, "floodgate_coalesced_decisions_total")
			t.Logf("%d script calls for %d requests; %d shared runs carried %d", calls, requests, runs, shared)
			switch {
			case tc.name == "off" && (calls < requests || runs != 0 || shared != 0):
				t.Errorf("-redis-coalesce 0: %d script calls for %d requests, %d shared runs; want one each, none shared", calls, requests, runs)
			case tc.name == "default" && calls > requests/2:
				t.Errorf("%d script calls for %d concurrent requests, want at most half", calls, requests)
			}
			// Each request ran alone or in a shared run.
			if alone := calls - runs; alone+shared != requests {
				t.Errorf("%d calls of which %d shared runs carrying %d: that is %d requests, want %d", calls, runs, shared, alone+shared, requests)
			}
		})
	}
}

func waitTick() { <-time.After(20 * time.Millisecond) }

// waitUntil polls cond, bounded by d.
func waitUntil(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	end := time.Now().Add(d)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("condition not met within %v", d)
		}
		waitTick()
	}
}

// TestServeDenyCache hammers one key past its limit through serve on Redis:
// with the default -deny-cache, the denials after the first are answered
// without a script call; with -deny-cache 0, every request runs one. Both
// admit exactly the limit.
func TestServeDenyCache(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		calls int64 // script runs that did not fail
	}{
		// 5 admitted and a first denial; without the cache, all 50. (The
		// first EVALSHA of a fresh Redis answers NOSCRIPT and the first
		// FCALL "Function not found": failed calls, not counted.)
		{"default", nil, 6},
		{"off", []string{"-deny-cache", "0"}, 50},
		{"functions", []string{"-redis-functions"}, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			redis := redistest.Standalone(t)
			dir, _ := writeConfig(t, "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 5}\n")
			args := append([]string{"-config", dir, "-redis", "redis://" + redis.Addr, "-timeout", "5s"}, tc.args...)
			in := startServe(t, args...)
			rls := in.rls(t)
			if _, err := redis.CLI(t.Context(), "CONFIG", "RESETSTAT"); err != nil {
				t.Fatal(err)
			}
			ok := 0
			for range 50 {
				resp, err := rls.ShouldRateLimit(t.Context(), rlsRequest("edge", "user", "abuser"))
				if err != nil {
					t.Fatal(err)
				}
				if resp.OverallCode == rlsv3.RateLimitResponse_OK {
					ok++
				}
			}
			if ok != 5 {
				t.Errorf("%d of 50 admitted, want exactly 5", ok)
			}
			calls, fcalls := scriptCalls(t, redis)
			if functions := slices.Contains(tc.args, "-redis-functions"); functions != (fcalls == calls) {
				t.Errorf("%d of %d script calls were FCALL; -redis-functions %v", fcalls, calls, functions)
			}
			// Every request that ran no script was a cached denial, and
			// /metrics says so.
			cached := in.metric(t, `floodgate_local_decisions_total{kind="deny_cache"}`)
			if want := 50 - calls; cached != want {
				t.Errorf("floodgate_local_decisions_total{kind=\"deny_cache\"} = %d after %d script calls for 50 requests, want %d", cached, calls, want)
			}
			if calls != tc.calls {
				t.Errorf("%d script calls for 50 requests, want %d", calls, tc.calls)
			}
		})
	}
}

// TestServeResponseHeaders: by default Envoy's answers carry the RateLimit
// headers, over gRPC and on POST /json; -response-headers=false leaves them
// out of both.
func TestServeResponseHeaders(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprint(on), func(t *testing.T) {
			dir, _ := writeConfig(t, e2eYAML)
			in := startServe(t, "-config", dir, "-response-headers="+strconv.FormatBool(on))
			resp, err := in.rls(t).ShouldRateLimit(t.Context(), rlsRequest("edge", "path", "/login"))
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, h := range resp.ResponseHeadersToAdd {
				names = append(names, h.Key)
			}
			if got := slices.Contains(names, "Ratelimit"); got != on {
				t.Errorf("gRPC response headers %v; RateLimit present %v, want %v", names, got, on)
			}
			hr, err := http.Post(in.httpURL+"/json", "application/json", strings.NewReader(`{"domain": "edge", "descriptors": [{"entries": [{"key": "path", "value": "/login"}]}]}`))
			if err != nil {
				t.Fatal(err)
			}
			hr.Body.Close()
			if got := hr.Header.Get("RateLimit") != ""; got != on {
				t.Errorf("POST /json: RateLimit header %q, want present %v", hr.Header.Get("RateLimit"), on)
			}
		})
	}
}

// TestServeWaitReplicas runs serve with -redis-wait-replicas 1: on a Redis
// with a replica, every decision is on the replica when it is answered;
// on one without, every call fails after -redis-wait-timeout and is
// answered by the failure mode (here fail_closed), and /metrics counts
// the store errors.
func TestServeWaitReplicas(t *testing.T) {
	conf := "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 5}\n"
	for _, tc := range []struct {
		name       string
		replicated bool
		args       []string
	}{
		// With a replica, WAIT may wait long (a loaded machine can hold
		// its acknowledgement back); without, every call waits the whole
		// timeout, so it is short.
		{"replica", true, []string{"-timeout", "5s", "-redis-wait-timeout", "4s"}},
		{"no_replica", false, []string{"-timeout", "5s", "-redis-wait-timeout", "20ms"}},
		// The default -timeout (10 ms) and -redis-wait-timeout (50 ms):
		// each call still fails and is answered by the failure mode,
		// whether its WAIT or its deadline ends first.
		{"no_replica_defaults", false, nil},
	} {
		replicated := tc.replicated
		t.Run(tc.name, func(t *testing.T) {
			master := redistest.Standalone(t)
			var replica *redistest.Server
			if replicated {
				replica = redistest.Replica(t, master)
			}
			dir, _ := writeConfig(t, conf)
			in := startServe(t, append([]string{"-config", dir, "-redis", "redis://" + master.Addr,
				"-failure-mode", "fail_closed", "-redis-wait-replicas", "1"}, tc.args...)...)
			rls := in.rls(t)
			ok := 0
			for i := range 8 {
				resp, err := rls.ShouldRateLimit(t.Context(), rlsRequest("edge", "user", "u"+strconv.Itoa(i%2)))
				if err != nil {
					t.Fatal(err)
				}
				if resp.OverallCode == rlsv3.RateLimitResponse_OK {
					ok++
				}
				if replicated {
					// Each answer comes after the replica has the write:
					// the keys of both users are on it as soon as each
					// was first decided.
					if got, want := strings.TrimSpace(replica.MustCLI(t, "DBSIZE")), strconv.Itoa(min(i+1, 2)); got != want {
						t.Errorf("after answer %d the replica holds %s keys, want %s", i, got, want)
					}
				}
			}
			errs := in.metric(t, "floodgate_store_errors_total")
			if replicated && (ok != 8 || errs != 0) {
				t.Errorf("with a replica: %d of 8 admitted, %d store errors; want 8, 0", ok, errs)
			}
			if !replicated && (ok != 0 || errs != 8) {
				t.Errorf("without a replica: %d of 8 admitted, %d store errors; want 0 (fail_closed), 8", ok, errs)
			}
			if tc.name == "no_replica" && !strings.Contains(in.stderr.String(), "not acknowledged by enough replicas") {
				t.Errorf("the log does not say why the calls failed:\n%s", in.stderr.String())
			}
		})
	}
}

// TestServeGOGC: -gogc sets the garbage collector's target while serve
// runs, and serve puts the process's back when it returns.
func TestServeGOGC(t *testing.T) {
	gogc := func() uint64 {
		s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	before := gogc()
	in := startServe(t, "-gogc", "375")
	if got := gogc(); got != 375 {
		t.Errorf("GOGC while serving with -gogc 375: %d", got)
	}
	in.stop()
	if got := gogc(); got != before {
		t.Errorf("GOGC after serve returned: %d, want %d as before", got, before)
	}
}
