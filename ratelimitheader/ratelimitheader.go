// Package ratelimitheader writes the HTTP fields that tell a client its
// rate limits: RateLimit-Policy and RateLimit of the IETF draft
// draft-ietf-httpapi-ratelimit-headers-11, Retry-After on a denial, and, on
// request, the legacy X-RateLimit-Limit, X-RateLimit-Remaining and
// X-RateLimit-Reset trio that older clients read.
//
// It is the one implementation of these fields in Floodgate: the net/http
// middleware (middleware/httplimit) and the service (floodgate serve, its
// HTTP API and its Envoy response headers) all call it. Most callers want
// SetEach, which takes the limits and decisions exactly as
// floodgate.Limiter.AllowEach returns them; Fields gives the same fields as
// name/value pairs for a transport that is not an http.Header.
//
// # The fields
//
// Both draft fields are Structured Field Lists (RFC 9651) of Items, one per
// limit: the Item is the policy name as an sf-string, its parameters the
// numbers. For "60 per minute, 59 left, window ends in 59 s":
//
//	RateLimit-Policy: "default";q=60;w=60
//	RateLimit: "default";r=59;t=59
//
// The policy name is Limit.Name; an unnamed limit is "default" when it is
// alone and "<limit>-per-<seconds>s" ("10-per-1s") among several (see
// PolicyName). Names are serialized as sf-strings: '"' and '\' are escaped,
// and any byte outside printable ASCII, which an sf-string cannot hold, is
// written as '_' (CheckName rejects such names before they get here).
//
// The parameters:
//
//   - q, the quota: the limit's capacity (Limit.Capacity: Burst for the
//     buckets, Limit otherwise), the largest r can ever be.
//   - w, the window in seconds, rounded up: the Period; for a calendar
//     window (Limit.Calendar), which a policy without a time cannot know,
//     the calendar days of its unit's longest window: 86400, 604800,
//     2678400 or 31622400 (t gives the true end). For TokenBucket and
//     GCRA it is the time the bucket takes to refill from empty,
//     Capacity×Period/Limit, so that q per w is both the largest burst and
//     the long-run rate (10 per second with a burst of 20: q=20;w=2).
//     Concurrency has no window: w is left out and qu="concurrent-requests"
//     says that q counts requests in flight.
//   - r, the available quota: Decision.Remaining.
//   - t, the effective window in seconds, rounded up: Decision.ResetAfter,
//     the time until the limit is back to its full quota (for a calendar
//     window, until its true end: local midnight of the next anchor day,
//     across any change of daylight saving time); on a denial no
//     later than Retry-After, as the draft asks. Left out for Concurrency.
//
// Every integer is clamped to 0..999,999,999,999,999, the 15 digits an
// sf-integer may have. The partition key parameter (pk) is not written: a
// client knows its own identity, and the keys Floodgate limits on (an
// address, a hashed API key) are better not echoed back.
//
// Durations are delay-seconds rounded up, never down, so a client that
// waits what it is told is never early: a RetryAfter of 200ms is
// "Retry-After: 1".
package ratelimitheader

