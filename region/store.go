package region

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/grant"
	"github.com/floodgate-rl/floodgate/share"
)

// Defaults of Options.
const (
	DefaultTerm      = 10 * time.Second
	DefaultRebalance = 500 * time.Millisecond
	DefaultGrace     = time.Second
	DefaultTimeout   = 2 * time.Second
	DefaultFirstWait = time.Second
	DefaultKeyPrefix = "global:"
)

// Options configure a Store. Name is required; the zero value of every
// other field means its default.
type Options struct {
	// Name is the region's name ("eu-west"), 1 to 64 bytes of
	// [A-Za-z0-9_.-]. Each process holds its own grants under it (with an
	// incarnation of its own), so several processes of one region are
	// several holders, each with its own share.
	Name string
	// Clock is the region's clock: its windows, and the time it tells
	// home. Nil means the process clock. A Request's own Now is used when
	// set, but never earlier than a time the Store already used.
	Clock floodgate.Clock
	// Policy splits each global limit among the regions by their recent
	// demand (package share); the zero value is share.Proportional.
	Policy share.Policy
	// Floor is the fraction of each global limit every region keeps
	// whatever its demand (0.05 of a limit of 1000 is 50): the first
	// request after a quiet spell is admitted at once. 0 to 1, default 0.
	Floor float64
	// SafeShare is the fraction of each global limit a region decides on
	// once its grant has ended without home answering (a partition): 0
	// (the default) denies every global request until home answers again,
	// and adds nothing to the overrun bound of the package doc.
	SafeShare float64
	// Term is how long a grant lasts at least, DefaultTerm (10 s) by
	// default: how long a region that lost home keeps deciding on its
	// share, and how long a share of a region that vanished stays unused.
	// A grant ends at a window boundary, so it lasts up to a Period more.
	Term time.Duration
	// Rebalance is how often the region reports its demand and claims or
	// returns share, DefaultRebalance (500 ms) by default; at most Term/2.
	Rebalance time.Duration
	// Grace is how long home keeps an ended grant's share counted: the
	// most the regions' clocks may disagree. DefaultGrace (1 s).
	Grace time.Duration
	// Timeout bounds each call to home; DefaultTimeout (2 s).
	Timeout time.Duration
	// FirstWait is how long the first decision of a global key in this
	// process waits for the key's first grant (bounded by its context too);
	// every later decision waits for nothing. DefaultFirstWait (1 s); a
	// negative value waits not at all (the first decisions are denied
	// until the grant comes).
	FirstWait time.Duration
	// KeyPrefix is put before a global key in the regional store, so that
	// its count (of this region's share) never meets a local limit's;
	// DefaultKeyPrefix ("global:").
	KeyPrefix string
	// Idle is how long a key may go without a decision before its share
	// is given back; default twice Term, and at least two periods.
	Idle time.Duration
}

// Store is a floodgate.Store for a region: it decides every limit marked
// Global on the region's granted share of it, in the regional store, and
// every other request in the regional store as it is. Make one with New;
// it is safe for concurrent use. Put it under a floodgate.Limiter, which
// is the one pipeline of every decision.
type Store struct {
	inner  floodgate.Store
	home   grant.Home
	holder string
	o      Options

	last atomic.Int64 // the latest time used, µs (monotonic clamp)

	mu      sync.Mutex
	entries map[entryKey]*entry

	tickMu sync.Mutex // one rebalance at a time
	kick   chan struct{}
	stop   chan struct{}
	done   chan struct{}
	closed atomic.Bool

	calls, failures atomic.Int64

	// ticking is false in tests that drive rebalance themselves.
	ticking bool
}

var (
	_ floodgate.Store     = (*Store)(nil)
	_ floodgate.Batcher   = (*Store)(nil)
	_ floodgate.Pipeliner = (*Store)(nil)
	_ floodgate.Resetter  = (*Store)(nil)
	_ floodgate.Pinger    = (*Store)(nil)
	_ floodgate.Closer    = (*Store)(nil)
	_ floodgate.Reserver  = (*Store)(nil)
)

