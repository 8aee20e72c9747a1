package floodgate

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/floodgate-rl/floodgate/algorithm"
	"github.com/floodgate-rl/floodgate/internal/direct"
)

// FailurePolicy says what a Limiter answers when its store fails (an error
// or a timeout).
type FailurePolicy string

const (
	// FailClosed denies while the store is failing: nothing passes that was
	// not counted. It is the default (the zero value).
	FailClosed FailurePolicy = "fail_closed"
	// FailOpen allows while the store is failing: availability over the
	// limit. Report the failures through the Observer and alert on them.
	FailOpen FailurePolicy = "fail_open"
	// FailLocal decides in Options.Local, an in-process store, with this
	// instance's share of each limit (see Share) while the store is
	// failing, and returns to the store when it answers again: a circuit
	// breaker opens on a failure, decides locally without waiting on the
	// store, and lets one call per Options.ProbeInterval try the store
	// again. Options.Local and Options.Instances are required. The
	// breaker's doc in fallback.go states what a handover costs in
	// accuracy: in any span of time the fleet admits at most twice what
	// the limit allows, plus what a restart of the store forgot.
	FailLocal FailurePolicy = "local"
)

// Options configure a Limiter. A nil *Options, or the zero value, means
// every default.
type Options struct {
	// Clock, if set, stamps every request with Clock.Now(), so decisions use
	// the caller's clock. Nil leaves Request.Now zero and lets the store use
	// its own clock (for Redis, the server's TIME, which every instance
	// shares).
	Clock Clock
	// KeyPrefix is prepended to every key ("api:"), so several limiters can
	// share one store without their keys meeting.
	KeyPrefix string
	// FailurePolicy answers store failures; default FailClosed.
	FailurePolicy FailurePolicy
	// Timeout bounds each store call when above zero (on top of the
	// caller's context). A decision is on the hot path of a request: a few
	// milliseconds is usual for Redis. A store decorator whose calls do
	// work of their own between calls of the store it wraps (one that
	// writes a durable record between a reserve and a settle) bounds
	// those calls itself: if the store has a method
	// WithTimeout(time.Duration) Store, New calls it with Timeout and
	// decides through the Store it returns, with the caller's context. A
	// store whose InProcess method reports true (memstore's) decides in
	// this process without I/O and cannot be unreachable: its calls get
	// no deadline from Timeout, which there could only turn the caller's
	// own wait for a CPU into the failure policy.
	Timeout time.Duration
	// Observer, if set, sees every decision and failure (for metrics).
	Observer Observer
	// Local is the in-process store FailLocal decides in while the store
	// is failing, usually memstore.New(nil); required for FailLocal, as
	// FailurePolicy or as the Policy of an Item of Decide. The Limiter
	// does not close it.
	Local Store
	// Instances is the number of Limiter instances sharing the store
	// (replicas of the service), which FailLocal divides each limit by;
	// required (at least 1) with Local.
	Instances int
	// ProbeInterval is how long FailLocal decides locally after a store
	// failure before one call tries the store again; default
	// DefaultProbeInterval, timed by Clock when set.
	ProbeInterval time.Duration
}

// Observer sees what a Limiter decides. Observe is called synchronously on
// the caller's goroutine, so it must be fast and safe for concurrent use.
type Observer interface {
	Observe(Event)
}

// Event is one decision seen by an Observer.
type Event struct {
	// Request is the request as sent to the store (key with prefix).
	Request Request
	// Outcome is what the caller got and who decided it: the store, the
	// failure policy (Err set), or under FailLocal the local store
	// (Decision.Fallback set; Err is the failure that sent it there, or
	// nil when the open breaker did not ask the store).
	Outcome
	// Latency is the time the call took, local store included; the
	// requests of one Decide or AllowEach share it.
	Latency time.Duration
}

// Limiter checks requests against limits in a Store. It is safe for
// concurrent use; make one per store and share it. Allow is the method most
// callers want.
type Limiter struct {
	store   Store
	clock   Clock
	prefix  string
	policy  FailurePolicy
	timeout time.Duration
	obs     Observer
	fb      *fallback // FailLocal's, with Options.Local; else nil
	// durable: the store accounts for durable quotas (Limit.Durable).
	durable bool
	// direct: no fallback, timeout or observer, so apply calls the store
	// and nothing else.
	direct bool
	// small is the store's direct path (package internal/direct) when
	// the Limiter is direct and has no Clock of its own; else nil.
	small direct.Decider
}

