package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/pgtest"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/server"
)

// serveArgsEnv carries the arguments of floodgate serve, as JSON, to
// TestServeProcessHelper.
const serveArgsEnv = "FLOODGATE_SERVE_PROCESS_ARGS"

// TestServeProcessHelper is floodgate serve in a process of its own, as
// main runs it (SIGTERM stops it): startServeProcess starts the test
// binary on this test alone with serveArgsEnv set. Otherwise it skips.
func TestServeProcessHelper(t *testing.T) {
	spec := os.Getenv(serveArgsEnv)
	if spec == "" {
		t.Skip("runs only in a process startServeProcess starts")
	}
	var args []string
	if err := json.Unmarshal([]byte(spec), &args); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", serveArgsEnv, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, args, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// startServeProcess starts floodgate serve with args in a process of its
// own (the test binary, TestServeProcessHelper) on loopback ports, and
// stops it (SIGTERM, then SIGKILL after 15s) when the test ends. Unlike
// startServe, instances started this way share nothing but what serve
// shares between machines: a ledger file's locks are another process's.
func startServeProcess(t *testing.T, args ...string) *instance {
	t.Helper()
	spec, err := json.Marshal(append([]string{"serve", "-http", "127.0.0.1:0", "-grpc", "127.0.0.1:0"}, args...))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestServeProcessHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), serveArgsEnv+"="+string(spec))
	inst := &instance{stderr: &syncBuffer{}}
	cmd.Stderr = inst.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan int, 1)
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if servingLine.MatchString(sc.Text()) {
				select {
				case lines <- sc.Text():
				default:
				}
			}
		}
		// Wait after the pipe is read to its end, as os/exec asks.
		cmd.Wait()
		exited <- cmd.ProcessState.ExitCode()
	}()
	var once sync.Once
	code := -1
	inst.stop = func() int {
		once.Do(func() {
			cmd.Process.Signal(syscall.SIGTERM)
			select {
			case code = <-exited:
			case <-time.After(15 * time.Second):
				t.Errorf("serve (pid %d) did not stop within 15s of SIGTERM; killed", cmd.Process.Pid)
				cmd.Process.Kill()
				code = <-exited
			}
		})
		return code
	}
	t.Cleanup(func() { inst.stop() })
	select {
	case line := <-lines:
		m := servingLine.FindStringSubmatch(line)
		inst.httpURL, inst.grpcAddr = "http://"+m[1], m[2]
	case c := <-exited:
		t.Fatalf("serve exited with %d before serving; stderr:\n%s", c, inst.stderr)
	case <-time.After(30 * time.Second):
		t.Fatalf("serve did not start within 30s; stderr:\n%s", inst.stderr)
	}
	return inst
}

const overridesYAML = `
domain: api
descriptors:
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 1000}
`

const (
	acmeAllow    = `{"domain":"api","descriptors":[{"entries":[{"key":"tenant","value":"acme"}]}]}`
	acmeKey      = `{"domain":"api","entries":[{"key":"tenant","value":"acme"}]}`
	acmeOverride = `{"domain":"api","entries":[{"key":"tenant","value":"acme"}],"limits":[{"limit":5000,"period":"1h"}]}`
	acmeSubject  = "d|api|tenant=acme"
	ruleLimit    = 1000
	overLimit    = 5000
)

// propagationMargin is what TestServeOverrides allows beyond one
// -override-poll for a change to be in force on another instance: the
// poll's two queries and the probe's request, on a loaded machine under
// -race. With the default poll (250ms) the bound is issue 28's second.
const propagationMargin = 750 * time.Millisecond

// TestServeOverridesPostgres: three floodgate serve processes on one
// redis-server and one PostgreSQL ledger; see testServeOverrides.
func TestServeOverridesPostgres(t *testing.T) {
	redis := redistest.Standalone(t)
	testServeOverrides(t, pgtest.Database(t), "-redis", "redis://"+redis.Addr, "-timeout", "2s")
}

// TestServeOverridesSQLite: three floodgate serve processes on the memory
// store and one SQLite ledger file, which they share (WAL, a busy
// timeout); see testServeOverrides.
func TestServeOverridesSQLite(t *testing.T) {
	testServeOverrides(t, filepath.Join(t.TempDir(), "ledger.db"))
}

