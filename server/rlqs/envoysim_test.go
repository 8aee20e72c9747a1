package rlqs_test

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate-rl/floodgate/internal/servertest"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/floodgate-rl/floodgate/server/rlqs"
)

// fakeClock is the one clock of a simulation: the replicas read it, the
// simulated Envoys read it, and only the test moves it.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *fakeClock { return &fakeClock{t: time.Unix(1_800_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// replica is one `serve`: a server.Server over the memory store with a
// config, and an rlqs.Service on a gRPC server on 127.0.0.1.
type replica struct {
	svc  *rlqs.Service
	g    *grpc.Server
	addr string
	done chan struct{}
}

func startReplica(t testing.TB, yaml string, o rlqs.Options) *replica {
	t.Helper()
	srv := servertest.New(t, "rules.yaml", yaml, server.Options{})
	svc, err := rlqs.New(srv, &o)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{svc: svc, g: grpc.NewServer(), addr: ln.Addr().String(), done: make(chan struct{})}
	svc.Register(r.g)
	go func() { defer close(r.done); _ = r.g.Serve(ln) }()
	t.Cleanup(r.stop)
	return r
}

// stop drains and stops the replica, as serve does at shutdown.
func (r *replica) stop() {
	select {
	case <-r.done:
		return
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = r.svc.Drain(ctx)
	r.g.Stop()
	<-r.done
}

// simBucket is a bucket as Envoy's rate_limit_quota filter keeps it
// (source/extensions/filters/http/rate_limit_quota/global_client_impl.cc):
// usage counters reset at each report, the active assignment with its
// expiry, and a token bucket that starts full and is kept only while an
// assignment brings the same max_tokens, tokens_per_fill and
// fill_interval.
type simBucket struct {
	id              map[string]string
	allowed, denied uint64
	lastReport      time.Time
	action          *typev3.RateLimitStrategy // nil: no assignment
	expires         time.Time
	tokens          float64
	last            time.Time
}

// tb is the token bucket of a strategy, or nil.
func tb(s *typev3.RateLimitStrategy) *typev3.TokenBucket { return s.GetTokenBucket() }

// rate is a token bucket's refill per second, as Envoy computes it: the
// fill interval's whole seconds only.
func rate(b *typev3.TokenBucket) float64 {
	return float64(b.GetTokensPerFill().GetValue()) / float64(b.GetFillInterval().GetSeconds())
}

// simEnvoy is one Envoy with the rate_limit_quota filter: it decides each
// request on its bucket's assignment (DENY_ALL without one, or once it
// expired: the fallback this simulation configures), subscribes a bucket
// with an immediate report of it, reports every bucket each interval on
// one stream (reopened when it ends), and applies assignments and
// abandons as they come.
type simEnvoy struct {
	t        testing.TB
	clock    *fakeClock
	domain   string
	addr     string
	interval time.Duration
	next     time.Time

	conn    *grpc.ClientConn
	stream  grpc.BidiStreamingClient[rlqsv3.RateLimitQuotaUsageReports, rlqsv3.RateLimitQuotaResponse]
	cancel  context.CancelFunc
	buckets map[string]*simBucket

	// created lists the max_tokens of every token bucket created, with
	// when: each starts full.
	created []created
	// streams counts the streams opened; loseNext loses the answer to
	// the next report.
	streams  int
	loseNext bool
	// sent counts the reports sent.
	sent int64
	// md is sent with every stream (a bearer token, a holder's name);
	// lie makes every report claim 2^63-1 requests in a nanosecond.
	md  metadata.MD
	lie bool
}

type created struct {
	at        time.Time
	maxTokens uint32
}

func newEnvoy(t testing.TB, clock *fakeClock, addr, domain string, interval, offset time.Duration) *simEnvoy {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	e := &simEnvoy{t: t, clock: clock, domain: domain, addr: addr, interval: interval, next: clock.Now().Add(offset),
		conn: conn, buckets: make(map[string]*simBucket)}
	t.Cleanup(func() {
		if e.cancel != nil {
			e.cancel()
		}
		conn.Close()
	})
	return e
}

func key(id map[string]string) string {
	keys := make([]string, 0, len(id))
	for k := range id {
		keys = append(keys, k+"="+id[k])
	}
	slices.Sort(keys)
	return strings.Join(keys, "|")
}

// open starts a stream if none is open.
func (e *simEnvoy) open() {
	if e.stream != nil {
		return
	}
	// A stream lives well under a second of real time in these
	// simulations; a minute bounds a server that stops answering.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	if e.md != nil {
		ctx = metadata.NewOutgoingContext(ctx, e.md)
	}
	st, err := rlqsv3.NewRateLimitQuotaServiceClient(e.conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		cancel()
		e.t.Fatalf("open stream: %v", err)
	}
	e.stream, e.cancel = st, cancel
	e.streams++
}

// dropStream ends the stream from the Envoy's side, as a broken connection
// would; the next report opens a new one (a new holder at home).
func (e *simEnvoy) dropStream() {
	if e.cancel != nil {
		e.cancel()
	}
	e.stream, e.cancel = nil, nil
}

