package redisstore

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algorithm"
)

// Options configure a Store. A nil *Options, or the zero value, means every
// default.
type Options struct {
	// Prefix starts every key; default DefaultPrefix ("floodgate"). It must
	// not contain '{' or '}', which would change the keys' Cluster slot.
	// Give each application its own prefix when several share a Redis.
	Prefix string
	// ClientTime decides requests whose Now is zero at this process's clock
	// (Clock), passed to the script, instead of the Redis server's TIME.
	// Use it on managed Redis offerings that forbid TIME in scripts. Every
	// process sharing the limits should then have a synchronised clock.
	// Default false: the server's clock, which every instance shares.
	ClientTime bool
	// Clock is the clock of ClientTime; nil means the system clock. Setting
	// it implies ClientTime.
	Clock floodgate.Clock
	// DenyCache is the most keys the store remembers as over their limit,
	// so that a client hammering a denied key costs no round trip until
	// its RetryAfter: see "Local decisions" in the package doc for when
	// this is exact. Default 0: off.
	DenyCache int
	// BudgetIdle is how long the local budget of a key (a limit with a
	// LocalBudget) may go unused before the store gives its unused units
	// back to Redis; 0 means DefaultBudgetIdle.
	BudgetIdle time.Duration
	// Functions runs the scripts as Redis functions (FCALL) instead of
	// EVALSHA: the store loads its library with FUNCTION LOAD REPLACE on
	// every master when a call finds its function missing (the first
	// call, after a restart without persistence, after FUNCTION FLUSH),
	// then calls again (at most three loads per call): a call that failed
	// with "Function not found" did not run. A function runs only its own code per call, where
	// EVALSHA runs the whole script, defining every helper again: it
	// costs Redis less CPU per decision (see "Functions" in the package
	// doc).
	//
	// Trade-offs: it needs Redis 7.0 or later (or Valkey); on an older
	// server every call fails with an error saying so, which wraps Redis's
	// unknown command error. There is no fallback to EVALSHA. Functions
	// are part of the dataset: persisted in RDB and AOF and replicated, so
	// they survive a failover, but also visible to FUNCTION LIST and
	// removed by FUNCTION FLUSH (after which the store loads them again).
	// A managed Redis may refuse FUNCTION LOAD (an ACL that denies it):
	// every call that finds no library then fails with an error naming
	// FUNCTION LOAD and Redis's reason. Default false: EVALSHA.
	Functions bool
	// Coalesce is how many script runs the store keeps in flight per
	// group of keys (the whole store, or one subject on a Redis Cluster)
	// before a concurrent call waits for one to come back; the calls that
	// waited then go together in one script run that decides each on its
	// own. Under load this costs Redis far less CPU per decision, so one
	// Redis decides more per second; with fewer calls at once every call
	// goes out on its own at once. Decisions are the same either way: see
	// "Coalescing" in the package doc. 0 means DefaultCoalesce; a negative
	// value turns coalescing off, so that every call runs its own script.
	Coalesce int
	// WaitReplicas, above 0, follows every script run with Redis's WAIT on
	// the same connection: a decision is returned only once that many
	// replicas have acknowledged the run's writes. A run they do not
	// acknowledge within WaitTimeout returns an error wrapping
	// ErrNotReplicated, which the Limiter answers by its failure policy;
	// the run did count on the master. This shrinks what a failover loses
	// (see "Replication and WAIT" in the package doc) at the price of a
	// round trip to a replica per run and a dedicated connection while it
	// waits. Default 0: no WAIT, the Redis default of asynchronous
	// replication.
	WaitReplicas int
	// WaitTimeout is how long a WAIT waits for the replicas, at most, and
	// never more than half of what is left of the call's deadline; 0 means
	// DefaultWaitTimeout. It is rounded down to a whole millisecond,
	// WAIT's unit, and is at least 1 ms. With a go-redis client it must be
	// below the client's ReadTimeout (see package goredisstore).
	WaitTimeout time.Duration
	// TLS is the TLS configuration of Open's connections for a rediss://,
	// rediss-sentinel:// or rediss-cluster:// URL, in place of the default
	// (TLS 1.2 or later, the server verified against the system roots):
	// for a private CA (RootCAs), a client certificate for mutual TLS
	// (Certificates, or GetClientCertificate to read a renewed one at
	// each new connection), or a server name other than the URL's host
	// (ServerName). Open uses a clone, with MinVersion TLS 1.2 if it is 0.
	// Leave ServerName empty for a Cluster, so that each node is verified
	// by the name or IP address it is reached at; set, every node's
	// certificate must hold that one name. With rediss-sentinel:// the
	// sentinels are reached with it too. Default nil: the default above.
	// Setting it with a URL without TLS (redis://…) is an error, not
	// ignored, and so is handing it to New or NewWithConn (goredisstore.New),
	// whose client has its own TLS configuration.
	TLS *tls.Config
}

