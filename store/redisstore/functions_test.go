package redisstore

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// The tests of Options.Functions: the conformance suite and the
// differential test through FCALL, on every topology, and the library's
// loading: first use, FUNCTION FLUSH under load, a restart without
// persistence, a server that refuses FUNCTION LOAD.

// commandCalls is the calls= of cmd in INFO commandstats, 0 if absent.
func commandCalls(t testing.TB, c rueidis.Client, cmd string) int64 {
	t.Helper()
	return commandStats(t, c)[cmd].Calls
}

// commandCallsErr is commandCalls for a goroutine other than the test's,
// which may not fail it.
func commandCallsErr(c rueidis.Client, cmd string) (int64, error) {
	info, err := c.Do(context.Background(), c.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		return 0, err
	}
	return redistest.ParseCommandStats(info)[cmd].Calls, nil
}

// checkFunctionsOnly fails unless the server ran FCALL and never EVALSHA
// or EVAL, and holds the library.
func checkFunctionsOnly(t *testing.T, c rueidis.Client) {
	t.Helper()
	if n := commandCalls(t, c, "fcall"); n == 0 {
		t.Error("no FCALL ran")
	}
	if n := commandCalls(t, c, "evalsha") + commandCalls(t, c, "eval"); n != 0 {
		t.Errorf("%d EVALSHA or EVAL ran with Options.Functions", n)
	}
	checkLibrary(t, c)
}

// checkLibrary fails unless the server holds the library.
func checkLibrary(t *testing.T, c rueidis.Client) {
	t.Helper()
	list, err := c.Do(t.Context(), c.B().FunctionList().Libraryname(scripts.lib.name).Build()).ToArray()
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 {
		t.Errorf("FUNCTION LIST LIBRARYNAME %s: %d libraries, want 1", scripts.lib.name, len(list))
	}
}

func TestFunctionsConformanceStandalone(t *testing.T) {
	checkFunctionsOnly(t, conformanceStandalone(t, &Options{Functions: true}))
}

func TestFunctionsConformanceCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	c := conformanceCluster(t, redistest.StartCluster(t, redistest.WithReplicas(1)), &Options{Functions: true})
	// Every node holds the library (replicas by replication), and no node
	// ran a script by EVALSHA.
	for addr, n := range c.Nodes() {
		t.Run(addr, func(t *testing.T) {
			checkLibrary(t, n)
			if k := commandCalls(t, n, "evalsha") + commandCalls(t, n, "eval"); k != 0 {
				t.Errorf("%d EVALSHA or EVAL ran with Options.Functions", k)
			}
		})
	}
}

func TestFunctionsConformanceSentinel(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Sentinel set")
	}
	checkFunctionsOnly(t, conformanceSentinel(t, &Options{Functions: true}))
}

// TestFunctionFlush empties Redis's functions again and again while
// requests run: FCALL fails with "Function not found", the store loads the
// library and calls again, and no caller sees an error or a wrong count.
// Each flush waits until the store has loaded the library again and run a
// few more calls, as a flush in production is rare next to a call.
func TestFunctionFlush(t *testing.T) {
	addr := standaloneAddr(t)
	s, c := testStore(t, addr, &Options{Functions: true})
	stop := make(chan struct{})
	done := make(chan struct{})
	var flushes atomic.Int64
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := c.Do(context.Background(), c.B().FunctionFlush().Build()).Error(); err != nil {
				t.Errorf("FUNCTION FLUSH: %v", err)
				return
			}
			flushes.Add(1)
			// Poll until the store has loaded the library again and run 8
			// more FCALLs, or the test stops.
			calls, err := commandCallsErr(c, "fcall")
			if err != nil {
				t.Error(err)
				return
			}
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
				select {
				case <-stop:
					return
				default:
				}
				list, err := c.Do(context.Background(), c.B().FunctionList().Build()).ToArray()
				n, nerr := commandCallsErr(c, "fcall")
				if err == nil && nerr == nil && len(list) > 0 && n >= calls+8 {
					break
				}
				time.Sleep(100 * time.Microsecond)
			}
		}
	}()
	decideUnderFlush(t, s)
	close(stop)
	<-done
	if n := flushes.Load(); n < 2 {
		t.Errorf("FUNCTION FLUSH ran %d times, want several", n)
	}
	t.Logf("%d flushes, %d FUNCTION LOADs", flushes.Load(), commandCalls(t, c, "function|load"))
}

