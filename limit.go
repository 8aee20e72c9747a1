package floodgate

import (
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate/algorithm"
)

// Algorithm names a rate limiting algorithm. The names are the ones used in
// config files, the HTTP API and Redis keys. The algorithm package doc says
// exactly what each admits.
type Algorithm string

// The algorithms.
const (
	// FixedWindow admits Limit units per window of Period; windows are
	// aligned to the epoch or start at the first hit (Window).
	FixedWindow Algorithm = "fixed_window"
	// SlidingWindowLog admits at most Limit units in any trailing Period,
	// exactly, keeping one timestamp per unit (memory O(Limit)).
	SlidingWindowLog Algorithm = "sliding_window_log"
	// SlidingWindow estimates the trailing Period from two fixed windows,
	// weighting the previous one (memory O(1)).
	SlidingWindow Algorithm = "sliding_window"
	// TokenBucket refills Limit tokens per Period up to Burst.
	TokenBucket Algorithm = "token_bucket"
	// GCRA admits what TokenBucket admits, keeping a single timestamp.
	GCRA Algorithm = "gcra"
	// Concurrency admits at most Limit units held at once by leases that
	// expire after Period; see Limiter.Acquire.
	Concurrency Algorithm = "concurrency"
)

// Algorithms lists every algorithm, in the order of the docs.
var Algorithms = []Algorithm{FixedWindow, SlidingWindowLog, SlidingWindow, TokenBucket, GCRA, Concurrency}

// Window says where a FixedWindow starts.
type Window string

const (
	// Aligned windows start at multiples of Period since the Unix epoch: a
	// one-minute window is the calendar minute, the same for every key.
	Aligned Window = "aligned"
	// FirstHit windows start at the key's first request and last Period.
	FirstHit Window = "first_hit"
)

// Bounds of a Limit and a Request; see the algorithm package for why.
const (
	// MaxPeriod is the longest Period: 2^48 µs, about 8.9 years.
	MaxPeriod = time.Duration(algorithm.MaxPeriod) * time.Microsecond
	// MaxLimit is the largest Limit, Burst or Request.Cost: 2^40.
	MaxLimit = algorithm.MaxLimit
	// MaxLogLimit is the largest Limit of SlidingWindowLog and Concurrency,
	// which keep one entry per unit.
	MaxLogLimit = algorithm.MaxLogLimit
)

// Limit is a rate limit policy. The zero value is not usable: Limit and
// Period must be set. A Limit is a small value, safe to copy and to share.
//
//	floodgate.Limit{Algorithm: floodgate.GCRA, Limit: 10, Period: time.Second, Burst: 20}
type Limit struct {
	// Algorithm is the algorithm; empty means DefaultAlgorithm
	// (FixedWindow).
	Algorithm Algorithm
	// Limit is how many units are admitted per Period (the refill rate for
	// TokenBucket and GCRA, the units held at once for Concurrency).
	// 0 denies everything. "60 per minute": Limit 60, Period time.Minute.
	Limit int64
	// Period is the window, the refill period, or the lease TTL
	// (Concurrency): above zero, a whole number of microseconds, at most
	// MaxPeriod (MaxPeriod/2 for SlidingWindow, which keeps a key for two
	// periods).
	Period time.Duration
	// Burst is the capacity of TokenBucket and GCRA: the most units admitted
	// at once after an idle spell. 0 means Limit. Other algorithms take no
	// Burst.
	Burst int64
	// Window is where a FixedWindow starts: Aligned (the default, when
	// empty) or FirstHit. Other algorithms take no Window.
	Window Window
	// CountRejected makes a denied request still add its cost
	// (FixedWindow, SlidingWindow only), so a client that keeps retrying
	// stays denied. Default false: a denial changes nothing.
	CountRejected bool
	// LocalBudget, above zero, lets a store shared by several processes
	// decide the limit in each process, with no round trip per decision,
	// never admitting more in total than the limit; stores that decide in
	// process (store/memstore) ignore it. Default 0: every decision
	// reaches the store.
	//
	// FixedWindow and SlidingWindow: an instance claims up to LocalBudget
	// units of the key's remaining budget from the shared state in one
	// atomic step and admits them locally until the window ends. Unused
	// units go back when the instance goes idle or closes. An instance
	// holding unused units can make another deny while budget sits idle:
	// LocalBudget bounds how much (see store/redisstore).
	//
	// TokenBucket and GCRA: an instance decides on a slice of the limit's
	// rate that it leases from the shared store, and the same fraction of
	// Burst; the slices follow each instance's demand and never add up to
	// more than Limit per Period, so all instances together admit no more
	// than the one bucket would over any interval. LocalBudget is the most
	// of the rate, in units per Period, one instance holds: at most Limit
	// (Validate refuses more); Limit lets one busy instance take the whole
	// rate. What it costs in utilisation, and why no interval is overrun,
	// is in docs/redis.md ("Rate slices").
	//
	// SlidingWindowLog and Concurrency take none: units claimed now and
	// spent later could exceed the limit in some interval.
	LocalBudget int64
	// Durable marks a paid quota, whose use is accounted for in a durable
	// record beside the store: a commit of a reservation is acknowledged
	// only once the record holds it, and a counter that the store lost (a
	// Redis restart without persistence, a failover, an eviction) is
	// rebuilt from the record before the next decision on it. A decision
	// that is not a reservation (Allow, Decide) is a reserve and a commit
	// of its cost. The store does the accounting, a decorator that says
	// so with a method DurableQuotas() bool that returns true; a Limiter
	// over any other store refuses a durable limit (ErrInvalidLimit,
	// naming "durable"). Only an aligned or first-hit FixedWindow without
	// LocalBudget can be durable: a window's count is the sum of its
	// commits, which no other algorithm has. See "Durable quotas" in the
	// package doc.
	Durable bool
	// Global marks one limit shared by every region of a deployment
	// (package region): a region.Store decides it on the share of Limit
	// its region holds as a lease from the home store, so that all
	// regions together admit at most Limit per window. Every other store
	// ignores it and decides the limit as a local one, which is today's
	// behaviour. Only an aligned FixedWindow can be global: the package
	// doc of region says why. Default false.
	Global bool
	// Name optionally names the policy in headers, logs and metrics.
	Name string
}

