package main

import (
	"encoding/json"
	"net"
	"strings"
	"testing"
)

const benchYAML = `
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: user
    value: hot
    rate_limit: {unit: hour, requests_per_unit: 37, window: first_hit}
  - key: user
    value: hot2
    rate_limit: {unit: hour, requests_per_unit: 37, window: first_hit}
`

type benchJSON struct {
	Calls     int64 `json:"calls"`
	Decisions int64 `json:"decisions"`
	OK        int64 `json:"ok"`
	OverLimit int64 `json:"over_limit"`
	NoRule    int64 `json:"no_rule"`
	Unknown   int64 `json:"unknown_domain"`
	StoreErr  int64 `json:"store_error"`
	Errors    int64 `json:"errors"`
	Latency   struct {
		P50, P99, Max float64
	} `json:"latency_ms"`
	Histogram []struct {
		Count int64 `json:"count"`
	} `json:"histogram"`
}

// runBench runs `floodgate bench args... -json -quiet` and decodes its
// report.
func runBench(t *testing.T, args ...string) benchJSON {
	t.Helper()
	out, _ := runBenchStderr(t, args...)
	return out
}

// runBenchStderr is runBench, also returning what bench wrote on stderr.
func runBenchStderr(t *testing.T, args ...string) (benchJSON, string) {
	t.Helper()
	var stdout, stderr strings.Builder
	if code := run(t.Context(), append(append([]string{"bench"}, args...), "-json", "-quiet"), &stdout, &stderr); code != 0 {
		t.Fatalf("bench %v: exit %d\nstdout:\n%s\nstderr:\n%s", args, code, &stdout, &stderr)
	}
	var out benchJSON
	if err := json.Unmarshal([]byte(stdout.String()), &out); err != nil {
		t.Fatalf("bench %v: %v\n%s", args, err, &stdout)
	}
	var inHist int64
	for _, b := range out.Histogram {
		inHist += b.Count
	}
	if inHist != out.Calls || out.OK+out.OverLimit+out.Errors != out.Calls || out.OK+out.OverLimit != out.Decisions {
		t.Errorf("bench %v: calls %d, ok+over+errors %d, histogram %d, decisions %d: they must agree",
			args, out.Calls, out.OK+out.OverLimit+out.Errors, inHist, out.Decisions)
	}
	if !(out.Latency.P50 > 0 && out.Latency.P50 <= out.Latency.P99 && out.Latency.P99 <= out.Latency.Max) {
		t.Errorf("bench %v: latency quantiles out of order: %+v", args, out.Latency)
	}
	return out, stderr.String()
}

// TestBench runs `floodgate bench` against `floodgate serve` on the memory
// store over both protocols, bounded by -n: every call is counted once,
// and on one hot key with a limit of 37 an hour exactly 37 are admitted.
func TestBench(t *testing.T) {
	dir, _ := writeConfig(t, benchYAML)
	// A store deadline far above any call's latency: at the default 10ms
	// a slow call on a loaded machine is answered by fail_open, OK.
	in := startServe(t, "-config", dir, "-timeout", "30s")
	for _, proto := range []struct{ flag, addr, hot string }{
		{"-grpc", in.grpcAddr, "user=hot"},
		{"-http", in.httpURL, "user=hot2"},
	} {
		t.Run(proto.flag, func(t *testing.T) {
			got := runBench(t, proto.flag, proto.addr, "-c", "8", "-n", "300", "-keys", "1000")
			if got.Calls != 300 || got.OK != 300 || got.NoRule != 0 {
				t.Errorf("uniform keys under a huge limit: %+v, want 300 calls, all OK, all limited", got)
			}
			// A descriptor no rule matches: OK, and counted as such.
			got = runBench(t, proto.flag, proto.addr, "-c", "2", "-n", "20", "-descriptor", "nobody=x")
			if got.Calls != 20 || got.OK != 20 || got.NoRule != 20 {
				t.Errorf("a descriptor of no rule: %+v, want 20 calls, all OK with no rule", got)
			}
			// Each protocol loads its own hot rule, 37 an hour in a window
			// that starts at the first call (no window boundary falls
			// inside the run), so both start from a full window.
			got = runBench(t, proto.flag, proto.addr, "-c", "16", "-n", "200", "-keys", "1", "-descriptor", proto.hot)
			if got.Calls != 200 || got.OK != 37 || got.OverLimit != 163 || got.Errors != 0 {
				t.Errorf("hot key, limit 37/hour: %+v, want 200 calls: 37 OK, 163 OVER_LIMIT, 0 errors", got)
			}
		})
	}
}

// TestBenchOpenLoop checks -rate: 40 calls at 400/s take about 0.1 s, and
// all are counted.
func TestBenchOpenLoop(t *testing.T) {
	dir, _ := writeConfig(t, benchYAML)
	in := startServe(t, "-config", dir, "-timeout", "30s")
	got := runBench(t, "-grpc", in.grpcAddr, "-c", "4", "-n", "40", "-rate", "400")
	if got.Calls != 40 || got.OK != 40 {
		t.Errorf("%+v, want 40 calls, all OK", got)
	}
}

func TestBenchBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-grpc", "127.0.0.1:1", "-c", "0"}, "-c: 0 is not between 1 and"},
		{[]string{"-grpc", "127.0.0.1:1", "-c", "many"}, `invalid value "many" for flag -c`},
		{[]string{"-grpc", "127.0.0.1:1", "-n", "-5"}, "-n: -5 is negative"},
		{[]string{"-grpc", "127.0.0.1:1", "-keys", "0"}, "-keys: 0 is not between 1 and"},
		{[]string{"-grpc", "127.0.0.1:1", "-hot", "1.5"}, "-hot: 1.5 is not between 0 and 1"},
		{[]string{"-grpc", "127.0.0.1:1", "-rate", "-1"}, "-rate: -1 is negative"},
		{[]string{}, "no target: give -grpc host:port"},
		{[]string{"-grpc", "127.0.0.1:1", "-http", "http://127.0.0.1:1"}, "choose one protocol"},
		{[]string{"-http", "ftp://127.0.0.1:1"}, "scheme is not http or https"},
		{[]string{"-grpc", "127.0.0.1:1", "-descriptor", "user"}, `entry "user" is not key=value`},
		{[]string{"-grpc", "127.0.0.1:1", "-domain", ""}, "domain is empty"},
		{[]string{"-grpc", "127.0.0.1:1", "-conns", "0"}, "connections: 0 is below 1"},
		{[]string{"-grpc", "127.0.0.1:1", "extra"}, `unexpected argument "extra"`},
		{[]string{"-protocol", "quic"}, "flag provided but not defined: -protocol"},
	} {
		var stdout, stderr strings.Builder
		if code := run(t.Context(), append([]string{"bench"}, tc.args...), &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("bench %v: exit %d, stderr %q; want exit 2 and %q", tc.args, code, stderr.String(), tc.want)
		}
	}
}

// TestBenchUnreachable counts every call to a closed port as an error and
// exits 1.
func TestBenchUnreachable(t *testing.T) {
	var stdout, stderr strings.Builder
	code := run(t.Context(), []string{"bench", "-http", "http://127.0.0.1:1", "-n", "5", "-c", "2", "-json", "-quiet"}, &stdout, &stderr)
	var out benchJSON
	if err := json.Unmarshal([]byte(stdout.String()), &out); err != nil {
		t.Fatalf("%v\n%s", err, &stdout)
	}
	if code != 1 || out.Errors != 5 || out.Calls != 5 || out.Decisions != 0 {
		t.Errorf("exit %d, %+v; want exit 1 and 5 errors of 5 calls", code, out)
	}
}

// TestBenchStoreDown: with the service's Redis unreachable, bench counts
// the failure policy's answers as store errors and warns, over both
// protocols and both failure modes, instead of "no rule" (gRPC) or plain
// OK (HTTP); a domain the service does not have is told apart from a
// descriptor of no rule.
func TestBenchStoreDown(t *testing.T) {
	dir, _ := writeConfig(t, benchDownYAML)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := lis.Addr().String()
	lis.Close() // a port nothing listens on: connection refused
	in := startServe(t, "-config", dir, "-redis", "redis://"+closed, "-failure-mode", "fail_open")
	for _, proto := range []struct{ flag, addr string }{{"-grpc", in.grpcAddr}, {"-http", in.httpURL}} {
		t.Run(proto.flag, func(t *testing.T) {
			for _, tc := range []struct {
				descriptor         string
				ok, over, storeErr int64
			}{
				{"user={i}", 20, 0, 20},  // fail_open
				{"pay={i}", 0, 20, 20},   // the rule's fail_closed
				{"nobody={i}", 20, 0, 0}, // no rule: the store is not asked
			} {
				got, stderr := runBenchStderr(t, proto.flag, proto.addr, "-domain", "bench", "-c", "2", "-n", "20", "-descriptor", tc.descriptor)
				if got.OK != tc.ok || got.OverLimit != tc.over || got.StoreErr != tc.storeErr || got.Errors != 0 || got.Unknown != 0 {
					t.Errorf("%s: %+v; want OK %d, OVER_LIMIT %d, store errors %d, no errors", tc.descriptor, got, tc.ok, tc.over, tc.storeErr)
				}
				if warned := strings.Contains(stderr, "warning: store unreachable: the failure policy answered 100.0%"); warned != (tc.storeErr > 0) {
					t.Errorf("%s: stderr %q; want the store warning: %v", tc.descriptor, stderr, tc.storeErr > 0)
				}
				if tc.storeErr > 0 && got.NoRule != 0 {
					t.Errorf("%s: %d counted as no rule", tc.descriptor, got.NoRule)
				}
			}
			got, stderr := runBenchStderr(t, proto.flag, proto.addr, "-domain", "bnech", "-c", "2", "-n", "20")
			if got.OK != 20 || got.Unknown != 20 || got.NoRule != 20 || got.StoreErr != 0 || !strings.Contains(stderr, "warning: unknown domain") {
				t.Errorf("unknown domain: %+v, stderr %q; want 20 OK, all of an unknown domain, and a warning", got, stderr)
			}
		})
	}
	if !strings.Contains(in.stderr.String(), "domain=bnech") {
		t.Errorf("serve's log names no unknown domain:\n%s", in.stderr)
	}
}

const benchDownYAML = `
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000}
  - key: pay
    rate_limit: {unit: second, requests_per_unit: 1000, failure_mode: fail_closed}
`
