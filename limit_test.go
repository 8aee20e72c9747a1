package floodgate

import (
	"errors"
	"math/big"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/algorithm"
)

// Valid limits, including every boundary that Validate must still accept.
var validLimits = []struct {
	name string
	l    Limit
}{
	{"60 per minute", Limit{Limit: 60, Period: time.Minute}},
	{"limit 0 denies all", Limit{Limit: 0, Period: time.Second}},
	{"explicit fixed window", Limit{Algorithm: FixedWindow, Limit: 1, Period: time.Microsecond}},
	{"aligned window", Limit{Limit: 10, Period: time.Hour, Window: Aligned}},
	{"global", Limit{Limit: 10, Period: time.Hour, Global: true}},
	{"first hit", Limit{Limit: 10, Period: time.Hour, Window: FirstHit}},
	{"fixed window count rejected", Limit{Limit: 10, Period: time.Hour, CountRejected: true}},
	{"fixed window longest period", Limit{Limit: MaxLimit, Period: MaxPeriod}},
	{"sliding window log", Limit{Algorithm: SlidingWindowLog, Limit: 100, Period: time.Minute}},
	{"sliding window log largest limit", Limit{Algorithm: SlidingWindowLog, Limit: MaxLogLimit, Period: MaxPeriod}},
	{"sliding window", Limit{Algorithm: SlidingWindow, Limit: 100, Period: time.Minute}},
	{"sliding window count rejected", Limit{Algorithm: SlidingWindow, Limit: 100, Period: time.Minute, CountRejected: true}},
	// (52123+1) × 86400e6 <= 2^52 < (52124+1) × 86400e6.
	{"sliding window most per day", Limit{Algorithm: SlidingWindow, Limit: 52_123, Period: 24 * time.Hour}},
	{"sliding window longest period", Limit{Algorithm: SlidingWindow, Limit: 15, Period: MaxPeriod / 2}},
	{"token bucket", Limit{Algorithm: TokenBucket, Limit: 10, Period: time.Second}},
	{"token bucket burst above limit", Limit{Algorithm: TokenBucket, Limit: 100, Period: time.Minute, Burst: 300}},
	{"token bucket burst below limit", Limit{Algorithm: TokenBucket, Limit: 10, Period: time.Second, Burst: 2}},
	// Burst defaults to Limit: 2^26 × 2^26 = 2^52 exactly.
	{"token bucket largest default burst", Limit{Algorithm: TokenBucket, Limit: 1 << 26, Period: time.Second}},
	{"token bucket limit 0 with burst", Limit{Algorithm: TokenBucket, Limit: 0, Period: time.Second, Burst: 5}},
	// Refilling 2^20 tokens at one per 2^28 µs takes exactly MaxPeriod.
	{"gcra refill takes MaxPeriod", Limit{Algorithm: GCRA, Limit: 1, Period: 1 << 28 * time.Microsecond, Burst: 1 << 20}},
	{"gcra", Limit{Algorithm: GCRA, Limit: 3, Period: time.Second, Burst: 20}},
	{"concurrency", Limit{Algorithm: Concurrency, Limit: 10, Period: 30 * time.Second}},
	{"concurrency largest limit", Limit{Algorithm: Concurrency, Limit: MaxLogLimit, Period: time.Minute}},
	{"named", Limit{Limit: 1, Period: time.Second, Name: "api"}},
	{"fixed window local budget", Limit{Limit: 1000, Period: time.Second, LocalBudget: 100}},
	{"first hit local budget above limit", Limit{Limit: 10, Period: time.Second, Window: FirstHit, LocalBudget: 50}},
	{"sliding window local budget", Limit{Algorithm: SlidingWindow, Limit: 1000, Period: time.Second, LocalBudget: MaxLimit}},
	{"token bucket local budget", Limit{Algorithm: TokenBucket, Limit: 10, Period: time.Second, LocalBudget: 5}},
	{"gcra local budget of the whole limit", Limit{Algorithm: GCRA, Limit: 10, Period: time.Second, Burst: 40, LocalBudget: 10}},
}

