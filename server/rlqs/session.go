package rlqs

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/grant"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/floodgate-rl/floodgate/server/tracing"
	"github.com/floodgate-rl/floodgate/share"
)

// session is one stream: one Envoy, one holder at home. Only the
// stream's goroutine touches it, but for drainSent (under Service.mu).
type session struct {
	svc       *Service
	holder    string
	domain    string
	buckets   map[string]*bucket
	done      chan struct{}
	drainSent bool
	warned    bool // of reports further apart than TTL
	// client is the stream's client (nil for a session no stream
	// opened); named says the holder is named by HolderHeader, and
	// superseded that a newer stream of that holder took over.
	client     *client
	named      bool
	superseded atomic.Bool
}

// bucket is what a session knows of one bucket ID.
type bucket struct {
	id *rlqsv3.BucketId
	// key is the grant's key at home; empty when the bucket is answered
	// by a blanket rule (no rule, unlimited, shadow mode, an algorithm
	// no token bucket expresses).
	key     string
	limit   floodgate.Limit
	blanket typev3.RateLimitStrategy_BlanketRule

	demand   grant.Demand // units per Period, smoothed
	reported time.Time    // the last report
	active   time.Time    // the last report with a request in it

	// last is home's last answer: every holder's demand and floor, and
	// this bucket's place among them (Self -1: none yet).
	last grant.Grant
	// sent is every share an assignment carried in the last TTL+Grace,
	// oldest first: home holds at least their maximum.
	sent []sentShare
	// cur is the strategy last sent (nil: none yet), at lastSent; changed
	// is when the Envoy last got a new token bucket.
	cur               *strategy
	lastSent, changed time.Time
	// stale: a reload changed the limit under the token bucket sent.
	stale bool
	// abandoned: the Envoy was told to forget the bucket. It is kept for
	// TTL+Grace after its last assignment, so that a new subscription of
	// the same stream finds the shares still held and when its last
	// token bucket was made.
	abandoned bool
}

// sentShare is a share assignments carried: first sent at first (which
// a report Grace later confirms), last sent at at (which TTL+Grace later
// no Envoy enforces). onStream is false for the share a named holder held
// when this stream began (its Envoy may enforce it from an earlier
// stream), which only a newer share's confirmation ends.
type sentShare struct {
	share     int64
	first, at time.Time
	onStream  bool
}

// strategy is an assignment's rate limit strategy, as the bound counts
// it: a blanket rule, or a token bucket of maxTokens refilled by
// tokensPerFill every fillSeconds.
type strategy struct {
	blanket                  typev3.RateLimitStrategy_BlanketRule
	bucket                   bool
	maxTokens, tokensPerFill uint32
	fillSeconds              int64
	share                    int64
}

func (a *strategy) equal(b *strategy) bool { return a != nil && b != nil && *a == *b }

// proto is the strategy as Envoy reads it.
func (a *strategy) proto() *typev3.RateLimitStrategy {
	if !a.bucket {
		return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: a.blanket}}
	}
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
		MaxTokens:     a.maxTokens,
		TokensPerFill: wrapperspb.UInt32(a.tokensPerFill),
		FillInterval:  &durationpb.Duration{Seconds: a.fillSeconds},
	}}}
}

// invalidField is an InvalidArgument naming field, with an
// errdetails.BadRequest that names it too.
func invalidField(field, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	st := status.New(codes.InvalidArgument, "rlqs: "+field+": "+msg)
	if d, err := st.WithDetails(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: field, Description: msg}}}); err == nil {
		st = d
	}
	return st.Err()
}

// bucketKey is a canonical text of a bucket ID, its entries sorted by
// key: {a: A, b: B} and {b: B, a: A} are one bucket, as the protocol says.
func bucketKey(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(escapeKV(k))
		b.WriteByte('=')
		b.WriteString(escapeKV(m[k]))
		b.WriteByte('|')
	}
	return b.String()
}

// kvEscaper escapes the bytes bucketKey uses as separators; built once
// (a Replacer builds its table at first use, which costs far more than
// one replacement).
var kvEscaper = strings.NewReplacer("%", "%25", "=", "%3D", "|", "%7C")

