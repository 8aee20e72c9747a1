package faults

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/store/redisstore"
)

// TestFaultSentinelFailover promotes the replica with SENTINEL FAILOVER
// under load. Redis replicates asynchronously, and the old master keeps
// accepting writes until the clients switch (on the sentinels'
// +switch-master) and until the sentinels demote it (up to 10 s later):
// what it counted after its last replication is lost, and the limit admits
// it again.
func TestFaultSentinelFailover(t *testing.T) {
	sentinelFault(t, "Sentinel failover (SENTINEL FAILOVER) under load: the replica is promoted", false, 1, 0)
}

// TestFaultSentinelFailoverWait is TestFaultSentinelFailover with
// redisstore.Options.WaitReplicas 1: a decision is returned only once the
// replica holds its writes. The old master loses its replica when the
// replica is promoted, so every call it takes after that fails (and is
// answered by its policy) instead of being admitted and then lost: no
// window admits more than the limit.
func TestFaultSentinelFailoverWait(t *testing.T) {
	sentinelFault(t, "Sentinel failover (SENTINEL FAILOVER) under load, with WaitReplicas 1 (WAIT after every script run)", false, 1, 1)
}

// TestFaultSentinelFailoverWaitOneOfTwo has two replicas and waits for one:
// the new master has a replica again as soon as the sentinels move the
// other replica to it, so service comes back in about a second; but until
// they do, that replica still acknowledges the old master's writes, which
// the move then drops, so some admissions can still be lost. The bound is
// one window.
func TestFaultSentinelFailoverWaitOneOfTwo(t *testing.T) {
	sentinelFault(t, "Sentinel failover (SENTINEL FAILOVER) under load, two replicas, WaitReplicas 1", false, 2, 1)
}

// TestFaultSentinelFailoverWaitAll has two replicas and waits for both:
// nothing admitted is lost, and service waits, as with one replica, for
// the old master to be demoted and synced.
func TestFaultSentinelFailoverWaitAll(t *testing.T) {
	sentinelFault(t, "Sentinel failover (SENTINEL FAILOVER) under load, two replicas, WaitReplicas 2", false, 2, 2)
}

// TestFaultSentinelMasterKill SIGKILLs the master under load: the
// sentinels see it down after down-after-milliseconds (1 s here), elect a
// leader and promote the replica. Calls fail until then.
func TestFaultSentinelMasterKill(t *testing.T) {
	sentinelFault(t, "Sentinel master SIGKILLed under load; the replica promoted after down-after-milliseconds 1 s", true, 1, 0)
}