func TestLimitValidateAccepts(t *testing.T) {
	for _, tc := range validLimits {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.l.Validate(); err != nil {
				t.Errorf("%v: Validate() = %v, want nil", tc.l, err)
			}
			checkParams(t, tc.l)
		})
	}
}

func TestLimitValidateAllocatesNothing(t *testing.T) {
	for _, tc := range validLimits {
		t.Run(tc.name, func(t *testing.T) {
			l := tc.l
			if got := testing.AllocsPerRun(100, func() { _ = l.Validate() }); got != 0 {
				t.Errorf("Validate of a valid limit: %v allocations, want 0", got)
			}
		})
	}
}

func TestLimitValidateRejects(t *testing.T) {
	tests := []struct {
		name   string
		l      Limit
		fields []string // every field the error must name, in order
	}{
		{"zero period", Limit{Limit: 10}, []string{"period"}},
		{"negative period", Limit{Limit: 10, Period: -time.Second}, []string{"period"}},
		{"period not a whole microsecond", Limit{Limit: 10, Period: 1500 * time.Nanosecond}, []string{"period"}},
		{"period above MaxPeriod", Limit{Limit: 10, Period: MaxPeriod + time.Microsecond}, []string{"period"}},
		{"negative limit", Limit{Limit: -1, Period: time.Second}, []string{"limit"}},
		{"limit above MaxLimit", Limit{Limit: MaxLimit + 1, Period: time.Second}, []string{"limit"}},
		{"sliding window log above MaxLogLimit", Limit{Algorithm: SlidingWindowLog, Limit: MaxLogLimit + 1, Period: time.Second}, []string{"limit"}},
		{"concurrency above MaxLogLimit", Limit{Algorithm: Concurrency, Limit: MaxLogLimit + 1, Period: time.Second}, []string{"limit"}},
		{"burst on fixed window", Limit{Limit: 10, Period: time.Second, Burst: 10}, []string{"burst"}},
		{"global gcra", Limit{Algorithm: GCRA, Limit: 10, Period: time.Second, Global: true}, []string{"global"}},
		{"global first hit", Limit{Limit: 10, Period: time.Second, Window: FirstHit, Global: true}, []string{"global"}},
		{"burst on sliding window", Limit{Algorithm: SlidingWindow, Limit: 10, Period: time.Second, Burst: 10}, []string{"burst"}},
		{"burst on sliding window log", Limit{Algorithm: SlidingWindowLog, Limit: 10, Period: time.Second, Burst: 10}, []string{"burst"}},
		{"burst on concurrency", Limit{Algorithm: Concurrency, Limit: 10, Period: time.Second, Burst: 10}, []string{"burst"}},
		{"negative burst", Limit{Algorithm: TokenBucket, Limit: 10, Period: time.Second, Burst: -1}, []string{"burst"}},
		{"burst above MaxLimit", Limit{Algorithm: GCRA, Limit: 1, Period: time.Second, Burst: MaxLimit + 1}, []string{"burst"}},
		{"burst times limit above 2^52", Limit{Algorithm: GCRA, Limit: 1 << 20, Period: time.Second, Burst: 1<<32 + 1}, []string{"burst"}},
		{"default burst times limit above 2^52", Limit{Algorithm: TokenBucket, Limit: 1<<26 + 1, Period: time.Second}, []string{"burst"}},
		{"refill longer than MaxPeriod", Limit{Algorithm: TokenBucket, Limit: 1, Period: MaxPeriod, Burst: 2}, []string{"burst"}},
		// Regression: the check used floor(Period/Limit) = 256 µs for the
		// interval 256 4095/4096 µs, so it let 2^40 tokens take MaxPeriod
		// plus almost 2^40 µs to refill.
		{"refill longer than MaxPeriod by a fraction of the interval", Limit{Algorithm: GCRA, Limit: 4096, Period: (256*4096 + 4095) * time.Microsecond, Burst: 1 << 40}, []string{"burst"}},
		{"refill one token over MaxPeriod", Limit{Algorithm: GCRA, Limit: 1, Period: 1 << 28 * time.Microsecond, Burst: 1<<20 + 1}, []string{"burst"}},
		{"unknown algorithm", Limit{Algorithm: "leaky_bucket", Limit: 10, Period: time.Second}, []string{"algorithm"}},
		{"first hit on sliding window", Limit{Algorithm: SlidingWindow, Limit: 10, Period: time.Second, Window: FirstHit}, []string{"window"}},
		{"first hit on token bucket", Limit{Algorithm: TokenBucket, Limit: 10, Period: time.Second, Window: FirstHit}, []string{"window"}},
		{"unknown window", Limit{Limit: 10, Period: time.Second, Window: "rolling"}, []string{"window"}},
		{"count rejected on token bucket", Limit{Algorithm: TokenBucket, Limit: 10, Period: time.Second, CountRejected: true}, []string{"count_rejected"}},
		{"count rejected on gcra", Limit{Algorithm: GCRA, Limit: 10, Period: time.Second, CountRejected: true}, []string{"count_rejected"}},
		{"count rejected on sliding window log", Limit{Algorithm: SlidingWindowLog, Limit: 10, Period: time.Second, CountRejected: true}, []string{"count_rejected"}},
		{"count rejected on concurrency", Limit{Algorithm: Concurrency, Limit: 10, Period: time.Second, CountRejected: true}, []string{"count_rejected"}},
		{"negative local budget", Limit{Limit: 10, Period: time.Second, LocalBudget: -1}, []string{"local_budget"}},
		{"local budget above MaxLimit", Limit{Limit: 10, Period: time.Second, LocalBudget: MaxLimit + 1}, []string{"local_budget"}},
		{"local budget above limit on token bucket", Limit{Algorithm: TokenBucket, Limit: 10, Period: time.Second, LocalBudget: 11}, []string{"local_budget"}},
		{"local budget above limit on gcra", Limit{Algorithm: GCRA, Limit: 10, Period: time.Second, Burst: 50, LocalBudget: 11}, []string{"local_budget"}},
		{"local budget on sliding window log", Limit{Algorithm: SlidingWindowLog, Limit: 10, Period: time.Second, LocalBudget: 5}, []string{"local_budget"}},
		{"local budget on concurrency", Limit{Algorithm: Concurrency, Limit: 10, Period: time.Second, LocalBudget: 5}, []string{"local_budget"}},
		{"sliding window (limit+1)*period above 2^52", Limit{Algorithm: SlidingWindow, Limit: 52_124, Period: 24 * time.Hour}, []string{"limit"}},
		// Regression: Start + 2*Period (the key's expiry) must stay within
		// MaxExact for every valid now.
		{"sliding window period above MaxPeriod/2", Limit{Algorithm: SlidingWindow, Limit: 1, Period: MaxPeriod/2 + time.Microsecond}, []string{"period"}},
		// Regression: the algorithm's name was printed unquoted, so a
		// newline in it split a message in two.
		{"unknown algorithm with a newline", Limit{Algorithm: "a\nb", Limit: 1, Period: time.Second, Burst: 1, Window: FirstHit, CountRejected: true},
			[]string{"algorithm", "burst", "window", "count_rejected"}},
		{"every problem at once", Limit{Algorithm: "x", Limit: -1, Period: -1, Burst: -1, Window: "w"},
			[]string{"algorithm", "limit", "period", "burst", "window"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.l.Validate()
			if err == nil {
				t.Fatalf("%v: Validate() = nil, want an error naming %v", tc.l, tc.fields)
			}
			if !errors.Is(err, ErrInvalidLimit) {
				t.Errorf("Validate() = %v, does not wrap ErrInvalidLimit", err)
			}
			checkLimitError(t, err)
			var fields []string
			for _, line := range strings.Split(err.Error(), "\n") {
				rest := strings.TrimPrefix(line, "floodgate: invalid limit: ")
				fields = append(fields, rest[:strings.Index(rest, ":")])
			}
			if got, want := strings.Join(fields, ","), strings.Join(tc.fields, ","); got != want {
				t.Errorf("Validate() = %q: names %s, want %s", err, got, want)
			}
		})
	}
}

