package redisstore

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

// TestDifferential runs the same random sequences of requests, with an
// explicit Now, against memstore (which runs the algorithm package's Go) and
// redisstore (which runs the Lua scripts), and requires identical decisions
// at every step: single requests, batches, peeks, releases, limits that
// change under a shared state, and clocks that go backwards.
//
// Redis drops a key when its TTL runs out in real time, while the sequences
// run in simulated time and memstore (without its sweeper) keeps every
// key; a state kept past its expiry mostly decides like none, but not
// always (a token bucket read under another limit, a clock gone back). So
// when Redis is about to drop a key, the test moves the clock to the
// key's simulated expiry and drops the key from both stores (see advance),
// and the clock goes backwards only while every key has a TTL long enough
// to outlast the sequence. A sequence whose step took longer than
// stallMargin (a stalled machine, when Redis may have dropped a key during
// the step) stops, inconclusive, at its first difference; at most a
// quarter may.
//
// It runs through rueidis (New); package goredisstore's conformance suite
// runs floodgatetest's own differential test through go-redis.
func TestDifferential(t *testing.T) { testDifferential(t, Options{}) }

// TestDifferentialFunctions is TestDifferential through FCALL
// (Options.Functions).
func TestDifferentialFunctions(t *testing.T) { testDifferential(t, Options{Functions: true}) }

func testDifferential(t *testing.T, o Options) {
	addr := standaloneAddr(t)
	c := newRueidis(t, addr)
	prefix := testPrefix(t)
	checkTTLsAtEnd(t, c, prefix)
	o.Prefix = prefix
	// The client's name is part of each subtest's name and random seed, as
	// when the test also ran through go-redis.
	const client = "rueidis"
	rs, err := New(c, &o)
	if err != nil {
		t.Fatal(err)
	}
	sequences := 40
	if testing.Short() {
		sequences = max(2, sequences/4)
	}
	cases := append([]floodgate.Algorithm{}, floodgate.Algorithms...)
	cases = append(cases, "mixed")
	for _, alg := range cases {
		t.Run(client+"/"+string(alg), func(t *testing.T) {
			t.Parallel()
			h := fnv.New64a()
			h.Write([]byte(client + string(alg)))
			rng := rand.New(rand.NewPCG(42, h.Sum64()))
			stalled := 0
			for seq := range sequences {
				d := &differ{t: t, rng: rng, redis: rs, inspect: c, key: fmt.Sprintf("%s/%s/seq%d", client, alg, seq)}
				d.run(alg, 150)
				if d.stalled {
					stalled++
				}
			}
			if stalled > sequences/4 {
				t.Errorf("%d of %d sequences inconclusive: the machine is too slow for this test", stalled, sequences)
			}
		})
	}
}

type differ struct {
	t     *testing.T
	rng   *rand.Rand
	redis *Store
	// inspect reads the keys of redis.
	inspect rueidis.Client
	mem     *memstore.Store
	key     string
	limits  []floodgate.Limit
	now     int64 // µs
	// keys tracks, for each Redis key of the sequence, when Redis drops it
	// in real time and when its state expires in simulated time.
	keys map[string]*keyClock
	// checked is when advance last compared the two.
	checked time.Time
	// stalled is set when a step took so long (a loaded machine) that a
	// key may have left Redis while its state was live in memstore: the
	// sequence stops there, inconclusive.
	stalled bool
	history []string
}

func (d *differ) run(alg floodgate.Algorithm, steps int) {
	d.mem = memstore.New(&memstore.Options{SweepInterval: -1})
	defer d.mem.Close()
	n := 1 + d.rng.IntN(3)
	for range n {
		a := alg
		if alg == "mixed" {
			a = floodgate.Algorithms[d.rng.IntN(len(floodgate.Algorithms))]
		}
		d.limits = append(d.limits, d.randomLimit(a))
	}
	d.now = 1_700_000_000_000_000 + d.rng.Int64N(1<<40)
	d.keys = make(map[string]*keyClock)
	for step := range steps {
		if d.stalled {
			return
		}
		d.advance()
		if len(d.limits) > 1 && d.rng.IntN(6) == 0 {
			d.batch(step)
		} else {
			d.single(step)
		}
	}
}