type entryKey struct {
	key    string
	period time.Duration
}

// An entry is the region's grant of one global key under one period.
type entry struct {
	// mu is held for reading by every decision on the share, and for
	// writing while the share changes: lowering it waits for the
	// decisions in flight, so the units counted in the window are final.
	mu     sync.RWMutex
	share  int64
	until  time.Time // end of the grant's term, on the region's clock
	failed bool      // the last call to home failed
	gone   bool      // released and dropped: look the key up again

	ready     chan struct{} // closed once home first answered or failed
	readyOnce sync.Once

	// Under um: what the decisions did.
	um      sync.Mutex
	limit   floodgate.Limit // the latest global limit seen
	win     int64           // window index of used
	used    int64           // units admitted (or failed) in window win
	asked   int64           // units asked since the last report
	lastUse time.Time

	// The loop's own.
	demand   grant.Demand // units per period, smoothed
	lastTick time.Time
	last     grant.Grant // home's last answer: every holder's demand, for the next split
	granted  bool        // home granted a share once (under mu)
	target   int64       // the last target share (under mu)
}

// New returns a region's Store over its regional store, holding shares
// granted by home. The regional store and home stay the caller's: Close gives
// the shares back but closes neither.
func New(regional floodgate.Store, home grant.Home, opts *Options) (*Store, error) {
	return newStore(regional, home, opts, true)
}

// newStore is New; ticking false leaves rebalancing to the caller (tests).
func newStore(regional floodgate.Store, home grant.Home, opts *Options, ticking bool) (*Store, error) {
	if regional == nil || home == nil {
		return nil, errors.New("region: New: nil store or home")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if err := CheckName(o.Name); err != nil {
		return nil, err
	}
	switch {
	case math.IsNaN(o.Floor) || o.Floor < 0 || o.Floor > 1:
		return nil, fmt.Errorf("region: Options.Floor %v is outside [0, 1]", o.Floor)
	case math.IsNaN(o.SafeShare) || o.SafeShare < 0 || o.SafeShare > 1:
		return nil, fmt.Errorf("region: Options.SafeShare %v is outside [0, 1]", o.SafeShare)
	case o.Term < 0 || o.Rebalance < 0 || o.Grace < 0 || o.Timeout < 0 || o.Idle < 0:
		return nil, errors.New("region: Options: negative duration")
	case o.Policy < share.Proportional || o.Policy > share.Equal:
		return nil, fmt.Errorf("region: Options.Policy %d is unknown", o.Policy)
	}
	o.Clock = cmpOr[floodgate.Clock](o.Clock, floodgate.SystemClock{})
	o.Term = cmpOr(o.Term, DefaultTerm)
	o.Rebalance = cmpOr(o.Rebalance, DefaultRebalance)
	o.Grace = cmpOr(o.Grace, DefaultGrace)
	o.Timeout = cmpOr(o.Timeout, DefaultTimeout)
	o.FirstWait = cmpOr(o.FirstWait, DefaultFirstWait)
	o.KeyPrefix = cmpOr(o.KeyPrefix, DefaultKeyPrefix)
	o.Idle = cmpOr(o.Idle, 2*o.Term)
	if o.Rebalance > o.Term/2 {
		return nil, fmt.Errorf("region: Options.Rebalance %v is above half of Term %v: a grant would end between two renewals", o.Rebalance, o.Term)
	}
	s := &Store{inner: regional, home: home, holder: o.Name + "#" + grant.Incarnation(), o: o,
		entries: make(map[entryKey]*entry), kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}), ticking: ticking}
	go s.loop()
	return s, nil
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// CheckName reports what is wrong with a region's name, or nil: 1 to 64
// bytes of [A-Za-z0-9_.-].
func CheckName(name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("region: Options.Name %q: want 1 to 64 bytes", name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-') {
			return fmt.Errorf("region: Options.Name %q: byte %q at %d is not one of [A-Za-z0-9_.-]", name, c, i)
		}
	}
	return nil
}