// Capacity is the largest number of units the limit can admit at once, and
// the Limit of its Decisions: Burst (or Limit when Burst is 0) for
// TokenBucket and GCRA, Limit otherwise; 0 when Limit is 0, which admits
// nothing.
func (l Limit) Capacity() int64 {
	if (l.Algorithm == TokenBucket || l.Algorithm == GCRA) && l.Burst != 0 && l.Limit != 0 {
		return l.Burst
	}
	return l.Limit
}

// DefaultAlgorithm is the algorithm of a Limit whose Algorithm is empty,
// in the library, config files and the HTTP API alike.
const DefaultAlgorithm = FixedWindow

// EffectiveAlgorithm is the algorithm the limit runs: Algorithm, or
// DefaultAlgorithm when it is empty.
func (l Limit) EffectiveAlgorithm() Algorithm {
	if l.Algorithm == "" {
		return DefaultAlgorithm
	}
	return l.Algorithm
}

// Validate reports every problem of the limit at once, each wrapping
// ErrInvalidLimit and naming its field. It allocates nothing for a valid
// limit.
func (l Limit) Validate() error {
	if l.valid() {
		return nil
	}
	return l.invalid()
}

// invalid is Validate's error for a limit that valid rejects.
func (l Limit) invalid() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fieldErr(ErrInvalidLimit, field, format, args...))
	}
	alg := l.EffectiveAlgorithm()
	known := false
	for _, a := range Algorithms {
		known = known || a == alg
	}
	// name is the algorithm in the messages below: quoted when unknown, so
	// that text from a config file cannot break a message's one line.
	name := string(alg)
	if !known {
		name = strconv.Quote(name)
		bad("algorithm", "unknown algorithm %s (want one of %s)", name, algorithmList())
	}
	switch {
	case l.Limit < 0:
		bad("limit", "%d is negative", l.Limit)
	case l.Limit > MaxLimit:
		bad("limit", "%d is above the maximum %d", l.Limit, MaxLimit)
	case (alg == SlidingWindowLog || alg == Concurrency) && l.Limit > MaxLogLimit:
		bad("limit", "%d is above %d, the maximum for %s, which keeps one entry per unit", l.Limit, MaxLogLimit, alg)
	}
	switch {
	case l.Period <= 0:
		bad("period", "%v must be above zero", l.Period)
	case l.Period > MaxPeriod:
		bad("period", "%v is above the maximum %v", l.Period, MaxPeriod)
	case l.Period%time.Microsecond != 0:
		bad("period", "%v is not a whole number of microseconds", l.Period)
	}
	periodUS := int64(l.Period / time.Microsecond)
	bucket := alg == TokenBucket || alg == GCRA
	switch {
	case !bucket && l.Burst != 0:
		bad("burst", "%s takes no burst (only token_bucket and gcra do)", name)
	case l.Burst < 0:
		bad("burst", "%d is negative", l.Burst)
	case l.Burst > MaxLimit:
		bad("burst", "%d is above the maximum %d", l.Burst, MaxLimit)
	case bucket && l.Limit > 0 && l.Limit <= MaxLimit && periodUS > 0:
		b := l.Capacity()
		switch productOK, refillOK := bucketFits(b, l.Limit, periodUS); {
		case !productOK:
			bad("burst", "burst %d times limit %d is above 2^52; lower one of them", b, l.Limit)
		case !refillOK:
			bad("burst", "burst %d takes longer than %v to refill", b, MaxPeriod)
		}
	}
	if alg == SlidingWindow && l.Limit >= 0 && l.Limit <= MaxLimit && periodUS > 0 && periodUS <= algorithm.MaxPeriod {
		if l.Limit+1 > algorithm.MaxExact/periodUS {
			bad("limit", "(limit+1) × period in microseconds is above 2^52 for sliding_window (at most %d per %v); use a shorter period or another algorithm",
				algorithm.MaxExact/periodUS-1, l.Period)
		}
		if periodUS > algorithm.MaxPeriod/2 {
			bad("period", "%v is above %v, the maximum for sliding_window, which keeps a key for two periods", l.Period, MaxPeriod/2)
		}
	}
	switch l.Window {
	case "", Aligned:
	case FirstHit:
		if alg != FixedWindow {
			bad("window", "%s takes no window (only fixed_window does)", name)
		}
	default:
		bad("window", "unknown window %q (want aligned or first_hit)", l.Window)
	}
	if l.CountRejected && alg != FixedWindow && alg != SlidingWindow {
		bad("count_rejected", "%s does not count rejected requests (only fixed_window and sliding_window do)", name)
	}
	if msg := l.budgetProblem(alg); msg != "" {
		bad("local_budget", "%s", msg)
	}
	switch {
	case l.Durable && alg != FixedWindow:
		bad("durable", "%s cannot be durable: only a fixed_window's count is the sum of its commits, which a ledger can rebuild", name)
	case l.Durable && l.LocalBudget != 0:
		bad("durable", "a durable quota takes no local_budget: units claimed by an instance are outside the reservations the ledger records")
	case l.Durable && l.Global:
		bad("durable", "a global limit cannot be durable: a region decides it on its leased share, which takes no reservations, and a durable quota is accounted by reservations")
	}
	switch {
	case l.Global && alg != FixedWindow:
		bad("global", "only an aligned fixed_window can be global, not %s", name)
	case l.Global && l.Window == FirstHit:
		bad("global", "only an aligned fixed_window can be global, not a first_hit one")
	}
	if len(errs) == 0 {
		// valid() is stricter than the checks above only by mistake.
		bad("limit", "%v is not valid", l)
	}
	return errors.Join(errs...)
}

