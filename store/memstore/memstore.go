// Package memstore is the embedded floodgate.Store: state in this process's
// memory, decided by the algorithm package under a per-shard lock.
//
// Use it for a single instance, for tests, and as the fallback of a shared
// store. It is not shared between processes: three instances behind a load
// balancer, each with its own memstore, admit three times the limit. Use
// store/redisstore for that.
//
// Keys are spread over shards by a seeded hash, each shard with its own
// mutex and maps, so goroutines deciding different keys rarely meet. The
// key's bytes are hashed once per decision: the same 64-bit hash picks the
// shard and keys the shard's map, which compares the key only to confirm
// (see table), and its state is written back in place. A decision on an
// existing key of an O(1) algorithm allocates nothing.
// Expired state is dropped when it is next touched and by a background
// sweeper, so memory stays bounded by the keys live in the last period.
// Like a Redis TTL, a key lives for its ResetAfter by the store's Clock,
// whatever the Request.Now of the request that wrote it: a caller whose
// clock is behind the store's loses no state to the sweeper.
//
// A floodgate.Limiter over a Store (with no Clock, Observer, Timeout or
// fallback of its own, and a Store without MaxKeys or MaxBytes) decides
// the O(1) algorithms by a direct path, DecideSmall: the Limiter
// validates the request and hands it over in parts, in registers, where
// Store.Apply takes a Request and returns a Decision by copy through the
// floodgate.Store interface. The decision, the state and the errors are
// Apply's (TestDirectDifferential compares the two on random operations).
//
// Each live key of fixed_window, sliding_window, token_bucket and gcra
// holds a 64-byte entry (hash, key header, period and state) in a growing
// slice, a 16-byte hash-to-position map slot, and the key's own bytes;
// sliding_window_log and concurrency hold one more entry per logged or
// held unit. BenchmarkMemoryPerKey measures it; docs/library.md has the
// figures.
package memstore

import (
	"context"
	"hash/maphash"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algorithm"
	"github.com/floodgate-rl/floodgate/internal/loop"
)

// Options configure a Store. A nil *Options means every default.
type Options struct {
	// Clock decides requests whose Now is zero; default the system clock.
	Clock floodgate.Clock
	// Shards is the number of independently locked shards, rounded up to a
	// power of two; default 64 per CPU.
	Shards int
	// SweepInterval is how often the background sweeper visits every shard
	// to drop expired keys and expire reservations; default 10s. Negative
	// disables it (keys then expire only when touched, or by Sweep).
	SweepInterval time.Duration
	// HoldRetention is how long a reservation is remembered after its
	// expiry, so that a retried reserve, commit or cancel gets the first
	// answer; default floodgate.DefaultHoldRetention.
	HoldRetention time.Duration
	// MaxKeys bounds the keys holding state (each an entry, a map slot
	// and its key string; see the package doc): a request that would add
	// a key to a full store is refused with ErrFull, after the expired
	// keys of its shard are dropped (at most once a second). The bound is
	// kept per shard, without a shared counter on the hot path: each
	// shard holds at most ceil(MaxKeys/Shards) keys, so the store holds
	// at most that times Shards, and refuses a key once its shard is
	// full. With uniform keys and MaxKeys far above Shards, refusals
	// start within a few percent of MaxKeys (1M keys over 128 shards:
	// about 97%); with MaxKeys near Shards they start much earlier. A
	// batch may pass its shard's bound by its own size. 0 means no
	// bound.
	MaxKeys int
	// MaxBytes bounds the bytes the store holds, by an accounted estimate
	// of each thing it holds (not a measure of the heap): a key's state
	// is 128 bytes plus the key's length; sliding_window_log adds 8 bytes
	// per logged unit (of its slice's capacity), concurrency 48 bytes
	// plus the lease ID's length per held unit; a reservation is 320
	// bytes plus its key's and ID's lengths, until it is forgotten after
	// Options.HoldRetention. A request that would take its shard past
	// ceil(MaxBytes/Shards) (a new key, more logged or leased units, a
	// new reservation) is refused with ErrFull, after the shard's expired
	// state is dropped (at most once a second), as at MaxKeys. One
	// request may pass the bound by what it adds. The garbage collector's
	// slack comes on top (up to 1+GOGC/100 times the live heap). 0 means
	// no bound.
	MaxBytes int64
	// MaxHoldsPerKey bounds the reservations the store remembers for one
	// key and period, held or settled and kept for HoldRetention: a
	// reserve beyond it is refused with ErrFull, so that one key's
	// reservations cannot take the store. A key reserving n times a
	// second keeps about n*(TTL+HoldRetention) of them. 0 means no
	// bound.
	MaxHoldsPerKey int
}

