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
