package httpapi

import (
	"net/http"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// Patterns returns the patterns Handler(extra) registers, in order, for the
// OpenAPI test's check that the document names every route the handler
// serves.
func (s *API) Patterns(extra map[string]http.Handler) []string {
	var ps []string
	for _, r := range s.routes(extra) {
		ps = append(ps, r.pattern)
	}
	return ps
}

// TestIDKey is the id key (Options.IDKeys) of the tests' APIs whose ids
// ReservationToken and LeaseToken make.
var TestIDKey = []byte("floodgate-httpapi-test-id-key-0123456789")

var testSigner = &signer{keys: [][]byte{TestIDKey}}

// ReservationToken is the id POST /v1/reservations answers, under
// TestIDKey without tokens, for an inline reservation of units of key
// under limit made with Idempotency-Key idem, expiring at expires.
func ReservationToken(idem, key string, limit floodgate.Limit, units int64, expires time.Time) string {
	s := &API{ids: testSigner}
	res := &floodgate.Reservation{ID: s.ids.idempotencyID("", idem), Items: []floodgate.Item{{Key: "i|" + key, Limit: limit, Cost: units}}, Expires: expires}
	tok, err := s.encodeToken(res, "")
	if err != nil {
		panic(err)
	}
	return tok
}

// LeaseToken is the id POST /v1/leases answers, under TestIDKey without
// tokens, for lease on an inline key under limit, holding cost units.
func LeaseToken(lease, key string, limit floodgate.Limit, cost int64) string {
	s := &API{ids: testSigner}
	tok, err := s.encodeLease(lease, &AllowRequest{Key: key, Limit: limitJSON(limit), Cost: &cost}, "")
	if err != nil {
		panic(err)
	}
	return tok
}

// SetHoldTimer makes after the timer of the responses a held: it is
// called with the delay of each hold as it starts, and the hold ends when
// its channel delivers, or earlier when the client goes away; stop is
// called as the hold ends either way, after a gone client's slot was
// given back.
func SetHoldTimer(a *API, after func(time.Duration) (c <-chan time.Time, stop func() bool)) {
	a.holds.after = after
}
