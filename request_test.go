package floodgate

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/algorithm"
)

var (
	perMinute   = Limit{Limit: 60, Period: time.Minute}
	concurrency = Limit{Algorithm: Concurrency, Limit: 3, Period: 30 * time.Second}
	// latest is the last Request.Now accepted: 2^52 - 2^48 µs, in 2103.
	latest = time.UnixMicro(maxNowMicros)
)

var validRequests = []struct {
	name string
	r    Request
}{
	{"one unit", Request{Key: "user:42", Limit: perMinute, Cost: 1}},
	{"peek", Request{Key: "user:42", Limit: perMinute}},
	{"largest cost", Request{Key: "k", Limit: perMinute, Cost: MaxLimit}},
	{"longest key", Request{Key: strings.Repeat("k", MaxKeyLen), Limit: perMinute, Cost: 1}},
	{"any bytes in the key", Request{Key: "{a}:b\x00\xff", Limit: perMinute, Cost: 1}},
	{"now at the epoch", Request{Key: "k", Limit: perMinute, Cost: 1, Now: time.UnixMicro(0)}},
	{"now at the latest", Request{Key: "k", Limit: perMinute, Cost: 1, Now: latest}},
	{"now with nanoseconds", Request{Key: "k", Limit: perMinute, Cost: 1, Now: time.Unix(1_700_000_000, 123_456_789)}},
	{"acquire", Request{Key: "k", Limit: concurrency, Cost: 1, Lease: "a1_B-2"}},
	{"release", Request{Key: "k", Limit: concurrency, Cost: 1, Lease: "a1", Release: true}},
	{"concurrency peek without a lease", Request{Key: "k", Limit: concurrency}},
	{"longest lease", Request{Key: "k", Limit: concurrency, Cost: 1, Lease: strings.Repeat("x", MaxLeaseLen)}},
}

func TestRequestValidateAccepts(t *testing.T) {
	for _, tc := range validRequests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.r.Validate(); err != nil {
				t.Errorf("Validate() = %v, want nil", err)
			}
		})
	}
}

func TestRequestValidateAllocatesNothing(t *testing.T) {
	for _, tc := range validRequests {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.r
			if got := testing.AllocsPerRun(100, func() { _ = r.Validate() }); got != 0 {
				t.Errorf("Validate of a valid request: %v allocations, want 0", got)
			}
		})
	}
}

func TestRequestValidateRejects(t *testing.T) {
	tests := []struct {
		name  string
		r     Request
		is    error  // the sentinel the error wraps
		field string // the field it names
	}{
		{"empty key", Request{Limit: perMinute, Cost: 1}, ErrInvalidRequest, "key"},
		{"key too long", Request{Key: strings.Repeat("k", MaxKeyLen+1), Limit: perMinute, Cost: 1}, ErrInvalidRequest, "key"},
		{"negative cost", Request{Key: "k", Limit: perMinute, Cost: -1}, ErrInvalidRequest, "cost"},
		{"cost above MaxLimit", Request{Key: "k", Limit: perMinute, Cost: MaxLimit + 1}, ErrInvalidRequest, "cost"},
		{"now before 1970", Request{Key: "k", Limit: perMinute, Cost: 1, Now: time.UnixMicro(-1)}, ErrInvalidRequest, "now"},
		{"now a nanosecond before 1970", Request{Key: "k", Limit: perMinute, Cost: 1, Now: time.Unix(0, -1)}, ErrInvalidRequest, "now"},
		{"now after the latest", Request{Key: "k", Limit: perMinute, Cost: 1, Now: latest.Add(time.Microsecond)}, ErrInvalidRequest, "now"},
		{"invalid limit", Request{Key: "k", Limit: Limit{Limit: 10}, Cost: 1}, ErrInvalidLimit, "period"},
		{"zero limit", Request{Key: "k", Cost: 1}, ErrInvalidLimit, "period"},
		{"lease on a fixed window", Request{Key: "k", Limit: perMinute, Cost: 1, Lease: "a"}, ErrInvalidRequest, "lease"},
		{"release on a token bucket", Request{Key: "k", Limit: Limit{Algorithm: TokenBucket, Limit: 1, Period: time.Second}, Cost: 1, Release: true}, ErrInvalidRequest, "lease"},
		{"acquire without a lease", Request{Key: "k", Limit: concurrency, Cost: 1}, ErrInvalidRequest, "lease"},
		{"release without a lease", Request{Key: "k", Limit: concurrency, Release: true}, ErrInvalidRequest, "lease"},
		{"lease too long", Request{Key: "k", Limit: concurrency, Cost: 1, Lease: strings.Repeat("x", MaxLeaseLen+1)}, ErrInvalidRequest, "lease"},
		{"lease with a dot", Request{Key: "k", Limit: concurrency, Cost: 1, Lease: "a.1"}, ErrInvalidRequest, "lease"},
		{"lease with a space", Request{Key: "k", Limit: concurrency, Cost: 1, Lease: "a 1"}, ErrInvalidRequest, "lease"},
		{"lease with a non-ASCII byte", Request{Key: "k", Limit: concurrency, Cost: 1, Lease: "é"}, ErrInvalidRequest, "lease"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.r.Validate()
			if err == nil {
				t.Fatalf("Validate() = nil, want an error naming %s", tc.field)
			}
			if !errors.Is(err, tc.is) {
				t.Errorf("Validate() = %v, does not wrap %v", err, tc.is)
			}
			if got, want := requestErrorField(err), tc.field; got != want {
				t.Errorf("Validate() = %q names %q, want %q", err, got, want)
			}
			if fe, ok := errors.AsType[*FieldError](err); !ok || fe.Kind != tc.is || fe.Field != tc.field {
				t.Errorf("Validate() = %q: errors.As finds %#v, want a *FieldError{%v, %q, …}", err, fe, tc.is, tc.field)
			}
		})
	}
}

