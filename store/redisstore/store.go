package redisstore

import (
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/grant"
)

// Store is the Redis floodgate.Store: each decision is one Lua script run
// atomically next to the state. Make one with Open, New, or NewWithConn
// (as goredisstore.New does for a go-redis client); the zero value is not
// usable. It is safe for concurrent use; share one per client. Apply is
// the method most callers want, through a floodgate.Limiter.
//
// A Store is a stack of layers, each of which calls only the one below it
// (see "Layers" in the package doc): Apply -> deny cache -> local budgets
// -> coalescer -> runner -> Conn.
type Store struct {
	prefix string
	conn   Conn // for Reset and Ping; the runner runs the scripts
	// closeClient closes the client that Open made; nil for a client
	// handed to New or NewWithConn, which stays the caller's.
	closeClient func()
	closed      atomic.Bool

	top     decider       // the first layer of Apply: deny, else budgets
	deny    *denyCache    // Options.DenyCache; nil: off
	budgets *localBudgets // floodgate.Limit.LocalBudget of the windows
	slices  *rateSlices   // floodgate.Limit.LocalBudget of the buckets
	co      *coalescer    // Options.Coalesce; nil: off
	runner  *runner       // runs the scripts; ApplyBatch calls it directly

	crossSlot crossSlotCounters // CrossSlotStats

	// Reservations: Options.HoldRetention in µs, Options.HoldSweep, and
	// the sweeper of holds made with release, started with the first
	// Reserve.
	holdRetain  int64
	holdSweep   time.Duration
	holdSweeper *loop
}

// decider is a layer of a Store: it decides c, in process or by handing it
// to the layer below, which it holds. An error is wrapped with c's
// algorithm and key (call.wrap).
type decider interface {
	decide(ctx context.Context, c call) (floodgate.Decision, error)
}

var (
	_ floodgate.Store    = (*Store)(nil)
	_ floodgate.Resetter = (*Store)(nil)
	_ floodgate.Batcher  = (*Store)(nil)
	_ floodgate.Closer   = (*Store)(nil)
)

// New returns a Store over a rueidis client: standalone, Sentinel or
// Cluster, as the client was built. The client stays the caller's: Close
// does not close it. opts may be nil.
func New(client rueidis.Client, opts *Options) (*Store, error) {
	if client == nil {
		return nil, fmt.Errorf("redisstore: New: nil client")
	}
	if opts != nil && opts.TLS != nil {
		return nil, fmt.Errorf("redisstore: New: Options.TLS is for Open; configure TLS on the client")
	}
	return newStore(rueidisConn{client}, opts)
}

// Open connects to the Redis named by rawURL (see docs/redis.md for the
// forms) with a rueidis client that the Store owns: Close closes it. It
// fails if the server cannot be reached or refuses the credentials before
// ctx is done. opts may be nil.
func Open(ctx context.Context, rawURL string, opts *Options) (*Store, error) {
	cfg, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	if err := validOptions(opts); err != nil {
		return nil, err
	}
	var custom *tls.Config
	if opts != nil && opts.TLS != nil {
		if !cfg.TLS {
			scheme, _, _ := strings.Cut(rawURL, "://")
			return nil, fmt.Errorf("redisstore: Options.TLS is set, but %s:// has no TLS: use rediss://, rediss-sentinel:// or rediss-cluster://", scheme)
		}
		custom = opts.TLS
	}
	o := cfg.clientOption(custom)
	asked := watchCertRequests(&o)
	if d, ok := ctx.Deadline(); ok && (o.Dialer.Timeout == 0 || time.Until(d) < o.Dialer.Timeout) {
		o.Dialer.Timeout = max(time.Until(d), time.Millisecond)
		o.Sentinel.Dialer.Timeout = o.Dialer.Timeout
	}
	client, err := rueidis.NewClient(o)
	if err != nil {
		return nil, cfg.openError(err, asked)
	}
	if err := client.Do(ctx, client.B().Ping().Build()).Error(); err != nil {
		client.Close()
		return nil, cfg.openError(err, asked)
	}
	s, err := newStore(rueidisConn{client}, opts)
	if err != nil {
		client.Close()
		return nil, err
	}
	s.closeClient = client.Close
	return s, nil
}