// TestLimitRules checks that limitRules has a row for every rule, once,
// in the order of the rules' bits, so that invalid reports every rule
// broken finds broken.
func TestLimitRules(t *testing.T) {
	for i, r := range limitRules {
		if want := rule(1) << i; r.rule != want {
			t.Errorf("limitRules[%d] is rule %#x, want %#x", i, r.rule, want)
		}
	}
	if got, want := rule(1)<<len(limitRules)-1, allRules; got != want {
		t.Errorf("limitRules covers %#x, want allRules %#x", got, want)
	}
}

// limitFields are the names a Validate error may give a field, as in config
// files and the HTTP API.
var limitFields = []string{"algorithm", "limit", "period", "burst", "window", "count_rejected", "local_budget", "global"}

// checkLimitError checks the shape of a Validate error: one line per
// problem, each "floodgate: invalid limit: <field>: <why>" and each wrapping
// ErrInvalidLimit; and never the fallback that reports a disagreement
// between Validate's fast path and its checks.
func checkLimitError(t *testing.T, err error) {
	t.Helper()
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	for _, e := range errs {
		if !errors.Is(e, ErrInvalidLimit) {
			t.Errorf("%q does not wrap ErrInvalidLimit", e)
		}
		rest, ok := strings.CutPrefix(e.Error(), "floodgate: invalid limit: ")
		field, why, ok2 := strings.Cut(rest, ": ")
		if !ok || !ok2 || why == "" || strings.Contains(e.Error(), "\n") {
			t.Errorf("%q is not \"floodgate: invalid limit: <field>: <why>\"", e)
			continue
		}
		if fe, ok := e.(*FieldError); !ok || fe.Kind != ErrInvalidLimit || fe.Field != field || fe.Problem != why {
			t.Errorf("%q is %#v, want a *FieldError{ErrInvalidLimit, %q, %q}", e, e, field, why)
		}
		known := false
		for _, f := range limitFields {
			known = known || f == field
		}
		if !known {
			t.Errorf("%q names %q, not a field of Limit", e, field)
		}
		if strings.HasSuffix(e.Error(), "is not valid") {
			t.Errorf("%q: Validate's fast path rejects a limit its checks accept", e)
		}
	}
}