// Regional returns the regional store the Store decides in.
func (s *Store) Regional() floodgate.Store { return s.inner }

// Holder is the name this process's grants are held under at home: the
// region's name and the process's incarnation.
func (s *Store) Holder() string { return s.holder }

// now is t (or the clock's time when t is zero), but never earlier than a
// time already used, so that a window, once left, is never decided in
// again.
func (s *Store) now(t time.Time) time.Time {
	if t.IsZero() {
		t = s.o.Clock.Now()
	}
	us := t.UnixMicro()
	for {
		last := s.last.Load()
		if us <= last {
			return time.UnixMicro(last)
		}
		if s.last.CompareAndSwap(last, us) {
			return time.UnixMicro(us)
		}
	}
}

// Apply decides r: a Global limit on the region's share of it, anything
// else in the regional store unchanged. See floodgate.Store.
func (s *Store) Apply(ctx context.Context, r floodgate.Request) (floodgate.Decision, error) {
	if !r.Limit.Global {
		return s.inner.Apply(ctx, r)
	}
	if err := r.Validate(); err != nil {
		return floodgate.Decision{}, err
	}
	if s.closed.Load() {
		return floodgate.Decision{}, floodgate.ErrClosed
	}
	g, err := s.acquire(ctx, r)
	if err != nil {
		return floodgate.Decision{}, err
	}
	d, err := s.inner.Apply(ctx, g.local)
	g.done(d.Allowed || err != nil)
	return g.answer(d, err)
}

// A globalCall is one Global request on its way to the regional store,
// holding its entry's read lock.
type globalCall struct {
	e     *entry
	r     floodgate.Request // as asked
	local floodgate.Request // as the regional store decides it
	now   time.Time
	// owner: this call holds e's read lock (another request of the same
	// batch and entry shares it).
	owner bool
}

// acquire finds r's entry (waiting for its first grant if it has none
// yet), read-locks it and builds the regional request. done releases it.
// The regional request takes no LocalBudget: units a regional Redis
// claimed in advance under one share could be spent after the share was
// lowered, and a region decides locally already.
func (s *Store) acquire(ctx context.Context, r floodgate.Request) (globalCall, error) {
	for {
		if s.closed.Load() {
			return globalCall{}, floodgate.ErrClosed
		}
		e := s.entry(r)
		s.waitFirst(ctx, e)
		e.mu.RLock()
		if e.gone {
			// Dropped while idle, or closed: look again.
			e.mu.RUnlock()
			continue
		}
		now := s.now(r.Now)
		local := r
		local.Key = s.o.KeyPrefix + r.Key
		local.Limit.Global = false
		local.Limit.LocalBudget = 0
		local.Limit.Limit = e.effective(now, s.safe(r.Limit.Limit))
		local.Now = now
		return globalCall{e: e, r: r, local: local, now: now, owner: true}, nil
	}
}

// done records the call's cost as asked and, if counted (admitted, or
// failed and so perhaps counted), as used in its window; then unlocks.
func (g globalCall) done(counted bool) {
	e := g.e
	w := window(g.now, g.r.Limit.Period)
	e.um.Lock()
	e.asked += g.r.Cost
	e.lastUse = g.now
	e.limit = g.r.Limit
	if w > e.win {
		e.win, e.used = w, 0
	}
	if counted && w == e.win {
		e.used += g.r.Cost
	}
	e.um.Unlock()
	if g.owner {
		e.mu.RUnlock()
	}
}

// finish records every call of a batch, those sharing a lock before the
// lock's owner, so that no count is recorded after its lock is released.
func finish(calls []globalCall, counted func(i int) bool) {
	for _, owners := range []bool{false, true} {
		for i, g := range calls {
			if g.e != nil && g.owner == owners {
				g.done(counted(i))
			}
		}
	}
}