// newStore builds the layers of a Store over c, from the bottom up.
func newStore(c Conn, opts *Options) (*Store, error) {
	if err := validOptions(opts); err != nil {
		return nil, err
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	rn := &runner{c: c, clock: o.Clock}
	if o.ClientTime && rn.clock == nil {
		rn.clock = floodgate.SystemClock{}
	}
	if o.Functions {
		rn.lib = newLibLoader()
	}
	if o.WaitReplicas > 0 {
		rn.wait = Wait{Replicas: int64(o.WaitReplicas), Timeout: cmp.Or(o.WaitTimeout, DefaultWaitTimeout)}
		if err := c.CanWait(rn.wait.Timeout); err != nil {
			return nil, fmt.Errorf("redisstore: Options.WaitReplicas: %w", err)
		}
	}
	s := &Store{prefix: cmp.Or(o.Prefix, DefaultPrefix), conn: c, runner: rn,
		holdRetain:  cmp.Or(o.HoldRetention, floodgate.DefaultHoldRetention).Microseconds(),
		holdSweep:   cmp.Or(o.HoldSweep, DefaultHoldSweep),
		holdSweeper: newLoop()}
	var remote decider = rn
	if o.Coalesce >= 0 {
		s.co = newCoalescer(rn, cmp.Or(o.Coalesce, DefaultCoalesce), c.Cluster())
		remote = s.co
	}
	clock := localClock{rn.clock}
	s.budgets = newLocalBudgets(remote, rn, clock, cmp.Or(o.BudgetIdle, DefaultBudgetIdle))
	s.top = s.budgets
	home, err := grant.NewScriptHome(s.prefix, rn.homeEval)
	if err != nil {
		return nil, err
	}
	s.slices = newRateSlices(home, rn.seenEval, clock, cmp.Or(o.SliceRenew, DefaultSliceRenew), cmp.Or(o.SliceTerm, DefaultSliceTerm),
		cmp.Or(o.SliceGrace, DefaultSliceGrace), cmp.Or(o.BudgetIdle, DefaultBudgetIdle))
	if o.DenyCache > 0 {
		s.deny = newDenyCache(o.DenyCache, clock, s.budgets)
		s.top = s.deny
	}
	return s, nil
}

// Key returns the Redis key that holds key's state under limit:
//
//	<prefix>:v1:<algorithm>:<period in µs>:{<encoded key>}
//
// or, for a calendar limit, <prefix>:v1:fixed_window:<unit>:{<encoded
// key>}. See docs/redis.md for the encoding. A fixed window keeps its
// state in keys named after this one (<key>:w, the counters of an aligned
// or calendar window; <key>:f, a first-hit window's state), and reads this
// one only for what a version before them wrote. The store reads and
// writes only such keys; Key is for tools and tests that inspect Redis.
func (s *Store) Key(key string, limit floodgate.Limit) string {
	if limit.Calendar.Unit != "" {
		return calendarKey(s.prefix, limit.Calendar.Unit, key)
	}
	return redisKey(s.prefix, limit.Algorithm, limit.Period, key)
}

// Apply decides r: see floodgate.Store. A request whose limit has a
// LocalBudget, or that Options.DenyCache remembers as denied, may be
// decided in process; the others take one script run, or a share of one
// (see docs/redis.md). An error from Redis (connection, timeout, ctx
// done) is returned wrapped with the algorithm and key; the request may
// then have been counted or not.
func (s *Store) Apply(ctx context.Context, r floodgate.Request) (floodgate.Decision, error) {
	if err := r.Validate(); err != nil {
		return floodgate.Decision{}, err
	}
	if s.closed.Load() {
		return floodgate.Decision{}, floodgate.ErrClosed
	}
	c := call{r: r, alg: r.Limit.EffectiveAlgorithm(), key: s.Key(r.Key, r.Limit)}
	if sliced(r.Limit) {
		return s.slices.decide(ctx, c)
	}
	return s.top.decide(ctx, c)
}

// Raise raises r.Key's window that starts at window to at least r.Cost,
// in one script run: see floodgate.Raiser. A remembered denial of the key
// is forgotten, since the state changed.
func (s *Store) Raise(ctx context.Context, r floodgate.Request, window time.Time) (floodgate.Decision, error) {
	if err := floodgate.CheckRaise(r, window); err != nil {
		return floodgate.Decision{}, err
	}
	if s.closed.Load() {
		return floodgate.Decision{}, floodgate.ErrClosed
	}
	k := s.Key(r.Key, r.Limit)
	d, err := s.runner.raise(ctx, call{r: r, alg: floodgate.FixedWindow, key: k}, window.UnixMicro())
	if s.deny != nil {
		s.deny.forget(k)
	}
	return d, err
}

// Reset deletes key's state under limit's algorithm and period (for a
// fixed window, its counters or its first-hit state, and the key a version
// before them kept its state in: see docs/redis.md). An empty
// or too long key, or an invalid limit, is an error, as in Apply. The
// slices of a token bucket or GCRA with a LocalBudget, which hold its rate
// in the instances, are not refilled (see "Rate slices" in
// docs/redis.md).
func (s *Store) Reset(ctx context.Context, key string, limit floodgate.Limit) error {
	probe := floodgate.Request{Key: key, Limit: limit}
	if err := probe.Validate(); err != nil {
		return err
	}
	if s.closed.Load() {
		return floodgate.ErrClosed
	}
	k := s.Key(key, limit)
	err := s.conn.Del(ctx, k)
	if sk := stateKey(k, limit); sk != k && err == nil {
		err = s.conn.Del(ctx, sk)
	}
	// After the DEL, so that a budget claimed before it is forgotten too.
	if s.deny != nil {
		s.deny.forget(k)
	}
	s.budgets.forget(k)
	if err != nil {
		return fmt.Errorf("redisstore: reset %s: %w: %w", k, floodgate.ErrStore, err)
	}
	return nil
}

// Close makes the store refuse further calls with floodgate.ErrClosed,
// stops the sweeper of reservations, gives back the unused units of its
// local budgets and the slices of rate home granted it (waiting at most
// two seconds for Redis; a slice whose grant call is in flight runs out after
// Options.SliceTerm instead), and closes the client if Open made it; a
// client handed to New or NewWithConn stays open. Close is idempotent.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.stopSweeper()
	s.budgets.close()
	s.slices.close()
	if s.closeClient != nil {
		s.closeClient()
	}
	return nil
}
