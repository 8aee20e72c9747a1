package httpapi

import (
	"net/http"

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

// ReservationToken is the id POST /v1/reservations answers for an inline
// reservation of key under limit made with Idempotency-Key idem.
func ReservationToken(idem, key string, limit floodgate.Limit) string {
	r, err := http.NewRequest("POST", "/", nil)
	if err != nil {
		panic(err)
	}
	r.Header.Set("Idempotency-Key", idem)
	o, err := reserveOptions(r, &ReserveRequest{})
	if err != nil {
		panic(err)
	}
	tok, err := encodeToken(&floodgate.Reservation{ID: o.ID, Items: []floodgate.Item{{Key: "i|" + key, Limit: limit}}})
	if err != nil {
		panic(err)
	}
	return tok
}

// LeaseToken is the id POST /v1/leases answers for lease on an inline key
// under limit, holding cost units.
func LeaseToken(lease, key string, limit floodgate.Limit, cost int64) string {
	tok, err := encodeLease(lease, &AllowRequest{Key: key, Limit: limitJSON(limit), Cost: &cost})
	if err != nil {
		panic(err)
	}
	return tok
}
