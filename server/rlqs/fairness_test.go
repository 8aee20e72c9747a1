package rlqs_test

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate-rl/floodgate/grant"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/server/rlqs"
	"github.com/floodgate-rl/floodgate/server/transport"
)

// The fairness simulation's rule: the README's, 600 per minute in fixed
// windows aligned to the minute.
const (
	fairLimit  = 600
	fairPeriod = time.Minute
	fairYAML   = `domain: edge
descriptors:
  - key: tenant
    descriptors:
      - key: route
        rate_limit: {unit: minute, requests_per_unit: 600}
`
)

// fairOptions are the simulations' service options (TTL 4 s, Grace 1 s,
// ChangeEvery 2 s) with per-client caps of 4 streams and 50 buckets, and
// clients named by their tokens.
func fairOptions(clock *fakeClock, home grant.Home, auth *transport.Auth) rlqs.Options {
	o := simOptions(clock, home)
	o.Auth, o.MaxClientStreams, o.MaxClientBuckets, o.MaxBuckets = auth, 4, 50, 200
	return o
}

// fairTokens writes a token file of one token per client and returns the
// Auth and the tokens.
func fairTokens(t *testing.T, names ...string) (*transport.Auth, map[string]string) {
	t.Helper()
	toks := make(map[string]string)
	var lines []string
	for _, n := range names {
		toks[n] = n + "-" + strings.Repeat("x", 40)
		lines = append(lines, toks[n])
	}
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := transport.LoadAuth(path, "")
	if err != nil {
		t.Fatal(err)
	}
	return a, toks
}

// fairFigures are what TestRLQSFairness measures; docs/guarantees.md
// ("RLQS fairness") states each one's bound.
type fairFigures struct {
	admittedAfter  time.Duration // the late joiner's first request to its first admitted one
	afterInterval  int64         // its share one interval after home learned its demand
	fairAfter      time.Duration // from home learning its demand to its fair share
	liar, liarMost int64         // the liar's share, and its bound
	windowRatio    float64       // the most admitted in one window ÷ L
	follow         time.Duration // from a shift of demand to the shares that follow it
	reconnectShare float64       // a reconnected holder's share ÷ its share before
}

// TestRLQSFairness runs the fleet on the README's rule (600 per
// minute, fixed window): Envoys A (8/s) and B (3/s), honest; D, which
// wants 20/s and reports 2^63-1 requests in a nanosecond each time; C,
// which joins at 60 s wanting 5/s; and a client that opens stream after
// stream of 20 buckets. At 120 s A and B swap demands; at 180 s A's
// stream drops and it reconnects (to the other replica, on Redis). It
// checks and prints each figure of docs/guarantees.md's "RLQS fairness",
// on a memory home (one replica) and on a real Redis (two replicas).
func TestRLQSFairness(t *testing.T) {
	t.Run("home=memory", func(t *testing.T) {
		clock := newClock()
		auth, toks := fairTokens(t, "a", "b", "c", "d", "abuser")
		r := startReplica(t, fairYAML, fairOptions(clock, nil, auth))
		runFairness(t, clock, []*replica{r}, toks)
	})
	t.Run("home=redis", func(t *testing.T) {
		red := redistest.Standalone(t)
		clock := newClock()
		auth, toks := fairTokens(t, "a", "b", "c", "d", "abuser")
		var reps []*replica
		for range 2 {
			reps = append(reps, startReplica(t, fairYAML, fairOptions(clock, newRedisHome(t, red.Addr), auth)))
		}
		runFairness(t, clock, reps, toks)
	})
}