// sentinelFault promotes a replica under load, by SIGKILL of the master or
// by SENTINEL FAILOVER, on a deployment with the given number of replicas
// and each store waiting for waitReplicas replicas after every script run.
func sentinelFault(t *testing.T, fault string, kill bool, replicas, waitReplicas int) {
	d := redistest.StartSentinel(t, redistest.WithSentinelReplicas(replicas))
	insts := instancesWith(t, "redis-sentinel://"+strings.Join(d.SentinelAddrs(), ",")+"/"+d.MasterName, 4,
		redisstore.Options{WaitReplicas: waitReplicas})
	l := startLoad(t, insts, 6, keysOf("a", "b"), windowLimit)
	waitFor(t, 10*time.Second, "successes before the failover", func() bool {
		return l.count(func(c call) bool { return c.err == nil }) >= 200
	})
	started := time.Now()
	if kill {
		if err := d.Master.Kill(); err != nil {
			t.Fatal(err)
		}
	} else {
		d.Sentinels[0].MustCLI(t, "SENTINEL", "FAILOVER", d.MasterName)
	}
	promoted := waitPromoted(t, d)
	switched := time.Now()
	t.Logf("the sentinels named the new master %v after the fault", switched.Sub(started))
	// Recovery is counted from the switch; under WAIT, from when the new
	// master has waitReplicas replicas in sync again (the other replicas
	// once the sentinels have moved them to it, the old master once they
	// have demoted it and it has synced): until then no WAIT can succeed.
	from := switched
	if waitReplicas > 0 {
		waitFor(t, 30*time.Second, "the new master to have its replicas in sync", func() bool {
			return onlineReplicas(promoted.MustCLI(t, "INFO", "replication")) >= waitReplicas
		})
		from = time.Now()
		t.Logf("the new master had %d replicas in sync %v after the fault", waitReplicas, from.Sub(started))
	}
	waitFor(t, 20*time.Second, "every instance to succeed after the switch", func() bool {
		first, _ := recovery(l.Calls(), len(insts), from)
		return !latest(first).IsZero()
	})
	recovered := time.Now()
	waitFor(t, 10*time.Second, "two periods after recovery", func() bool {
		return l.count(func(c call) bool { return c.err == nil && c.start.After(recovered.Add(2*windowLimit.Period)) }) > 0
	})
	l.Stop()
	followed := followers(t, promoted)
	calls := l.Calls()
	st := measure(l, insts)
	first, errsAfter := recovery(calls, len(insts), from)
	other, late := afterRecovery(t, from, errsAfter)
	overrun, maxWindow, bad := windows(calls, windowLimit, span(started, latest(first).Add(time.Second), windowLimit.Period))
	// The time without service is the longest gap between two successes
	// of one instance. After SENTINEL FAILOVER a success after the switch
	// may still come from the old master, so recovery is not measured
	// from successes; after a kill it is.
	gap := maxGap(calls, len(insts), started.Add(-time.Second))
	recoveryMS := -1.0
	if kill {
		recoveryMS = msf(latest(first).Sub(switched))
	}
	saw := fmt.Sprintf("%d of %d calls failed, each answered by its policy; the sentinels named the new master %s after the fault; "+
		"%d connections of the %d instances ran scripts on it after the load; "+
		"max latency %s against a %s deadline (process stalled up to %s)", st.errors, st.calls, ms(switched.Sub(started)),
		followed, len(insts), ms(st.maxLatency), ms(timeout), ms(st.stall))
	if waitReplicas > 0 {
		unreplicated := 0
		for _, c := range calls {
			if errors.Is(c.err, redisstore.ErrNotReplicated) {
				unreplicated++
			}
		}
		saw += fmt.Sprintf("; %d calls failed with ErrNotReplicated: the old master lost a replica to the promotion, "+
			"and the new master had %d of %d replicas in sync %s after the fault", unreplicated, waitReplicas, replicas, ms(from.Sub(started)))
	}
	record(t, Row{
		Fault: fault,
		Saw:   saw,
		Calls: st.calls, Errors: st.errors, Deadlines: st.deadlines,
		TimeoutMS: msf(timeout), MaxLatencyMS: msf(st.maxLatency), StallMS: msf(st.stall),
		WrongPolicy: st.wrongPolicy, ErrorsAfterRecovery: other, TimeoutsAfterRecovery: late, NoScript: st.noscript,
		RecoveryMS: recoveryMS, OutageMS: msf(gap), Instances: len(insts), Followed: followed,
		Limit: windowLimit.Limit, Overrun: overrun, MaxWindow: maxWindow, BadWindows: bad,
		Uncounted: st.uncounted,
	})
}