// randomLimit is a valid limit of alg, often of a period another limit of
// the sequence has (so that they share state with other numbers).
func (d *differ) randomLimit(alg floodgate.Algorithm) floodgate.Limit {
	periods := []time.Duration{time.Microsecond, 7 * time.Microsecond, 333 * time.Microsecond,
		10 * time.Millisecond, time.Second, 3 * time.Second, time.Minute, time.Hour, 24 * time.Hour}
	for {
		l := floodgate.Limit{Algorithm: alg}
		if len(d.limits) > 0 && d.rng.IntN(2) == 0 {
			l.Period = d.limits[d.rng.IntN(len(d.limits))].Period
		} else {
			l.Period = periods[d.rng.IntN(len(periods))]
			if d.rng.IntN(3) == 0 {
				l.Period += time.Duration(d.rng.Int64N(int64(l.Period/time.Microsecond))) * time.Microsecond
			}
		}
		switch d.rng.IntN(10) {
		case 0:
			l.Limit = 0
		case 1:
			l.Limit = d.rng.Int64N(1000) + 1
		default:
			l.Limit = d.rng.Int64N(12) + 1
		}
		switch alg {
		case floodgate.FixedWindow:
			if d.rng.IntN(2) == 0 {
				l.Window = floodgate.FirstHit
			}
			l.CountRejected = d.rng.IntN(3) == 0
		case floodgate.SlidingWindow:
			l.CountRejected = d.rng.IntN(3) == 0
		case floodgate.TokenBucket, floodgate.GCRA:
			if d.rng.IntN(2) == 0 {
				l.Burst = d.rng.Int64N(20) + 1
			}
		}
		if l.Validate() == nil {
			return l
		}
	}
}

// stallMargin is how long a step may take, in real time, before the test
// can no longer tell a difference of the stores from a key that Redis
// dropped during the step.
const stallMargin = 400 * time.Millisecond

// keyClock is what the test knows of one Redis key.
type keyClock struct {
	realDeadline time.Time // when Redis drops it, as of the last look
	simExpiry    int64     // the latest simulated expiry of its state seen
	dropped      bool      // dropped by advance, and not written since
}

func (d *differ) keyClock(l floodgate.Limit) *keyClock {
	k := stateKey(d.redis.Key(d.key, l), l)
	kc := d.keys[k]
	if kc == nil {
		kc = &keyClock{}
		d.keys[k] = kc
	}
	return kc
}

// advance moves the clock: usually forward by a fraction of a period,
// sometimes by several periods, sometimes not, sometimes backwards. Then,
// for a key that Redis drops within stallMargin, or dropped, it moves the
// clock to its simulated expiry, if that is later, and drops it from both
// stores, as a store may once the state has expired.
func (d *differ) advance() {
	p := int64(d.limits[d.rng.IntN(len(d.limits))].Period / time.Microsecond)
	switch r := d.rng.IntN(20); {
	case r == 0 && d.ttlsOutlastSequence():
		d.now -= 1 + d.rng.Int64N(min(p, 10_000_000))
		d.history = append(d.history, fmt.Sprintf("clock back to %d", d.now))
	case r <= 2:
		d.now += d.rng.Int64N(3*p + 1)
	case r <= 6:
	default:
		d.now += d.rng.Int64N(p/4 + 2)
	}
	d.checked = time.Now()
	for _, l := range d.limits {
		kc := d.keyClock(l)
		if kc.dropped || d.checked.Add(stallMargin).Before(kc.realDeadline) {
			continue
		}
		d.now = max(d.now, kc.simExpiry)
		key := stateKey(d.redis.Key(d.key, l), l)
		if err := d.inspect.Do(d.t.Context(), d.inspect.B().Del().Key(key).Build()).Error(); err != nil {
			d.t.Fatal(err)
		}
		if err := d.mem.Reset(d.t.Context(), d.key, l); err != nil {
			d.t.Fatal(err)
		}
		kc.dropped = true
		d.history = append(d.history, fmt.Sprintf("%s dropped, clock at %d", key, d.now))
	}
}

// afterStep records, for every key, when Redis drops it (its PTTL) and
// when its state expires in simulated time: the latest now + ResetAfter
// of a decision on it.
func (d *differ) afterStep(touched []floodgate.Request, ds []floodgate.Decision) {
	for _, l := range d.limits {
		kc := d.keyClock(l)
		key := stateKey(d.redis.Key(d.key, l), l)
		for i, r := range touched {
			if stateKey(d.redis.Key(r.Key, r.Limit), r.Limit) == key {
				kc.simExpiry = max(kc.simExpiry, r.Now.UnixMicro()+ds[i].ResetAfter.Microseconds())
			}
		}
		before := time.Now()
		if ttl := d.pttl(l); ttl >= 0 {
			kc.realDeadline = before.Add(time.Duration(ttl) * time.Millisecond)
			kc.dropped = false
		} else {
			kc.realDeadline = time.Time{}
		}
	}
}

func (d *differ) pttl(l floodgate.Limit) int64 {
	c := d.inspect
	ttl, err := c.Do(d.t.Context(), c.B().Pttl().Key(stateKey(d.redis.Key(d.key, l), l)).Build()).AsInt64()
	if err != nil {
		d.t.Fatal(err)
	}
	if ttl == -1 {
		d.t.Fatalf("%s: key %s has no TTL", d.key, stateKey(d.redis.Key(d.key, l), l))
	}
	return ttl
}

