package grant

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// newRedisHome starts a redis-server and returns a RedisHome on it.
func newRedisHome(t *testing.T) (*RedisHome, *redistest.Server) {
	t.Helper()
	srv := redistest.Standalone(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	h, err := OpenHome(ctx, "redis://"+srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return h, srv
}

// TestHomeScriptMatchesStep runs random calls of three holders on two keys
// through home.lua on a real Redis and through step, its Go twin, and
// checks that they answer alike and that the live shares never add up to
// more than the limit.
func TestHomeScriptMatchesStep(t *testing.T) {
	t.Parallel()
	rh, _ := newRedisHome(t)
	mh := &MemHome{}
	rng := rand.New(rand.NewPCG(7, 11))
	start := time.Unix(1_700_000_000, 123456)
	holders := []string{"a#1", "b#2", "c#3"}
	keys := []string{"k", "weird {key} %#"}
	ctx := t.Context()
	now := start
	for i := range 2000 {
		now = now.Add(time.Duration(rng.IntN(400_000)) * time.Microsecond)
		at := now
		if rng.IntN(10) == 0 {
			at = now.Add(-time.Duration(rng.IntN(2_000_000)) * time.Microsecond) // a late message or a slow clock
		}
		limit := int64(100)
		if rng.IntN(50) == 0 {
			limit = int64(rng.IntN(100)) // a limit lowered by a config change
		}
		r := Request{
			Key:     keys[rng.IntN(len(keys))],
			Limit:   floodgate.Limit{Limit: limit, Period: time.Second},
			Holder:  holders[rng.IntN(len(holders))],
			Now:     at,
			Term:    time.Duration(1+rng.IntN(3)) * time.Second,
			Grace:   500 * time.Millisecond,
			Want:    int64(rng.IntN(120)),
			Demand:  int64(rng.IntN(1000)),
			Floor:   int64(rng.IntN(10)),
			Release: rng.IntN(20) == 0,
			Keep:    rng.IntN(8) == 0,
		}
		want, err := mh.Grant(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := rh.Grant(ctx, r)
		if err != nil {
			t.Fatalf("call %d %+v: %v", i, r, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("call %d %+v:\nhome.lua %+v\nstep     %+v", i, r, got, want)
		}
		var sum int64
		for _, s := range got.Shares {
			sum += s
		}
		if sum > 100 {
			t.Fatalf("call %d: live shares %v add up to %d, above the limit", i, got.Shares, sum)
		}
	}
}

// TestHomeKeysHaveTTL: every key home.lua writes expires. The grants
// run for an hour, so that no key expires while the test looks (with a
// term of a second, a loaded machine once saw a key expire between the
// SCAN and its PTTL), and one script lists the keys and reads their
// PTTLs at one instant of the server, in one redis-cli call.
func TestHomeKeysHaveTTL(t *testing.T) {
	t.Parallel()
	rh, srv := newRedisHome(t)
	ctx := t.Context()
	for i := range 20 {
		_, err := rh.Grant(ctx, Request{Key: fmt.Sprint("k", i), Limit: floodgate.Limit{Limit: 10, Period: time.Second},
			Holder: "a#1", Now: time.Now(), Term: time.Hour, Grace: time.Second, Want: 5})
		if err != nil {
			t.Fatal(err)
		}
	}
	const pttls = `local out = {}
for _, k in ipairs(redis.call('KEYS', '*')) do
  out[#out + 1] = k .. ' ' .. redis.call('PTTL', k)
end
return out`
	lines := strings.Split(srv.MustCLI(t, "EVAL", pttls, "0"), "\n")
	if len(lines) != 20 {
		t.Fatalf("%d keys, want 20: %q", len(lines), lines)
	}
	for _, l := range lines {
		k, ttl, _ := strings.Cut(l, " ")
		if ms, err := strconv.ParseInt(ttl, 10, 64); err != nil || ms < 0 {
			t.Errorf("key %s has PTTL %s", k, ttl)
		}
	}
}

// TestHomeNoScript: after SCRIPT FLUSH the next call runs the script again
// without an error.
func TestHomeNoScript(t *testing.T) {
	t.Parallel()
	rh, srv := newRedisHome(t)
	r := Request{Key: "k", Limit: floodgate.Limit{Limit: 10, Period: time.Second}, Holder: "a#1", Now: time.Now(),
		Term: time.Second, Grace: time.Second, Want: 5}
	for range 3 {
		if _, err := rh.Grant(t.Context(), r); err != nil {
			t.Fatal(err)
		}
		srv.MustCLI(t, "SCRIPT", "FLUSH")
	}
}

func TestDecodeGrantRejects(t *testing.T) {
	t.Parallel()
	for _, v := range [][]int64{nil, {1, 2, 3, 1}, {1, 2, 3, 2, 1, 0, 0, 0}, {1, 2, 3, 1, 1, 0, 0}, {1, 2, 3, -1, 0}} {
		if _, err := decodeGrant(v); err == nil {
			t.Errorf("decodeGrant(%v) = nil error", v)
		}
	}
}

// TestDialHomeLater: a home dialled while down fails each call, and
// answers once it is up.
func TestDialHomeLater(t *testing.T) {
	t.Parallel()
	srv := redistest.Standalone(t)
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	h, err := DialHome("redis://" + srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	r := Request{Key: "k", Limit: floodgate.Limit{Limit: 10, Period: time.Second}, Holder: "a#1", Now: time.Now(),
		Term: time.Second, Grace: time.Second, Want: 5}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if _, err := h.Grant(ctx, r); err == nil {
		t.Fatal("Grant with home down = nil error")
	}
	if err := srv.Restart(t); err != nil {
		t.Fatal(err)
	}
	if got, err := h.Grant(t.Context(), r); err != nil || got.Share != 5 {
		t.Fatalf("Grant with home up = %+v, %v; want a share of 5", got, err)
	}
	if _, err := DialHome("bogus://x"); err == nil {
		t.Error("DialHome(bogus://x) = nil error")
	}
}

// TestScriptHomeMatchesRedisHome runs the same random calls through a
// ScriptHome over a rueidis client and through a RedisHome on another
// prefix of the same server: the answers must be equal.
func TestScriptHomeMatchesRedisHome(t *testing.T) {
	t.Parallel()
	rh, _ := newRedisHome(t)
	c, err := rh.client(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	sh, err := NewScriptHome("scripthome", func(ctx context.Context, key, src, sha string, args []string) ([]int64, error) {
		res := c.Do(ctx, c.B().Evalsha().Sha1(sha).Numkeys(1).Key(key).Arg(args...).Build())
		if e, ok := rueidis.IsRedisErr(res.Error()); ok && e.IsNoScript() {
			res = c.Do(ctx, c.B().Eval().Script(src).Numkeys(1).Key(key).Arg(args...).Build())
		}
		return res.AsIntSlice()
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewScriptHome("a{b", nil); err == nil {
		t.Error("NewScriptHome with a nil EvalFunc and a brace: no error")
	}
	rng := rand.New(rand.NewPCG(3, 5))
	now := time.Unix(1_700_000_000, 0)
	for i := range 300 {
		now = now.Add(time.Duration(rng.IntN(400_000)) * time.Microsecond)
		r := Request{
			Key: "k", Limit: floodgate.Limit{Limit: 100, Period: time.Second},
			Holder: []string{"a", "b", "c"}[rng.IntN(3)], Now: now,
			Term: time.Second, Grace: 100 * time.Millisecond,
			Want: int64(rng.IntN(120)), Demand: int64(rng.IntN(100)), Release: rng.IntN(10) == 0,
		}
		want, err := rh.Grant(t.Context(), r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := sh.Grant(t.Context(), r)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("call %d %+v:\nScriptHome %+v\nRedisHome  %+v", i, r, got, want)
		}
	}
	if _, err := sh.Grant(t.Context(), Request{}); !errors.Is(err, floodgate.ErrInvalidRequest) {
		t.Errorf("empty request: %v, want ErrInvalidRequest", err)
	}
}