// valid is the fast path of Validate: a few comparisons and, for the
// buckets, two 128-bit products; no division and no allocation. It takes a
// pointer so that Request.Validate does not copy the Limit.
func (l *Limit) valid() bool {
	if l.Limit < 0 || l.Limit > MaxLimit || l.Period <= 0 || l.Period > MaxPeriod || l.Period%time.Microsecond != 0 {
		return false
	}
	periodUS := int64(l.Period / time.Microsecond)
	if l.LocalBudget != 0 && l.budgetProblem(l.EffectiveAlgorithm()) != "" {
		return false
	}
	if l.Durable && (l.EffectiveAlgorithm() != FixedWindow || l.LocalBudget != 0 || l.Global) {
		return false
	}
	aligned := l.Window == "" || l.Window == Aligned
	if l.Global && (l.EffectiveAlgorithm() != FixedWindow || !aligned) {
		return false
	}
	switch l.Algorithm {
	case "", FixedWindow:
		return l.Burst == 0 && (aligned || l.Window == FirstHit)
	case TokenBucket, GCRA:
		if l.Burst < 0 || l.Burst > MaxLimit || l.CountRejected || !aligned {
			return false
		}
		if l.Limit == 0 {
			return true
		}
		b := l.Burst
		if b == 0 {
			b = l.Limit
		}
		productOK, refillOK := bucketFits(b, l.Limit, periodUS)
		return productOK && refillOK
	case SlidingWindow:
		// (Limit+1) × period ≤ MaxExact: Limit+1 ≤ 2^40+1 and periodUS ≤
		// 2^48, so the product fits in 128 bits.
		hi, lo := bits.Mul64(uint64(l.Limit+1), uint64(periodUS))
		return l.Burst == 0 && aligned && hi == 0 && lo <= uint64(algorithm.MaxExact) && periodUS <= algorithm.MaxPeriod/2
	case SlidingWindowLog, Concurrency:
		return l.Burst == 0 && aligned && !l.CountRejected && l.Limit <= MaxLogLimit
	}
	return false
}