// ttlsOutlastSequence reports whether every key of the sequence exists with
// a TTL of at least 5 s, so that the clock may go backwards. (A key that
// expired in Redis may still be held, expired, by memstore, and come back to
// life there when the clock goes back.)
func (d *differ) ttlsOutlastSequence() bool {
	for _, l := range d.limits {
		if d.pttl(l) < 5000 {
			return false
		}
	}
	return true
}

func (d *differ) request(l floodgate.Limit) floodgate.Request {
	r := floodgate.Request{Key: d.key, Limit: l, Now: time.UnixMicro(d.now)}
	switch x := d.rng.IntN(10); {
	case x < 2:
		r.Cost = 0
	case x < 7:
		r.Cost = 1
	default:
		r.Cost = d.rng.Int64N(l.Capacity() + 3)
	}
	if l.Algorithm == floodgate.Concurrency {
		r.Lease = []string{"a", "b", "c", "lease-d"}[d.rng.IntN(4)]
		switch {
		case d.rng.IntN(4) == 0:
			r.Release = true
		case r.Cost == 0 && d.rng.IntN(2) == 0:
			r.Lease = ""
		}
	}
	return r
}

func (d *differ) single(step int) {
	r := d.request(d.limits[d.rng.IntN(len(d.limits))])
	want, errM := d.mem.Apply(d.t.Context(), r)
	got, errR := d.redis.Apply(d.t.Context(), r)
	d.history = append(d.history, fmt.Sprintf("step %d: Apply %s cost=%d lease=%q release=%v now=%d: %+v",
		step, r.Limit, r.Cost, r.Lease, r.Release, d.now, want))
	if errM != nil || errR != nil {
		d.t.Fatalf("%s: memstore error %v, redisstore error %v", d.key, errM, errR)
	}
	if got != want {
		d.fail(fmt.Sprintf("redisstore %+v", got))
		return
	}
	d.afterStep([]floodgate.Request{r}, []floodgate.Decision{want})
}

func (d *differ) batch(step int) {
	rs := make([]floodgate.Request, len(d.limits))
	cost := d.rng.Int64N(3)
	for i, l := range d.limits {
		rs[i] = d.request(l)
		rs[i].Cost, rs[i].Release = cost, false
		if l.Algorithm == floodgate.Concurrency && rs[i].Lease == "" {
			rs[i].Lease = "batch"
		}
	}
	want, errM := d.mem.ApplyBatch(d.t.Context(), rs)
	got, errR := d.redis.ApplyBatch(d.t.Context(), rs)
	var b strings.Builder
	for i, r := range rs {
		fmt.Fprintf(&b, "\n    %s lease=%q", r.Limit, r.Lease)
		if i < len(want) {
			fmt.Fprintf(&b, ": %+v", want[i])
		}
	}
	d.history = append(d.history, fmt.Sprintf("step %d: ApplyBatch cost=%d now=%d:%s", step, cost, d.now, b.String()))
	if errM != nil || errR != nil {
		d.t.Fatalf("%s: memstore error %v, redisstore error %v", d.key, errM, errR)
	}
	for i := range want {
		if got[i] != want[i] {
			d.fail(fmt.Sprintf("request %d: redisstore %+v", i, got[i]))
			return
		}
	}
	d.afterStep(rs, want)
}

func (d *differ) fail(msg string) {
	d.t.Helper()
	if took := time.Since(d.checked); took > stallMargin {
		d.t.Logf("%s: inconclusive: the step took %v, a key may have left Redis during it", d.key, took)
		d.stalled = true
		return
	}
	h := d.history
	if len(h) > 30 {
		h = h[len(h)-30:]
	}
	c := d.inspect
	for _, l := range d.limits {
		k := stateKey(d.redis.Key(d.key, l), l)
		typ, _ := c.Do(d.t.Context(), c.B().Type().Key(k).Build()).ToString()
		ttl, _ := c.Do(d.t.Context(), c.B().Pttl().Key(k).Build()).AsInt64()
		msg += fmt.Sprintf("\n%s: %s pttl %d", k, typ, ttl)
		switch typ {
		case "string":
			v, _ := c.Do(d.t.Context(), c.B().Get().Key(k).Build()).ToString()
			msg += " " + v
		case "hash":
			v, _ := c.Do(d.t.Context(), c.B().Hgetall().Key(k).Build()).AsStrMap()
			msg += fmt.Sprint(" ", v)
		}
	}
	d.t.Fatalf("%s: decisions differ at the last step (memstore's shown):\n  %s\n%s", d.key, strings.Join(h, "\n  "), msg)
}
