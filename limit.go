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

	// DefaultAlgorithm is the algorithm of a Limit whose Algorithm is
	// empty, in the library, config files and the HTTP API alike.
	DefaultAlgorithm = FixedWindow
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
	// Calendar, when not zero, makes a FixedWindow's windows periods of a
	// calendar (days, weeks, months or years of a time zone, from an
	// anchor day) instead of multiples of Period: a monthly quota that
	// resets at midnight on the 1st in New York. Period is then 0 (a
	// window lasts what its calendar period lasts: 23 to 25 hours for a
	// day), and the window can be neither first_hit nor take a
	// LocalBudget, nor be Global. Durable quotas take one, so that their
	// windows are the bill's. See Calendar.
	Calendar Calendar
	// Name optionally names the policy in headers, logs and metrics.
	Name string

	// wait is algorithm.Params.Wait: set by Limiter.Schedule on the
	// TokenBucket limit it reserves under, the units the bucket may owe.
	wait int64
}

// Capacity is the largest number of units the limit can admit at once, and
// the Limit of its Decisions: Burst (or Limit when Burst is 0) for
// TokenBucket and GCRA, Limit otherwise; 0 when Limit is 0, which admits
// nothing.
func (l Limit) Capacity() int64 {
	if k, _ := l.kind(); k.Burst() && l.Burst != 0 && l.Limit != 0 {
		return l.Burst
	}
	return l.Limit
}

// EffectiveAlgorithm is the algorithm the limit runs: Algorithm, or
// DefaultAlgorithm when it is empty.
func (l Limit) EffectiveAlgorithm() Algorithm {
	if l.Algorithm == "" {
		return DefaultAlgorithm
	}
	return l.Algorithm
}