// checkParams checks, with exact big-integer arithmetic, that the Params of
// a limit Validate accepts keep every bound the algorithm package documents:
// counts within MaxLimit (MaxLogLimit for the log and concurrency), Period
// within MaxPeriod, the products of the buckets and of sliding_window within
// MaxExact, and "now plus the longest time a key lives" within MaxExact for
// every now a Request may carry.
func checkParams(t *testing.T, l Limit) {
	t.Helper()
	p := l.Params()
	alg := l.EffectiveAlgorithm()
	if got, want := p.Limit, l.Limit; got != want {
		t.Errorf("Params().Limit = %d, want %d", got, want)
	}
	if got, want := time.Duration(p.Period)*time.Microsecond, l.Period; got != want {
		t.Errorf("Params().Period = %d µs, want %v", got, want)
	}
	if got, want := l.Kind().String(), string(alg); got != want {
		t.Errorf("Kind() = %s, want %s", got, want)
	}
	if p.Limit < 0 || p.Limit > algorithm.MaxLimit {
		t.Errorf("Params().Limit = %d, outside [0, MaxLimit]", p.Limit)
	}
	if p.Period <= 0 || p.Period > algorithm.MaxPeriod {
		t.Errorf("Params().Period = %d, outside (0, MaxPeriod]", p.Period)
	}
	if p.FirstHit && alg != FixedWindow {
		t.Errorf("FirstHit on %s", alg)
	}
	if p.CountRejected && alg != FixedWindow && alg != SlidingWindow {
		t.Errorf("CountRejected on %s", alg)
	}
	lim, per := big.NewInt(p.Limit), big.NewInt(p.Period)
	maxExact := big.NewInt(algorithm.MaxExact)
	// lives is the longest a key lives past now, in µs.
	lives := new(big.Rat).SetInt(per)
	switch alg {
	case FixedWindow:
	case SlidingWindowLog, Concurrency:
		if p.Limit > algorithm.MaxLogLimit {
			t.Errorf("%s: Limit %d above MaxLogLimit", alg, p.Limit)
		}
	case SlidingWindow:
		if n := new(big.Int).Mul(big.NewInt(p.Limit+1), per); n.Cmp(maxExact) > 0 {
			t.Errorf("sliding_window: (Limit+1)*Period = %v above MaxExact", n)
		}
		lives.Mul(lives, big.NewRat(2, 1))
	case TokenBucket, GCRA:
		if got, want := p.Burst, l.Capacity(); got != want {
			t.Errorf("Params().Burst = %d, want Capacity() = %d", got, want)
		}
		if l.Burst == 0 && p.Burst != p.Limit {
			t.Errorf("Params().Burst = %d, want the default Limit %d", p.Burst, p.Limit)
		}
		if p.Burst < 0 || p.Burst > algorithm.MaxLimit {
			t.Errorf("Params().Burst = %d, outside [0, MaxLimit]", p.Burst)
		}
		if p.Limit > 0 {
			b := big.NewInt(p.Burst)
			if n := new(big.Int).Mul(b, lim); n.Cmp(maxExact) > 0 {
				t.Errorf("Burst*Limit = %v above MaxExact", n)
			}
			lives.SetFrac(new(big.Int).Mul(b, per), lim) // the time to refill the whole bucket
		} else {
			lives.SetInt64(0)
		}
	default:
		t.Fatalf("Validate accepted unknown algorithm %q", l.Algorithm)
	}
	if alg != TokenBucket && alg != GCRA && p.Burst != 0 {
		t.Errorf("%s: Params().Burst = %d, want 0", alg, p.Burst)
	}
	end := new(big.Rat).Add(lives, new(big.Rat).SetInt64(maxNowMicros))
	if end.Cmp(new(big.Rat).SetInt(maxExact)) > 0 {
		t.Errorf("%s: a key set at the latest now lives until %v µs, above MaxExact", alg, end.FloatString(1))
	}
}