// TestFaultClusterFailover SIGKILLs one master of a three-master Cluster
// with a replica each, under load on keys of every shard. Its replica
// takes over after cluster-node-timeout (1 s here). The keys of the other
// shards must keep working throughout; the nodes run with
// cluster-require-full-coverage no, without which every shard refuses
// commands while one shard has no master.
func TestFaultClusterFailover(t *testing.T) {
	c := redistest.StartCluster(t, redistest.WithReplicas(1), redistest.WithNodeOptions(redistest.WithArgs(
		"--cluster-node-timeout", "1000", "--cluster-require-full-coverage", "no")))
	insts := instances(t, "redis-cluster://"+strings.Join(c.Addrs(), ","), 4)
	victim := c.Masters[0]

	// Two keys on each master.
	var keys, failedKeys []string
	perMaster := map[string]int{}
	for i := 0; i < 200 && len(keys) < 2*len(c.Masters); i++ {
		k := "k" + strconv.Itoa(i)
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		m, err := c.MasterFor(ctx, insts[0].store.Key(k, windowLimit))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if perMaster[m.Addr] < 2 {
			perMaster[m.Addr]++
			keys = append(keys, k)
			if m == victim {
				failedKeys = append(failedKeys, k)
			}
		}
	}
	if len(failedKeys) != 2 || len(keys) != 2*len(c.Masters) {
		t.Fatalf("keys %v (on the victim %v): not two per master", keys, failedKeys)
	}
	onVictim := func(c call) bool { return c.key == failedKeys[0] || c.key == failedKeys[1] }

	l := startLoad(t, insts, 6, keysOf(keys...), windowLimit)
	waitFor(t, 10*time.Second, "successes before the kill", func() bool {
		return l.count(func(c call) bool { return c.err == nil && onVictim(c) }) >= 100
	})
	killed := time.Now()
	if err := victim.Kill(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "every instance to succeed on the failed shard again", func() bool {
		var mine []call
		for _, cl := range l.Calls() {
			if onVictim(cl) {
				mine = append(mine, cl)
			}
		}
		first, _ := recovery(mine, len(insts), killed.Add(timeout+slack))
		return !latest(first).IsZero() && l.count(func(c call) bool { return c.err != nil && onVictim(c) }) > 0
	})
	l.Stop()

	calls := l.Calls()
	st := measure(l, insts)
	var mine []call
	var otherErrs, otherDeadlines, otherCalls int
	for _, cl := range calls {
		switch {
		case onVictim(cl):
			mine = append(mine, cl)
		case cl.err != nil && errors.Is(cl.err, context.DeadlineExceeded):
			otherDeadlines++
			otherCalls++
		case cl.err != nil:
			if otherErrs < 5 {
				t.Logf("healthy shard: %v", cl.err)
			}
			otherErrs++
			otherCalls++
		default:
			otherCalls++
		}
	}
	// Recovery is counted from the end of the first failed call on the
	// shard: the failure is only seen once the first call to the dead node
	// fails. Not from its start: a call can wait in the store before it is
	// sent (coalescing), so one that started earlier than a success may
	// still have gone to the node after it died.
	var firstErr time.Time
	for _, cl := range mine {
		if cl.err != nil && cl.end.After(killed) && (firstErr.IsZero() || cl.end.Before(firstErr)) {
			firstErr = cl.end
		}
	}
	first, errsAfter := recovery(mine, len(insts), firstErr)
	other, late := afterRecovery(t, firstErr, errsAfter)
	record(t, Row{
		Fault: "Cluster master SIGKILLed under load; its replica promoted after cluster-node-timeout 1 s",
		Saw: fmt.Sprintf("%d of %d calls failed, all on the failed shard, each answered by its policy; "+
			"%d calls on the other shards: %d errors, %d deadlines on the loaded host; max latency %s against a %s deadline (process stalled up to %s)",
			st.errors, st.calls, otherCalls, otherErrs, otherDeadlines, ms(st.maxLatency), ms(timeout), ms(st.stall)),
		Calls: st.calls, Errors: st.errors, Deadlines: st.deadlines,
		TimeoutMS: msf(timeout), MaxLatencyMS: msf(st.maxLatency), StallMS: msf(st.stall),
		WrongPolicy: st.wrongPolicy, ErrorsAfterRecovery: other, TimeoutsAfterRecovery: late, NoScript: st.noscript,
		RecoveryMS: msf(latest(first).Sub(killed)), OutageMS: msf(latest(first).Sub(firstErr)),
		Uncounted: st.uncounted, OtherShardErrors: otherErrs,
	})
}

// waitPromoted waits until the sentinels of d name one of its replicas
// master, and returns it.
func waitPromoted(t *testing.T, d *redistest.Sentinel) *redistest.Server {
	t.Helper()
	var promoted *redistest.Server
	waitFor(t, 20*time.Second, "the sentinels to name a replica master", func() bool {
		out := d.Sentinels[0].MustCLI(t, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", d.MasterName)
		for _, r := range d.Replicas {
			if strings.HasSuffix(strings.TrimSpace(out), strconv.Itoa(r.Port)) {
				promoted = r
			}
		}
		return promoted != nil
	})
	return promoted
}

// followers counts the connections to the new master promoted whose last
// command ran a script (or was the WAIT after one): a replica receives a
// script's writes, never the script, so these are the instances' clients
// that followed it.
func followers(t *testing.T, promoted *redistest.Server) int {
	t.Helper()
	n := 0
	for line := range strings.Lines(promoted.MustCLI(t, "CLIENT", "LIST")) {
		if strings.Contains(line, " cmd=evalsha ") || strings.Contains(line, " cmd=eval ") || strings.Contains(line, " cmd=wait ") {
			n++
		}
	}
	return n
}

// onlineReplicas counts the replicas in sync in a master's INFO
// replication ("slave0:ip=…,port=…,state=online,…").
func onlineReplicas(info string) int {
	n := 0
	for line := range strings.Lines(info) {
		if strings.HasPrefix(line, "slave") && strings.Contains(line, "state=online") {
			n++
		}
	}
	return n
}