func escapeKV(s string) string { return kvEscaper.Replace(s) }

// checkReport checks the shape of a report before anything is done with
// it: every bucket ID present, of 1 to server.MaxEntries entries with
// non-empty keys and at most MaxBucketIDBytes bytes, and a time elapsed
// that is a valid duration, not negative.
func checkReport(m *rlqsv3.RateLimitQuotaUsageReports, domain string) error {
	switch {
	case m.GetDomain() == "" && domain == "":
		return invalidField("domain", "empty in the stream's first report")
	case m.GetDomain() != "" && domain != "" && m.GetDomain() != domain:
		return invalidField("domain", "%q differs from the stream's domain %q; open a new stream for another domain", m.GetDomain(), domain)
	}
	for i, u := range m.GetBucketQuotaUsages() {
		field := fmt.Sprintf("bucket_quota_usages[%d]", i)
		id := u.GetBucketId().GetBucket()
		if len(id) == 0 {
			return invalidField(field+".bucket_id", "empty")
		}
		if len(id) > server.MaxEntries {
			return invalidField(field+".bucket_id", "%d entries, more than the %d allowed", len(id), server.MaxEntries)
		}
		n := 0
		for k, v := range id {
			if k == "" {
				return invalidField(field+".bucket_id", "an entry with an empty key")
			}
			n += len(k) + len(v)
		}
		if n > MaxBucketIDBytes {
			return invalidField(field+".bucket_id", "%d bytes of keys and values, more than the %d allowed", n, MaxBucketIDBytes)
		}
		if te := u.GetTimeElapsed(); te != nil {
			if err := te.CheckValid(); err != nil || te.AsDuration() < 0 {
				return invalidField(field+".time_elapsed", "%v is not a duration of zero or more", te)
			}
		}
	}
	return nil
}

// handle answers one report: the first report of a bucket subscribes the
// stream to it; every bucket reported gets its action in the answer, in
// the report's order.
func (ss *session) handle(ctx context.Context, m *rlqsv3.RateLimitQuotaUsageReports) (*rlqsv3.RateLimitQuotaResponse, error) {
	s := ss.svc
	if err := checkReport(m, ss.domain); err != nil {
		return nil, err
	}
	cfg := s.srv.Config()
	if ss.domain == "" {
		if cfg.Domain(m.GetDomain()) == nil {
			return nil, invalidField("domain", "%q is not a domain of this server's config", m.GetDomain())
		}
		ss.domain = m.GetDomain()
	}
	now := s.o.Clock()
	bs, err := ss.subscribe(cfg, m.GetBucketQuotaUsages(), now)
	if err != nil {
		return nil, err
	}
	jobs := ss.grantAll(ctx, bs, now)
	return ss.answer(jobs, now), nil
}

// handleTraced is handle, in a span of its own when tracing: the
// domain (once the stream has one), the buckets reported, the outcome
// (answered, or refused for a report the stream ends on).
func (ss *session) handleTraced(ctx context.Context, m *rlqsv3.RateLimitQuotaUsageReports) (*rlqsv3.RateLimitQuotaResponse, error) {
	tr := ss.svc.srv.Tracer()
	if tr == nil {
		return ss.handle(ctx, m)
	}
	ctx, span := tr.Start(ctx, tracing.SpanRLQSReport)
	resp, err := ss.handle(ctx, m)
	if span.IsRecording() {
		domain := ss.domain
		if ss.svc.srv.Config().Domain(domain) == nil {
			domain = "_unknown"
		}
		outcome := "answered"
		if err != nil {
			// The Envoy's report was malformed: its error, not ours.
			outcome = "refused"
		}
		span.SetAttributes(tracing.KeyDomain.String(domain), tracing.KeyBuckets.Int(len(m.GetBucketQuotaUsages())),
			tracing.KeyOutcome.String(outcome))
	}
	span.End()
	return resp, err
}