import (
	"errors"
	"fmt"
	"math/bits"
	"net/http"
	"strconv"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// The names of the fields this package writes, in canonical form.
const (
	HeaderPolicy          = "Ratelimit-Policy"
	HeaderRateLimit       = "Ratelimit"
	HeaderRetryAfter      = "Retry-After"
	HeaderLegacyLimit     = "X-Ratelimit-Limit"
	HeaderLegacyRemaining = "X-Ratelimit-Remaining"
	HeaderLegacyReset     = "X-Ratelimit-Reset"
)

// MaxInteger is the largest sf-integer, 15 digits; larger numbers are
// clamped to it.
const MaxInteger = 999_999_999_999_999

// MaxNameLen is the longest policy name CheckName accepts, in bytes: the
// shortest sf-string every parser must accept (RFC 9651, section 4.2.5).
const MaxNameLen = 1024

// Options choose the fields written besides RateLimit and Retry-After. A
// nil *Options, or the zero value, writes RateLimit-Policy, RateLimit and
// (on a denial) Retry-After.
type Options struct {
	// OmitPolicy leaves RateLimit-Policy out, for responses that must stay
	// small; the draft makes it optional.
	OmitPolicy bool
	// Legacy also writes X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset for the limit closest to denying (the one with the
	// least Remaining; a denying one first): its capacity, its remaining
	// quota, and its reset in delay-seconds, rounded up.
	Legacy bool
	// LegacyResetUnix writes X-RateLimit-Reset as a Unix time in seconds
	// (rounded up) instead of delay-seconds, as some older APIs did. It
	// depends on the client's clock agreeing with the server's.
	LegacyResetUnix bool
}

// Field is one header field: a name in canonical form and its value.
type Field struct {
	Name, Value string
}

// Set writes the fields of one limit and its decision into h, replacing
// any earlier values of the same fields. See SetEach.
func Set(h http.Header, l floodgate.Limit, d floodgate.Decision, opts *Options) {
	SetEach(h, []floodgate.Limit{l}, []floodgate.Decision{d}, opts)
}

// SetEach writes the fields of several limits checked together, with ds[i]
// the decision of limits[i] (as from floodgate.Limiter.AllowEach), into h,
// replacing any earlier values of the same fields. Retry-After is written
// when the combined decision is a denial that can succeed later. A nil ds
// (the state is unknown, for instance when a store failed and the failure
// policy allowed the request) writes only RateLimit-Policy.
func SetEach(h http.Header, limits []floodgate.Limit, ds []floodgate.Decision, opts *Options) {
	for _, name := range []string{HeaderPolicy, HeaderRateLimit, HeaderRetryAfter, HeaderLegacyLimit, HeaderLegacyRemaining, HeaderLegacyReset} {
		delete(h, name)
	}
	for _, f := range Fields(limits, ds, opts) {
		h[f.Name] = []string{f.Value}
	}
}

// Fields returns the fields SetEach writes, in this order: RateLimit-Policy,
// RateLimit, Retry-After, then the legacy trio; each at most once. Use it
// where the fields travel as name/value pairs (Envoy's
// response_headers_to_add, gRPC metadata). A ds that is nil or of another
// length than limits is treated as unknown: only the policy is written.
func Fields(limits []floodgate.Limit, ds []floodgate.Decision, opts *Options) []Field {
	if len(limits) == 0 {
		return nil
	}
	return AppendFields(make([]Field, 0, MaxFields), limits, ds, opts)
}

// MaxFields is the most fields Fields returns.
const MaxFields = 6

// AppendFields is Fields appending to dst and returning the extended
// slice: with room for MaxFields in dst (an array on the caller's stack),
// the fields' slice is no allocation.
func AppendFields(dst []Field, limits []floodgate.Limit, ds []floodgate.Decision, opts *Options) []Field {
	var o Options
	if opts != nil {
		o = *opts
	}
	if len(limits) == 0 {
		return dst
	}
	fields := dst
	switch {
	case len(ds) != len(limits):
		if !o.OmitPolicy {
			fields = append(fields, Field{HeaderPolicy, Policy(limits...)})
		}
		return fields
	case o.OmitPolicy:
		fields = append(fields, Field{HeaderRateLimit, RateLimit(limits, ds)})
	default:
		// Both fields formatted on the stack and made one string, which
		// they share: one allocation where they were two.
		var buf [2 * fieldBuf]byte
		b := appendPolicy(buf[:0], limits)
		n := len(b)
		both := string(appendRateLimit(b, limits, ds))
		fields = append(fields, Field{HeaderPolicy, both[:n]}, Field{HeaderRateLimit, both[n:]})
	}
	if d := floodgate.Combine(ds); !d.Allowed && d.RetryAfter > 0 {
		fields = append(fields, Field{HeaderRetryAfter, RetryAfter(d.RetryAfter)})
	}
	if o.Legacy {
		b := ds[Binding(ds)]
		reset := Seconds(b.ResetAfter)
		if o.LegacyResetUnix {
			reset = ceilUnix(b.Now.Add(b.ResetAfter))
		}
		fields = append(fields,
			Field{HeaderLegacyLimit, strconv.FormatInt(clamp(b.Limit), 10)},
			Field{HeaderLegacyRemaining, strconv.FormatInt(clamp(b.Remaining), 10)},
			Field{HeaderLegacyReset, strconv.FormatInt(clamp(reset), 10)})
	}
	return fields
}

// Policy formats the RateLimit-Policy field of the limits: one item per
// limit, `"default";q=60;w=60` for 60 per minute.
func Policy(limits ...floodgate.Limit) string {
	// Formatted on the stack, so that the field is one allocation (its
	// string) unless it is longer than the buffer.
	var buf [fieldBuf]byte
	return string(appendPolicy(buf[:0], limits))
}

// appendPolicy appends the RateLimit-Policy field of limits to b.
func appendPolicy(b []byte, limits []floodgate.Limit) []byte {
	for i, l := range limits {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = appendString(b, PolicyName(limits, i))
		b = appendParam(b, "q", l.Capacity())
		if l.Algorithm == floodgate.Concurrency {
			b = append(b, `;qu="concurrent-requests"`...)
			continue
		}
		b = appendParam(b, "w", window(l))
	}
	return b
}

// fieldBuf is the length of the buffer Policy and RateLimit format a field
// in before making it a string: a field of a named limit or two.
const fieldBuf = 128

// RateLimit formats the RateLimit field: one item per limit with ds[i] the
// decision of limits[i], `"default";r=59;t=59` after the first request of
// 60 per minute. It returns "" if the lengths differ.
func RateLimit(limits []floodgate.Limit, ds []floodgate.Decision) string {
	if len(ds) != len(limits) {
		return ""
	}
	var buf [fieldBuf]byte
	return string(appendRateLimit(buf[:0], limits, ds))
}

// appendRateLimit appends the RateLimit field of limits and ds, of the
// same length, to b.
func appendRateLimit(b []byte, limits []floodgate.Limit, ds []floodgate.Decision) []byte {
	for i, l := range limits {
		if i > 0 {
			b = append(b, ", "...)
		}
		d := ds[i]
		b = appendString(b, PolicyName(limits, i))
		b = appendParam(b, "r", d.Remaining)
		if l.Algorithm == floodgate.Concurrency {
			continue
		}
		t := Seconds(d.ResetAfter)
		if !d.Allowed && d.RetryAfter > 0 {
			t = min(t, Seconds(d.RetryAfter))
		}
		b = appendParam(b, "t", t)
	}
	return b
}

// RetryAfter formats d as a Retry-After value: delay-seconds, rounded up
// ("1" for 200ms). It returns "" for a negative d (floodgate.Never), when
// no wait will do.
func RetryAfter(d time.Duration) string {
	if d < 0 {
		return ""
	}
	return strconv.FormatInt(Seconds(d), 10)
}

// Seconds is d in whole seconds, rounded up, clamped to 0..MaxInteger.
func Seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return clamp(s)
}