// budgetProblem says what is wrong with l.LocalBudget under alg, or "".
func (l Limit) budgetProblem(alg Algorithm) string {
	switch {
	case l.LocalBudget == 0:
		return ""
	case l.LocalBudget < 0:
		return fmt.Sprintf("%d is negative", l.LocalBudget)
	case l.LocalBudget > MaxLimit:
		return fmt.Sprintf("%d is above the maximum %d", l.LocalBudget, MaxLimit)
	case (alg == TokenBucket || alg == GCRA) && l.Limit > 0 && l.LocalBudget > l.Limit:
		return fmt.Sprintf("%d is above limit %d: for %s it is the most of the rate, in units per period, that one instance holds", l.LocalBudget, l.Limit, alg)
	case alg == SlidingWindowLog:
		return "sliding_window_log takes no local_budget: units claimed at one instant and spent later could exceed the limit in some trailing period; fixed_window, sliding_window, token_bucket and gcra take one"
	case alg == Concurrency:
		return "concurrency takes no local_budget (fixed_window, sliding_window, token_bucket and gcra take one)"
	}
	return ""
}

// bucketFits reports whether a TokenBucket or GCRA of capacity b refilled
// limit per periodUS keeps its arithmetic exact: productOK when
// b*limit <= MaxExact (instants carry a fraction of a microsecond in units
// of 1/limit), refillOK when also b*periodUS/limit <= MaxPeriod, exactly
// (refilling the whole bucket takes at most MaxPeriod, so now plus that
// stays within MaxExact), that is b*periodUS <= MaxPeriod*limit. limit > 0,
// periodUS > 0, 0 <= b <= MaxLimit: every product fits in 128 bits.
func bucketFits(b, limit, periodUS int64) (productOK, refillOK bool) {
	if hi, lo := bits.Mul64(uint64(b), uint64(limit)); hi != 0 || lo > uint64(algorithm.MaxExact) {
		return false, false
	}
	refillHi, refillLo := bits.Mul64(uint64(b), uint64(periodUS))
	maxHi, maxLo := bits.Mul64(uint64(algorithm.MaxPeriod), uint64(limit))
	return true, refillHi < maxHi || refillHi == maxHi && refillLo <= maxLo
}

func algorithmList() string {
	names := make([]string, len(Algorithms))
	for i, a := range Algorithms {
		names[i] = string(a)
	}
	return strings.Join(names, ", ")
}

// Params is the limit in the integer form algorithm.Step takes, with the
// defaults filled in (Burst = Limit). Call it on a validated limit.
func (l Limit) Params() algorithm.Params {
	var burst int64 // Capacity for the buckets, 0 elsewhere
	switch l.Algorithm {
	case TokenBucket, GCRA:
		burst = l.Limit
		if l.Burst != 0 && l.Limit != 0 {
			burst = l.Burst
		}
	}
	return algorithm.Params{
		Limit:         l.Limit,
		Period:        int64(l.Period / time.Microsecond),
		Burst:         burst,
		FirstHit:      l.Window == FirstHit,
		CountRejected: l.CountRejected,
	}
}

// String formats the limit as "60/1m0s fixed_window", adding the options
// that differ from the defaults: "10/1s gcra burst=20",
// "100/1h0m0s fixed_window first_hit count_rejected",
// "1000/1s fixed_window local_budget=100", "10000/720h0m0s fixed_window durable".
func (l Limit) String() string {
	var b strings.Builder
	if l.Name != "" {
		b.WriteString(strconv.Quote(l.Name) + " ")
	}
	fmt.Fprintf(&b, "%d/%v %s", l.Limit, l.Period, l.EffectiveAlgorithm())
	if l.Burst != 0 {
		fmt.Fprintf(&b, " burst=%d", l.Burst)
	}
	if l.Window == FirstHit {
		b.WriteString(" first_hit")
	} else if l.Window != "" && l.Window != Aligned {
		fmt.Fprintf(&b, " window=%q", string(l.Window))
	}
	if l.CountRejected {
		b.WriteString(" count_rejected")
	}
	if l.LocalBudget != 0 {
		fmt.Fprintf(&b, " local_budget=%d", l.LocalBudget)
	}
	if l.Durable {
		b.WriteString(" durable")
	}
	if l.Global {
		b.WriteString(" global")
	}
	return b.String()
}

// maxNowMicros bounds Request.Now so that now plus a period stays exact.
const maxNowMicros = algorithm.MaxExact - algorithm.MaxPeriod