// subscribe finds or makes the bucket of each usage reported, in order,
// after forgetting the buckets abandoned for longer than TTL+Grace, and
// measures each one's demand; a report beyond the stream's or the
// replica's bucket bounds is refused whole.
func (ss *session) subscribe(cfg *config.Config, usages []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage, now time.Time) ([]*bucket, error) {
	s := ss.svc
	if len(usages) > s.o.MaxStreamBuckets {
		return nil, invalidField("bucket_quota_usages", "%d usages in one report, more than the %d buckets a stream may have", len(usages), s.o.MaxStreamBuckets)
	}
	for key, b := range ss.buckets {
		if b.abandoned && now.Sub(b.lastSent) >= s.o.TTL+s.o.Grace {
			ss.forget(key)
		}
	}
	bs := make([]*bucket, len(usages))
	for i, u := range usages {
		key := bucketKey(u.GetBucketId().GetBucket())
		b := ss.buckets[key]
		if b != nil && b.abandoned {
			// Subscribed again: the Envoy has no assignment for it.
			b.abandoned, b.stale, b.cur, b.active, b.demand = false, false, nil, time.Time{}, grant.Demand{}
		}
		if b == nil {
			if len(ss.buckets) >= s.o.MaxStreamBuckets {
				return nil, invalidField(fmt.Sprintf("bucket_quota_usages[%d].bucket_id", i), "the stream already has %d buckets, the most allowed (floodgate serve -rlqs-max-stream-buckets)", len(ss.buckets))
			}
			if c := ss.client; c != nil && c.buckets.Add(1) > int64(s.o.MaxClientBuckets) {
				c.buckets.Add(-1)
				return nil, status.Errorf(codes.ResourceExhausted, "rlqs: this client (%s) holds %d buckets on this replica, the most one client may (floodgate serve -rlqs-max-client-buckets)", clientKind(c.name), s.o.MaxClientBuckets)
			}
			if s.buckets.Add(1) > int64(s.o.MaxBuckets) {
				s.buckets.Add(-1)
				if c := ss.client; c != nil {
					c.buckets.Add(-1)
				}
				return nil, status.Errorf(codes.ResourceExhausted, "rlqs: this replica holds %d buckets, the most it serves", s.o.MaxBuckets)
			}
			s.m.buckets.Inc()
			b = &bucket{id: u.GetBucketId(), last: grant.Grant{Self: -1}}
			ss.buckets[key] = b
		}
		ss.classify(cfg, b)
		ss.measure(b, u, now)
		bs[i] = b
	}
	s.m.reports.Add(float64(len(usages)))
	return bs, nil
}

// reportJob is what one bucket of a report is answered with: abandon it,
// or the strategy out (nil: no action, when home did not answer); first
// is the index of the bucket's first job in the report, whose answer a
// bucket reported twice shares.
type reportJob struct {
	b       *bucket
	abandon bool
	out     *strategy
	first   int
}

// grantAll decides each bucket of a report: idle or stale buckets are
// abandoned, buckets without a rule get their blanket strategy, and the
// others are granted by home, all at once (a report of many buckets
// waits for about one round trip to home, not one per bucket) and once
// per bucket however often the report names it.
func (ss *session) grantAll(ctx context.Context, bs []*bucket, now time.Time) []reportJob {
	s := ss.svc
	jobs := make([]reportJob, len(bs))
	var calls []int                         // the jobs that call home
	first := make(map[*bucket]int, len(bs)) // each bucket's first job
	for i, b := range bs {
		jobs[i].b, jobs[i].first = b, i
		if jobs[i].abandon = b.stale || now.Sub(b.active) >= s.o.Idle; jobs[i].abandon {
			continue
		}
		if b.key == "" {
			jobs[i].out = &strategy{blanket: b.blanket}
			continue
		}
		if k, twice := first[b]; twice {
			jobs[i].first = k // reported twice in one report: granted once
			continue
		}
		first[b] = i
		calls = append(calls, i)
	}
	// A few workers call home for all of them.
	if len(calls) == 1 {
		j := &jobs[calls[0]]
		j.out = ss.grant(ctx, j.b, now)
	} else if len(calls) > 1 {
		var next atomic.Int64
		var wg sync.WaitGroup
		for range min(len(calls), 16) {
			wg.Go(func() {
				for k := next.Add(1) - 1; k < int64(len(calls)); k = next.Add(1) - 1 {
					j := &jobs[calls[k]]
					j.out = ss.grant(ctx, j.b, now)
				}
			})
		}
		wg.Wait()
	}
	for i := range jobs {
		if k := jobs[i].first; k != i {
			jobs[i].out = jobs[k].out
		}
	}
	return jobs
}