// Store is the in-memory floodgate.Store. It is safe for concurrent use.
// Close stops its sweeper.
type Store struct {
	clock  floodgate.Clock
	system bool // clock is floodgate.SystemClock: read it by systemMicros
	seed   maphash.Seed
	mask   uint64
	shards []shard
	// sweeper visits the shards, one a tick; it never starts with a
	// negative Options.SweepInterval.
	sweeper loop.Loop
	// retain is Options.HoldRetention in µs.
	retain int64
	// maxKeys is Options.MaxKeys, perShard its share per shard (0: no
	// bound); maxBytes and perShardBytes are Options.MaxBytes and its
	// share; maxHoldsPerKey is Options.MaxHoldsPerKey; bounded is set
	// when MaxKeys or MaxBytes is. refused counts ErrFull answers.
	maxKeys, perShard       int
	maxBytes, perShardBytes int64
	maxHoldsPerKey          int
	bounded                 bool
	refused                 atomic.Int64
	// fair holds the states of limits shared by flows (ApplyFlow).
	fair fairTable
}

var (
	_ floodgate.Store    = (*Store)(nil)
	_ floodgate.Resetter = (*Store)(nil)
	_ floodgate.Batcher  = (*Store)(nil)
	_ floodgate.Closer   = (*Store)(nil)
	_ floodgate.Reserver = (*Store)(nil)
	_ floodgate.Raiser   = (*Store)(nil)
	_ floodgate.Sharer   = (*Store)(nil)
)

// numSmall is the number of algorithms whose state is an algorithm.Small:
// their Kinds come first, so that a shard's small tables are indexed by
// Kind.
const numSmall = algorithm.KindSlidingWindowLog

// mkey identifies a state: the key and the limit's period. Two limits on
// one key that differ only in Limit, Burst or options share state (raising a
// limit keeps the count); "10 per second" and "1000 per hour" do not.
type mkey struct {
	key    string
	period int64
}

// slot is the state of one key of an O(1) algorithm and the time (µs, by
// the store's clock) at which the sweeper may drop it.
type slot struct {
	st  algorithm.Small
	exp int64
}

// logSlot and concSlot are the states of the O(limit) algorithms; acct
// is the bytes accounted for their units (see account).
type logSlot struct {
	log  []int64
	exp  int64
	acct int64
}

type concSlot struct {
	units []algorithm.Unit
	exp   int64
	acct  int64
}

type shard struct {
	mu    sync.Mutex
	small [numSmall]table[slot]
	logs  table[*logSlot]
	conc  table[*concSlot]
	// holds are the reservations of this shard's keys (reserve.go); nil
	// until the first.
	holds map[holdKey]*holdEntry
	// holdBytes is the accounted size of holds (see Options.MaxBytes),
	// holdsPer their number per key and period; both kept by putHold and
	// dropHold.
	holdBytes int64
	holdsPer  map[mkey]int
	// fullSwept is when room last swept the shard because it was full
	// (store clock, µs).
	fullSwept int64
	_         [64]byte // keep shards' mutexes on separate cache lines
}

// New returns a Store and starts its sweeper. opts may be nil.
func New(opts *Options) *Store {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Clock == nil {
		o.Clock = floodgate.SystemClock{}
	}
	n := o.Shards
	if n <= 0 {
		n = 64 * runtime.GOMAXPROCS(0)
	}
	size := 1
	for size < n {
		size <<= 1
	}
	_, system := o.Clock.(floodgate.SystemClock)
	if o.HoldRetention <= 0 {
		o.HoldRetention = floodgate.DefaultHoldRetention
	}
	s := &Store{clock: o.Clock, system: system, seed: maphash.MakeSeed(), mask: uint64(size - 1), shards: make([]shard, size),
		retain: o.HoldRetention.Microseconds(), maxKeys: max(o.MaxKeys, 0), maxBytes: max(o.MaxBytes, 0), maxHoldsPerKey: max(o.MaxHoldsPerKey, 0)}
	if s.maxKeys > 0 {
		s.perShard = (s.maxKeys + size - 1) / size
	}
	if s.maxBytes > 0 {
		s.perShardBytes = (s.maxBytes + int64(size) - 1) / int64(size)
	}
	s.bounded = s.perShard != 0 || s.perShardBytes != 0
	for i := range s.shards {
		sh := &s.shards[i]
		for k := range sh.small {
			sh.small[k] = newTable[slot]()
		}
		sh.logs = newTable[*logSlot]()
		sh.conc = newTable[*concSlot]()
	}
	if o.SweepInterval == 0 {
		o.SweepInterval = 10 * time.Second
	}
	if o.SweepInterval > 0 {
		s.startSweeper(o.SweepInterval)
	}
	return s
}