// New returns a Limiter over store. opts may be nil.
func New(store Store, opts *Options) (*Limiter, error) {
	if store == nil {
		return nil, fmt.Errorf("floodgate: New: nil store")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	switch o.FailurePolicy {
	case "":
		o.FailurePolicy = FailClosed
	case FailClosed, FailOpen, FailLocal:
	default:
		return nil, fmt.Errorf("floodgate: New: unknown failure policy %q (want fail_open, fail_closed or local)", o.FailurePolicy)
	}
	if o.Timeout < 0 {
		return nil, fmt.Errorf("floodgate: New: negative timeout %v", o.Timeout)
	}
	fb, err := newFallback(&o)
	if err != nil {
		return nil, err
	}
	if ip, ok := store.(inProcessStore); ok && ip.InProcess() {
		o.Timeout = 0
	}
	if ts, ok := store.(timedStore); ok && o.Timeout > 0 {
		store, o.Timeout = ts.WithTimeout(o.Timeout), 0
	}
	ds, ok := store.(durableStore)
	l := &Limiter{store: store, clock: o.Clock, prefix: o.KeyPrefix, policy: o.FailurePolicy, timeout: o.Timeout, obs: o.Observer, fb: fb,
		durable: ok && ds.DurableQuotas(), direct: fb == nil && o.Timeout == 0 && o.Observer == nil}
	if dd, ok := store.(direct.Decider); ok && l.direct && l.clock == nil {
		l.small = dd
	}
	return l, nil
}

// timedStore is a Store that bounds its own calls (see Options.Timeout).
type timedStore interface {
	WithTimeout(timeout time.Duration) Store
}

// inProcessStore is a Store that decides in this process, without I/O
// (see Options.Timeout).
type inProcessStore interface {
	InProcess() bool
}

// durableStore is a Store that accounts for durable quotas (see
// Limit.Durable).
type durableStore interface {
	DurableQuotas() bool
}

// Store returns the store the limiter decides in: the one given to New,
// or the Store its WithTimeout returned (see Options.Timeout).
func (l *Limiter) Store() Store { return l.store }

// Allow takes one unit for key under limit. See AllowN.
func (l *Limiter) Allow(ctx context.Context, key string, limit Limit) (d Decision, err error) {
	if l.small != nil {
		if ok, err := l.allowSmall(ctx, &d, key, &limit, 1); ok {
			return d, err
		}
	}
	if !l.direct {
		return l.apply(ctx, &Request{Key: key, Limit: limit, Cost: 1})
	}
	// AllowN's common case, repeated here rather than called: see AllowN.
	var r Request
	r.Key, r.Limit, r.Cost = key, limit, 1
	if err := l.prepare(&r, l.now()); err != nil {
		return Decision{RetryAfter: Never}, err
	}
	d, err = l.store.Apply(ctx, r)
	if err != nil {
		return l.failure(err), err
	}
	return d, nil
}

// AllowN takes n units for key under limit if the limit admits them.
//
// The Decision is always usable: on a store failure Allow returns the
// failure policy's decision (allowed for FailOpen, denied for FailClosed)
// together with the error, so a caller may act on the decision alone.
// Under FailLocal the local store decides instead, with no error, and the
// decision has Fallback set. An
// invalid key, limit or n returns an error wrapping ErrInvalidRequest or
// ErrInvalidLimit and a denial, whatever the policy.
func (l *Limiter) AllowN(ctx context.Context, key string, limit Limit, n int64) (d Decision, err error) {
	if l.small != nil {
		if ok, err := l.allowSmall(ctx, &d, key, &limit, n); ok {
			return d, err
		}
	}
	if !l.direct {
		return l.apply(ctx, &Request{Key: key, Limit: limit, Cost: n})
	}
	// The common case, a Limiter with no fallback, timeout or observer,
	// builds the Request and calls the store in this one frame, and Allow
	// repeats these lines rather than call AllowN: most of a decision's
	// cost outside the store is copying the Request and the Decision from
	// frame to frame, above all copies that read with wide loads what was
	// just written a field at a time, and a composite literal, which the
	// compiler builds in a temporary and copies.
	var r Request
	r.Key, r.Limit, r.Cost = key, limit, n
	if err := l.prepare(&r, l.now()); err != nil {
		return Decision{RetryAfter: Never}, err
	}
	d, err = l.store.Apply(ctx, r)
	if err != nil {
		return l.failure(err), err
	}
	return d, nil
}

// Peek reports the state of key under limit without taking anything:
// Remaining is what AllowN could still take.
func (l *Limiter) Peek(ctx context.Context, key string, limit Limit) (Decision, error) {
	return l.apply(ctx, &Request{Key: key, Limit: limit})
}

// Reset gives key its whole budget back under limit's algorithm. The store
// must implement Resetter.
func (l *Limiter) Reset(ctx context.Context, key string, limit Limit) error {
	r, ok := l.store.(Resetter)
	if !ok {
		return fmt.Errorf("floodgate: Reset: %w", ErrNotSupported)
	}
	if key == "" {
		return fieldErr(ErrInvalidRequest, "key", "empty")
	}
	if err := limit.Validate(); err != nil {
		return err
	}
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	return r.Reset(ctx, l.prefix+key, limit)
}

// AllowEach takes n units for key under every limit, all or nothing: if any
// limit denies, nothing is taken from the others. It returns the combined
// decision (see Combine) and each limit's. On a store without Batcher the
// limits are applied one by one and a later denial cannot give back what an
// earlier limit took.
func (l *Limiter) AllowEach(ctx context.Context, key string, n int64, limits ...Limit) (Decision, []Decision, error) {
	rs := make([]Request, len(limits))
	now := l.now()
	for i, lim := range limits {
		rs[i] = Request{Key: key, Limit: lim, Cost: n}
		if err := l.prepare(&rs[i], now); err != nil {
			return Decision{RetryAfter: Never}, nil, err
		}
	}
	c := call{rs: rs, atomic: true, out: make([]Outcome, len(rs))}
	for i := range c.out {
		c.out[i].Policy = l.policy
	}
	l.run(ctx, &c)
	ds := make([]Decision, len(rs))
	for i := range c.out {
		d, err := c.out[i].result()
		if err != nil {
			return d, nil, err
		}
		ds[i] = d
	}
	return Combine(ds), ds, nil
}

// Acquire takes one unit of a Concurrency limit for key and returns the
// lease holding it, or a nil lease if the limit is full. The lease expires
// after limit.Period unless renewed; Release gives it back early. See
// AcquireN.
func (l *Limiter) Acquire(ctx context.Context, key string, limit Limit) (*Lease, Decision, error) {
	return l.AcquireN(ctx, key, limit, 1)
}

// AcquireN takes n units of a Concurrency limit under a new random lease.
// On a store failure, FailOpen returns a lease that holds nothing (its
// Release is a no-op) and the error.
func (l *Limiter) AcquireN(ctx context.Context, key string, limit Limit, n int64) (*Lease, Decision, error) {
	if limit.EffectiveAlgorithm() != Concurrency {
		return nil, Decision{RetryAfter: Never}, fieldErr(ErrInvalidLimit, "algorithm", "Acquire needs a concurrency limit, not %s", limit.EffectiveAlgorithm())
	}
	if n < 1 {
		return nil, Decision{RetryAfter: Never}, fieldErr(ErrInvalidRequest, "cost", "Acquire takes at least 1 unit, not %d", n)
	}
	var id [16]byte
	_, _ = rand.Read(id[:]) // crypto/rand.Read never fails (Go 1.24+).
	lease := &Lease{l: l, key: key, limit: limit, cost: n, id: hex.EncodeToString(id[:])}
	d, err := l.apply(ctx, &Request{Key: key, Limit: limit, Cost: n, Lease: lease.id})
	if err != nil {
		if d.Allowed {
			lease.released = true
			return lease, d, err
		}
		return nil, d, err
	}
	if !d.Allowed {
		return nil, d, nil
	}
	return lease, d, nil
}

// Lease holds units of a Concurrency limit until Release or until it
// expires. It is safe to call Release more than once; not safe for
// concurrent Release and Renew.
type Lease struct {
	l        *Limiter
	key      string
	limit    Limit
	cost     int64
	id       string
	released bool
}

// ID is the lease's random identifier.
func (ls *Lease) ID() string { return ls.id }

// Release gives the lease's units back. Releasing twice, or a lease that
// already expired, is harmless.
func (ls *Lease) Release(ctx context.Context) error {
	if ls.released {
		return nil
	}
	_, err := ls.l.apply(ctx, &Request{Key: ls.key, Limit: ls.limit, Cost: ls.cost, Lease: ls.id, Release: true})
	if err == nil {
		ls.released = true
	}
	return err
}

// Renew extends the lease for another limit.Period from now. It is denied
// if the lease expired and the limit has since filled up.
func (ls *Lease) Renew(ctx context.Context) (Decision, error) {
	return ls.l.apply(ctx, &Request{Key: ls.key, Limit: ls.limit, Cost: ls.cost, Lease: ls.id})
}

// apply prepares r (which it changes) and decides it. r does not escape:
// the store gets a copy.
func (l *Limiter) apply(ctx context.Context, r *Request) (Decision, error) {
	if err := l.prepare(r, l.now()); err != nil {
		return Decision{RetryAfter: Never}, err
	}
	if !l.direct {
		return l.applyWrapped(ctx, r)
	}
	// No fallback, timeout or observer: the store call alone, in a small
	// frame with no defer.
	d, err := l.store.Apply(ctx, *r)
	if err != nil {
		d = l.failure(err)
	}
	return d, err
}

// allowSmall is AllowN(ctx, key, limit, cost) by the store's direct path
// (package internal/direct), for a Limiter that has one: it sets *out
// and reports true, with the error if ctx has ended; or reports false,
// having decided nothing, for a request the direct path does not take
// (the general path then decides it, or reports why it is invalid): one
// that is not a valid request of an O(1) algorithm, or is calendar or
// durable, or that the store turns down. It writes *out a field at a
// time, and hands the store the request in parts: a struct of more than
// four fields is kept in memory, and its copies from frame to frame read
// with wide loads what was just written a field at a time, which waits.
func (l *Limiter) allowSmall(ctx context.Context, out *Decision, key string, limit *Limit, cost int64) (bool, error) {
	if l.prefix != "" {
		key = l.prefix + key
	}
	if key == "" || len(key) > MaxKeyLen || cost < 0 || cost > MaxLimit || limit.Durable || limit.Calendar.Unit != "" {
		return false, nil
	}
	// limit.valid(), with the kind found once for both.
	k, known := limit.kind()
	if !k.Small() || limit.brokenAs(k, known) != 0 {
		return false, nil
	}
	if err := ctx.Err(); err != nil {
		*out = l.failure(err)
		return true, err
	}
	// limit.Params(), for a limit that is not calendar.
	var burst int64
	if k.Burst() {
		burst = limit.Limit
		if limit.Burst != 0 && limit.Limit != 0 {
			burst = limit.Burst
		}
	}
	var flags direct.Flags
	if limit.Window == FirstHit {
		flags |= direct.FirstHit
	}
	if limit.CountRejected {
		flags |= direct.CountRejected
	}
	allowed, capacity, remaining, resetAfter, retryAfter, now, ok := l.small.DecideSmall(direct.Small{
		Key: key, Kind: k, Flags: flags, Limit: limit.Limit, Period: int64(limit.Period / time.Microsecond), Burst: burst, Cost: cost})
	if !ok {
		return false, nil
	}
	// FromAlgorithm's conversion; out.Fallback stays false.
	out.Allowed, out.Limit, out.Remaining = allowed, capacity, remaining
	out.ResetAfter = time.Duration(resetAfter) * time.Microsecond
	out.RetryAfter = time.Duration(retryAfter) * time.Microsecond
	if retryAfter == algorithm.Never {
		out.RetryAfter = Never
	}
	out.Now = time.UnixMicro(now)
	return true, nil
}

// failure is the decision of a call whose store returned err, on a
// Limiter without FailLocal's local store: the failure policy's if it
// answers err, else a denial (see ErrStore).
func (l *Limiter) failure(err error) Decision {
	if answersByPolicy(err) {
		return failed(l.policy)
	}
	return Decision{}
}

// applyWrapped is apply for a prepared r with a fallback, a timeout or an
// observer: the pipeline of Decide, for one request.
func (l *Limiter) applyWrapped(ctx context.Context, r *Request) (Decision, error) {
	c := call{rs: []Request{*r}, out: []Outcome{{Policy: l.policy}}}
	l.run(ctx, &c)
	return c.out[0].result()
}

// prepare adds the key prefix and the time, and validates r.
func (l *Limiter) prepare(r *Request, now time.Time) error {
	if l.prefix != "" {
		r.Key = l.prefix + r.Key
	}
	r.Now = now
	if r.Limit.Durable && !l.durable {
		return fieldErr(ErrInvalidLimit, "durable", "a durable quota needs a store that accounts for it (see Limit.Durable)")
	}
	return r.Validate()
}

// now is the limiter's clock, or the zero time to let the store decide.
func (l *Limiter) now() time.Time {
	if l.clock == nil {
		return time.Time{}
	}
	return l.clock.Now()
}

func (l *Limiter) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if l.timeout <= 0 {
		return ctx, noCancel
	}
	// A caller's deadline no later than the timeout's is already the
	// bound: deriving a context (four allocations and a timer) would
	// change nothing.
	if d, ok := ctx.Deadline(); ok && !d.After(time.Now().Add(l.timeout)) {
		return ctx, noCancel
	}
	return context.WithTimeout(ctx, l.timeout)
}

// noCancel is the CancelFunc of a context that was not derived.
func noCancel() {}