// answer is the response to a report whose buckets were decided as jobs,
// one action per job in the report's order (none for a bucket whose home
// did not answer).
func (ss *session) answer(jobs []reportJob, now time.Time) *rlqsv3.RateLimitQuotaResponse {
	s := ss.svc
	resp := &rlqsv3.RateLimitQuotaResponse{}
	for _, j := range jobs {
		switch {
		case j.abandon:
			if !j.b.abandoned {
				j.b.abandoned, j.b.stale = true, false
				s.m.abandoned.Inc()
			}
			resp.BucketAction = append(resp.BucketAction, &rlqsv3.RateLimitQuotaResponse_BucketAction{BucketId: j.b.id,
				BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_{AbandonAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction{}}})
		case j.out != nil:
			resp.BucketAction = append(resp.BucketAction, ss.assign(j.b, j.out, now, s.o.TTL))
		}
	}
	return resp
}

// forget drops the bucket of key from the session.
func (ss *session) forget(key string) {
	delete(ss.buckets, key)
	if c := ss.client; c != nil {
		c.buckets.Add(-1)
	}
	ss.svc.buckets.Add(-1)
	ss.svc.m.buckets.Dec()
}

// classify matches b's ID to a rule of the config in force (each report,
// so a reload applies at the next one) and decides how it is answered.
func (ss *session) classify(cfg *config.Config, b *bucket) {
	s := ss.svc
	rule, entries := s.index.match(cfg, ss.domain, b.id.GetBucket())
	oldKey := b.key
	b.key, b.blanket = "", typev3.RateLimitStrategy_ALLOW_ALL
	switch {
	case rule == nil || rule.Unlimited || rule.ShadowMode:
		return
	case !expressible(rule.Limit):
		// A limit no token bucket can express is answered by its
		// failure mode, as a store failure would be.
		if rule.FailurePolicy == floodgate.FailClosed {
			b.blanket = typev3.RateLimitStrategy_DENY_ALL
		}
		s.m.inexpressible.Inc()
		return
	case rule.Limit.Limit == 0:
		b.blanket = typev3.RateLimitStrategy_DENY_ALL
		return
	}
	key := s.o.Prefix + rule.Key(entries)
	if b.cur != nil && b.cur.bucket && (b.limit != rule.Limit || oldKey != key) {
		// A reload changed the bucket's limit: its Envoy must drop the
		// token bucket it runs. A new one with an equal max_tokens and
		// tokens_per_fill would not replace it (Envoy compares only those
		// and the fill interval's nanoseconds), so the bucket is
		// abandoned, and the Envoy subscribes again at its next request.
		b.stale = true
	}
	b.key = key
	if b.limit != rule.Limit {
		b.limit, b.last = rule.Limit, grant.Grant{Self: -1}
	}
}

// expressible reports whether a token bucket expresses l: fixed_window,
// token_bucket and gcra, whose admissions are a rate of Limit per Period
// with a capacity (Capacity). A sliding window promises at most Limit in
// every trailing Period, which a bucket of that capacity and rate breaks
// (it admits up to twice as much); a concurrency limit holds units until
// they are released, which the protocol cannot say; a calendar window
// has no fixed period to be a rate of.
func expressible(l floodgate.Limit) bool {
	if l.IsCalendar() {
		// A calendar window has no period (months, days across a
		// daylight-saving change differ in length): no rate per fill
		// interval is its limit.
		return false
	}
	switch l.EffectiveAlgorithm() {
	case floodgate.FixedWindow, floodgate.TokenBucket, floodgate.GCRA:
		return true
	}
	return false
}