// testServeOverrides is issue 28's "an override set through the API on
// one instance is in force on two others within a second; the audit
// lists it; a restart keeps it", end to end: three serve processes on
// ledger with the default -override-poll and token files; an override
// set through POST /v1/overrides on the first decides there at once and
// on the two others within one poll and propagationMargin of the answer
// (each measured, and logged); GET /v1/overrides/audit, on another
// instance, lists it with the admin token's identity; a restarted
// instance applies it from its first request; a removal on the second
// instance comes back to the rule's limit everywhere the same way.
func testServeOverrides(t *testing.T, ledgerSpec string, extra ...string) {
	dir, _ := writeConfig(t, overridesYAML)
	tokens := t.TempDir()
	clientFile, adminFile := filepath.Join(tokens, "client"), filepath.Join(tokens, "admin")
	writeFile(t, clientFile, clientToken+"\n")
	writeFile(t, adminFile, adminToken+"\n")
	args := append([]string{"-config", dir, "-ledger", ledgerSpec, "-auth-token-file", clientFile, "-admin-token-file", adminFile}, extra...)
	var ins [3]*instance
	for i := range ins {
		ins[i] = startServeProcess(t, args...)
	}
	defer func() {
		if t.Failed() {
			for i, in := range ins {
				t.Logf("instance %d stderr:\n%s", i+1, in.stderr)
			}
		}
	}()
	for i, in := range ins {
		if got, err := in.limitOf(acmeAllow); err != nil || got != ruleLimit {
			t.Fatalf("instance %d before any override: limit %d, %v; want the rule's %d", i+1, got, err, ruleLimit)
		}
	}

	// Set on instance 1: in force there at once, on 2 and 3 within a poll.
	code, body, _ := ins[0].do(t, "POST", "/v1/overrides", acmeOverride, adminToken)
	acked := time.Now()
	if code != 200 {
		t.Fatalf("POST /v1/overrides: %d %s", code, body)
	}
	if got, err := ins[0].limitOf(acmeAllow); err != nil || got != overLimit {
		t.Fatalf("instance 1, which took the change, after its answer: limit %d, %v; want %d", got, err, overLimit)
	}
	waitInForce(t, "set on instance 1", acked, versionOf(t, body), overLimit, []int{2, 3}, ins[1], ins[2])

	// The audit, read on instance 3, lists it with who made it.
	var audit struct {
		Changes []struct {
			Version int64  `json:"version"`
			Subject string `json:"subject"`
			By      string `json:"by"`
			Old     *struct {
				Limits []struct {
					Limit int64 `json:"limit"`
				} `json:"limits"`
			} `json:"old"`
			New *struct {
				Limits []struct {
					Limit int64 `json:"limit"`
				} `json:"limits"`
			} `json:"new"`
			At time.Time `json:"at"`
		} `json:"changes"`
	}
	readAudit := func(in *instance) {
		t.Helper()
		code, body, _ := in.do(t, "GET", "/v1/overrides/audit", "", adminToken)
		if code != 200 {
			t.Fatalf("GET /v1/overrides/audit: %d %s", code, body)
		}
		audit.Changes = nil
		if err := json.Unmarshal([]byte(body), &audit); err != nil {
			t.Fatalf("audit %s: %v", body, err)
		}
	}
	sum := sha256.Sum256([]byte(adminToken))
	admin := "token:" + hex.EncodeToString(sum[:16])
	readAudit(ins[2])
	if n := len(audit.Changes); n != 1 {
		t.Fatalf("audit after one change: %d changes, want 1", n)
	}
	c := audit.Changes[0]
	if c.Subject != acmeSubject || c.By != admin || c.Old != nil || c.New == nil || len(c.New.Limits) != 1 || c.New.Limits[0].Limit != overLimit ||
		c.At.Before(acked.Add(-time.Minute)) || c.At.After(acked) {
		t.Errorf("audit of the set: %+v; want subject %s by %s, no old, new limit %d, at about %v", c, acmeSubject, admin, overLimit, acked)
	}
	if code, _, _ := ins[2].do(t, "GET", "/v1/overrides/audit", "", clientToken); code != 403 {
		t.Errorf("GET /v1/overrides/audit with a client token: %d, want 403", code)
	}

	// A restart keeps it: instance 3 applies it from its first request.
	if code := ins[2].stop(); code != 0 {
		t.Fatalf("instance 3 exited %d", code)
	}
	ins[2] = startServeProcess(t, args...)
	if got, err := ins[2].limitOf(acmeAllow); err != nil || got != overLimit {
		t.Fatalf("instance 3 after a restart: limit %d, %v; want the override's %d", got, err, overLimit)
	}

	// A removal on instance 2 goes back to the rule's limit everywhere.
	code, body, _ = ins[1].do(t, "POST", "/v1/overrides/remove", acmeKey, adminToken)
	acked = time.Now()
	if code != 200 {
		t.Fatalf("POST /v1/overrides/remove: %d %s", code, body)
	}
	if got, err := ins[1].limitOf(acmeAllow); err != nil || got != ruleLimit {
		t.Fatalf("instance 2, which took the removal, after its answer: limit %d, %v; want %d", got, err, ruleLimit)
	}
	waitInForce(t, "removed on instance 2", acked, versionOf(t, body), ruleLimit, []int{1, 3}, ins[0], ins[2])
	readAudit(ins[0])
	if n := len(audit.Changes); n != 2 {
		t.Fatalf("audit after a set and a removal: %d changes, want 2", n)
	}
	c = audit.Changes[0]
	if c.By != admin || c.New != nil || c.Old == nil || len(c.Old.Limits) != 1 || c.Old.Limits[0].Limit != overLimit || c.Version <= audit.Changes[1].Version {
		t.Errorf("audit of the removal (newest first): %+v; want by %s, old limit %d, no new, version above %d", c, admin, overLimit, audit.Changes[1].Version)
	}
	// Each process stops cleanly (a data race in one exits 66).
	for i, in := range ins {
		if code := in.stop(); code != 0 {
			t.Errorf("instance %d exited %d", i+1, code)
		}
	}
}