func TestLimitParams(t *testing.T) {
	tests := []struct {
		name string
		l    Limit
		want algorithm.Params
	}{
		{"fixed window", Limit{Limit: 60, Period: time.Minute}, algorithm.Params{Limit: 60, Period: 60_000_000}},
		{"first hit, count rejected", Limit{Limit: 5, Period: time.Millisecond, Window: FirstHit, CountRejected: true},
			algorithm.Params{Limit: 5, Period: 1000, FirstHit: true, CountRejected: true}},
		{"aligned is not first hit", Limit{Limit: 5, Period: time.Second, Window: Aligned}, algorithm.Params{Limit: 5, Period: 1_000_000}},
		{"token bucket default burst", Limit{Algorithm: TokenBucket, Limit: 10, Period: time.Second}, algorithm.Params{Limit: 10, Period: 1_000_000, Burst: 10}},
		{"gcra burst", Limit{Algorithm: GCRA, Limit: 10, Period: time.Second, Burst: 20}, algorithm.Params{Limit: 10, Period: 1_000_000, Burst: 20}},
		{"gcra limit 0", Limit{Algorithm: GCRA, Period: time.Second}, algorithm.Params{Period: 1_000_000}},
		{"token bucket limit 0 with a burst", Limit{Algorithm: TokenBucket, Period: time.Second, Burst: 5}, algorithm.Params{Period: 1_000_000}},
		{"concurrency", Limit{Algorithm: Concurrency, Limit: 3, Period: 30 * time.Second}, algorithm.Params{Limit: 3, Period: 30_000_000}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.l.Params(); got != tc.want {
				t.Errorf("%v.Params() = %+v, want %+v", tc.l, got, tc.want)
			}
		})
	}
}