// measure takes b's demand from a report: (allowed + denied) per Period
// over the span since b's previous report, the longer of the report's
// time_elapsed and the span this replica saw (so a report cannot make a
// count look faster by claiming a nanosecond), at most DemandCap × the
// limit. Each measure replaces the one before, so a shift of demand is
// seen whole at the first report after it. The report that subscribes a
// bucket, with no span, leaves its demand unmeasured (0): the Envoy is
// new, and holds its floor until its first full report.
func (ss *session) measure(b *bucket, u *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage, now time.Time) {
	n := u.GetNumRequestsAllowed() + u.GetNumRequestsDenied()
	if u.GetNumRequestsAllowed() > n { // overflow: as many as can be told apart
		n = math.MaxUint64
	}
	if n > 0 || b.active.IsZero() {
		b.active = now
	}
	elapsed := u.GetTimeElapsed().AsDuration()
	if !b.reported.IsZero() {
		elapsed = max(elapsed, now.Sub(b.reported))
	}
	if !b.reported.IsZero() && now.Sub(b.reported) > ss.svc.o.TTL && !ss.warned {
		// Once per stream: the Envoy's assignments expire between its
		// reports, and it runs on its fallback in between.
		ss.warned = true
		ss.svc.log.Warn("rlqs reports arrive less often than the assignments live; raise -rlqs-ttl above the Envoy's reporting_interval",
			"holder", ss.holder, "gap", now.Sub(b.reported), "ttl", ss.svc.o.TTL)
	}
	b.reported = now
	if (b.key == "" && b.limit.Period == 0) || elapsed <= 0 {
		return
	}
	b.demand = grant.Demand{}
	b.demand.Measure(n, elapsed, b.limit.Period)
	b.demand.Rate = min(b.demand.Rate, satMul(b.limit.Limit, DemandCap))
}

// satMul is a×k for a, k >= 0, saturating at share.MaxDemand.
func satMul(a, k int64) int64 {
	if a > share.MaxDemand/k {
		return share.MaxDemand
	}
	return a * k
}

// floor is each holder's floor of l: Options.Floor × L, and at least
// what makes one token (a token bucket's max_tokens ⌊s×B/L⌋ is 1 from
// s = ⌈L/B⌉ on), unless Options.Floor says none; never above L.
func (ss *session) floor(l floodgate.Limit) int64 {
	if ss.svc.o.Floor <= 0 || l.Limit <= 0 {
		return 0
	}
	f := max(int64(ss.svc.o.Floor*float64(l.Limit)), 1)
	if c := l.Capacity(); !isWindow(l) && c > 0 {
		f = max(f, (l.Limit+c-1)/c)
	}
	return min(f, l.Limit)
}

// splitLimit is the part of l split among the holders: l less one floor,
// the room kept free for a newcomer, whose first report then gets its
// floor at once (when no more than one newcomer arrives per change of
// the others' shares).
func splitLimit(l floodgate.Limit, floor int64) int64 {
	if floor > 0 && floor < l.Limit {
		return l.Limit - floor
	}
	return l.Limit
}

// isWindow reports whether l is a fixed window (the rule's capacity is
// its limit, handed out again at each window's start).
func isWindow(l floodgate.Limit) bool { return l.EffectiveAlgorithm() == floodgate.FixedWindow }

// confirm forgets the shares sent to b that its Envoy can no longer
// enforce: those older than TTL+Grace (each assignment lives TTL after it
// arrived, at most Grace after it was sent), and those sent before a
// later share that this stream has confirmed. A share sent at t is
// confirmed by a report on the same stream at t+Grace or later: the
// stream still works, so the answer arrived (a gRPC stream delivers in
// order or ends, and Grace bounds the delivery), and the Envoy enforces
// it or a newer one, not what came before it.
func (ss *session) confirm(b *bucket, now time.Time) {
	s := ss.svc
	hold := s.o.TTL + s.o.Grace
	b.sent = slices.DeleteFunc(b.sent, func(x sentShare) bool { return now.Sub(x.at) >= hold })
	for i := len(b.sent) - 1; i > 0; i-- {
		if b.sent[i].onStream && !now.Before(b.sent[i].first.Add(s.o.Grace)) {
			b.sent = slices.Delete(b.sent, 0, i)
			break
		}
	}
}