func runFairness(t *testing.T, clock *fakeClock, reps []*replica, toks map[string]string) {
	const (
		step     = 100 * time.Millisecond
		interval = time.Second // the Envoys' reporting_interval
		ttl      = 4 * time.Second
		grace    = time.Second
		every    = 2 * time.Second // ChangeEvery
		joinAt   = 60 * time.Second
		shiftAt  = 120 * time.Second
		dropAt   = 180 * time.Second
		end      = 240 * time.Second
	)
	names := []string{"a", "b", "c", "d"}
	envoys := make([]*simEnvoy, 4)
	for i, n := range names {
		envoys[i] = newEnvoy(t, clock, reps[i%len(reps)].addr, "edge", interval, time.Duration(i)*250*time.Millisecond)
		envoys[i].md = metadata.Pairs("authorization", "Bearer "+toks[n], rlqs.HolderHeader, "envoy-"+n)
	}
	envoys[3].lie = true
	demand := func(i int, at time.Duration) float64 {
		switch {
		case i == 2 && at < joinAt:
			return 0
		case i == 3:
			return 20
		case at >= shiftAt && i < 2:
			return []float64{3, 8}[i]
		}
		return []float64{8, 3, 5}[i]
	}

	// share is envoy i's assigned share now, in units per period (0 on
	// DENY_ALL, no assignment or an expired one).
	share := func(i int) int64 {
		b := envoys[i].buckets[key(simBucketID)]
		if b == nil {
			return 0
		}
		return int64(math.Round(envoys[i].activeRate(b, clock.Now()) * fairPeriod.Seconds()))
	}
	steps := int(end / step)
	shares := make([][4]int64, steps)
	perWindow := map[int64]int64{}
	acc := make([]float64, 4)
	var firstAsk, firstAdmit time.Duration = -1, -1
	start := clock.Now()
	abuse := func() {
		// One client opens streams of 20 buckets each until refused: its
		// caps (4 streams, 50 buckets) hold, and nobody else notices.
		conn, err := grpc.NewClient(reps[0].addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		ctx := metadata.NewOutgoingContext(t.Context(), metadata.Pairs("authorization", "Bearer "+toks["abuser"]))
		var refused, served int
		for n := range 10 {
			st, err := rlqsv3.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
			if err != nil {
				t.Fatal(err)
			}
			m := &rlqsv3.RateLimitQuotaUsageReports{Domain: "edge"}
			for k := range 20 {
				m.BucketQuotaUsages = append(m.BucketQuotaUsages, &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
					BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"tenant": fmt.Sprintf("abuse-%d-%d", n, k), "route": "/"}}, NumRequestsDenied: 1})
			}
			if err := st.Send(m); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Recv(); err != nil {
				if status.Code(err) != codes.ResourceExhausted {
					t.Errorf("the abuser's stream %d: %v, want ResourceExhausted", n, err)
				}
				refused++
				continue
			}
			served++
		}
		t.Logf("the abuser's 10 streams of 20 buckets: %d served, %d refused (ResourceExhausted)", served, refused)
		if served != 2 || refused != 8 {
			t.Errorf("the abuser got %d streams served and %d refused; want 2 and 8 (50 buckets per client: 2 reports of 20; then the stream caps)", served, refused)
		}
	}

	var beforeDrop int64
	var reconnectMin int64 = math.MaxInt64
	for k := range steps {
		at := time.Duration(k) * step
		switch at {
		case 30 * time.Second:
			abuse()
		case dropAt:
			beforeDrop = share(0)
			envoys[0].dropStream()
			if len(reps) > 1 {
				// Reconnect to the other replica: home knows the holder.
				other := reps[1].addr
				conn, err := grpc.NewClient(other, grpc.WithTransportCredentials(insecure.NewCredentials()))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { conn.Close() })
				envoys[0].conn, envoys[0].addr = conn, other
			}
		}
		clock.Advance(step)
		for i, e := range envoys {
			acc[i] += demand(i, at) * step.Seconds()
			for ; acc[i] >= 1; acc[i]-- {
				if i == 2 && firstAsk < 0 {
					firstAsk = clock.Now().Sub(start)
				}
				if e.request(simBucketID) {
					perWindow[clock.Now().Unix()/60]++
					if i == 2 && firstAdmit < 0 {
						firstAdmit = clock.Now().Sub(start)
					}
				}
			}
			e.tick()
		}
		for i := range envoys {
			shares[k][i] = share(i)
		}
		var sum float64
		for _, e := range envoys {
			for _, b := range e.buckets {
				sum += e.activeRate(b, clock.Now())
			}
		}
		if sum < 0 || sum > fairLimit/fairPeriod.Seconds()+1e-9 {
			t.Errorf("at %v the Envoys' active rates add up to %.3f per second, above L/P = 10", at, sum)
		}
		if at > dropAt && at <= dropAt+10*time.Second {
			reconnectMin = min(reconnectMin, shares[k][0])
		}
	}
	at := func(d time.Duration) [4]int64 { return shares[int(d/step)-1] }
	var f fairFigures

	// 1. The late joiner: admitted on its floor in the answer to its
	// first report, its fair share soon after home learns its demand (its
	// first report with a span, one interval after it joined).
	f.admittedAfter = firstAdmit - firstAsk
	learned := joinAt + interval
	f.afterInterval = at(learned + interval)[2]
	final := at(shiftAt)
	for k := int(learned / step); k < int(shiftAt/step); k++ {
		if near(shares[k][2], final[2]) {
			f.fairAfter = time.Duration(k+1)*step - learned
			break
		}
	}
	// 2. The liar: its share in the steady state before the shift, and the
	// bound of docs/rlqs.md: floor + rest × 2L/(2L + honest demand), and
	// 1/16 more, since a share within 1/16 of its target is kept.
	f.liar = final[3]
	floor := int64(fairLimit * rlqs.DefaultFloor)
	rest := float64(fairLimit - floor - 4*floor)
	honest := (8.0 + 3 + 5) * fairPeriod.Seconds()
	f.liarMost = int64(math.Ceil((float64(floor) + rest*rlqs.DemandCap*fairLimit/(rlqs.DemandCap*fairLimit+honest)) * 17 / 16))
	// 4. Windows: the most the fleet admitted in one window of the rule.
	var most int64
	for _, n := range perWindow {
		most = max(most, n)
	}
	f.windowRatio = float64(most) / fairLimit
	// 5. Follow time: from the shift until every share is within 1/16 of
	// where it settles, for good.
	settled := at(dropAt)
	f.follow = -1
	for k := int(shiftAt / step); k < int(dropAt/step); k++ {
		ok := true
		for j := k; j < int(dropAt/step) && ok; j++ {
			for i := range 4 {
				ok = ok && near(shares[j][i], settled[i])
			}
		}
		if ok {
			f.follow = time.Duration(k+1)*step - shiftAt
			break
		}
	}
	f.reconnectShare = float64(reconnectMin) / float64(beforeDrop)

	// The bounds, as docs/guarantees.md states them (I the reporting
	// interval, G Grace, M ChangeEvery, n the holders).
	confirm := time.Duration(math.Ceil(grace.Seconds()/interval.Seconds())) * interval
	fairBound := every + interval + confirm
	followBound := 2*interval + every + confirm + interval
	n := 4.0
	windowBound := 1 + (fairLimit*time.Second.Seconds()/fairPeriod.Seconds()+n)*(1+math.Ceil(fairPeriod.Seconds()/every.Seconds()))/fairLimit
	t.Logf("RLQS fairness (%d replica(s)): late joiner admitted %v after its first request (bound %v); its share one interval after home learned its demand %d of %d (its floor %d at least); fair share %v after home learned its demand (bound %v); liar's share %d of %d (bound %d); most admitted in one window %.3f × the limit (bound %.3f); follow time %v (bound %v); a reconnected holder kept %.2f of its share (bound 1.00)",
		len(reps), f.admittedAfter, interval, f.afterInterval, fairLimit, floor, f.fairAfter, fairBound, f.liar, fairLimit, f.liarMost,
		f.windowRatio, windowBound, f.follow, followBound, f.reconnectShare)
	if f.admittedAfter < 0 || f.admittedAfter > interval {
		t.Errorf("the late joiner's first admitted request came %v after its first request; want within one reporting interval (%v): its floor in the first answer", f.admittedAfter, interval)
	}
	if f.afterInterval < floor {
		t.Errorf("one interval after home learned its demand the late joiner holds %d, below its floor %d", f.afterInterval, floor)
	}
	if f.fairAfter <= 0 || f.fairAfter > fairBound {
		t.Errorf("the late joiner reached its fair share %v after home learned its demand; want within M + I + ⌈G/I⌉·I = %v", f.fairAfter, fairBound)
	}
	if f.liar > f.liarMost {
		t.Errorf("the liar holds %d of %d, above its bound %d", f.liar, fairLimit, f.liarMost)
	}
	if f.windowRatio > windowBound {
		t.Errorf("the fleet admitted %.3f × the limit in one window, above the bound %.3f", f.windowRatio, windowBound)
	}
	if f.follow <= 0 || f.follow > followBound {
		t.Errorf("the shares followed the shift in %v; want within 2I + M + ⌈G/I⌉·I + I = %v", f.follow, followBound)
	}
	if reconnectMin < beforeDrop {
		t.Errorf("after its reconnect A held %d at least, below its %d before: a reconnected holder keeps its share", reconnectMin, beforeDrop)
	}
	// The split follows demand: A and B in proportion before the shift
	// (8:3), reversed after.
	if a, b := final[0], final[1]; a <= 2*b {
		t.Errorf("before the shift A (8/s) holds %d and B (3/s) %d; want A above twice B", a, b)
	}
	if a, b := settled[0], settled[1]; b <= 2*a {
		t.Errorf("after the shift A (3/s) holds %d and B (8/s) %d; want B above twice A", a, b)
	}
}

// near reports whether got is within 1/16 of want.
func near(got, want int64) bool {
	d := got - want
	if d < 0 {
		d = -d
	}
	return d <= want/16
}