// answer turns the regional decision into the global one: Limit is the
// global limit, and a denial is never "never" for a cost the global limit
// could admit (the share may grow by the next window).
func (g globalCall) answer(d floodgate.Decision, err error) (floodgate.Decision, error) {
	if err != nil {
		return d, err
	}
	d.Limit = g.r.Limit.Limit
	if !d.Allowed && d.RetryAfter == floodgate.Never && g.r.Cost <= g.r.Limit.Limit {
		p := g.r.Limit.Period.Microseconds()
		d.RetryAfter = time.Duration(p-g.now.UnixMicro()%p) * time.Microsecond
	}
	return d, nil
}

// window is the index of the aligned window of period that holds t.
func window(t time.Time, period time.Duration) int64 {
	return t.UnixMicro() / period.Microseconds()
}

// safe is the safe share of a global limit.
func (s *Store) safe(limit int64) int64 { return int64(float64(limit) * s.o.SafeShare) }

// floor is every region's floor of a global limit.
func (s *Store) floor(limit int64) int64 { return int64(float64(limit) * s.o.Floor) }

// effective is the share to decide on at now, under e.mu: the granted
// share while its term lasts; once it has ended (home did not renew it for
// a whole term), or when home could not be reached for a first grant, the
// safe share; 0 while the first grant is on its way.
func (e *entry) effective(now time.Time, safe int64) int64 {
	switch {
	case now.Before(e.until):
		return e.share
	case e.granted || e.failed:
		return safe
	}
	return 0
}