// locate hashes key once and returns the index of its shard and the ref
// of its state under period. The shard depends on the key alone, so that
// Reset and batches lock the same shard whatever the period.
func (s *Store) locate(key string, period int64) (uint64, ref) {
	h := maphash.String(s.seed, key)
	// The period is folded in by an odd multiplier, a bijection: two
	// periods of one key never share a hash.
	return h & s.mask, ref{hash: h ^ uint64(period)*0x9e3779b97f4a7c15, mkey: mkey{key, period}}
}

// keyPeriod is the period a key's state is located by: the limit's
// Period in µs, or for a calendar limit minus its longest window
// (algorithm.MaxCalendarPeriod), which no aligned limit shares, or for a
// first-hit fixed window its Period plus firstHitPeriod, so that it does
// not share the state of an aligned window of the same period (the Redis
// store keeps an aligned window's counts apart from a first-hit window's
// state: see "Key layout" in docs/redis.md).
func keyPeriod(l *floodgate.Limit) int64 {
	if l.Calendar.Unit != "" {
		return -l.Params().Period
	}
	p := int64(l.Period / time.Microsecond)
	if l.Window == floodgate.FirstHit {
		p += firstHitPeriod
	}
	return p
}

// firstHitPeriod is added to a first-hit window's period in keyPeriod: above
// every period (algorithm.MaxPeriod).
const firstHitPeriod = 1 << 50

// clockNow is the store's clock in µs.
func (s *Store) clockNow() int64 {
	if s.system {
		return systemMicros()
	}
	return s.clock.Now().UnixMicro()
}

// times returns the time (µs) r is decided at, and skew, what to add to a
// time of the request to make it a time of the store's clock: 0 unless r
// has its own Now.
func (s *Store) times(r *floodgate.Request) (now, skew int64) {
	if r.Now.IsZero() {
		return s.clockNow(), 0
	}
	now = r.Now.UnixMicro()
	return now, s.clockNow() - now
}

// Apply decides r atomically: see floodgate.Store.
func (s *Store) Apply(ctx context.Context, r floodgate.Request) (out floodgate.Decision, _ error) {
	if err := r.Validate(); err != nil {
		return floodgate.Decision{}, err
	}
	if err := ctx.Err(); err != nil {
		return floodgate.Decision{}, err
	}
	k := r.Limit.Kind()
	i, ref := s.locate(r.Key, keyPeriod(&r.Limit))
	var now, skew int64
	if r.Now.IsZero() && s.system {
		now = systemMicros() // s.times, without its two calls
	} else {
		now, skew = s.times(&r)
	}
	if r.Limit.Calendar.Unit != "" {
		return s.applyCalendar(&r, k, i, ref, now, skew)
	}
	sh := &s.shards[i]
	sh.mu.Lock()
	if s.bounded && !s.room(sh, k, ref, growth(&r, k)) {
		sh.mu.Unlock()
		return floodgate.Decision{}, s.fullError()
	}
	var d algorithm.Decision
	if k < numSmall {
		// The O(1) algorithms, most decisions, skip step's switch:
		// stepSlot takes the limit's Params in registers.
		stepSlot(&d, &sh.small[k], k, r.Limit.Params(), ref, now, skew, r.Cost, true)
	} else {
		d = sh.step(&r, k, r.Limit.Params(), ref, now, skew, true)
	}
	sh.mu.Unlock()
	setDecision(&out, &d, now)
	return out, nil
}

// applyCalendar is Apply's step for a calendar limit, whose Params hold
// the windows around now (floodgate.Limit.ParamsAt), computed before the
// lock is taken.
func (s *Store) applyCalendar(r *floodgate.Request, k algorithm.Kind, i uint64, ref ref, now, skew int64) (out floodgate.Decision, _ error) {
	p := r.Limit.ParamsAt(now)
	sh := &s.shards[i]
	sh.mu.Lock()
	if s.bounded && !s.room(sh, k, ref, growth(r, k)) {
		sh.mu.Unlock()
		return floodgate.Decision{}, s.fullError()
	}
	var d algorithm.Decision
	stepSlot(&d, &sh.small[k], k, p, ref, now, skew, r.Cost, true)
	sh.mu.Unlock()
	setDecision(&out, &d, now)
	return out, nil
}

