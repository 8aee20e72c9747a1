package goredisstore

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/store/redisstore"
)

// TestWait checks Options.WaitReplicas through go-redis on a master with
// one replica, by EVALSHA and by FCALL: every decision returned is already
// on the replica; with the replica stopped (SIGSTOP), every call fails
// with ErrNotReplicated at about WaitTimeout; after the replica resumes,
// WAIT succeeds again, also for a call that finds its script missing.
func TestWait(t *testing.T) {
	master := redistest.Standalone(t)
	replica := redistest.Replica(t, master)
	const waitTimeout = 100 * time.Millisecond
	// Where the replica is up, the stores wait up to patient for it: a
	// loaded machine can hold a replica's acknowledgement back past
	// waitTimeout, which is for the phase where it cannot come.
	const patient = 2 * time.Second
	l := limitOf(floodgate.FixedWindow, 1000, time.Hour)
	c := redis.NewClient(&redis.Options{Addr: master.Addr, MaxRetries: -1, DialTimeout: testDialTimeout})
	t.Cleanup(func() { c.Close() })
	prefix := testPrefix(t)
	stores, brief := map[string]*redisstore.Store{}, map[string]*redisstore.Store{}
	for name, functions := range map[string]bool{"evalsha": false, "functions": true} {
		o := redisstore.Options{Prefix: prefix + name, Functions: functions, WaitReplicas: 1, WaitTimeout: patient}
		stores[name] = newStore(t, c, &o)
		o.WaitTimeout = waitTimeout
		brief[name] = newStore(t, c, &o)
	}
	serverTime := func(key string) floodgate.Request { return floodgate.Request{Key: key, Limit: l, Cost: 1} }

	// Healthy: what a call returns is on the replica when it returns.
	for name, s := range stores {
		for i := range 20 {
			d, err := s.Apply(t.Context(), serverTime("k"))
			if err != nil || !d.Allowed {
				t.Fatalf("%s: call %d: %+v %v", name, i, d, err)
			}
			k := s.Key("k", l)
			if m, r := master.MustCLI(t, "GET", k), replica.MustCLI(t, "GET", k); m != r {
				t.Fatalf("%s: call %d returned before the replica had its write: master %q, replica %q", name, i, m, r)
			}
		}
	}

	// The replica stopped: every call fails with ErrNotReplicated after
	// about WaitTimeout.
	if err := replica.Pause(); err != nil {
		t.Fatal(err)
	}
	for name, s := range brief {
		start := time.Now()
		_, err := s.Apply(t.Context(), serverTime("k"))
		took := time.Since(start)
		if !errors.Is(err, redisstore.ErrNotReplicated) || !strings.Contains(err.Error(), "0 of 1 acknowledged") {
			t.Errorf("%s: with the replica stopped: %v, want ErrNotReplicated, 0 of 1", name, err)
		}
		if took < waitTimeout-time.Millisecond || took > 5*time.Second {
			t.Errorf("%s: the failed call took %v, want about the %v WaitTimeout", name, took, waitTimeout)
		}
	}
	if err := replica.Resume(); err != nil {
		t.Fatal(err)
	}

	// Resumed: the replica catches up and WAIT succeeds again. Then the
	// scripts and functions flushed: the call that finds its script
	// missing loads it and sends its WAIT again, and is decided.
	for name, s := range stores {
		if _, err := s.Apply(t.Context(), serverTime("k")); err != nil {
			t.Fatalf("%s: after the replica resumed: %v", name, err)
		}
	}
	master.MustCLI(t, "SCRIPT", "FLUSH")
	master.MustCLI(t, "FUNCTION", "FLUSH")
	for name, s := range stores {
		if _, err := s.Apply(t.Context(), serverTime("k")); err != nil {
			t.Errorf("%s: after SCRIPT FLUSH and FUNCTION FLUSH: %v", name, err)
		}
	}
}

// TestWaitCluster checks that on a Cluster the WAIT goes to the master of
// the script's key: with the replica of one master stopped, a key of that
// master fails with ErrNotReplicated, and a key of another master is
// decided. After a failover, the client reloads its slot map when a call
// meets MOVED, and decides again within a few calls.
func TestWaitCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	cl := redistest.StartCluster(t, redistest.WithReplicas(1))
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), MaxRetries: -1, DialTimeout: testDialTimeout})
	t.Cleanup(func() { c.Close() })
	prefix := testPrefix(t)
	// The stores wait up to 2 s where the replica is up (a loaded machine
	// can hold an acknowledgement back), 50 ms where it is stopped.
	patient := newStore(t, c, &redisstore.Options{Prefix: prefix, WaitReplicas: 1, WaitTimeout: 2 * time.Second})
	brief := newStore(t, c, &redisstore.Options{Prefix: prefix, WaitReplicas: 1, WaitTimeout: 50 * time.Millisecond})
	l := limitOf(floodgate.GCRA, 1000, time.Second)
	// A key on Masters[0], and one on another master.
	var onVictim, elsewhere string
	for i := 0; i < 1000 && (onVictim == "" || elsewhere == ""); i++ {
		k := "k" + strconv.Itoa(i)
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		m, err := cl.MasterFor(ctx, patient.Key(k, l))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case m == cl.Masters[0] && onVictim == "":
			onVictim = k
		case m != cl.Masters[0] && elsewhere == "":
			elsewhere = k
		}
	}
	req := func(key string) floodgate.Request { return floodgate.Request{Key: key, Limit: l, Cost: 1} }
	for _, k := range []string{onVictim, elsewhere} {
		if _, err := patient.Apply(t.Context(), req(k)); err != nil {
			t.Fatalf("%s with every replica up: %v", k, err)
		}
	}
	if err := cl.Replicas[0].Pause(); err != nil {
		t.Fatal(err)
	}
	if _, err := brief.Apply(t.Context(), req(onVictim)); !errors.Is(err, redisstore.ErrNotReplicated) {
		t.Errorf("%s, whose master's replica is stopped: %v, want ErrNotReplicated", onVictim, err)
	}
	if _, err := patient.Apply(t.Context(), req(elsewhere)); err != nil {
		t.Errorf("%s, on another master: %v", elsewhere, err)
	}
	if err := cl.Replicas[0].Resume(); err != nil {
		t.Fatal(err)
	}

	// A failover: the replica takes over its master's slots (CLUSTER
	// FAILOVER, coordinated). A call sent to the old master meets MOVED
	// and fails (its script did not run); the client then reloads its slot
	// map, which go-redis otherwise does only every minute.
	// Failover returns once the replica has taken over: a call made
	// before then would succeed on the old master without testing anything.
	fctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if err := cl.Failover(fctx, cl.Replicas[0]); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := patient.Apply(t.Context(), req(onVictim))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still fails 20 s after the failover: %v", onVictim, err)
		}
		<-time.After(50 * time.Millisecond) // polling the failover, bounded above
	}
}