// TestAlgorithmKinds checks that every Algorithm is the name of an
// algorithm.Kind, and the empty one the Kind of DefaultAlgorithm.
func TestAlgorithmKinds(t *testing.T) {
	if got, want := len(Algorithms), int(algorithm.NumKinds); got != want {
		t.Errorf("%d Algorithms, %d algorithm.Kinds", got, want)
	}
	for _, a := range Algorithms {
		l := Limit{Algorithm: a}
		if k, ok := l.kind(); !ok || k.String() != string(a) {
			t.Errorf("the Kind of %q is %v, %v", a, k, ok)
		}
	}
	empty, def := Limit{}, Limit{Algorithm: DefaultAlgorithm}
	if k, ok := empty.kind(); !ok || k != algorithm.KindFixedWindow {
		t.Errorf("the Kind of the empty algorithm is %v, %v, want %v", k, ok, algorithm.KindFixedWindow)
	}
	if got, want := empty.Kind(), def.Kind(); got != want {
		t.Errorf("the empty algorithm runs %v, DefaultAlgorithm %v", got, want)
	}
	if k, ok := (&Limit{Algorithm: "leaky_bucket"}).kind(); ok || k != algorithm.NumKinds {
		t.Errorf("the Kind of an unknown algorithm is %v, %v, want %v, false", k, ok, algorithm.NumKinds)
	}
}