// entry returns r's entry, making it (and asking the loop for its first
// grant) if there is none.
func (s *Store) entry(r floodgate.Request) *entry {
	k := entryKey{r.Key, r.Limit.Period}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entries[k]
	if e == nil {
		e = &entry{ready: make(chan struct{}), limit: r.Limit, last: grant.Grant{Self: -1}, lastTick: s.o.Clock.Now()}
		s.entries[k] = e
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
	return e
}

// waitFirst waits, at most FirstWait and while ctx lasts, for e's first
// answer from home.
func (s *Store) waitFirst(ctx context.Context, e *entry) {
	select {
	case <-e.ready:
		return
	default:
	}
	if s.o.FirstWait < 0 {
		return
	}
	t := time.NewTimer(s.o.FirstWait)
	defer t.Stop()
	select {
	case <-e.ready:
	case <-ctx.Done():
	case <-t.C:
	}
}

// ApplyBatch decides rs all or nothing in the regional store, which must
// be a floodgate.Batcher, each Global request on its share.
func (s *Store) ApplyBatch(ctx context.Context, rs []floodgate.Request) ([]floodgate.Decision, error) {
	b, ok := s.inner.(floodgate.Batcher)
	if !ok {
		return nil, fmt.Errorf("region: ApplyBatch: %w", floodgate.ErrNotSupported)
	}
	local, calls, err := s.acquireAll(ctx, rs)
	if err != nil {
		return nil, err
	}
	ds, err := b.ApplyBatch(ctx, local)
	finish(calls, func(i int) bool { return err != nil || i >= len(ds) || ds[i].Allowed })
	if err != nil {
		return ds, err
	}
	for i, g := range calls {
		if g.e != nil && i < len(ds) {
			ds[i], _ = g.answer(ds[i], nil)
		}
	}
	return ds, nil
}

// ApplyPipelined decides each of rs on its own, in one round trip when
// the regional store is a floodgate.Pipeliner.
func (s *Store) ApplyPipelined(ctx context.Context, rs []floodgate.Request) ([]floodgate.Decision, []error) {
	ds := make([]floodgate.Decision, len(rs))
	errs := make([]error, len(rs))
	local, calls, err := s.acquireAll(ctx, rs)
	if err != nil {
		for i := range errs {
			errs[i] = err
		}
		return ds, errs
	}
	if p, ok := s.inner.(floodgate.Pipeliner); ok {
		ds, errs = p.ApplyPipelined(ctx, local)
	} else {
		for i, r := range local {
			ds[i], errs[i] = s.inner.Apply(ctx, r)
		}
	}
	if len(ds) != len(rs) || len(errs) != len(rs) {
		finish(calls, func(int) bool { return true })
		err := fmt.Errorf("region: %w: %d decisions and %d errors for %d requests", floodgate.ErrUnexpectedReply, len(ds), len(errs), len(rs))
		ds, errs = make([]floodgate.Decision, len(rs)), make([]error, len(rs))
		for i := range errs {
			errs[i] = err
		}
		return ds, errs
	}
	finish(calls, func(i int) bool { return errs[i] != nil || ds[i].Allowed })
	for i, g := range calls {
		if g.e != nil {
			ds[i], errs[i] = g.answer(ds[i], errs[i])
		}
	}
	return ds, errs
}

// acquireAll acquires every Global request of rs, each entry once (a
// second read lock of one entry could wait behind a writer that waits for
// the first), and returns the regional requests.
func (s *Store) acquireAll(ctx context.Context, rs []floodgate.Request) ([]floodgate.Request, []globalCall, error) {
	if s.closed.Load() {
		return nil, nil, floodgate.ErrClosed
	}
	local := slices.Clone(rs)
	calls := make([]globalCall, len(rs))
	for i := range rs {
		if !rs[i].Limit.Global {
			continue
		}
		if err := rs[i].Validate(); err != nil {
			finish(calls[:i], func(int) bool { return false })
			return nil, nil, err
		}
		if j := slices.IndexFunc(calls[:i], func(g globalCall) bool {
			return g.owner && g.r.Key == rs[i].Key && g.r.Limit.Period == rs[i].Limit.Period
		}); j >= 0 {
			// Two requests of one key and period in one batch: the
			// regional store decides them as it would any two, on the
			// share the first read.
			g := calls[j]
			l := rs[i]
			l.Key, l.Now = g.local.Key, g.now
			l.Limit.Global, l.Limit.Limit, l.Limit.LocalBudget = false, g.local.Limit.Limit, 0
			local[i] = l
			calls[i] = globalCall{e: g.e, r: rs[i], local: l, now: g.now}
			continue
		}
		g, err := s.acquire(ctx, rs[i])
		if err != nil {
			finish(calls[:i], func(int) bool { return false })
			return nil, nil, err
		}
		calls[i] = g
		local[i] = g.local
	}
	return local, calls, nil
}

// Reset forgets key's state under limit in the regional store: for a
// Global limit, this region's count of its share (the other regions keep
// theirs).
func (s *Store) Reset(ctx context.Context, key string, limit floodgate.Limit) error {
	rs, ok := s.inner.(floodgate.Resetter)
	if !ok {
		return fmt.Errorf("region: Reset: %w", floodgate.ErrNotSupported)
	}
	if limit.Global {
		key = s.o.KeyPrefix + key
		limit.Global = false
	}
	return rs.Reset(ctx, key, limit)
}

// Ping checks the regional store, if it can be checked: a region decides
// without home, so home's health is not the region's readiness (Stats
// counts home's failures).
func (s *Store) Ping(ctx context.Context) error {
	if p, ok := s.inner.(floodgate.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

// Close stops rebalancing and gives every share back to home (waiting at
// most Timeout), then refuses Global requests with floodgate.ErrClosed.
// Neither the regional store nor home is closed. Close is idempotent.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	close(s.stop)
	<-s.done
	s.mu.Lock()
	es := make(map[entryKey]*entry, len(s.entries))
	for k, e := range s.entries {
		es[k] = e
	}
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), s.o.Timeout)
	defer cancel()
	var wg sync.WaitGroup
	for k, e := range es {
		e.mu.Lock()
		e.share, e.gone = 0, true
		e.mu.Unlock()
		e.um.Lock()
		limit := e.limit
		e.um.Unlock()
		wg.Go(func() {
			_, _ = s.home.Grant(ctx, grant.Request{Key: k.key, Limit: limit, Holder: s.holder, Now: s.now(time.Time{}),
				Term: s.o.Term, Grace: s.o.Grace, Release: true})
		})
	}
	wg.Wait()
	return nil
}