// reloadedLine is serve's log line of overrides it read from the ledger
// and put in force (OverrideSync.Refresh logs it after the swap).
var reloadedLine = regexp.MustCompile(`time=(\S+) level=INFO msg="overrides reloaded" version=(\d+) `)

// reloadedAt is when in's log says it put version of the overrides in
// force; false until it does.
func (in *instance) reloadedAt(t *testing.T, version int64) (time.Time, bool) {
	t.Helper()
	for _, m := range reloadedLine.FindAllStringSubmatch(in.stderr.String(), -1) {
		if m[2] != strconv.FormatInt(version, 10) {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			t.Fatalf("%s: %v", m[0], err)
		}
		return at, true
	}
	return time.Time{}, false
}

// waitInForce checks that the change of version, acknowledged to the
// test at acked, is in force on each of ins (named by names) within one
// default -override-poll and propagationMargin: the instance's log says
// it swapped version in by then, and then a request there is decided by
// want. Each instance's two figures are logged: its log's time of the
// swap, and the first answer the test saw decided by want (every 5ms,
// concurrently; this one also counts that request's own latency), each
// after acked.
func waitInForce(t *testing.T, what string, acked time.Time, version, want int64, names []int, ins ...*instance) {
	t.Helper()
	seen := make([]time.Duration, len(ins))
	errs := make([]error, len(ins))
	var wg sync.WaitGroup
	for i, in := range ins {
		wg.Go(func() {
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			for {
				got, err := in.limitOf(acmeAllow)
				if err != nil {
					errs[i] = err
					return
				}
				if got == want {
					seen[i] = time.Since(acked)
					return
				}
				if time.Since(acked) > 10*time.Second {
					errs[i] = fmt.Errorf("limit still %d 10s after the change, want %d", got, want)
					return
				}
				<-tick.C
			}
		})
	}
	wg.Wait()
	bound := server.DefaultOverridePoll + propagationMargin
	for i, in := range ins {
		if errs[i] != nil {
			t.Fatalf("%s: instance %d: %v", what, names[i], errs[i])
		}
		var at time.Time
		waitUntil(t, 10*time.Second, func() bool {
			var ok bool
			at, ok = in.reloadedAt(t, version)
			return ok
		})
		swapped := at.Sub(acked)
		t.Logf("%s: in force on instance %d %v after the answer by its log, first seen decided by it %v after (poll %v)",
			what, names[i], swapped.Round(time.Millisecond), seen[i].Round(time.Millisecond), server.DefaultOverridePoll)
		if swapped > bound {
			t.Errorf("%s: instance %d put version %d in force %v after it was acknowledged, want at most %v (one -override-poll and %v)",
				what, names[i], version, swapped, bound, propagationMargin)
		}
	}
}

// versionOf is the version of a change's answer.
func versionOf(t *testing.T, body string) int64 {
	t.Helper()
	var c struct {
		Version int64 `json:"version"`
	}
	if err := json.Unmarshal([]byte(body), &c); err != nil || c.Version <= 0 {
		t.Fatalf("the answer of a change %s: version %d, %v", body, c.Version, err)
	}
	return c.Version
}

// limitOf is the limit that decides body (a request of /v1/allow, with
// the client token) on in.
func (in *instance) limitOf(body string) (int64, error) {
	req, err := newJSONRequest(in.httpURL+"/v1/allow", body, clientToken)
	if err != nil {
		return 0, err
	}
	resp, err := overrideClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var out struct {
		Limit int64 `json:"limit"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return 0, fmt.Errorf("/v1/allow: %d: %v", resp.StatusCode, err)
	}
	if resp.StatusCode != 200 && resp.StatusCode != 429 {
		return 0, fmt.Errorf("/v1/allow: %d", resp.StatusCode)
	}
	return out.Limit, nil
}

// overrideClient bounds each probe of propagation.
var overrideClient = &http.Client{Timeout: 10 * time.Second}

// newJSONRequest is a POST of body to url with a bearer token.
func newJSONRequest(url, body, token string) (*http.Request, error) {
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	return req, nil
}