func TestLimitCapacity(t *testing.T) {
	tests := []struct {
		l    Limit
		want int64
	}{
		{Limit{Limit: 60, Period: time.Minute}, 60},
		{Limit{Algorithm: TokenBucket, Limit: 10, Period: time.Second}, 10},
		{Limit{Algorithm: TokenBucket, Limit: 10, Period: time.Second, Burst: 2}, 2},
		{Limit{Algorithm: GCRA, Limit: 100, Period: time.Minute, Burst: 300}, 300},
		{Limit{Algorithm: SlidingWindowLog, Limit: 7, Period: time.Minute}, 7},
		{Limit{Algorithm: Concurrency, Limit: 4, Period: time.Minute}, 4},
		// Regression: a bucket of limit 0 admits nothing, and its
		// Decisions say Limit 0; Capacity said Burst.
		{Limit{Algorithm: TokenBucket, Limit: 0, Period: time.Second, Burst: 5}, 0},
		{Limit{Algorithm: GCRA, Limit: 0, Period: time.Second, Burst: 5}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.l.String(), func(t *testing.T) {
			if got := tc.l.Capacity(); got != tc.want {
				t.Errorf("Capacity() = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestLimitString(t *testing.T) {
	tests := []struct {
		l    Limit
		want string
	}{
		{Limit{Limit: 60, Period: time.Minute}, "60/1m0s fixed_window"},
		{Limit{Algorithm: GCRA, Limit: 10, Period: time.Second, Burst: 20}, "10/1s gcra burst=20"},
		{Limit{Limit: 100, Period: time.Hour, Window: FirstHit, CountRejected: true}, "100/1h0m0s fixed_window first_hit count_rejected"},
		{Limit{Limit: 100, Period: time.Hour, Window: Aligned}, "100/1h0m0s fixed_window"},
		{Limit{Algorithm: SlidingWindow, Limit: 5, Period: 1500 * time.Millisecond, CountRejected: true}, "5/1.5s sliding_window count_rejected"},
		{Limit{Algorithm: Concurrency, Limit: 3, Period: 30 * time.Second, Name: "uploads"}, `"uploads" 3/30s concurrency`},
		{Limit{Name: "a \"b\"", Limit: 1, Period: time.Second}, `"a \"b\"" 1/1s fixed_window`},
		{Limit{Limit: 1000, Period: time.Second, LocalBudget: 100}, "1000/1s fixed_window local_budget=100"},
		{Limit{Limit: 1000, Period: time.Second, Global: true}, "1000/1s fixed_window global"},
		// Invalid limits still print, for error messages.
		{Limit{Algorithm: "x", Limit: -1, Window: "rolling"}, `-1/0s x window="rolling"`},
	}
	for _, tc := range tests {
		t.Run(tc.want, func(t *testing.T) {
			if got := tc.l.String(); got != tc.want {
				t.Errorf("String() = %q, want %q", got, tc.want)
			}
		})
	}
}

// FuzzLimitValidate checks that Validate never panics, that every limit it
// accepts keeps the bounds of the algorithm package, and that every error
// wraps ErrInvalidLimit and names a field on each line.
func FuzzLimitValidate(f *testing.F) {
	for _, tc := range validLimits {
		l := tc.l
		f.Add(string(l.Algorithm), l.Limit, int64(l.Period), l.Burst, string(l.Window), l.CountRejected)
	}
	f.Add("token_bucket", int64(4096), int64((256*4096+4095)*time.Microsecond), int64(1<<40), "", false)
	f.Add("sliding_window", int64(52_124), int64(24*time.Hour), int64(0), "", true)
	f.Add("gcra", int64(1), int64(1<<28*time.Microsecond), int64(1<<20+1), "", false)
	f.Add("x", int64(-1), int64(-1), int64(-1), "w", true)
	f.Fuzz(func(t *testing.T, alg string, limit, periodNS, burst int64, window string, countRejected bool) {
		l := Limit{Algorithm: Algorithm(alg), Limit: limit, Period: time.Duration(periodNS), Burst: burst, Window: Window(window), CountRejected: countRejected}
		_ = l.String()
		_ = l.Capacity()
		err := l.Validate()
		if err == nil {
			checkParams(t, l)
			return
		}
		if !errors.Is(err, ErrInvalidLimit) {
			t.Errorf("%v: Validate() = %v, does not wrap ErrInvalidLimit", l, err)
		}
		checkLimitError(t, err)
	})
}

// TestLimitValidateIsExact checks that Validate accepts exactly the limits
// within the documented bounds, computed with big integers, on random
// limits crowded around each bound: it rejects nothing it need not.
func TestLimitValidateIsExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	near := func(x int64) int64 { return max(0, x+rng.Int64N(5)-2) }
	pick := func(xs ...int64) int64 { return xs[rng.IntN(len(xs))] }
	maxPeriodUS := int64(MaxPeriod / time.Microsecond)
	for range 20_000 {
		alg := Algorithms[rng.IntN(len(Algorithms))]
		limit := near(pick(1, 3, 1<<rng.IntN(41), MaxLogLimit, MaxLimit, rng.Int64N(MaxLimit)))
		periodUS := max(1, near(pick(1, 1<<rng.IntN(49), maxPeriodUS, maxPeriodUS/2, 86_400_000_000, rng.Int64N(maxPeriodUS))))
		var burst int64
		if alg == TokenBucket || alg == GCRA {
			burst = near(pick(0, 1, MaxLimit, algorithm.MaxExact/max(1, limit),
				new(big.Int).Div(new(big.Int).Mul(big.NewInt(maxPeriodUS), big.NewInt(limit)), big.NewInt(periodUS)).Int64()))
			burst = min(burst, MaxLimit+1)
		}
		if alg == SlidingWindow && rng.IntN(2) == 0 {
			limit = near(algorithm.MaxExact/periodUS - 1)
		}
		l := Limit{Algorithm: alg, Limit: limit, Period: time.Duration(periodUS) * time.Microsecond, Burst: burst}
		if got, want := l.Validate() == nil, withinBounds(l); got != want {
			t.Fatalf("%v: Validate() accepts it: %v, within the bounds: %v (%v)", l, got, want, l.Validate())
		}
	}
}

// withinBounds reports whether a limit with a known algorithm, a period of
// whole microseconds and no options keeps the documented bounds, exactly.
func withinBounds(l Limit) bool {
	p := int64(l.Period / time.Microsecond)
	if l.Limit < 0 || l.Limit > MaxLimit || p <= 0 || p > algorithm.MaxPeriod {
		return false
	}
	n := big.NewInt
	mul := func(a, b int64) *big.Int { return new(big.Int).Mul(n(a), n(b)) }
	switch l.Algorithm {
	case SlidingWindowLog, Concurrency:
		return l.Burst == 0 && l.Limit <= MaxLogLimit
	case SlidingWindow:
		return l.Burst == 0 && mul(l.Limit+1, p).Cmp(n(algorithm.MaxExact)) <= 0 && 2*p <= algorithm.MaxPeriod
	case TokenBucket, GCRA:
		if l.Burst < 0 || l.Burst > MaxLimit {
			return false
		}
		b := l.Capacity()
		return l.Limit == 0 ||
			mul(b, l.Limit).Cmp(n(algorithm.MaxExact)) <= 0 &&
				mul(b, p).Cmp(mul(algorithm.MaxPeriod, l.Limit)) <= 0
	}
	return l.Burst == 0
}

// BenchmarkValidate measures the check every decision runs, on a valid
// request of each algorithm (op=request, Request.Validate) and on its
// limit alone (op=limit, Limit.Validate), with the options a config
// commonly sets.
func BenchmarkValidate(b *testing.B) {
	limits := []Limit{
		{Limit: 60, Period: time.Minute},
		{Algorithm: SlidingWindowLog, Limit: 100, Period: time.Minute},
		{Algorithm: SlidingWindow, Limit: 100, Period: time.Minute, CountRejected: true},
		{Algorithm: TokenBucket, Limit: 10, Period: time.Second, Burst: 20},
		{Algorithm: GCRA, Limit: 10, Period: time.Second, LocalBudget: 5},
		{Algorithm: Concurrency, Limit: 10, Period: 30 * time.Second},
	}
	for _, l := range limits {
		r := Request{Key: "user:1", Limit: l, Cost: 1}
		if l.Algorithm == Concurrency {
			r.Lease = "lease-1"
		}
		b.Run("alg="+string(l.EffectiveAlgorithm())+"/op=request", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := r.Validate(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("alg="+string(l.EffectiveAlgorithm())+"/op=limit", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := l.Validate(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestCalendarSet: Calendar.set, which broken runs on every decision in
// place of c != Calendar{}, is true for a Calendar with any one field not
// zero, so a field added to Calendar and not to set fails here.
func TestCalendarSet(t *testing.T) {
	if c := (Calendar{}); c.set() {
		t.Fatal("the zero Calendar is set")
	}
	typ := reflect.TypeFor[Calendar]()
	for i := range typ.NumField() {
		var c Calendar
		f := reflect.ValueOf(&c).Elem().Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString("x")
		case reflect.Int:
			f.SetInt(1)
		case reflect.Pointer:
			f.Set(reflect.New(f.Type().Elem()))
		default:
			t.Fatalf("field %s: kind %s not handled here; set it and Calendar.set", typ.Field(i).Name, f.Kind())
		}
		if c == (Calendar{}) {
			t.Fatalf("field %s: still the zero Calendar", typ.Field(i).Name)
		}
		if !c.set() {
			t.Errorf("Calendar with only %s set: set() is false", typ.Field(i).Name)
		}
	}
}