// TestRequestValidateNowMessage checks that the error for a time out of
// range gives the range that is really accepted.
func TestRequestValidateNowMessage(t *testing.T) {
	r := Request{Key: "k", Limit: perMinute, Cost: 1, Now: time.Date(2110, 1, 1, 0, 0, 0, 0, time.UTC)}
	err := r.Validate()
	if err == nil {
		t.Fatal("Validate() = nil for a time in 2110")
	}
	for _, want := range []string{"1970-01-01", "2103-10-18"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %q, want it to mention %s", err, want)
		}
	}
}

// requestErrorField is the field a Request.Validate error names: the word
// after the sentinel's text (the first line's, for a joined Limit error).
func requestErrorField(err error) string {
	msg, _, _ := strings.Cut(err.Error(), "\n")
	for _, prefix := range []string{"floodgate: invalid request: ", "floodgate: invalid limit: "} {
		if rest, ok := strings.CutPrefix(msg, prefix); ok {
			field, _, _ := strings.Cut(rest, ":")
			return field
		}
	}
	return ""
}

// FuzzRequestValidate checks that Validate never panics, that a request it
// accepts is within every bound the stores rely on, and that an error wraps
// ErrInvalidRequest (or ErrInvalidLimit) and names a field.
func FuzzRequestValidate(f *testing.F) {
	for _, tc := range validRequests {
		r := tc.r
		if len(r.Key) > 1024 {
			continue // a megabyte seed slows the fuzzer to a crawl; the tables test it
		}
		nowUS := int64(-1 << 63) // the zero time
		if !r.Now.IsZero() {
			nowUS = r.Now.UnixMicro()
		}
		f.Add(r.Key, string(r.Limit.Algorithm), r.Limit.Limit, int64(r.Limit.Period), r.Cost, nowUS, r.Lease, r.Release)
	}
	f.Add("", "", int64(60), int64(time.Minute), int64(-1), int64(-1), "a.b", true)
	f.Add("k", "concurrency", int64(3), int64(time.Second), int64(1), maxNowMicros+1, "", false)
	f.Fuzz(func(t *testing.T, key, alg string, limit, periodNS, cost, nowUS int64, lease string, release bool) {
		r := Request{
			Key:     key,
			Limit:   Limit{Algorithm: Algorithm(alg), Limit: limit, Period: time.Duration(periodNS)},
			Cost:    cost,
			Lease:   lease,
			Release: release,
		}
		if nowUS != -1<<63 {
			r.Now = time.UnixMicro(nowUS)
		}
		err := r.Validate()
		if err != nil {
			if !errors.Is(err, ErrInvalidRequest) && !errors.Is(err, ErrInvalidLimit) {
				t.Fatalf("Validate() = %v, wraps neither ErrInvalidRequest nor ErrInvalidLimit", err)
			}
			if errors.Is(err, ErrInvalidLimit) {
				checkLimitError(t, err)
				if r.Limit.Validate() == nil {
					t.Errorf("Validate() = %v, but the limit is valid", err)
				}
				return
			}
			switch field := requestErrorField(err); field {
			case "key", "cost", "now", "lease":
			default:
				t.Errorf("Validate() = %q names %q, not a field of Request", err, field)
			}
			return
		}
		if key == "" || len(key) > MaxKeyLen {
			t.Errorf("accepted a key of %d bytes", len(key))
		}
		if cost < 0 || cost > MaxLimit {
			t.Errorf("accepted cost %d", cost)
		}
		if !r.Now.IsZero() {
			if us := r.Now.UnixMicro(); us < 0 || us > maxNowMicros {
				t.Errorf("accepted now %d µs", us)
			}
		}
		if err := r.Limit.Validate(); err != nil {
			t.Errorf("accepted a request whose limit is invalid: %v", err)
		}
		isConc := r.Limit.EffectiveAlgorithm() == Concurrency
		if !isConc && (lease != "" || release) {
			t.Errorf("accepted a lease on %s", r.Limit.EffectiveAlgorithm())
		}
		if isConc && lease == "" && (cost > 0 || release) {
			t.Errorf("accepted a concurrency acquire or release without a lease")
		}
		if len(lease) > MaxLeaseLen {
			t.Errorf("accepted a lease of %d bytes", len(lease))
		}
		for _, c := range []byte(lease) {
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
				t.Errorf("accepted lease %q", lease)
				break
			}
		}
	})
}