// DefaultWaitTimeout is the default Options.WaitTimeout.
const DefaultWaitTimeout = 50 * time.Millisecond

// DefaultBudgetIdle is the default Options.BudgetIdle.
const DefaultBudgetIdle = 100 * time.Millisecond

// Store is the Redis floodgate.Store: each decision is one Lua script run
// atomically next to the state. Make one with Open, New, or NewWithConn
// (as goredisstore.New does for a go-redis client); the zero value is not
// usable. It is safe for concurrent use; share one per
// client. Apply is the method most callers want, through a
// floodgate.Limiter.
type Store struct {
	c      Conn
	prefix string
	clock  floodgate.Clock // nil: the server's TIME
	// closeClient closes the client that Open made; nil for a client
	// handed to New or NewWithConn, which stays the caller's.
	closeClient func()
	closed      atomic.Bool
	local       *local // denials remembered, local budgets
	// lib, when Options.Functions, loads the library; nil: EVALSHA.
	lib *libLoader
	// co coalesces concurrent calls (Options.Coalesce); nil: off.
	co *coalescer
	// wait is the WAIT after each script run (Options.WaitReplicas and
	// WaitTimeout); Replicas 0: none.
	wait Wait
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

// Open connects to the Redis named by rawURL (see the package doc for the
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

func validOptions(opts *Options) error {
	if opts != nil && strings.ContainsAny(opts.Prefix, "{}") {
		return fmt.Errorf("redisstore: Options.Prefix %q contains a brace, which would change the keys' Cluster slot", opts.Prefix)
	}
	if opts != nil && opts.DenyCache < 0 {
		return fmt.Errorf("redisstore: Options.DenyCache %d is negative", opts.DenyCache)
	}
	if opts != nil && opts.BudgetIdle < 0 {
		return fmt.Errorf("redisstore: Options.BudgetIdle %v is negative", opts.BudgetIdle)
	}
	if opts != nil && opts.WaitReplicas < 0 {
		return fmt.Errorf("redisstore: Options.WaitReplicas %d is negative", opts.WaitReplicas)
	}
	if opts != nil && opts.WaitTimeout < 0 {
		return fmt.Errorf("redisstore: Options.WaitTimeout %v is negative", opts.WaitTimeout)
	}
	return nil
}

func newStore(c Conn, opts *Options) (*Store, error) {
	if err := validOptions(opts); err != nil {
		return nil, err
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	s := &Store{c: c, prefix: o.Prefix, clock: o.Clock}
	if s.prefix == "" {
		s.prefix = DefaultPrefix
	}
	if o.ClientTime && s.clock == nil {
		s.clock = floodgate.SystemClock{}
	}
	s.local = newLocal(&o, s.clock)
	if o.Functions {
		s.lib = &libLoader{sem: make(chan struct{}, 1)}
	}
	if o.WaitReplicas > 0 {
		s.wait = Wait{Replicas: int64(o.WaitReplicas), Timeout: cmp.Or(o.WaitTimeout, DefaultWaitTimeout)}
		if err := c.CanWait(s.wait.Timeout); err != nil {
			return nil, fmt.Errorf("redisstore: Options.WaitReplicas: %w", err)
		}
	}
	switch {
	case o.Coalesce == 0:
		s.co = newCoalescer(s, DefaultCoalesce, c.Cluster())
	case o.Coalesce > 0:
		s.co = newCoalescer(s, o.Coalesce, c.Cluster())
	}
	return s, nil
}

// Key returns the Redis key that holds key's state under limit:
//
//	<prefix>:v1:<algorithm>:<period in µs>:{<encoded key>}
//
// See the package doc for the encoding. The store reads and writes only
// such keys; Key is for tools and tests that inspect Redis.
func (s *Store) Key(key string, limit floodgate.Limit) string {
	return redisKey(s.prefix, limit.Algorithm, limit.Period, key)
}

// Apply decides r in one script run: see floodgate.Store. A request whose
// limit has a LocalBudget, or that Options.DenyCache remembers as denied, may be
// decided in process (see the package doc). An error from Redis
// (connection, timeout, ctx done) is returned wrapped with the algorithm
// and key; the request may then have been counted or not.
func (s *Store) Apply(ctx context.Context, r floodgate.Request) (floodgate.Decision, error) {
	if err := r.Validate(); err != nil {
		return floodgate.Decision{}, err
	}
	if s.closed.Load() {
		return floodgate.Decision{}, floodgate.ErrClosed
	}
	alg := algorithmOf(r.Limit)
	key := s.Key(r.Key, r.Limit)
	if r.Now.IsZero() {
		return s.local.apply(ctx, s, r, alg, key)
	}
	return s.applyRemote(ctx, r, alg, key)
}

// applyRemote decides r in Redis: in a script run of its own, or
// coalesced with other calls (see coalesce.go).
func (s *Store) applyRemote(ctx context.Context, r floodgate.Request, alg floodgate.Algorithm, key string) (floodgate.Decision, error) {
	now := s.nowMicros(&r)
	if s.co != nil {
		return s.co.apply(ctx, r, alg, key, now)
	}
	return s.applyOne(ctx, r, alg, key, now)
}

// applyOne decides r at now (see nowMicros) in one run of its algorithm's
// script.
func (s *Store) applyOne(ctx context.Context, r floodgate.Request, alg floodgate.Algorithm, key string, now int64) (floodgate.Decision, error) {
	// One allocation for the key and the arguments.
	kv := make([]string, 1, 1+argsPerRequest)
	kv[0] = key
	args := appendRequest(kv[1:1], &r, alg, now)
	vals, err := s.run(ctx, scripts.single[alg], kv[:1], args)
	if err != nil {
		return floodgate.Decision{}, fmt.Errorf("redisstore: %s %s: %w", alg, key, err)
	}
	if len(vals) != replyLen {
		return floodgate.Decision{}, fmt.Errorf("redisstore: %s %s: %w: %d integers, want %d", alg, key, floodgate.ErrUnexpectedReply, len(vals), replyLen)
	}
	d, err := decode(vals, now)
	if err != nil {
		return floodgate.Decision{}, fmt.Errorf("redisstore: %s %s: %w", alg, key, err)
	}
	return d, nil
}

// ApplyBatch decides rs in one script run, all or nothing: see
// floodgate.Batcher. Every request must have the same Key (the subject), so
// that every key of the batch shares its hash tag and one Cluster slot;
// requests of different keys are an error wrapping
// floodgate.ErrInvalidRequest. A batch of one is an Apply.
func (s *Store) ApplyBatch(ctx context.Context, rs []floodgate.Request) ([]floodgate.Decision, error) {
	for i := range rs {
		if err := rs[i].Validate(); err != nil {
			return nil, fmt.Errorf("redisstore: batch request %d: %w", i, err)
		}
		if rs[i].Key != rs[0].Key {
			return nil, &floodgate.FieldError{Kind: floodgate.ErrInvalidRequest, Field: "key", Problem: fmt.Sprintf("a batch decides one key, but request %d has another key than request 0", i)}
		}
	}
	switch len(rs) {
	case 0:
		return []floodgate.Decision{}, nil
	case 1:
		d, err := s.Apply(ctx, rs[0])
		if err != nil {
			return nil, err
		}
		return []floodgate.Decision{d}, nil
	}
	if s.closed.Load() {
		return nil, floodgate.ErrClosed
	}
	keys := make([]string, len(rs))
	nows := make([]int64, len(rs))
	args := make([]string, 0, len(rs)*(1+argsPerRequest))
	for i := range rs {
		alg := algorithmOf(rs[i].Limit)
		keys[i] = s.Key(rs[i].Key, rs[i].Limit)
		nows[i] = s.nowMicros(&rs[i])
		args = append(args, string(alg))
		args = appendRequest(args, &rs[i], alg, nows[i])
	}
	vals, err := s.run(ctx, scripts.batch, keys, args)
	if err != nil {
		return nil, fmt.Errorf("redisstore: batch %s: %w", keys[0], err)
	}
	if len(vals) != replyLen*len(rs) {
		return nil, fmt.Errorf("redisstore: batch %s: %w: %d integers, want %d", keys[0], floodgate.ErrUnexpectedReply, len(vals), replyLen*len(rs))
	}
	out := make([]floodgate.Decision, len(rs))
	allowed := 0
	for i := range rs {
		if out[i], err = decode(vals[i*replyLen:(i+1)*replyLen], nows[i]); err != nil {
			return nil, fmt.Errorf("redisstore: batch %s: request %d: %w", keys[i], i, err)
		}
		if out[i].Allowed {
			allowed++
		}
	}
	if allowed != 0 && allowed != len(rs) {
		return nil, fmt.Errorf("redisstore: batch %s: %w: %d of %d allowed, want all or none", keys[0], floodgate.ErrUnexpectedReply, allowed, len(rs))
	}
	return out, nil
}

// Reset deletes key's state under limit's algorithm and period. An empty
// or too long key, or an invalid limit, is an error, as in Apply.
func (s *Store) Reset(ctx context.Context, key string, limit floodgate.Limit) error {
	probe := floodgate.Request{Key: key, Limit: limit}
	if err := probe.Validate(); err != nil {
		return err
	}
	if s.closed.Load() {
		return floodgate.ErrClosed
	}
	k := s.Key(key, limit)
	err := s.c.Del(ctx, k)
	// After the DEL, so that a budget claimed before it is forgotten too.
	s.local.forget(k)
	if err != nil {
		return fmt.Errorf("redisstore: reset %s: %w", k, err)
	}
	return nil
}

// Close makes the store refuse further calls with floodgate.ErrClosed,
// gives back the unused units of its local budgets (waiting at most two
// seconds for Redis), and closes the client if Open made it; a client
// handed to New or NewWithConn stays open. Close is idempotent.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.local.close(s)
	if s.closeClient != nil {
		s.closeClient()
	}
	return nil
}

// run runs sc by digest and, if the server does not have it (NOSCRIPT:
// after a restart, a failover or SCRIPT FLUSH), by source, which also
// caches it again. The caller never sees NOSCRIPT. A script that failed with
// NOSCRIPT did not run, so running it again cannot count twice.
func (s *Store) run(ctx context.Context, sc *script, keys, args []string) ([]int64, error) {
	if s.lib != nil {
		return s.fcall(ctx, sc, keys, args)
	}
	vals, err := s.c.EvalSHA(ctx, sc.sha, keys, args, s.wait.within(ctx))
	if err != nil && s.c.IsNoScript(err) {
		// The WAIT sent after the EVALSHA that found no script ran all the
		// same; this one gets what is left of the deadline.
		vals, err = s.c.Eval(ctx, sc.src, keys, args, s.wait.within(ctx))
	}
	if err != nil {
		return nil, classify(err)
	}
	return vals, nil
}

// fcall runs sc's function and, if the server does not have it (after the
// store's first call, a restart without persistence, a failover to a
// server without the library, FUNCTION FLUSH), loads the library and calls
// again, at most maxLoads times: an FCALL that failed with "Function not
// found" did not run, so calling again cannot count twice. After any other
// error, a timeout among them, the call may have run: it is not repeated.
func (s *Store) fcall(ctx context.Context, sc *script, keys, args []string) ([]int64, error) {
	for loads := 0; ; loads++ {
		gen := s.lib.gen.Load()
		vals, err := s.c.FCall(ctx, sc.fn, keys, args, s.wait.within(ctx))
		if err == nil {
			return vals, nil
		}
		if isUnknownCommand(err) {
			return nil, fmt.Errorf("Options.Functions needs Redis 7.0 or later: %w", err)
		}
		if !s.c.IsNoFunction(err) || loads == maxLoads {
			return nil, classify(err)
		}
		if err := s.lib.load(ctx, s.c, gen); err != nil {
			return nil, fmt.Errorf("FUNCTION LOAD %s: %w", scripts.lib.name, err)
		}
	}
}

// isUnknownCommand reports whether err is Redis's answer to a command it
// does not have (FCALL before Redis 7.0).
func isUnknownCommand(err error) bool {
	return strings.HasPrefix(strings.TrimPrefix(err.Error(), "ERR "), "unknown command")
}

// maxLoads is the most times one call loads the library (or waits for
// another call's load) before it returns "Function not found": more than
// one, for a FUNCTION FLUSH that comes between a load and the call again.
const maxLoads = 3

// libLoader loads the library for a Store, one load at a time: the calls
// that found their function missing while a load ran use that load.
type libLoader struct {
	sem chan struct{} // a token held while loading
	gen atomic.Uint64 // loads done
}

// load loads the library unless a load finished since gen (the loads done
// when the caller's failed call began).
func (l *libLoader) load(ctx context.Context, c Conn, gen uint64) error {
	select {
	case l.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-l.sem }()
	if l.gen.Load() != gen {
		return nil
	}
	if err := c.LoadLibrary(ctx, scripts.lib.src); err != nil {
		return err
	}
	l.gen.Add(1)
	return nil
}

func algorithmOf(l floodgate.Limit) floodgate.Algorithm {
	if l.Algorithm == "" {
		return floodgate.FixedWindow
	}
	return l.Algorithm
}

// nowMicros is the time passed to the script: Request.Now, the Clock with
// ClientTime, or -1 for the server's TIME.
func (s *Store) nowMicros(r *floodgate.Request) int64 {
	switch {
	case !r.Now.IsZero():
		return r.Now.UnixMicro()
	case s.clock != nil:
		return s.clock.Now().UnixMicro()
	}
	return -1
}

// appendRequest appends the ARGV of one request, in the layout of
// parse_request in common.lua.
func appendRequest(args []string, r *floodgate.Request, alg floodgate.Algorithm, now int64) []string {
	p := r.Limit.Params()
	flags := 0
	if p.FirstHit {
		flags |= flagFirstHit
	}
	if p.CountRejected {
		flags |= flagCountRejected
	}
	if r.Release {
		flags |= flagRelease
	}
	id := ""
	switch alg {
	case floodgate.SlidingWindowLog:
		id = requestID()
	case floodgate.Concurrency:
		id = r.Lease
	}
	// The five numbers are written into one string and sliced from it: one
	// allocation instead of one per number above 99.
	var buf [5 * 20]byte
	var ends [5]int
	b := buf[:0]
	for i, n := range [5]int64{now, p.Limit, p.Period, r.Cost, p.Burst} {
		b = strconv.AppendInt(b, n, 10)
		ends[i] = len(b)
	}
	nums := string(b)
	return append(args,
		nums[:ends[0]],
		nums[ends[0]:ends[1]],
		nums[ends[1]:ends[2]],
		nums[ends[2]:ends[3]],
		nums[ends[3]:ends[4]],
		strconv.Itoa(flags),
		id,
	)
}

// requestID is 96 random bits, the prefix of a call's sliding log members,
// which keeps them unique: two calls in the same microsecond collide with
// probability 2^-96.
func requestID() string {
	var b [12]byte
	binary.LittleEndian.PutUint64(b[:8], rand.Uint64())
	binary.LittleEndian.PutUint32(b[8:], rand.Uint32())
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// replyLen is the number of integers in the reply of one decision.
const replyLen = 6

// decode checks the reply of one decision ({allowed, limit, remaining,
// reset_after_us, retry_after_us, now_us}) and converts it. wantNow is the
// time passed to the script, or -1 for the server's.
func decode(v []int64, wantNow int64) (floodgate.Decision, error) {
	allowed, limit, remaining, resetAfter, retryAfter, now := v[0], v[1], v[2], v[3], v[4], v[5]
	bad := func(field string, n int64) (floodgate.Decision, error) {
		return floodgate.Decision{}, fmt.Errorf("%w: %s %d out of range", floodgate.ErrUnexpectedReply, field, n)
	}
	switch {
	case allowed != 0 && allowed != 1:
		return bad("allowed", allowed)
	case limit < 0 || limit > algorithm.MaxLimit:
		return bad("limit", limit)
	case remaining < 0 || remaining > limit:
		return bad("remaining", remaining)
	case resetAfter < 0 || resetAfter > algorithm.MaxExact:
		return bad("reset_after_us", resetAfter)
	case retryAfter < algorithm.Never || retryAfter > algorithm.MaxExact || (allowed == 1 && retryAfter != 0):
		return bad("retry_after_us", retryAfter)
	case now < 0 || now > algorithm.MaxExact || (wantNow >= 0 && now != wantNow):
		return bad("now_us", now)
	}
	d := algorithm.Decision{Allowed: allowed == 1, Limit: limit, Remaining: remaining, ResetAfter: resetAfter, RetryAfter: retryAfter}
	return floodgate.FromAlgorithm(d, now), nil
}
