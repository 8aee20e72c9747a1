package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/ledger"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

// encoderBytes is the answer as writeJSON wrote it before appendAllow:
// encoding/json's Encoder, HTML escaping on.
func encoderBytes(t testing.TB, resp *AllowResponse) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(resp); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// strs are the strings the generated answers draw from: empty (omitted),
// plain, and every kind encoding/json escapes (quotes, backslashes,
// control bytes, HTML's <>&, U+2028, invalid UTF-8).
var strs = []string{"", "OK", "OVER_LIMIT", "1s", "user:42", "per-user", `a"b`, `c\d`, "e\nf\tg\x00", "<script>&", "line\u2028sep", "bad\xffutf8", "ünï", "1h0m0s"}

func randomLimit(r *rand.Rand) *LimitJSON {
	if r.IntN(4) == 0 {
		return nil
	}
	l := &LimitJSON{Algorithm: strs[r.IntN(len(strs))], Period: strs[r.IntN(len(strs))], Unit: strs[r.IntN(len(strs))],
		TimeZone: strs[r.IntN(len(strs))], Anchor: strs[r.IntN(len(strs))], Window: strs[r.IntN(len(strs))],
		Name: strs[r.IntN(len(strs))], CountRejected: r.IntN(2) == 0}
	if r.IntN(3) > 0 {
		n := r.Int64() - r.Int64()
		l.Limit = &n
	}
	if r.IntN(2) == 0 {
		l.Burst = r.Int64N(1000) - 10
	}
	return l
}

func randomDecision(r *rand.Rand, depth int) DecisionJSON {
	b := func() bool { return r.IntN(3) == 0 }
	d := DecisionJSON{Allowed: b(), Code: strs[r.IntN(len(strs))], Limit: r.Int64() - r.Int64(), Remaining: r.Int64N(1e9),
		ResetAfterMS: r.Int64N(1e6) - 1, RetryAfterMS: r.Int64N(1e6) - 1, Rule: strs[r.IntN(len(strs))], Policy: randomLimit(r),
		Unlimited: b(), ShadowMode: b(), QuotaMode: b(), StoreError: b(), StoreFull: b(), LedgerError: b(), Fallback: b(), NoRule: b(),
		Override: b(), Plan: strs[r.IntN(len(strs))]}
	if depth == 0 && r.IntN(3) == 0 {
		d.Limits = make([]LimitDecisionJSON, r.IntN(3))
		for i := range d.Limits {
			d.Limits[i] = LimitDecisionJSON{Allowed: b(), Code: strs[r.IntN(len(strs))], Limit: r.Int64N(100), Remaining: r.Int64N(100),
				ResetAfterMS: r.Int64N(100), RetryAfterMS: r.Int64N(100) - 1, Policy: randomLimit(r)}
		}
	}
	return d
}

// TestAppendAllowMatchesEncoder checks that appendAllow writes, byte for
// byte, what encoding/json's Encoder writes for the same AllowResponse:
// generated answers with every field set and unset and strings that need
// escaping, and the answers of the API's own tests' shapes.
func TestAppendAllowMatchesEncoder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 5000 {
		resp := AllowResponse{DecisionJSON: randomDecision(r, 0), UnknownDomain: r.IntN(2) == 0}
		if r.IntN(2) == 0 {
			resp.Descriptors = make([]DecisionJSON, r.IntN(4))
			for j := range resp.Descriptors {
				resp.Descriptors[j] = randomDecision(r, 0)
			}
		}
		if r.IntN(2) == 0 {
			w := r.Int64N(1 << 40)
			resp.WaitedMS = &w
		}
		want := encoderBytes(t, &resp)
		if got := appendAllow(nil, &resp); !bytes.Equal(got, want) {
			t.Fatalf("answer %d:\n got %s\nwant %s", i, got, want)
		}
	}
}

// TestAppendAllowKnowsEveryField fails when a field is added to the
// answer's types: appendAllow writes the fields it names, so a new one
// must be added there too (and to this list).
func TestAppendAllowKnowsEveryField(t *testing.T) {
	for _, c := range []struct {
		v    any
		want []string
	}{
		{AllowResponse{}, []string{"DecisionJSON", "UnknownDomain", "Descriptors", "WaitedMS"}},
		{DecisionJSON{}, []string{"Allowed", "Code", "Limit", "Remaining", "ResetAfterMS", "RetryAfterMS", "Rule", "Policy", "Unlimited",
			"ShadowMode", "QuotaMode", "StoreError", "StoreFull", "LedgerError", "Fallback", "NoRule", "Limits", "Override", "Plan"}},
		{LimitDecisionJSON{}, []string{"Allowed", "Code", "Limit", "Remaining", "ResetAfterMS", "RetryAfterMS", "Policy"}},
		{LimitJSON{}, []string{"Algorithm", "Limit", "Period", "Unit", "TimeZone", "Anchor", "Burst", "Window", "CountRejected", "Name"}},
	} {
		typ := reflect.TypeOf(c.v)
		var got []string
		for f := range typ.Fields() {
			got = append(got, f.Name)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s has fields %v; appendAllow writes %v: add the new ones to encode.go", typ, got, c.want)
		}
	}
}