// Held is a region's grant of one global key, as Store.Held reports it.
type Held struct {
	// Share is the share decided on now, Granted what home granted (the
	// same while the grant's term lasts), Until the end of the term.
	Share, Granted int64
	Until          time.Time
	// Target is the share the region last computed it should hold.
	Target int64
}

// Held reports the region's grant of key under limit (its Period), for
// tests, simulations and dashboards.
func (s *Store) Held(key string, limit floodgate.Limit) Held {
	s.mu.Lock()
	e := s.entries[entryKey{key, limit.Period}]
	s.mu.Unlock()
	if e == nil {
		return Held{}
	}
	now := s.now(time.Time{})
	e.mu.RLock()
	defer e.mu.RUnlock()
	return Held{Share: e.effective(now, s.safe(limit.Limit)), Granted: e.share, Until: e.until, Target: e.target}
}

// Stats counts the calls to home and those that failed, and sums up the
// region's grants now.
type Stats struct {
	Calls, Failures int64
	// Keys is the global keys the region holds an entry for; Failing, those
	// whose latest call to home failed (decided on the safe share, or on a
	// grant that has not ended yet).
	Keys, Failing int
	// Share is the units decided on now summed over the keys (each key's
	// Held.Share), and Limit their global limits summed: Share/Limit is the
	// part of the global budget this region holds.
	Share, Limit int64
}

// Stats reports the calls to home so far and the grants held now.
func (s *Store) Stats() Stats {
	st := Stats{Calls: s.calls.Load(), Failures: s.failures.Load()}
	s.mu.Lock()
	entries := make([]*entry, 0, len(s.entries))
	for _, e := range s.entries {
		entries = append(entries, e)
	}
	s.mu.Unlock()
	now := s.now(time.Time{})
	for _, e := range entries {
		e.um.Lock()
		limit := e.limit.Limit
		e.um.Unlock()
		e.mu.RLock()
		if !e.gone {
			st.Keys++
			st.Share += e.effective(now, s.safe(limit))
			st.Limit += limit
			if e.failed {
				st.Failing++
			}
		}
		e.mu.RUnlock()
	}
	return st
}

// Reserve holds units in the regional store, which must be a
// floodgate.Reserver; a Global limit takes no reservation
// (floodgate.ErrNotSupported): a hold of a share could outlive the grant
// it was taken from.
func (s *Store) Reserve(ctx context.Context, r floodgate.HoldRequest) (floodgate.HoldResult, error) {
	rv, err := s.reserver(r.Requests)
	if err != nil {
		return floodgate.HoldResult{}, err
	}
	return rv.Reserve(ctx, r)
}

// Settle settles a hold of Reserve in the regional store.
func (s *Store) Settle(ctx context.Context, r floodgate.SettleRequest) ([]floodgate.Settlement, error) {
	rv, err := s.reserver(r.Requests)
	if err != nil {
		return nil, err
	}
	return rv.Settle(ctx, r)
}

func (s *Store) reserver(rs []floodgate.Request) (floodgate.Reserver, error) {
	rv, ok := s.inner.(floodgate.Reserver)
	if !ok {
		return nil, fmt.Errorf("region: reservation: %w", floodgate.ErrNotSupported)
	}
	for i := range rs {
		if rs[i].Limit.Global {
			return nil, fmt.Errorf("region: reservation of %q: %w: a global limit takes no reservation", rs[i].Key, floodgate.ErrNotSupported)
		}
	}
	return rv, nil
}
