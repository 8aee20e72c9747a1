package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestOpen connects by URL to a standalone server with an ACL user and a
// database, and refuses wrong credentials and unreachable servers.
func TestOpen(t *testing.T) {
	srv := redistest.Standalone(t, redistest.WithUser("app", "s3cr%t"), redistest.WithArgs("--user", "default", "off"))
	u := "redis://app:s3cr%25t@" + srv.Addr + "/3"
	s, err := Open(t.Context(), u, nil)
	if err != nil {
		t.Fatal(err)
	}
	l := limitOf(floodgate.FixedWindow, 1, time.Minute)
	if d, err := s.Apply(t.Context(), request("k", l, t0)); err != nil || !d.Allowed {
		t.Fatalf("%+v %v", d, err)
	}
	out, err := srv.CLI(t.Context(), "-n", "3", "EXISTS", stateKey(s.Key("k", l), l))
	if err != nil || strings.TrimSpace(out) != "1" {
		t.Errorf("the state is not in database 3: %q %v", out, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(t.Context(), request("k", l, t0)); !errors.Is(err, floodgate.ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
	if _, err := Open(t.Context(), "redis://app:wrong@"+srv.Addr, nil); err == nil {
		t.Error("Open with a wrong password succeeded")
	} else if strings.Contains(err.Error(), "wrong") {
		t.Errorf("the error repeats the password: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := Open(ctx, "redis://127.0.0.1:1", nil); err == nil {
		t.Error("Open of a closed port succeeded")
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("Open of a closed port took %v", took)
	}
	if _, err := Open(t.Context(), "redis://"+srv.Addr, &Options{Prefix: "{x}"}); err == nil {
		t.Error("Open accepted a prefix with braces")
	}
	if _, err := Open(t.Context(), "mysql://x", nil); !errors.Is(err, ErrBadURL) {
		t.Errorf("Open of a bad URL: %v", err)
	}
}

// TestCluster runs the store on a 3-master Redis Cluster: the keys of many
// subjects spread over every master, each key is in the slot of its encoded
// subject (as CLUSTER KEYSLOT computes it), and a batch of several limits
// of one subject works (package goredisstore checks a batch through
// go-redis).
func TestCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	addrs := cl.Addrs()
	c := newRueidisCluster(t, addrs)
	prefix := testPrefix(t)
	checkTTLsAtEnd(t, c, prefix)
	rs, err := New(c, &Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	l := limitOf(floodgate.GCRA, 10, time.Minute)
	for i := range 300 {
		if _, err := rs.Apply(t.Context(), request(fmt.Sprintf("user:%d", i), l, time.Time{})); err != nil {
			t.Fatal(err)
		}
	}
	perNode := checkTTLs(t, c, prefix)
	for _, m := range cl.Masters {
		if perNode[m.Addr] < 50 {
			t.Errorf("master %s holds %d of 300 keys: %v", m.Addr, perNode[m.Addr], perNode)
		}
	}

	for _, subject := range []string{"{evil}", "a}b{c", "user:7", strings.Repeat("x", 300)} {
		key := rs.Key(subject, l)
		slot, err := c.Do(t.Context(), c.B().ClusterKeyslot().Key(key).Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		want, err := c.Do(t.Context(), c.B().ClusterKeyslot().Key(encodeSubject(subject)).Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		if slot != want || uint16(slot) != keySlot(key) {
			t.Errorf("%.40q: CLUSTER KEYSLOT %d, of the encoded subject %d, keySlot %d", subject, slot, want, keySlot(key))
		}
	}

	for name, s := range map[string]*Store{"rueidis": rs} {
		subject := "{evil}/" + name
		limits := []floodgate.Limit{
			limitOf(floodgate.SlidingWindow, 3, time.Second),
			limitOf(floodgate.FixedWindow, 5, time.Hour),
			limitOf(floodgate.TokenBucket, 4, time.Minute),
			limitOf(floodgate.SlidingWindowLog, 4, time.Minute),
		}
		batch := func() floodgate.Decision {
			rs := make([]floodgate.Request, len(limits))
			for i, l := range limits {
				rs[i] = floodgate.Request{Key: subject, Limit: l, Cost: 1, Now: t0}
			}
			ds, err := s.ApplyBatch(t.Context(), rs)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			return floodgate.Combine(ds)
		}
		for i := range 3 {
			if d := batch(); !d.Allowed {
				t.Fatalf("%s: batch %d denied: %+v", name, i, d)
			}
		}
		if d := batch(); d.Allowed || d.Remaining != 0 {
			t.Errorf("%s: 4th batch in a second: %+v, want denied", name, d)
		}
		// The denied batch took nothing from the hour.
		d, err := s.Apply(t.Context(), floodgate.Request{Key: subject, Limit: limits[1], Now: t0})
		if err != nil || d.Remaining != 2 {
			t.Errorf("%s: the hour after a denied batch: %+v %v, want 2 remaining", name, d, err)
		}
	}

	if _, err := Open(t.Context(), "redis-cluster://"+addrs[0], &Options{Prefix: prefix}); err != nil {
		t.Errorf("Open redis-cluster:// with one seed: %v", err)
	}
	opened, err := Open(t.Context(), "redis-cluster://"+strings.Join(addrs, ","), &Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer opened.Close()
	if d, err := opened.Apply(t.Context(), request("user:1", l, time.Time{})); err != nil || !d.Allowed || d.Remaining != 8 {
		t.Errorf("through Open: %+v %v, want the second of 10", d, err)
	}
}

// TestSentinel runs the store through Sentinel, opened by URL.
func TestSentinel(t *testing.T) {
	d := redistest.StartSentinel(t)
	u := "redis-sentinel://" + strings.Join(d.SentinelAddrs(), ",") + "/" + d.MasterName
	prefix := testPrefix(t)
	s, err := Open(t.Context(), u, &Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	checkTTLsAtEnd(t, newRueidis(t, d.Master.Addr), prefix)
	l := limitOf(floodgate.TokenBucket, 2, time.Minute)
	for i, want := range []bool{true, true, false} {
		if d, err := s.Apply(t.Context(), request("k", l, time.Time{})); err != nil || d.Allowed != want {
			t.Errorf("request %d: %+v %v, want allowed %v", i, d, err, want)
		}
	}
	out, err := d.Master.CLI(t.Context(), "EXISTS", s.Key("k", l))
	if err != nil || strings.TrimSpace(out) != "1" {
		t.Errorf("the state is not on the master: %q %v", out, err)
	}
}