// PolicyName is the name limits[i] goes by in the fields: its Name, or, if
// that is empty, "default" when it is the only limit and
// "<limit>-per-<seconds>s" ("10-per-1s", "1000-per-3600s") among several.
// Problem details list denied policies by this name.
func PolicyName(limits []floodgate.Limit, i int) string {
	l := limits[i]
	switch {
	case l.Name != "":
		return l.Name
	case len(limits) == 1:
		return "default"
	case l.IsCalendar():
		return fmt.Sprintf("%d-per-%s", l.Limit, l.Calendar.Unit)
	}
	return fmt.Sprintf("%d-per-%ds", l.Limit, Seconds(l.Period))
}

// Binding is the index of the decision closest to denying: the denial with
// the longest RetryAfter (Never first) if any, else the one with the least
// Remaining, ties going to the longer ResetAfter. The legacy fields report
// it. It returns 0 for an empty ds.
func Binding(ds []floodgate.Decision) int {
	best := 0
	for i := 1; i < len(ds); i++ {
		if worse(ds[i], ds[best]) {
			best = i
		}
	}
	return best
}

// worse reports whether a is closer to denying than b.
func worse(a, b floodgate.Decision) bool {
	if a.Allowed != b.Allowed {
		return !a.Allowed
	}
	if !a.Allowed && a.RetryAfter != b.RetryAfter {
		if a.RetryAfter == floodgate.Never || b.RetryAfter == floodgate.Never {
			return a.RetryAfter == floodgate.Never
		}
		return a.RetryAfter > b.RetryAfter
	}
	if a.Remaining != b.Remaining {
		return a.Remaining < b.Remaining
	}
	return a.ResetAfter > b.ResetAfter
}