// request decides one request of bucket id now, as the filter does.
func (e *simEnvoy) request(id map[string]string) bool {
	now := e.clock.Now()
	k := key(id)
	b := e.buckets[k]
	if b == nil {
		// The first request of a bucket: no assignment yet (DENY_ALL
		// here), and an immediate report that subscribes it.
		b = &simBucket{id: id, denied: 1, lastReport: now}
		e.buckets[k] = b
		e.send([]*simBucket{b}, now)
		return false
	}
	ok := e.decide(b, now)
	if ok {
		b.allowed++
	} else {
		b.denied++
	}
	return ok
}

func (e *simEnvoy) decide(b *simBucket, now time.Time) bool {
	if b.action == nil || !now.Before(b.expires) {
		return false // no assignment, or expired: the fallback is DENY_ALL
	}
	if t := tb(b.action); t != nil {
		b.tokens = min(float64(t.GetMaxTokens()), b.tokens+rate(t)*now.Sub(b.last).Seconds())
		b.last = now
		if b.tokens >= 1 {
			b.tokens--
			return true
		}
		return false
	}
	return b.action.GetBlanketRule() == typev3.RateLimitStrategy_ALLOW_ALL
}

// activeRate is the refill rate per second of b's active token bucket; 0
// when it has none (DENY_ALL, no assignment, expired). ALLOW_ALL is
// reported as -1.
func (e *simEnvoy) activeRate(b *simBucket, now time.Time) float64 {
	if b.action == nil || !now.Before(b.expires) {
		return 0
	}
	if t := tb(b.action); t != nil {
		return rate(t)
	}
	if b.action.GetBlanketRule() == typev3.RateLimitStrategy_ALLOW_ALL {
		return -1
	}
	return 0
}

// tick sends the periodic report when it is due.
func (e *simEnvoy) tick() {
	now := e.clock.Now()
	if now.Before(e.next) {
		return
	}
	e.next = e.next.Add(e.interval)
	bs := make([]*simBucket, 0, len(e.buckets))
	for _, b := range e.buckets {
		bs = append(bs, b)
	}
	if len(bs) > 0 {
		e.send(bs, now)
	}
}

// send reports bs (time_elapsed in whole seconds, as Envoy sends it),
// resets their counters, and applies the answer.
func (e *simEnvoy) send(bs []*simBucket, now time.Time) {
	e.open()
	m := &rlqsv3.RateLimitQuotaUsageReports{Domain: e.domain}
	for _, b := range bs {
		u := &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId:           &rlqsv3.BucketId{Bucket: b.id},
			TimeElapsed:        &durationpb.Duration{Seconds: int64(now.Sub(b.lastReport) / time.Second)},
			NumRequestsAllowed: b.allowed,
			NumRequestsDenied:  b.denied,
		}
		if e.lie {
			u.NumRequestsAllowed, u.NumRequestsDenied, u.TimeElapsed = 1<<63-1, 0, &durationpb.Duration{Nanos: 1}
		}
		m.BucketQuotaUsages = append(m.BucketQuotaUsages, u)
		b.allowed, b.denied, b.lastReport = 0, 0, now
	}
	e.sent++
	if err := e.stream.Send(m); err != nil {
		e.dropStream() // the usage is lost, as Envoy drops it
		return
	}
	if e.loseNext {
		// The connection breaks after the report left: the server acts
		// on it, its answer never arrives, and the Envoy keeps enforcing
		// what it had until that expires.
		e.loseNext = false
		if _, err := e.stream.Recv(); err != nil {
			e.t.Errorf("the answer to lose: %v", err)
		}
		e.dropStream()
		return
	}
	resp, err := e.stream.Recv()
	if err != nil {
		if !errors.Is(err, io.EOF) {
			e.t.Logf("stream ended: %v", err)
		}
		e.dropStream()
		return
	}
	e.apply(resp, now)
}

// apply applies an answer as the filter does (onQuotaResponseImpl).
func (e *simEnvoy) apply(resp *rlqsv3.RateLimitQuotaResponse, now time.Time) {
	for _, a := range resp.GetBucketAction() {
		k := key(a.GetBucketId().GetBucket())
		b := e.buckets[k]
		if b == nil {
			e.t.Errorf("an action for bucket %v, which this Envoy does not have", a.GetBucketId().GetBucket())
			continue
		}
		if a.GetAbandonAction() != nil {
			delete(e.buckets, k)
			continue
		}
		qa := a.GetQuotaAssignmentAction()
		if qa == nil {
			e.t.Errorf("an action with neither assignment nor abandon: %v", a)
			continue
		}
		st := qa.GetRateLimitStrategy()
		if nt := tb(st); nt != nil {
			ot := tb(b.action)
			same := ot != nil && ot.GetMaxTokens() == nt.GetMaxTokens() && ot.GetTokensPerFill().GetValue() == nt.GetTokensPerFill().GetValue() &&
				ot.GetFillInterval().GetNanos() == nt.GetFillInterval().GetNanos()
			if !same || b.action == nil || !now.Before(b.expires) {
				b.tokens, b.last = float64(nt.GetMaxTokens()), now
				e.created = append(e.created, created{now, nt.GetMaxTokens()})
			}
		}
		b.action = st
		b.expires = now.Add(time.Duration(qa.GetAssignmentTimeToLive().GetSeconds()) * time.Second)
	}
}

// drainStream reads the unsolicited answer of a drain (the TTL 0
// assignments) and the stream's end.
func (e *simEnvoy) drainStream() error {
	now := e.clock.Now()
	for {
		resp, err := e.stream.Recv()
		if err != nil {
			e.dropStream()
			return err
		}
		e.apply(resp, now)
	}
}