// setDecision sets *out to floodgate.FromAlgorithm(*d, nowUS), one field
// at a time. Apply's result is filled this way because a Decision (more
// fields than the compiler keeps in registers) returned by a call is
// first stored a field at a time to a temporary and then copied with
// 16-byte loads, which cannot take their bytes from two pending stores
// and wait for them to reach the cache. TestSetDecision checks that the
// two agree.
func setDecision(out *floodgate.Decision, d *algorithm.Decision, nowUS int64) {
	out.Allowed = d.Allowed
	out.Limit = d.Limit
	out.Remaining = d.Remaining
	out.ResetAfter = time.Duration(d.ResetAfter) * time.Microsecond
	out.RetryAfter = time.Duration(d.RetryAfter) * time.Microsecond
	if d.RetryAfter == algorithm.Never {
		out.RetryAfter = floodgate.Never
	}
	out.Now = time.UnixMicro(nowUS)
	out.Fallback = false
}

// step decides r at now in the shard, whose lock the caller holds, and
// stores the new state if commit is set. State that expired but was not
// swept yet is passed to the algorithm as it is: every Step treats state
// older than its period as the empty state, and returns the empty state,
// which step then deletes. The state's sweeping deadline is its Expires
// plus skew (see Store.times), on the store's clock.
func (sh *shard) step(r *floodgate.Request, k algorithm.Kind, p algorithm.Params, mk ref, now, skew int64, commit bool) algorithm.Decision {
	var d algorithm.Decision
	switch k {
	case algorithm.KindSlidingWindowLog:
		ls, _ := sh.logs.get(mk)
		var st algorithm.SlidingWindowLog
		if ls != nil {
			st.Log = ls.log
		}
		if !commit {
			st.Log = append([]int64(nil), st.Log...)
		}
		st, d = st.Step(p, now, r.Cost)
		if !commit {
			return d
		}
		if exp := st.Expires(p); exp > 0 {
			if ls == nil {
				ls = &logSlot{}
				sh.logs.put(mk, ls)
			}
			ls.log, ls.exp = st.Log, exp+skew
			ls.account(&sh.logs)
		} else if ls != nil {
			sh.logs.del(mk)
		}
	case algorithm.KindConcurrency:
		cs, _ := sh.conc.get(mk)
		var st algorithm.Concurrency
		if cs != nil {
			st.Units = cs.units
		}
		if !commit {
			st.Units = append([]algorithm.Unit(nil), st.Units...)
		}
		op := algorithm.LeaseAcquire
		if r.Release {
			op = algorithm.LeaseRelease
		}
		st, d = st.Step(p, now, r.Cost, r.Lease, op)
		if !commit {
			return d
		}
		if exp := st.Expires(p); exp > 0 {
			if cs == nil {
				cs = &concSlot{}
				sh.conc.put(mk, cs)
			}
			cs.units, cs.exp = st.Units, exp+skew
			cs.account(&sh.conc)
		} else if cs != nil {
			sh.conc.del(mk)
		}
	default:
		stepSlot(&d, &sh.small[k], k, p, mk, now, skew, r.Cost, commit)
	}
	return d
}

// stepSlot is shard.step for the O(1) algorithms, whose state is a slot
// in t, the table of k: it decides cost units under p at now and, if
// commit is set, stores the new state with its sweeping deadline moved by
// skew.
func stepSlot(d *algorithm.Decision, t *table[slot], k algorithm.Kind, p algorithm.Params, mk ref, now, skew, cost int64, commit bool) {
	old, w := t.find(mk)
	// StepTo writes the Decision straight to the result: every further
	// copy of it costs a wait (see setDecision).
	next := old
	next.st.StepTo(k, d, p, now, cost)
	// A decision that changes no state (a denial, a peek) leaves the
	// deadline as the last change set it, as a Redis TTL would.
	if !commit || next.st == old.st {
		return
	}
	if next.exp = next.st.Expires(k, p); next.exp > 0 {
		next.exp += skew
		t.set(mk, next, w)
	} else if w != absent {
		t.del(mk)
	}
}

