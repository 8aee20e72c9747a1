package redisstore

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// withReplica starts a standalone master and one linked replica of it.
func withReplica(t *testing.T) (master, replica *redistest.Server) {
	t.Helper()
	master = redistest.Standalone(t)
	return master, redistest.Replica(t, master)
}

// TestWait checks Options.WaitReplicas on a master with one replica:
// every decision returned is already on the replica; with the replica
// stopped (SIGSTOP), every call fails with ErrNotReplicated at about
// WaitTimeout, coalesced calls included, while a store without WAIT on the
// same master goes on deciding; after the replica resumes, WAIT succeeds
// again; and a WAIT for more replicas than there are fails, naming both
// numbers. It runs on rueidis (EVALSHA and functions); package
// goredisstore runs it on go-redis.
func TestWait(t *testing.T) {
	master, replica := withReplica(t)
	const waitTimeout = 100 * time.Millisecond
	l := limitOf(floodgate.FixedWindow, 1000, time.Hour)
	prefix := testPrefix(t)
	// Where the replica is up, the stores wait up to patient for it: a
	// loaded machine can hold a replica's acknowledgement back past
	// waitTimeout, which is for the phase where it cannot come. Both kinds
	// of store share the keys.
	const patient = 2 * time.Second
	stores, brief := map[string]*Store{}, map[string]*Store{}
	for name, mk := range map[string]func(*Options) (*Store, error){
		"rueidis":   func(o *Options) (*Store, error) { return New(newRueidis(t, master.Addr), o) },
		"functions": func(o *Options) (*Store, error) { o.Functions = true; return New(newRueidis(t, master.Addr), o) },
	} {
		for _, st := range []struct {
			m       map[string]*Store
			timeout time.Duration
		}{{stores, patient}, {brief, waitTimeout}} {
			s, err := mk(&Options{Prefix: prefix + name, WaitReplicas: 1, WaitTimeout: st.timeout})
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			st.m[name] = s
		}
	}
	plain, err := New(newRueidis(t, master.Addr), &Options{Prefix: prefix + "plain"})
	if err != nil {
		t.Fatal(err)
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
	// about WaitTimeout; a store without WAIT is unaffected.
	if err := replica.Pause(); err != nil {
		t.Fatal(err)
	}
	for name, s := range brief {
		start := time.Now()
		_, err := s.Apply(t.Context(), serverTime("k"))
		took := time.Since(start)
		if !errors.Is(err, ErrNotReplicated) || !strings.Contains(err.Error(), "0 of 1 acknowledged") {
			t.Errorf("%s: with the replica stopped: %v, want ErrNotReplicated, 0 of 1", name, err)
		}
		if took < waitTimeout-time.Millisecond || took > 5*time.Second {
			t.Errorf("%s: the failed call took %v, want about the %v WaitTimeout", name, took, waitTimeout)
		}
	}
	// Concurrent calls share runs (Options.Coalesce): each fails alike.
	s := brief["rueidis"]
	var wg sync.WaitGroup
	errs := make([]error, 16)
	for i := range errs {
		wg.Go(func() { _, errs[i] = s.Apply(t.Context(), serverTime("k"+strconv.Itoa(i%4))) })
	}
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, ErrNotReplicated) {
			t.Errorf("concurrent call %d with the replica stopped: %v, want ErrNotReplicated", i, err)
		}
	}
	// A deadline shorter than WaitTimeout ends the call at the deadline.
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	start := time.Now()
	_, err = stores["rueidis"].Apply(ctx, serverTime("k"))
	cancel()
	if took := time.Since(start); err == nil || took > patient/2 {
		t.Errorf("with a 20 ms deadline: %v after %v, want an error long before the %v WaitTimeout", err, took, patient)
	}
	if d, err := plain.Apply(t.Context(), serverTime("k")); err != nil || !d.Allowed {
		t.Errorf("without WAIT, with the replica stopped: %+v %v", d, err)
	}
	if err := replica.Resume(); err != nil {
		t.Fatal(err)
	}

	// Resumed: the replica catches up and WAIT succeeds again.
	for name, s := range stores {
		if _, err := s.Apply(t.Context(), serverTime("k")); err != nil {
			t.Fatalf("%s: after the replica resumed: %v", name, err)
		}
	}

	// The scripts and functions flushed: the call that finds its script
	// missing loads it and sends its WAIT again, and is decided.
	master.MustCLI(t, "SCRIPT", "FLUSH")
	master.MustCLI(t, "FUNCTION", "FLUSH")
	for name, s := range stores {
		if _, err := s.Apply(t.Context(), serverTime("k")); err != nil {
			t.Errorf("%s: after SCRIPT FLUSH and FUNCTION FLUSH: %v", name, err)
		}
	}

	// More replicas than there are.
	two, err := New(newRueidis(t, master.Addr), &Options{Prefix: prefix + "two", WaitReplicas: 2, WaitTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := two.Apply(t.Context(), serverTime("k")); !errors.Is(err, ErrNotReplicated) || !strings.Contains(err.Error(), "1 of 2 acknowledged") {
		t.Errorf("WaitReplicas 2 with one replica: %v, want ErrNotReplicated, 1 of 2", err)
	}
}

// TestWaitOptions checks the options' errors: negative values. Package
// goredisstore checks the go-redis clients that cannot send WAIT on a
// script's connection.
func TestWaitOptions(t *testing.T) {
	addr := standaloneAddr(t)
	c := newRueidis(t, addr)
	if _, err := New(c, &Options{WaitReplicas: -1}); err == nil || !strings.Contains(err.Error(), "WaitReplicas") {
		t.Errorf("WaitReplicas -1: %v", err)
	}
	if _, err := New(c, &Options{WaitReplicas: 1, WaitTimeout: -time.Second}); err == nil || !strings.Contains(err.Error(), "WaitTimeout") {
		t.Errorf("WaitTimeout -1s: %v", err)
	}
}

// TestWaitCluster checks that on a Cluster the WAIT goes to the master of
// the script's key: with the replica of one master stopped, a key of that
// master fails with ErrNotReplicated, and a key of another master is
// decided. A WAIT sent to any other node would succeed for both.
func TestWaitCluster(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.WithReplicas(1))
	addrs := cl.Addrs()
	prefix := testPrefix(t)
	// The stores wait up to 2 s where the replica is up (a loaded
	// machine can hold an acknowledgement back), 50 ms where it is
	// stopped.
	rc := newRueidisCluster(t, addrs)
	stores := map[time.Duration]map[string]*Store{}
	for _, timeout := range []time.Duration{2 * time.Second, 50 * time.Millisecond} {
		opts := &Options{Prefix: prefix, WaitReplicas: 1, WaitTimeout: timeout}
		rs, err := New(rc, opts)
		if err != nil {
			t.Fatal(err)
		}
		stores[timeout] = map[string]*Store{"rueidis": rs}
	}
	rs := stores[2*time.Second]["rueidis"]
	l := limitOf(floodgate.GCRA, 1000, time.Second)
	// A key on Masters[0], and one on another master.
	var onVictim, elsewhere string
	for i := 0; i < 1000 && (onVictim == "" || elsewhere == ""); i++ {
		k := "k" + strconv.Itoa(i)
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		m, err := cl.MasterFor(ctx, rs.Key(k, l))
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
	for name, s := range stores[2*time.Second] {
		for _, k := range []string{onVictim, elsewhere} {
			if _, err := s.Apply(t.Context(), req(k)); err != nil {
				t.Fatalf("%s: %s with every replica up: %v", name, k, err)
			}
		}
	}
	if err := cl.Replicas[0].Pause(); err != nil {
		t.Fatal(err)
	}
	for name, s := range stores[50*time.Millisecond] {
		if _, err := s.Apply(t.Context(), req(onVictim)); !errors.Is(err, ErrNotReplicated) {
			t.Errorf("%s: %s, whose master's replica is stopped: %v, want ErrNotReplicated", name, onVictim, err)
		}
		if _, err := stores[2*time.Second][name].Apply(t.Context(), req(elsewhere)); err != nil {
			t.Errorf("%s: %s, on another master: %v", name, elsewhere, err)
		}
	}
	if err := cl.Replicas[0].Resume(); err != nil {
		t.Fatal(err)
	}

	// A failover: the replica takes over its master's slots (CLUSTER
	// FAILOVER, coordinated), and the old master becomes its replica. A
	// call sent to the old master meets MOVED and fails (its script did
	// not run); the clients then learn the new map and decide again, each
	// within a few calls, where a client that only reloaded its map every
	// minute (go-redis's default) would fail throughout.
	// Failover returns once the replica has taken over: a call made
	// before then would succeed on the old master without testing anything.
	fctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if err := cl.Failover(fctx, cl.Replicas[0]); err != nil {
		t.Fatal(err)
	}
	for name, s := range stores[2*time.Second] {
		deadline := time.Now().Add(20 * time.Second)
		var err error
		for {
			if _, err = s.Apply(t.Context(), req(onVictim)); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %s still fails 20 s after the failover: %v", name, onVictim, err)
			}
			<-time.After(50 * time.Millisecond) // polling the failover, bounded above
		}
	}
}