// ErrInvalidName is wrapped by CheckName's errors.
var ErrInvalidName = errors.New("ratelimitheader: invalid policy name")

// CheckName reports whether name can be written as it is: at most
// MaxNameLen bytes of printable ASCII (0x20 to 0x7E), what an sf-string
// holds. The empty name is valid (PolicyName picks one). Validate names
// where they come in (a config file, a middleware's options), since the
// fields themselves never fail and write a bad byte as '_'.
func CheckName(name string) error {
	if len(name) > MaxNameLen {
		return fmt.Errorf("%w: %d bytes is above the maximum %d", ErrInvalidName, len(name), MaxNameLen)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("%w: byte %q at %d is not printable ASCII", ErrInvalidName, c, i)
		}
	}
	return nil
}

// window is the w parameter of l in seconds; see the package doc.
func window(l floodgate.Limit) int64 {
	if l.IsCalendar() {
		// A policy has no time, so no window of its own: the calendar
		// days of the unit's longest window (1, 7, 31, 366). t, from the
		// decision, is the true end of the current one.
		days := map[floodgate.CalendarUnit]int64{floodgate.CalendarDay: 1, floodgate.CalendarWeek: 7, floodgate.CalendarMonth: 31, floodgate.CalendarYear: 366}
		return days[l.Calendar.Unit] * 86400
	}
	period := l.Period
	if l.Kind().Burst() && l.Limit > 0 && l.Capacity() != l.Limit {
		// Capacity × Period / Limit, exact in 128 bits and rounded up, in
		// microseconds (a valid Limit keeps it below MaxPeriod).
		us := uint64(l.Period / time.Microsecond)
		hi, lo := bits.Mul64(uint64(max(0, l.Capacity())), us)
		if hi >= uint64(l.Limit) {
			return MaxInteger
		}
		q, r := bits.Div64(hi, lo, uint64(l.Limit))
		if r != 0 {
			q++
		}
		s := q / 1e6
		if q%1e6 != 0 {
			s++
		}
		return max(1, clamp(int64(min(s, MaxInteger))))
	}
	return max(1, Seconds(period))
}

// ceilUnix is t as Unix seconds, rounded up.
func ceilUnix(t time.Time) int64 {
	s := t.Unix()
	if t.Nanosecond() > 0 {
		s++
	}
	return s
}

func clamp(n int64) int64 { return min(max(n, 0), MaxInteger) }

// appendString appends s as an sf-string (RFC 9651, section 4.1.6).
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c > 0x7e:
			b = append(b, '_')
			if c >= 0xc0 { // one '_' per UTF-8 sequence, not per byte
				for i+1 < len(s) && s[i+1]&0xc0 == 0x80 {
					i++
				}
			}
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// appendParam appends ;key=n with n an sf-integer, clamped.
func appendParam(b []byte, key string, n int64) []byte {
	b = append(b, ';')
	b = append(b, key...)
	b = append(b, '=')
	return strconv.AppendInt(b, clamp(n), 10)
}