// ApplyBatch decides rs all or nothing: see floodgate.Batcher. The shards
// of all keys are locked together (in index order, so batches never
// deadlock).
func (s *Store) ApplyBatch(ctx context.Context, rs []floodgate.Request) ([]floodgate.Decision, error) {
	for i := range rs {
		if err := rs[i].Validate(); err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b := s.lockBatch(rs)
	defer b.unlock()
	if err := b.room(); err != nil {
		return nil, err
	}
	ds, _ := b.apply()
	return b.decisions(ds), nil
}

// batch is the requests of an all-or-nothing call with their shards
// locked: where each state is, and the time each is decided at.
type batch struct {
	s     *Store
	rs    []floodgate.Request
	items []batchItem
	// locked are the shards locked, in index order.
	locked []uint64
	// clockNow is the one reading of the clock for the whole batch: one
	// decision, one time.
	clockNow int64
}

// batchItem is where request i's state is, and its time: now is the
// request's, skew what turns it into the store's clock (see Store.times).
type batchItem struct {
	idx       uint64 // the shard
	ref       ref
	kind      algorithm.Kind
	params    algorithm.Params
	now, skew int64
}

// lockBatch locates rs and locks their shards, in index order, so that
// batches never deadlock.
func (s *Store) lockBatch(rs []floodgate.Request) *batch {
	b := &batch{s: s, rs: rs, items: make([]batchItem, len(rs)), locked: make([]uint64, len(rs))}
	for i := range rs {
		it := &b.items[i]
		it.kind, it.params = rs[i].Limit.Kind(), rs[i].Limit.Params()
		it.idx, it.ref = s.locate(rs[i].Key, keyPeriod(&rs[i].Limit))
		b.locked[i] = it.idx
	}
	sortUnique(&b.locked)
	for _, i := range b.locked {
		s.shards[i].mu.Lock()
	}
	b.clockNow = s.clockNow()
	for i := range rs {
		it := &b.items[i]
		it.now = b.clockNow
		if !rs[i].Now.IsZero() {
			it.now = rs[i].Now.UnixMicro()
			it.skew = b.clockNow - it.now
		}
		if rs[i].Limit.Calendar.Unit != "" {
			it.params = rs[i].Limit.ParamsAt(it.now)
		}
	}
	return b
}

func (b *batch) unlock() {
	for _, i := range b.locked {
		b.s.shards[i].mu.Unlock()
	}
}

func (b *batch) shard(i int) *shard { return &b.s.shards[b.items[i].idx] }

// apply decides the requests all or nothing and reports whether all were
// admitted: see floodgate.Batcher.
func (b *batch) apply() ([]algorithm.Decision, bool) {
	rs := b.rs
	ds := make([]algorithm.Decision, len(rs))
	undo := make([]snapshot, len(rs))
	admitted := true
	for i := range rs {
		sh := b.shard(i)
		undo[i] = sh.save(b.items[i].kind, b.items[i].ref)
		ds[i] = sh.step(&rs[i], b.items[i].kind, b.items[i].params, b.items[i].ref, b.items[i].now, b.items[i].skew, true)
		admitted = admitted && ds[i].Allowed
	}
	if admitted {
		return ds, true
	}
	for i := len(rs) - 1; i >= 0; i-- {
		b.shard(i).restore(undo[i])
	}
	for i := range rs {
		switch {
		case ds[i].Allowed:
			ds[i] = b.peek(i)
			ds[i].Allowed, ds[i].RetryAfter = false, 0
		case rs[i].Limit.CountRejected:
			b.shard(i).step(&rs[i], b.items[i].kind, b.items[i].params, b.items[i].ref, b.items[i].now, b.items[i].skew, true)
		}
	}
	return ds, false
}

// peek is request i's state, without a cost.
func (b *batch) peek(i int) algorithm.Decision {
	peek := b.rs[i]
	peek.Cost, peek.Lease, peek.Release = 0, "", false
	return b.shard(i).step(&peek, b.items[i].kind, b.items[i].params, b.items[i].ref, b.items[i].now, b.items[i].skew, false)
}

func (b *batch) decisions(ds []algorithm.Decision) []floodgate.Decision {
	out := make([]floodgate.Decision, len(ds))
	for i := range ds {
		out[i] = floodgate.FromAlgorithm(ds[i], b.items[i].now)
	}
	return out
}

// snapshot is the state of one key before a batch changed it.
type snapshot struct {
	k     algorithm.Kind
	key   ref
	ok    bool
	small slot
	log   logSlot
	conc  concSlot
}

func (sh *shard) save(k algorithm.Kind, key ref) snapshot {
	sn := snapshot{k: k, key: key}
	switch k {
	case algorithm.KindSlidingWindowLog:
		if ls, _ := sh.logs.get(key); ls != nil {
			sn.ok, sn.log = true, logSlot{log: append([]int64(nil), ls.log...), exp: ls.exp}
		}
	case algorithm.KindConcurrency:
		if cs, _ := sh.conc.get(key); cs != nil {
			sn.ok, sn.conc = true, concSlot{units: append([]algorithm.Unit(nil), cs.units...), exp: cs.exp}
		}
	default:
		sn.small, sn.ok = sh.small[k].get(key)
	}
	return sn
}

func (sh *shard) restore(sn snapshot) {
	switch {
	case sn.k == algorithm.KindSlidingWindowLog && sn.ok:
		ls := &logSlot{log: sn.log.log, exp: sn.log.exp}
		sh.logs.put(sn.key, ls)
		ls.account(&sh.logs)
	case sn.k == algorithm.KindSlidingWindowLog:
		sh.logs.del(sn.key)
	case sn.k == algorithm.KindConcurrency && sn.ok:
		cs := &concSlot{units: sn.conc.units, exp: sn.conc.exp}
		sh.conc.put(sn.key, cs)
		cs.account(&sh.conc)
	case sn.k == algorithm.KindConcurrency:
		sh.conc.del(sn.key)
	case sn.ok:
		sh.small[sn.k].put(sn.key, sn.small)
	default:
		sh.small[sn.k].del(sn.key)
	}
}

// Reset forgets key's state under limit's algorithm and period. An empty
// key or an invalid limit is an error, as in Apply.
func (s *Store) Reset(ctx context.Context, key string, limit floodgate.Limit) error {
	probe := floodgate.Request{Key: key, Limit: limit}
	if err := probe.Validate(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	i, mk := s.locate(key, keyPeriod(&limit))
	sh := &s.shards[i]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	switch k := limit.Kind(); k {
	case algorithm.KindSlidingWindowLog:
		sh.logs.del(mk)
	case algorithm.KindConcurrency:
		sh.conc.del(mk)
	default:
		sh.small[k].del(mk)
	}
	return nil
}

// Len is the number of keys holding state, live or expired but not yet
// swept.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k := range sh.small {
			n += sh.small[k].len()
		}
		n += sh.logs.len() + sh.conc.len()
		sh.mu.Unlock()
	}
	return n
}