// TestFunctionsRestart restarts the server, which keeps no data and so no
// functions: the next call loads the library again, and the caller sees no
// error.
func TestFunctionsRestart(t *testing.T) {
	srv := redistest.Standalone(t)
	s, err := New(newRueidis(t, srv.Addr), &Options{Functions: true, Prefix: testPrefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	l := limitOf(floodgate.GCRA, 3, time.Minute)
	for i := range 2 {
		d, err := s.Apply(t.Context(), request("k", l, t0))
		if err != nil || !d.Allowed || d.Remaining != 3-int64(i)-1 {
			t.Fatalf("call %d: %+v %v", i, d, err)
		}
	}
	if err := srv.Restart(t); err != nil {
		t.Fatal(err)
	}
	// The client reconnects: poll until a PING answers.
	c := newRueidis(t, srv.Addr)
	if n := commandCalls(t, c, "fcall"); n != 0 {
		t.Fatalf("a new server has run %d FCALLs", n)
	}
	var d floodgate.Decision
	for deadline := time.Now().Add(10 * time.Second); ; {
		d, err = s.Apply(t.Context(), request("k", l, t0))
		if err == nil || time.Now().After(deadline) || !isConnError(err) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("after the restart: %v", err)
	}
	// The state was lost with the restart: a fresh bucket.
	if !d.Allowed || d.Remaining != 2 {
		t.Errorf("after the restart: %+v, want a fresh bucket", d)
	}
	checkFunctionsOnly(t, c)
}

// isConnError reports whether err is a connection error that a restarted
// server gives a client until it reconnects, not a reply from Redis.
func isConnError(err error) bool {
	_, isReply := rueidis.IsRedisErr(err)
	return !isReply
}

// TestFunctionsLocal runs local budgets and the deny cache over
// functions: three instances, ten goroutines each, one day-long window of
// 100 with a LocalBudget; exactly 100 are admitted, and the budgets claimed
// and returned through FCALL.
func TestFunctionsLocal(t *testing.T) {
	addr := standaloneAddr(t)
	c := newRueidis(t, addr)
	for _, l := range []floodgate.Limit{
		{Limit: 100, Period: 24 * time.Hour, Window: floodgate.FirstHit, LocalBudget: 8},
		{Algorithm: floodgate.SlidingWindow, Limit: 100, Period: 100 * 24 * time.Hour, LocalBudget: 8},
	} {
		t.Run(string(l.EffectiveAlgorithm()), func(t *testing.T) {
			stores := newInstances(t, addr, 3, Options{Prefix: testPrefix(t), Functions: true, DenyCache: 100})
			if got := seedScenario(t, stores, l); got != l.Limit {
				t.Errorf("%d admitted, want exactly %d", got, l.Limit)
			}
			// A denied key is remembered: the next call costs no FCALL.
			before := commandCalls(t, c, "fcall")
			if d, err := stores[0].Apply(t.Context(), floodgate.Request{Key: "seed", Limit: l, Cost: 1}); err != nil || d.Allowed {
				t.Errorf("after the limit: %+v %v", d, err)
			}
			if n := commandCalls(t, c, "fcall") - before; n != 0 {
				t.Errorf("a remembered denial ran %d FCALLs", n)
			}
		})
	}
	checkFunctionsOnly(t, c)
}

// TestFunctionsErrors checks what a function's error replies become: a
// foreign key is an unexpected reply, as through EVALSHA; and a user whose
// ACL refuses FUNCTION LOAD gets an error naming the load and the refusal,
// and no decision.
func TestFunctionsErrors(t *testing.T) {
	srv := redistest.Standalone(t)
	admin := newRueidis(t, srv.Addr)
	s, _ := testStore(t, srv.Addr, &Options{Functions: true})
	key := s.Key("foreign", limitOf(floodgate.FixedWindow, 5, time.Minute))
	if err := admin.Do(t.Context(), admin.B().Set().Key(key).Value("not a state").ExSeconds(60).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	_, err := s.Apply(t.Context(), request("foreign", limitOf(floodgate.FixedWindow, 5, time.Minute), t0))
	if !errors.Is(err, floodgate.ErrUnexpectedReply) {
		t.Errorf("a foreign key: %v, want an error wrapping ErrUnexpectedReply", err)
	}
	// A user that may FCALL but not FUNCTION LOAD, on a server without the
	// library.
	if err := admin.Do(t.Context(), admin.B().FunctionFlush().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(t.Context(), admin.B().AclSetuser().Username("limited").Rule("on", ">pw", "~*", "+@all", "-function").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	lc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, ForceSingleClient: true, DisableCache: true, Username: "limited", Password: "pw"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lc.Close)
	ls, err := New(lc, &Options{Functions: true, Prefix: testPrefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = ls.Apply(t.Context(), request("k", limitOf(floodgate.GCRA, 5, time.Minute), t0))
	if err == nil || !strings.Contains(err.Error(), "FUNCTION LOAD "+scripts.lib.name) || !strings.Contains(err.Error(), "NOPERM") {
		t.Errorf("FUNCTION LOAD refused: %v, want an error naming FUNCTION LOAD and NOPERM", err)
	}
}

// TestFunctionsUnknownCommand runs the store against a server without
// FCALL (renamed away, as a Redis before 7.0 has none): every call fails
// with an error that says Options.Functions needs Redis 7.0.
func TestFunctionsUnknownCommand(t *testing.T) {
	srv := redistest.Standalone(t, redistest.WithArgs("--rename-command", "FCALL", ""))
	s, _ := testStore(t, srv.Addr, &Options{Functions: true})
	_, err := s.Apply(t.Context(), request("k", limitOf(floodgate.GCRA, 5, time.Minute), t0))
	if err == nil || !strings.Contains(err.Error(), "Options.Functions needs Redis 7.0 or later") || !strings.Contains(err.Error(), "unknown command") {
		t.Errorf("no FCALL: %v, want an error saying Options.Functions needs Redis 7.0", err)
	}
}
