package limitcheck_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/limitcheck"
	"github.com/floodgate-rl/floodgate/middleware/grpclimit"
	"github.com/floodgate-rl/floodgate/middleware/httplimit"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

// The middlewares convert their MissingKey to limitcheck's: the values
// must stay the same.
func TestMissingKeyValues(t *testing.T) {
	for _, tc := range []struct {
		http httplimit.MissingKey
		grpc grpclimit.MissingKey
		want limitcheck.MissingKey
	}{
		{httplimit.DenyMissingKey, grpclimit.DenyMissingKey, limitcheck.Deny},
		{httplimit.AllowMissingKey, grpclimit.AllowMissingKey, limitcheck.Allow},
		{httplimit.SharedMissingKey, grpclimit.SharedMissingKey, limitcheck.Shared},
	} {
		if limitcheck.MissingKey(tc.http) != tc.want || limitcheck.MissingKey(tc.grpc) != tc.want {
			t.Errorf("httplimit %d, grpclimit %d, want %d", tc.http, tc.grpc, tc.want)
		}
	}
}

func TestValidate(t *testing.T) {
	lim, err := floodgate.New(memstore.New(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	ok := []floodgate.Limit{{Limit: 1, Period: time.Second}}
	if err := limitcheck.Validate("pkg", "call", lim, ok, limitcheck.Deny); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	err = limitcheck.Validate("pkg", "call", nil, []floodgate.Limit{
		{Limit: 1, Period: time.Second, Algorithm: floodgate.Concurrency},
		{Limit: 1, Period: time.Second},
		{Limit: 1, Period: time.Second},
	}, 7)
	for _, want := range []string{
		"pkg: New: nil Limiter",
		"pkg: New: limits[0]: ",
		"held for the whole call;",
		"pkg: New: limits[2]: policy name",
		"pkg: New: unknown MissingKey 7",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v, want an error containing %q", err, want)
		}
	}
	if !errors.Is(err, floodgate.ErrInvalidLimit) {
		t.Errorf("Validate: %v, want ErrInvalidLimit", err)
	}
}

func TestViolated(t *testing.T) {
	limits := []floodgate.Limit{{Name: "a"}, {Name: "b"}, {Name: "c"}}
	decisions := []floodgate.Decision{
		{Allowed: true},
		{Allowed: false, RetryAfter: time.Second},
		{Allowed: false}, // gave its unit back
	}
	if got := limitcheck.Violated(limits, decisions); !slices.Equal(got, []string{"b"}) {
		t.Errorf("Violated = %q, want [b]", got)
	}
	if got := limitcheck.ViolatedIndexes(limits[:1], decisions); got != nil {
		t.Errorf("ViolatedIndexes past the limits = %v, want none", got)
	}
}

func TestCheck(t *testing.T) {
	lim, err := floodgate.New(memstore.New(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	errMissing := errors.New("missing")
	limits := []floodgate.Limit{{Limit: 1, Period: time.Hour}}
	for _, tc := range []struct {
		missing     limitcheck.MissingKey
		key         string
		wantKey     string
		wantAllowed bool
		wantErr     error
	}{
		{limitcheck.Deny, "", "", false, errMissing},
		{limitcheck.Allow, "", "", true, errMissing},
		{limitcheck.Shared, "", "p:anonymous", true, nil},
		{limitcheck.Deny, "k", "p:k", true, nil},
	} {
		c := limitcheck.Checker{Limiter: lim, Limits: limits, KeyPrefix: "p:", MissingKey: tc.missing, ErrMissingKey: errMissing}
		if err := c.Init("pkg", "call"); err != nil {
			t.Fatal(err)
		}
		o := c.Check(t.Context(), tc.key, "")
		if o.Key != tc.wantKey || o.Decision.Allowed != tc.wantAllowed || o.Err != tc.wantErr {
			t.Errorf("MissingKey %d, key %q: %+v, want key %q, allowed %v, err %v", tc.missing, tc.key, o, tc.wantKey, tc.wantAllowed, tc.wantErr)
		}
		if (o.Decisions != nil) != (tc.wantKey != "") {
			t.Errorf("MissingKey %d, key %q: Decisions %v", tc.missing, tc.key, o.Decisions)
		}
	}
	// Init copied the limits: the caller's slice may change.
	c := limitcheck.Checker{Limiter: lim, Limits: limits, MissingKey: limitcheck.Deny}
	if err := c.Init("pkg", "call"); err != nil {
		t.Fatal(err)
	}
	limits[0].Limit = 0
	if c.Limits[0].Limit != 1 {
		t.Error("Init did not copy Limits")
	}
}