// kind is the algorithm.Kind of the limit's algorithm, and whether it is
// one; for an unknown algorithm, algorithm.NumKinds, which takes nothing.
func (l *Limit) kind() (algorithm.Kind, bool) {
	if l.Algorithm == "" {
		return algorithm.KindFixedWindow, true
	}
	k, ok := algorithm.ParseKind(string(l.Algorithm))
	if !ok {
		return algorithm.NumKinds, false
	}
	return k, true
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

// valid is the fast path of Validate, run on every decision: the rules'
// predicates, without a call or an allocation. It takes a pointer so that
// Request.Validate does not copy the Limit.
func (l *Limit) valid() bool { return l.broken() == 0 }

// invalid is Validate's error for a limit that valid rejects: a FieldError
// for each rule it breaks, in the order of limitRules, joined. It takes a
// copy, which the messages may keep, so that Validate's limit stays on
// the stack.
func (l Limit) invalid() error {
	broken := l.broken()
	var errs []error
	for _, r := range limitRules {
		if broken&r.rule != 0 {
			errs = append(errs, fieldErr(ErrInvalidLimit, r.field, "%s", r.problem(&l)))
		}
	}
	return errors.Join(errs...)
}

// A rule is one thing a valid Limit keeps, as a bit of a set of rules.
// Its predicate is in broken, its field and problem in limitRules.
type rule uint64

// The rules of a Limit; limitRules has their order.
const (
	algorithmUnknown rule = 1 << iota
	limitNegative
	limitAboveMax
	limitAboveUnitMax // of the algorithms that keep an entry per unit
	periodNotPositive
	periodAboveMax
	periodNotWholeMicros
	burstNotTaken
	burstNegative
	burstAboveMax
	bucketProductInexact // burst × limit above MaxExact
	bucketRefillTooLong  // refilling the whole bucket takes above MaxPeriod
	slidingProductInexact
	slidingPeriodAboveMax
	windowNotTaken
	windowUnknown
	countRejectedNotTaken
	budgetNegative
	budgetAboveMax
	budgetAboveRate
	budgetOnLog
	budgetOnConcurrency
	durableAlgorithm
	durableBudget
	durableGlobal
	globalAlgorithm
	globalFirstHit
	calendarInvalid
	calendarAlgorithm
	calendarPeriod
	calendarFirstHit
	calendarBudget
	calendarGlobal
	allRules = calendarGlobal<<1 - 1
)

// broken returns the set of rules l breaks: the one place each rule's
// predicate is, which valid (every decision) and invalid (the messages)
// both run, so the two cannot disagree. Of the rules of one switch only
// the first that holds is set: a negative limit is not also above a
// maximum. What each algorithm takes (a burst, a first_hit window,
// count_rejected, its largest limit and period) is algorithm.Kind's. It
// makes no call, so that its values stay in registers.
func (l *Limit) broken() rule {
	k, known := l.kind()
	return l.brokenAs(k, known)
}

// brokenAs is broken for the limit's kind k, known false for an unknown
// algorithm, as kind returns them: Limiter.allowSmall, which needs the
// kind too, finds it once.
func (l *Limit) brokenAs(k algorithm.Kind, known bool) (set rule) {
	if !known {
		set |= algorithmUnknown
	}
	// The guards of the switches below (a comparison of unsigned values
	// for a range, options at zero) hold for most limits, which then skip
	// the rules that could not hold.
	if uint64(l.Limit) > uint64(k.MaxLimit()) {
		switch {
		case l.Limit < 0:
			set |= limitNegative
		case l.Limit > MaxLimit:
			set |= limitAboveMax
		default:
			set |= limitAboveUnitMax
		}
	}
	periodUS := int64(l.Period / time.Microsecond)
	calendar := l.Calendar.set()
	if calendar {
		set |= l.brokenCalendar(k)
		if l.Period == 0 {
			periodUS = algorithm.MaxCalendarPeriod(l.Calendar.unit())
		}
	}
	if uint64(l.Period-1) >= uint64(MaxPeriod) && !(calendar && l.Period == 0) || periodUS*int64(time.Microsecond) != int64(l.Period) && !calendar {
		switch {
		case l.Period <= 0:
			set |= periodNotPositive
		case l.Period > MaxPeriod:
			set |= periodAboveMax
		default:
			set |= periodNotWholeMicros
		}
	}
	switch {
	case l.Burst == 0 && !k.Burst():
	case !k.Burst() && l.Burst != 0:
		set |= burstNotTaken
	case l.Burst < 0:
		set |= burstNegative
	case l.Burst > MaxLimit:
		set |= burstAboveMax
	case k.Burst() && l.Limit > 0 && l.Limit <= MaxLimit && periodUS > 0:
		switch productOK, refillOK := bucketFits(bucketCapacity(l), l.Limit, periodUS); {
		case !productOK:
			set |= bucketProductInexact
		case !refillOK:
			set |= bucketRefillTooLong
		}
	}
	if k == algorithm.KindSlidingWindow && l.Limit >= 0 && l.Limit <= MaxLimit && periodUS > 0 && periodUS <= algorithm.MaxPeriod {
		// (Limit+1) × period <= MaxExact, without a division: Limit+1 <=
		// 2^40+1 and periodUS <= 2^48, so the product fits in 128 bits.
		if hi, lo := bits.Mul64(uint64(l.Limit+1), uint64(periodUS)); hi != 0 || lo > uint64(algorithm.MaxExact) {
			set |= slidingProductInexact
		}
		if periodUS > k.MaxPeriod() {
			set |= slidingPeriodAboveMax
		}
	}
	if l.Window == "" && !l.CountRejected && l.LocalBudget == 0 && !l.Durable && !l.Global {
		return set
	}
	switch l.Window {
	case "", Aligned:
	case FirstHit:
		if !k.FirstHit() {
			set |= windowNotTaken
		}
	default:
		set |= windowUnknown
	}
	if l.CountRejected && !k.CountRejected() {
		set |= countRejectedNotTaken
	}
	switch {
	case l.LocalBudget == 0:
	case l.LocalBudget < 0:
		set |= budgetNegative
	case l.LocalBudget > MaxLimit:
		set |= budgetAboveMax
	case k.Burst() && l.Limit > 0 && l.LocalBudget > l.Limit:
		set |= budgetAboveRate
	case k == algorithm.KindSlidingWindowLog:
		set |= budgetOnLog
	case k == algorithm.KindConcurrency:
		set |= budgetOnConcurrency
	}
	switch {
	case l.Durable && k != algorithm.KindFixedWindow:
		set |= durableAlgorithm
	case l.Durable && l.LocalBudget != 0:
		set |= durableBudget
	case l.Durable && l.Global:
		set |= durableGlobal
	}
	switch {
	case l.Global && k != algorithm.KindFixedWindow:
		set |= globalAlgorithm
	case l.Global && l.Window == FirstHit:
		set |= globalFirstHit
	}
	return set
}

// set reports whether c is not the zero Calendar: c != Calendar{},
// field by field, which the compiler inlines where the comparison of
// the structs is a call (of the type's equality function) on every
// decision.
func (c *Calendar) set() bool {
	return c.Unit != "" || c.Location != nil || c.Day != 0 || c.Month != 0
}

// brokenCalendar is the rules of broken for a limit with a Calendar.
func (l *Limit) brokenCalendar(k algorithm.Kind) (set rule) {
	if l.Calendar.problem() != "" {
		set |= calendarInvalid
	}
	switch {
	case k != algorithm.KindFixedWindow:
		set |= calendarAlgorithm
	case l.Window == FirstHit:
		set |= calendarFirstHit
	}
	if l.Period != 0 {
		set |= calendarPeriod
	}
	if l.LocalBudget != 0 {
		set |= calendarBudget
	}
	if l.Global {
		set |= calendarGlobal
	}
	return set
}

// limitRules are the rules of a Limit in the order Validate reports them,
// each with the field it names and its problem, made only for a limit
// that breaks it.
var limitRules = []struct {
	rule    rule
	field   string
	problem func(l *Limit) string
}{
	{algorithmUnknown, "algorithm", func(l *Limit) string {
		return fmt.Sprintf("unknown algorithm %s (want one of %s)", l.name(), algorithmList())
	}},
	{limitNegative, "limit", func(l *Limit) string { return fmt.Sprintf("%d is negative", l.Limit) }},
	{limitAboveMax, "limit", func(l *Limit) string { return fmt.Sprintf("%d is above the maximum %d", l.Limit, MaxLimit) }},
	{limitAboveUnitMax, "limit", func(l *Limit) string {
		k, _ := l.kind()
		return fmt.Sprintf("%d is above %d, the maximum for %s, which keeps one entry per unit", l.Limit, k.MaxLimit(), l.name())
	}},
	{periodNotPositive, "period", func(l *Limit) string { return fmt.Sprintf("%v must be above zero", l.Period) }},
	{periodAboveMax, "period", func(l *Limit) string { return fmt.Sprintf("%v is above the maximum %v", l.Period, MaxPeriod) }},
	{periodNotWholeMicros, "period", func(l *Limit) string { return fmt.Sprintf("%v is not a whole number of microseconds", l.Period) }},
	{burstNotTaken, "burst", func(l *Limit) string {
		return fmt.Sprintf("%s takes no burst (only token_bucket and gcra do)", l.name())
	}},
	{burstNegative, "burst", func(l *Limit) string { return fmt.Sprintf("%d is negative", l.Burst) }},
	{burstAboveMax, "burst", func(l *Limit) string { return fmt.Sprintf("%d is above the maximum %d", l.Burst, MaxLimit) }},
	{bucketProductInexact, "burst", func(l *Limit) string {
		return fmt.Sprintf("burst %d times limit %d is above 2^52; lower one of them", bucketCapacity(l), l.Limit)
	}},
	{bucketRefillTooLong, "burst", func(l *Limit) string {
		return fmt.Sprintf("burst %d takes longer than %v to refill", bucketCapacity(l), MaxPeriod)
	}},
	{slidingProductInexact, "limit", func(l *Limit) string {
		return fmt.Sprintf("(limit+1) × period in microseconds is above 2^52 for sliding_window (at most %d per %v); use a shorter period or another algorithm",
			algorithm.MaxExact/int64(l.Period/time.Microsecond)-1, l.Period)
	}},
	{slidingPeriodAboveMax, "period", func(l *Limit) string {
		return fmt.Sprintf("%v is above %v, the maximum for sliding_window, which keeps a key for two periods", l.Period, MaxPeriod/2)
	}},
	{windowNotTaken, "window", func(l *Limit) string { return fmt.Sprintf("%s takes no window (only fixed_window does)", l.name()) }},
	{windowUnknown, "window", func(l *Limit) string { return fmt.Sprintf("unknown window %q (want aligned or first_hit)", l.Window) }},
	{countRejectedNotTaken, "count_rejected", func(l *Limit) string {
		return fmt.Sprintf("%s does not count rejected requests (only fixed_window and sliding_window do)", l.name())
	}},
	{budgetNegative, "local_budget", func(l *Limit) string { return fmt.Sprintf("%d is negative", l.LocalBudget) }},
	{budgetAboveMax, "local_budget", func(l *Limit) string { return fmt.Sprintf("%d is above the maximum %d", l.LocalBudget, MaxLimit) }},
	{budgetAboveRate, "local_budget", func(l *Limit) string {
		return fmt.Sprintf("%d is above limit %d: for %s it is the most of the rate, in units per period, that one instance holds", l.LocalBudget, l.Limit, l.name())
	}},
	{budgetOnLog, "local_budget", func(*Limit) string {
		return "sliding_window_log takes no local_budget: units claimed at one instant and spent later could exceed the limit in some trailing period; fixed_window, sliding_window, token_bucket and gcra take one"
	}},
	{budgetOnConcurrency, "local_budget", func(*Limit) string {
		return "concurrency takes no local_budget (fixed_window, sliding_window, token_bucket and gcra take one)"
	}},
	{durableAlgorithm, "durable", func(l *Limit) string {
		return fmt.Sprintf("%s cannot be durable: only a fixed_window's count is the sum of its commits, which a ledger can rebuild", l.name())
	}},
	{durableBudget, "durable", func(*Limit) string {
		return "a durable quota takes no local_budget: units claimed by an instance are outside the reservations the ledger records"
	}},
	{durableGlobal, "durable", func(*Limit) string {
		return "a global limit cannot be durable: a region decides it on its leased share, which takes no reservations, and a durable quota is accounted by reservations"
	}},
	{globalAlgorithm, "global", func(l *Limit) string {
		return fmt.Sprintf("only an aligned fixed_window can be global, not %s", l.name())
	}},
	{globalFirstHit, "global", func(*Limit) string { return "only an aligned fixed_window can be global, not a first_hit one" }},
	{calendarInvalid, "calendar", func(l *Limit) string { return l.Calendar.problem() }},
	{calendarAlgorithm, "calendar", func(l *Limit) string {
		return fmt.Sprintf("only a fixed_window takes calendar windows, not %s", l.name())
	}},
	{calendarPeriod, "period", func(l *Limit) string {
		return fmt.Sprintf("%v: a calendar window takes no period (0): it lasts its %s", l.Period, l.Calendar.Unit)
	}},
	{calendarFirstHit, "window", func(*Limit) string {
		return "a calendar window starts at local midnight of its anchor day, not at the first hit"
	}},
	{calendarBudget, "local_budget", func(*Limit) string {
		return "a calendar window takes no local_budget: an instance's claim does not know where the calendar window ends"
	}},
	{calendarGlobal, "global", func(*Limit) string {
		return "a calendar window cannot be global: a region's lease is of aligned windows"
	}},
}

// name is the limit's algorithm in Validate's messages: quoted when
// unknown, so that text from a config file cannot break a message's one
// line.
func (l *Limit) name() string {
	if _, ok := l.kind(); !ok {
		return strconv.Quote(string(l.Algorithm))
	}
	return string(l.EffectiveAlgorithm())
}

// bucketCapacity is the capacity of a TokenBucket or GCRA whose Limit is
// above 0: Burst, or Limit when Burst is 0.
func bucketCapacity(l *Limit) int64 {
	if l.Burst == 0 {
		return l.Limit
	}
	return l.Burst
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
// defaults filled in (Burst = Limit). Call it on a validated limit. The
// state machine that runs it is Kind's.
func (l Limit) Params() algorithm.Params {
	var burst int64 // Capacity for the buckets, 0 elsewhere
	// Two comparisons, not Kind: Params is on every decision's path, and
	// small enough for the compiler to inline into it.
	switch l.Algorithm {
	case TokenBucket, GCRA:
		burst = l.Limit
		if l.Burst != 0 && l.Limit != 0 {
			burst = l.Burst
		}
	}
	period := int64(l.Period / time.Microsecond)
	if l.Calendar.Unit != "" {
		period = algorithm.MaxCalendarPeriod(l.Calendar.unit())
	}
	return algorithm.Params{
		Limit:         l.Limit,
		Period:        period,
		Burst:         burst,
		FirstHit:      l.Window == FirstHit,
		CountRejected: l.CountRejected,
		Wait:          l.wait,
	}
}

// ParamsAt is Params for a decision at nowUS (µs since the epoch): for a
// calendar limit, with the windows around nowUS (Calendar.Windows), which
// its step needs; Params for every other. Call it on a validated limit.
func (l Limit) ParamsAt(nowUS int64) algorithm.Params {
	p := l.Params()
	if l.Calendar.Unit != "" {
		w := l.Calendar.Windows(nowUS)
		p.Calendar = &w
	}
	return p
}

// statePeriod is the period that, with the key and algorithm, names a
// store's state: Period, or for a calendar limit minus the unit's longest
// window, which no aligned limit has.
func (l *Limit) statePeriod() time.Duration {
	if l.Calendar.Unit != "" {
		return -time.Duration(l.Params().Period) * time.Microsecond
	}
	return l.Period
}

// IsCalendar reports whether the limit's windows are calendar periods.
func (l Limit) IsCalendar() bool { return l.Calendar.Unit != "" }

// WindowAt is the window of a FixedWindow limit that contains t: a
// multiple of Period since the epoch (Aligned), or the calendar period
// (Calendar). For a FirstHit window, which depends on the key, it is
// [t, t+Period).
func (l Limit) WindowAt(t time.Time) (start, end time.Time) {
	switch {
	case l.Calendar.Unit != "":
		return l.Calendar.Window(t)
	case l.Window == FirstHit || l.Period <= 0:
		return t, t.Add(l.Period)
	}
	us, p := t.UnixMicro(), int64(l.Period/time.Microsecond)
	s := us - ((us%p)+p)%p
	return time.UnixMicro(s), time.UnixMicro(s + p)
}

// Kind is the algorithm.Kind that runs the limit, the state machine of
// EffectiveAlgorithm: what a store or a model steps with its Params.
// For an algorithm that Validate rejects as unknown it is
// algorithm.NumKinds, which takes nothing.
func (l Limit) Kind() algorithm.Kind {
	k, _ := l.kind()
	return k
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
	if l.Calendar.Unit != "" && l.Period == 0 {
		fmt.Fprintf(&b, "%d/%s %s", l.Limit, l.Calendar.Unit, l.EffectiveAlgorithm())
	} else {
		fmt.Fprintf(&b, "%d/%v %s", l.Limit, l.Period, l.EffectiveAlgorithm())
	}
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
	if l.Calendar != (Calendar{}) {
		fmt.Fprintf(&b, " calendar=%q", l.Calendar.String())
	}
	return b.String()
}

// maxNowMicros bounds Request.Now so that now plus a period stays exact.
const maxNowMicros = algorithm.MaxExact - algorithm.MaxPeriod