// Sweep drops every key expired at the store's clock's now, and returns how
// many it dropped. The sweeper calls it shard by shard; tests call it
// directly.
func (s *Store) Sweep() int {
	now := s.clockNow()
	n := 0
	for i := range s.shards {
		n += s.shards[i].sweep(now)
	}
	return n
}

func (sh *shard) sweep(now int64) int {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.sweepLocked(now)
}

// sweepLocked is sweep for a caller that holds the shard's lock.
func (sh *shard) sweepLocked(now int64) int {
	n := 0
	for k := range sh.small {
		n += sh.small[k].sweep(func(v slot) bool { return v.exp <= now })
	}
	n += sh.logs.sweep(func(v *logSlot) bool { return v.exp <= now })
	n += sh.conc.sweep(func(v *concSlot) bool { return v.exp <= now })
	sh.sweepHolds(now)
	return n
}

// startSweeper visits one shard at a time, so that a whole pass takes
// interval and no lock is held for long.
func (s *Store) startSweeper(interval time.Duration) {
	step := max(interval/time.Duration(len(s.shards)), time.Millisecond)
	next := 0
	s.sweeper.Start(step, func(context.Context) bool {
		s.shards[next].sweep(s.clockNow())
		next = (next + 1) % len(s.shards)
		return true
	})
}

// InProcess reports true: a floodgate.Limiter puts no deadline of its
// Options.Timeout on the memory store's calls. A call is the store's own
// work under one shard's lock, a few microseconds, and the store cannot
// be unreachable: under a deadline, a call could only fail because its
// caller's goroutine waited for a CPU (a saturated host), and the Limiter
// would answer that by its failure policy, which under FailOpen stops
// limiting when the host is busiest. The caller's own context still
// counts: a call whose context has ended is refused with its error.
func (s *Store) InProcess() bool { return true }

// Close stops the sweeper. The store still answers afterwards.
func (s *Store) Close() error {
	s.sweeper.Stop()
	return nil
}

func sortUnique(xs *[]uint64) {
	slices.Sort(*xs)
	*xs = slices.Compact(*xs)
}