// grant renews b's grant at home and returns the strategy to send, or nil
// when home did not answer: the Envoy then keeps its assignment until its
// time to live, which the grant outlasts, and falls back after it.
//
// The share to send is the split of the limit over every holder's last
// demand and floor (as home reported them at the previous call), with
// b's own demand measured now; it changes at most once per ChangeEvery.
// Home is asked for the larger of it and every share sent in the last
// TTL+Grace (an Envoy may still enforce any of them), so the shares home
// holds cover every token bucket an Envoy may be running; what is sent
// is at most what home granted.
func (ss *session) grant(ctx context.Context, b *bucket, now time.Time) *strategy {
	s := ss.svc
	l := b.limit
	floor := ss.floor(l)
	hold := s.o.TTL + s.o.Grace
	ss.confirm(b, now)
	held := func() int64 {
		var h int64
		for _, x := range b.sent {
			h = max(h, x.share)
		}
		return h
	}
	req := grant.Request{Key: b.key, Limit: floodgate.Limit{Limit: l.Limit, Period: time.Second}, Holder: ss.holder,
		Now: now, Term: hold, Grace: s.o.Grace, Demand: b.demand.Rate, Floor: floor}
	call := func(want int64) (grant.Grant, bool) {
		req.Want = want
		cctx, cancel := context.WithTimeout(ctx, s.o.Timeout)
		defer cancel()
		out, err := s.home.Grant(cctx, req)
		s.m.grants.Inc()
		if err != nil {
			s.m.homeErrors.Inc()
			s.log.Debug("rlqs grant failed", "holder", ss.holder, "error", err)
			return out, false
		}
		b.last = out
		return out, true
	}
	own := share.Party{Demand: b.demand.Rate, Floor: floor}
	split := splitLimit(l, floor)
	target, ok := b.last.Target(split, own, s.o.Policy)
	if !ok {
		// The first grant of the bucket on this stream: register its
		// demand, keeping what the holder holds (a named holder that
		// reconnected may hold a share its Envoy still enforces, which
		// is held until this stream confirms a newer one), and learn
		// the others'.
		req.Keep = true
		out, ok := call(0)
		req.Keep = false
		if !ok {
			return nil
		}
		if out.Share > 0 {
			b.sent = append(b.sent, sentShare{share: out.Share, first: now, at: now})
		}
		target, _ = b.last.Target(split, own, s.o.Policy)
	}
	expired := b.cur == nil || now.Sub(b.lastSent) >= s.o.TTL
	keep := !expired && now.Sub(b.changed) < s.o.ChangeEvery
	if !expired && b.cur.share > 0 && abs(target-b.cur.share) <= b.cur.share/16 {
		// Within 1/16 of the share in force: not worth a new token
		// bucket, which the Envoy would start full.
		keep = true
	}
	if keep {
		target = b.cur.share
	} else if !b.changed.IsZero() && now.Sub(b.changed) < s.o.ChangeEvery {
		// No assignment in force (a bucket subscribed again soon after
		// it was abandoned), but a token bucket was made less than
		// ChangeEvery ago: no new one yet, DENY_ALL until then.
		target = 0
	}
	out, ok := call(max(target, held()))
	if !ok {
		return nil
	}
	give := min(target, out.Share)
	if keep {
		// out.Share >= held >= b.cur.share unless home lost its state.
		give = min(b.cur.share, out.Share)
	}
	return tokenBucket(l, give)
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// tokenBucket is the token bucket of share units of l: tokens_per_fill
// units every fill_interval, the period rounded up to whole seconds (Envoy
// reads only the seconds of a fill interval), with the rate rounded down,
// and max_tokens the same part of l's capacity, rounded down; for a fixed
// window, at most WindowBurst of the share's rate (rounded up, at least 1),
// so that a new token bucket, which starts full, hands out a second of
// the share, not a whole window's. A share too small for one token is
// DENY_ALL.
func tokenBucket(l floodgate.Limit, s int64) *strategy {
	st := &strategy{blanket: typev3.RateLimitStrategy_DENY_ALL, share: s}
	if s <= 0 || l.Limit <= 0 {
		return st
	}
	fill := (l.Period + time.Second - 1) / time.Second
	tpf := mulDiv(uint64(s), uint64(fill)*uint64(time.Second), uint64(l.Period))
	maxTokens := mulDiv(uint64(s), uint64(l.Capacity()), uint64(l.Limit))
	if isWindow(l) {
		maxTokens = min(maxTokens, max(1, ceilMulDiv(uint64(s), uint64(WindowBurst), uint64(l.Period))))
	}
	tpf, maxTokens = min(tpf, math.MaxUint32), min(maxTokens, math.MaxUint32)
	if tpf == 0 || maxTokens == 0 {
		return st
	}
	st.blanket, st.bucket, st.fillSeconds = typev3.RateLimitStrategy_ALLOW_ALL, true, int64(fill)
	st.tokensPerFill, st.maxTokens = uint32(tpf), uint32(maxTokens)
	return st
}

// WindowBurst is the span of a share's rate that a fixed window's token
// bucket holds at most: a second, the least fill interval Envoy reads.
const WindowBurst = time.Second

// ceilMulDiv is ⌈a×b/c⌉ without overflow, saturating at 2^64-1.
func ceilMulDiv(a, b, c uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	if hi >= c {
		return math.MaxUint64
	}
	q, r := bits.Div64(hi, lo, c)
	if r > 0 && q < math.MaxUint64 {
		q++
	}
	return q
}

// mulDiv is ⌊a×b/c⌋ without overflow, saturating at 2^64-1.
func mulDiv(a, b, c uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	if hi >= c {
		return math.MaxUint64
	}
	q, _ := bits.Div64(hi, lo, c)
	return q
}

// assign records st as sent to b now and returns its action.
func (ss *session) assign(b *bucket, st *strategy, now time.Time, ttl time.Duration) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	if b.key != "" {
		if !st.equal(b.cur) || now.Sub(b.lastSent) >= ss.svc.o.TTL {
			// A new token bucket at the Envoy (a changed strategy, or one
			// sent after the last expired).
			b.changed = now
		}
		// One entry per distinct share in a row, so the list holds at most
		// the changes of TTL+Grace (at most one per ChangeEvery, and a
		// resent share only moves its time), however often a client
		// reports.
		// A share of 0 is recorded too: once confirmed, it says the
		// Envoy no longer enforces what came before it.
		switch n := len(b.sent); {
		case ttl <= 0:
		case n > 0 && b.sent[n-1].share == st.share && b.sent[n-1].onStream:
			b.sent[n-1].at = now
		default:
			b.sent = append(b.sent, sentShare{share: st.share, first: now, at: now, onStream: true})
		}
	}
	b.cur, b.lastSent = st, now
	ss.svc.m.assignments.Inc()
	return &rlqsv3.RateLimitQuotaResponse_BucketAction{BucketId: b.id,
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
			AssignmentTimeToLive: durationpb.New(ttl),
			RateLimitStrategy:    st.proto(),
		}}}
}

// expireAll is the drain's answer: every bucket's current strategy with a
// time to live of 0; nil when the stream has none.
func (ss *session) expireAll() *rlqsv3.RateLimitQuotaResponse {
	resp := &rlqsv3.RateLimitQuotaResponse{}
	now := ss.svc.o.Clock()
	for _, b := range ss.buckets {
		if b.abandoned {
			continue
		}
		st := b.cur
		if st == nil {
			st = &strategy{blanket: typev3.RateLimitStrategy_DENY_ALL}
		}
		resp.BucketAction = append(resp.BucketAction, ss.assign(b, st, now, 0))
	}
	if len(resp.BucketAction) == 0 {
		return nil
	}
	return resp
}