// FuzzAppendAllow compares appendAllow with encoding/json on answers
// whose strings and numbers come from the fuzzer.
func FuzzAppendAllow(f *testing.F) {
	for _, s := range strs {
		f.Add(s, s, int64(len(s)), true)
	}
	f.Fuzz(func(t *testing.T, rule, name string, n int64, allowed bool) {
		lim := &LimitJSON{Algorithm: name, Limit: &n, Period: rule, Name: name, Burst: n}
		resp := AllowResponse{DecisionJSON: DecisionJSON{Allowed: allowed, Code: rule, Limit: n, Rule: rule, Policy: lim, Plan: name,
			Limits: []LimitDecisionJSON{{Code: name, Policy: lim}}},
			Descriptors: []DecisionJSON{{Rule: name, Policy: lim}, {Code: rule}}, WaitedMS: &n}
		want := encoderBytes(t, &resp)
		if got := appendAllow(nil, &resp); !bytes.Equal(got, want) {
			t.Fatalf("\n got %s\nwant %s", got, want)
		}
	})
}

// BenchmarkAppendAllow is appendAllow alone into a reused buffer, on an
// answer of two descriptors with a policy each and a decision of two
// limits: the encoder's own cost, without the handler's. It allocates
// nothing.
func BenchmarkAppendAllow(b *testing.B) {
	n := int64(1000)
	lim := &LimitJSON{Algorithm: "gcra", Limit: &n, Period: "1s", Burst: 10, Name: "per-user"}
	d := DecisionJSON{Allowed: true, Code: "OK", Limit: 1000, Remaining: 998, ResetAfterMS: 2, Rule: "per-user", Policy: lim,
		Limits: []LimitDecisionJSON{{Allowed: true, Code: "OK", Limit: 1000, Remaining: 998, ResetAfterMS: 2, Policy: lim},
			{Code: "OVER_LIMIT", Limit: 10, ResetAfterMS: 900, RetryAfterMS: 100}}}
	resp := AllowResponse{DecisionJSON: d, Descriptors: []DecisionJSON{d, d}}
	buf := appendAllow(nil, &resp)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		buf = appendAllow(buf[:0], &resp)
	}
}

// randomStatus is a status of every shape an answer's decision takes:
// limited or not, by a rule or none, a calendar limit, shadow, quota,
// store and ledger errors, the fallback, several limits, an override.
func randomStatus(t *testing.T, r *rand.Rand) server.Status {
	t.Helper()
	b := func() bool { return r.IntN(3) == 0 }
	st := server.Status{Code: server.OK, Shadow: b(), Quota: b(), Override: b(), Plan: strs[r.IntN(len(strs))]}
	if b() {
		st.Code = server.OverLimit
	}
	if r.IntN(2) == 0 {
		st.Rule = &config.Rule{ID: strs[r.IntN(len(strs))], Unlimited: b()}
	}
	limit := func() floodgate.Limit {
		l := floodgate.Limit{Limit: r.Int64N(1e12), Period: []time.Duration{time.Second, time.Minute, 90 * time.Second, time.Hour}[r.IntN(4)],
			Algorithm: []floodgate.Algorithm{"", floodgate.GCRA, floodgate.TokenBucket, floodgate.SlidingWindow}[r.IntN(4)],
			Burst:     r.Int64N(3) * 7, CountRejected: b(), Name: []string{"", "per-user", "ünï"}[r.IntN(3)]}
		if r.IntN(5) == 0 {
			cal, err := floodgate.ParseCalendar("month", []string{"", "Europe/Paris"}[r.IntN(2)], []string{"", "15"}[r.IntN(2)])
			if err != nil {
				t.Fatal(err)
			}
			l.Period, l.Calendar = 0, cal
		}
		return l
	}
	decision := func() floodgate.Decision {
		d := floodgate.Decision{Allowed: b(), Limit: r.Int64N(1e12), Remaining: r.Int64N(1e9), ResetAfter: time.Duration(r.Int64N(1e12)),
			RetryAfter: time.Duration(r.Int64N(1e12)), Fallback: b()}
		if b() {
			d.RetryAfter = floodgate.Never
		}
		return d
	}
	if r.IntN(4) > 0 {
		st.Limited, st.Limit, st.Decision = true, limit(), decision()
	}
	switch r.IntN(5) {
	case 0:
		st.Err = errors.New("store down")
	case 1:
		st.Err = memstore.ErrFull
	case 2:
		st.Err = ledger.ErrLedger
	}
	if st.Limited && r.IntN(4) == 0 {
		for range 1 + r.IntN(2) {
			st.Limits = append(st.Limits, server.LimitStatus{Code: server.OK, Limit: limit(), Decision: decision(), Shadow: b()})
		}
	}
	return st
}

// TestAppendAllowFromMatches checks that the handler's answer,
// appendAllowFrom of allowHead, is byte for byte appendAllow of
// allowResponse (which TestAppendAllowMatchesEncoder holds to
// encoding/json), in both forms, with the changes handleAllow makes to
// the head (unknown_domain; a global shadow answer's code).
func TestAppendAllowFromMatches(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 5000 {
		inline := r.IntN(3) == 0
		var statuses []server.Status
		overall := randomStatus(t, r)
		if inline {
			statuses = []server.Status{overall}
		} else {
			for range r.IntN(4) {
				statuses = append(statuses, randomStatus(t, r))
			}
		}
		full, head := allowResponse(inline, overall, statuses), allowHead(inline, overall, statuses, false)
		for _, resp := range []*AllowResponse{&full, &head} {
			resp.UnknownDomain = i%5 == 0
			if i%7 == 0 {
				resp.Code, resp.Allowed, resp.ShadowMode = server.OK.String(), true, true
			}
		}
		want := appendAllow(nil, &full)
		if got := appendAllowFrom(nil, &head, inline, &overall, statuses); !bytes.Equal(got, want) {
			t.Fatalf("answer %d (inline %v):\n got %s\nwant %s", i, inline, got, want)
		}
	}
}