func TestFromAlgorithm(t *testing.T) {
	now := time.UnixMicro(1_700_000_000_123_456)
	tests := []struct {
		name string
		d    algorithm.Decision
		want Decision
	}{
		{"allowed", algorithm.Decision{Allowed: true, Limit: 60, Remaining: 59, ResetAfter: 60_000_000},
			Decision{Allowed: true, Limit: 60, Remaining: 59, ResetAfter: time.Minute, Now: now}},
		{"denied", algorithm.Decision{Limit: 3, ResetAfter: 1_000_000, RetryAfter: 333_334},
			Decision{Limit: 3, ResetAfter: time.Second, RetryAfter: 333_334 * time.Microsecond, Now: now}},
		{"never", algorithm.Decision{Limit: 3, Remaining: 3, RetryAfter: algorithm.Never},
			Decision{Limit: 3, Remaining: 3, RetryAfter: Never, Now: now}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := FromAlgorithm(tc.d, now.UnixMicro()); got != tc.want {
				t.Errorf("FromAlgorithm(%+v) = %+v, want %+v", tc.d, got, tc.want)
			}
		})
	}
}

func TestCombine(t *testing.T) {
	t1 := time.UnixMicro(1_700_000_000_000_000)
	t2 := t1.Add(time.Millisecond)
	perSecond := Decision{Allowed: true, Limit: 10, Remaining: 7, ResetAfter: 300 * time.Millisecond, Now: t1}
	perHour := Decision{Allowed: true, Limit: 1000, Remaining: 3, ResetAfter: time.Hour, Now: t2}
	deniedSoon := Decision{Limit: 10, Remaining: 0, ResetAfter: time.Second, RetryAfter: 100 * time.Millisecond, Now: t1}
	deniedLater := Decision{Limit: 1000, Remaining: 0, ResetAfter: time.Hour, RetryAfter: 2 * time.Second, Now: t1}
	deniedNever := Decision{Limit: 5, Remaining: 5, RetryAfter: Never, Now: t1}
	tests := []struct {
		name string
		ds   []Decision
		want Decision
	}{
		{"none", nil, Decision{Allowed: true}},
		{"one", []Decision{perSecond}, perSecond},
		{"one denied", []Decision{deniedSoon}, deniedSoon},
		{"all allowed: least remaining, longest reset, latest now", []Decision{perSecond, perHour},
			Decision{Allowed: true, Limit: 1000, Remaining: 3, ResetAfter: time.Hour, Now: t2}},
		{"order does not matter", []Decision{perHour, perSecond},
			Decision{Allowed: true, Limit: 1000, Remaining: 3, ResetAfter: time.Hour, Now: t2}},
		{"one denial denies", []Decision{perHour, deniedSoon},
			Decision{Limit: 10, Remaining: 0, ResetAfter: time.Hour, RetryAfter: 100 * time.Millisecond, Now: t2}},
		{"longest retry of the denials", []Decision{deniedSoon, perSecond, deniedLater},
			Decision{Limit: 10, Remaining: 0, ResetAfter: time.Hour, RetryAfter: 2 * time.Second, Now: t1}},
		{"never wins, last", []Decision{deniedLater, deniedNever},
			Decision{Limit: 1000, Remaining: 0, ResetAfter: time.Hour, RetryAfter: Never, Now: t1}},
		{"never wins, first", []Decision{deniedNever, deniedLater, deniedSoon},
			Decision{Limit: 1000, Remaining: 0, ResetAfter: time.Hour, RetryAfter: Never, Now: t1}},
		{"a tie on remaining keeps the first limit", []Decision{
			{Allowed: true, Limit: 10, Remaining: 2, Now: t1},
			{Allowed: true, Limit: 20, Remaining: 2, Now: t1},
		}, Decision{Allowed: true, Limit: 10, Remaining: 2, Now: t1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Combine(tc.ds); got != tc.want {
				t.Errorf("Combine() = %+v, want %+v", got, tc.want)
			}
		})
	}
}
