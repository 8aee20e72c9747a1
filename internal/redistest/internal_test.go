package redistest

import (
	"bytes"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// recorder stands in for a test, so that a Skip or Fatal can be observed.
type recorder struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (r *recorder) Skipf(format string, args ...any) {
	r.skipped, r.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failed, r.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (r *recorder) Skip(args ...any) { r.Skipf("%s", fmt.Sprint(args...)) }

func (r *recorder) Fatal(args ...any) { r.Fatalf("%s", fmt.Sprint(args...)) }

// run calls f on a recorder in its own goroutine, as testing does.
func run(t *testing.T, f func(testing.TB)) *recorder {
	t.Helper()
	r := &recorder{TB: t}
	var wg sync.WaitGroup
	wg.Go(func() { f(r) })
	wg.Wait()
	return r
}

func TestRequireWithoutRedis(t *testing.T) {
	// Not parallel: it empties PATH for the whole process.
	var warned bytes.Buffer
	saved := warnings
	warnings, skipWarning = &warned, sync.Once{}
	t.Cleanup(func() { warnings = saved })

	t.Setenv("PATH", t.TempDir())
	t.Setenv(RequireEnv, "")
	r := run(t, func(tb testing.TB) { Require(tb) })
	if !r.skipped || r.failed {
		t.Errorf("without %s: skipped %v, failed %v; want a skip", RequireEnv, r.skipped, r.failed)
	}
	for _, want := range []string{"redis-server", "apt-get install"} {
		if !strings.Contains(r.msg, want) {
			t.Errorf("skip message %q does not mention %q", r.msg, want)
		}
		if !strings.Contains(warned.String(), want) {
			t.Errorf("warning %q does not mention %q", warned.String(), want)
		}
	}

	t.Setenv(RequireEnv, "1")
	r = run(t, func(tb testing.TB) { Standalone(tb) })
	if !r.failed || r.skipped {
		t.Errorf("with %s=1: skipped %v, failed %v; want a failure", RequireEnv, r.skipped, r.failed)
	}
	if !strings.Contains(r.msg, RequireEnv) {
		t.Errorf("failure message %q does not mention %s", r.msg, RequireEnv)
	}
}

func TestStartFailureShowsLog(t *testing.T) {
	t.Parallel()
	Require(t)
	r := run(t, func(tb testing.TB) { Standalone(tb, WithArgs("--no-such-directive", "1")) })
	if !r.failed {
		t.Fatal("Standalone with a bad directive did not fail")
	}
	// The failure quotes redis-server's own complaint.
	for _, want := range []string{"no-such-directive", "Bad directive"} {
		if !strings.Contains(r.msg, want) {
			t.Errorf("failure %q does not mention %q", r.msg, want)
		}
	}
}

func TestClusterNeedsThreeMasters(t *testing.T) {
	t.Parallel()
	Require(t)
	r := run(t, func(tb testing.TB) { StartCluster(tb, WithMasters(2)) })
	if !r.failed || !strings.Contains(r.msg, "at least 3 masters") {
		t.Errorf("StartCluster with 2 masters: failed %v with %q, want a failure about 3 masters", r.failed, r.msg)
	}
}

func TestParseClusterNodes(t *testing.T) {
	out := `07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.1:30004@31004,host.example replica e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238317239 4 connected
67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 127.0.0.1:30002@31002 master - 0 1426238316232 2 connected 5461-10922 [5461->-e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca]
e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:30001@31001 myself,master - 0 0 1 connected 0 2-5460
`
	nodes, err := parseClusterNodes(out)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(nodes), 3; got != want {
		t.Fatalf("%d nodes, want %d", got, want)
	}
	replica, second, first := nodes[0], nodes[1], nodes[2]
	if replica.master() || replica.masterID != first.id || replica.addr != "127.0.0.1:30004" {
		t.Errorf("replica = %+v, want a replica of %s at 127.0.0.1:30004", replica, first.id)
	}
	if !first.master() || first.addr != "127.0.0.1:30001" || first.firstSlot() != 0 {
		t.Errorf("first master = %+v, want 127.0.0.1:30001 from slot 0", first)
	}
	for _, tc := range []struct {
		node clusterNode
		slot int
		want bool
	}{
		{first, 0, true},
		{first, 1, false},
		{first, 5460, true},
		{second, 5461, true},
		{second, 10922, true},
		{second, 10923, false},
	} {
		if got := tc.node.serves(tc.slot); got != tc.want {
			t.Errorf("%s serves slot %d = %v, want %v", tc.node.addr, tc.slot, got, tc.want)
		}
	}
	if _, err := parseClusterNodes("abc 127.0.0.1:1@2 master\n"); err == nil {
		t.Error("a short line parsed without error")
	}
}
