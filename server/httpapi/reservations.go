package httpapi

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/server"
)

// Reservations over HTTP: POST /v1/reservations holds the upper bound of a
// request's cost (an inline key and limit, or a domain's descriptors, all
// or nothing), and answers an id; POST /v1/reservations/{id}/commit
// settles the actual cost, /cancel gives the hold back. Every step is
// idempotent: the store keeps each hold's answer (see floodgate.Reserver),
// so a retry gets the first answer and another step is a conflict (422).
//
// The id is a token that names what it holds: the store's reservation ID
// and, for each key, the key and limit it was reserved under, so that any
// replica of the service settles it without a shared table, and a reload
// that changes a rule's limit changes nothing of a reservation made
// before. It is base64url JSON, not signed: a client can read and forge
// one, and that gains nothing, because a settle acts only on holds the
// store has under each named key and the ID, with the limit and units
// the hold recorded at its reserve (never the token's), each state at
// most once (a token naming one twice is refused). The store's ID is 128
// random bits, or with an Idempotency-Key header a hash of that key,
// which a client should make unguessable (a UUID).

// maxTokenLen bounds a reservation token, and so the keys a reservation
// holds (a path segment of a URL).
const maxTokenLen = 4096

// token is what a reservation's id carries.
type token struct {
	ID    string      `json:"i"`
	Items []tokenItem `json:"k"`
	Local bool        `json:"l,omitempty"`
}

type tokenItem struct {
	Key   string    `json:"k"`
	Limit LimitJSON `json:"l"`
	// Durable and Window are a durable quota's: the window its units
	// count in (µs since the epoch), which the commit records in the
	// ledger. The store's record of the hold decides whether a commit is
	// recorded (floodgate.Settlement.Durable), so an altered token cannot
	// leave a commit out of the ledger.
	Durable bool  `json:"d,omitempty"`
	Window  int64 `json:"w,omitempty"`
}

func encodeToken(res *floodgate.Reservation) (string, error) {
	t := token{ID: res.ID, Local: res.Local}
	for i, it := range res.Items {
		ti := tokenItem{Key: it.Key, Limit: *limitJSON(it.Limit), Durable: it.Limit.Durable}
		if i < len(res.Windows) && !res.Windows[i].IsZero() {
			ti.Window = res.Windows[i].UnixMicro()
		}
		t.Items = append(t.Items, ti)
	}
	return sealToken("r1.", "reservation", t)
}

func decodeToken(s string) (token, []floodgate.Item, error) {
	var t token
	if err := openToken("r1.", "reservation", s, &t); err != nil {
		return token{}, nil, err
	}
	if t.ID == "" || len(t.Items) == 0 {
		return token{}, nil, badToken("reservation", "malformed")
	}
	items := make([]floodgate.Item, len(t.Items))
	for i, ti := range t.Items {
		lim, err := ti.Limit.toLimit("limit")
		if err != nil || ti.Key == "" {
			return token{}, nil, badToken("reservation", "malformed item")
		}
		lim.Durable = ti.Durable
		items[i] = floodgate.Item{Key: ti.Key, Limit: lim}
	}
	return t, items, nil
}

// sealToken is the id of v: prefix and v in JSON, base64url, at most
// maxTokenLen bytes. what names the thing for an error ("reservation").
func sealToken(prefix, what string, v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	s := prefix + base64.RawURLEncoding.EncodeToString(b)
	if len(s) > maxTokenLen {
		return "", invalid("key", "the keys of the %s make an id of %d bytes, more than the %d allowed", what, len(s), maxTokenLen)
	}
	return s, nil
}

// openToken reads an id that sealToken made into v; a malformed one is a
// 404, as an id that names nothing.
func openToken(prefix, what, s string, v any) error {
	rest, ok := strings.CutPrefix(s, prefix)
	if !ok || len(s) > maxTokenLen {
		return badToken(what, "unknown form")
	}
	b, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil {
		return badToken(what, "not base64url")
	}
	if err := json.Unmarshal(b, v); err != nil {
		return badToken(what, "malformed")
	}
	return nil
}

func badToken(what, why string) error {
	return &httpError{status: http.StatusNotFound, field: "id", msg: "not a " + what + " id: " + why}
}

// ReserveRequest is the body of POST /v1/reservations: an AllowRequest
// (inline, or domain and descriptors) whose cost or hits is the upper
// bound to hold, and for how long.
type ReserveRequest struct {
	AllowRequest
	// TTLMS is how long the units are held, in milliseconds; default
	// floodgate.DefaultHoldTTL.
	TTLMS *int64 `json:"ttl_ms,omitempty"`
	// ReleaseOnExpiry gives the units back if the reservation expires
	// unsettled; by default they stay charged.
	ReleaseOnExpiry bool `json:"release_on_expiry,omitempty"`
}

// ReserveResponse answers POST /v1/reservations.
type ReserveResponse struct {
	AllowResponse
	// ID settles the reservation; empty when it holds nothing (denied, or
	// allowed by fail_open while the store failed).
	ID string `json:"id,omitempty"`
	// ExpiresAt is when an unsettled reservation expires.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	// Replayed reports a retry (the same Idempotency-Key) answered from
	// the first reserve.
	Replayed bool `json:"replayed,omitempty"`
}

// SettleBody is the body of POST /v1/reservations/{id}/commit.
type SettleBody struct {
	// Cost is the cost actually used.
	Cost *int64 `json:"cost"`
}

// SettlementJSON is what settling did to one key.
type SettlementJSON struct {
	Refunded  int64 `json:"refunded"`
	Charged   int64 `json:"charged"`
	Short     int64 `json:"short"`
	Remaining int64 `json:"remaining"`
	Limit     int64 `json:"limit"`
}

// SettleResponse answers commit and cancel: one settlement per key held,
// in the order reserved.
type SettleResponse struct {
	Replayed    bool             `json:"replayed,omitempty"`
	Settlements []SettlementJSON `json:"settlements"`
}

func (s *API) handleReserve(w http.ResponseWriter, r *http.Request) {
	var req ReserveRequest
	if !decodeJSON(w, r, &req) {
		return
	}
	o, err := reserveOptions(r, &req)
	if err != nil {
		writeProblem(w, err)
		return
	}
	inline, err := req.form()
	if err != nil {
		writeProblem(w, err)
		return
	}
	var res *floodgate.Reservation
	var statuses []server.Status
	var overall server.Status
	if inline {
		res, overall, err = s.reserveInline(r.Context(), &req.AllowRequest, o)
		statuses = []server.Status{overall}
	} else {
		var result server.Result
		res, result, err = s.reserveDescriptors(r.Context(), &req.AllowRequest, o)
		statuses, overall = result.Statuses, Binding(result)
	}
	if err != nil {
		s.reservations.WithLabelValues("reserve", "failed").Inc()
		writeProblem(w, err)
		return
	}
	s.reservations.WithLabelValues("reserve", pick(res != nil && res.Held, "held", "denied")).Inc()
	resp := ReserveResponse{AllowResponse: allowResponse(inline, overall, statuses)}
	if res != nil && res.Held {
		if resp.ID, err = encodeToken(res); err != nil {
			// Nothing should hold what no one can settle.
			_, _ = res.Cancel(r.Context())
			writeProblem(w, err)
			return
		}
		resp.ExpiresAt, resp.Replayed = &res.Expires, res.Replayed
	}
	writeAllow(w, resp, overall, statuses)
}

// reserveOptions reads the TTL and the Idempotency-Key header, whose hash
// is the store's reservation ID.
func reserveOptions(r *http.Request, req *ReserveRequest) (*floodgate.ReserveOptions, error) {
	o := &floodgate.ReserveOptions{ReleaseOnExpiry: req.ReleaseOnExpiry}
	if req.TTLMS != nil {
		ms := *req.TTLMS
		if ms <= 0 || ms > floodgate.MaxHoldTTL.Milliseconds() {
			return nil, invalid("ttl_ms", "%d is not between 1 and %d", ms, floodgate.MaxHoldTTL.Milliseconds())
		}
		o.TTL = time.Duration(ms) * time.Millisecond
	}
	if key := r.Header.Get("Idempotency-Key"); key != "" {
		if len(key) > 256 {
			return nil, invalid("Idempotency-Key", "%d bytes, more than the 256 allowed", len(key))
		}
		sum := sha256.Sum256([]byte(key))
		o.ID = hex.EncodeToString(sum[:16])
	}
	return o, nil
}

func (s *API) reserveInline(ctx context.Context, req *AllowRequest, o *floodgate.ReserveOptions) (*floodgate.Reservation, server.Status, error) {
	lim, cost, err := req.inlineLimit()
	if err != nil {
		return nil, server.Status{}, err
	}
	return s.srv.ReserveInline(ctx, req.Key, lim, cost, o)
}

func (s *API) reserveDescriptors(ctx context.Context, req *AllowRequest, o *floodgate.ReserveOptions) (*floodgate.Reservation, server.Result, error) {
	ds, hits, err := req.descriptors()
	if err != nil {
		return nil, server.Result{}, err
	}
	return s.srv.Reserve(ctx, req.Domain, ds, hits, o)
}

// handleSettle answers commit (cancel false) and cancel.
func (s *API) handleSettle(cancel bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		t, items, err := decodeToken(r.PathValue("id"))
		if err != nil {
			writeProblem(w, err)
			return
		}
		var cost int64
		if !cancel {
			var body SettleBody
			if !decodeJSON(w, r, &body) {
				return
			}
			if body.Cost == nil {
				writeProblem(w, invalid("cost", "required: the cost actually used"))
				return
			}
			cost = *body.Cost
		}
		sts, err := s.settleReservation(r.Context(), t, items, cost, cancel)
		step := pick(cancel, "cancel", "commit")
		switch {
		case errors.Is(err, floodgate.ErrExpired):
			s.reservations.WithLabelValues(step, "expired").Inc()
			writeProblem(w, &httpError{status: http.StatusGone, field: "id", msg: expiredDetail(sts)})
			return
		case err != nil:
			s.reservations.WithLabelValues(step, "failed").Inc()
			writeProblem(w, err)
			return
		}
		resp := SettleResponse{Settlements: make([]SettlementJSON, len(sts))}
		for i, st := range sts {
			resp.Replayed = resp.Replayed || st.Replayed
			resp.Settlements[i] = SettlementJSON{Refunded: st.Refunded, Charged: st.Charged, Short: st.Short,
				Remaining: st.Decision.Remaining, Limit: st.Decision.Limit}
		}
		s.reservations.WithLabelValues(step, pick(resp.Replayed, "replayed", "settled")).Inc()
		writeJSON(w, http.StatusOK, resp)
	}
}

// settleReservation settles the reservation of token t. One that the
// failure mode local held is in this instance's memory: another instance
// answers 404.
func (s *API) settleReservation(ctx context.Context, t token, items []floodgate.Item, cost int64, cancel bool) ([]floodgate.Settlement, error) {
	res := s.srv.Limiter().Reservation(t.ID, items, t.Local)
	now := time.Now()
	for i, ti := range t.Items {
		// A window the reserve could have had: one that was open at most
		// MaxHoldTTL ago (a hold lasts no longer). Another is not believed,
		// and the commit records the window of its own time.
		w := time.UnixMicro(ti.Window).UTC()
		if ti.Window > 0 && !w.After(now.Add(time.Minute)) && w.Add(items[i].Limit.Period+floodgate.MaxHoldTTL).After(now) {
			if res.Windows == nil {
				res.Windows = make([]time.Time, len(items))
			}
			res.Windows[i] = w
		}
	}
	if cancel {
		return res.Cancel(ctx)
	}
	return res.Commit(ctx, cost)
}

// expiredDetail says what the expiry of a reservation did.
func expiredDetail(sts []floodgate.Settlement) string {
	var back int64
	for _, st := range sts {
		back += st.Refunded
	}
	if back == 0 {
		return "the reservation expired before this step; its units stayed charged"
	}
	return fmt.Sprintf("the reservation expired before this step; %d units were given back", back)
}

// descriptors converts the descriptor form of the body, and its hits.
func (req *AllowRequest) descriptors() ([]server.Descriptor, int64, error) {
	if len(req.Descriptors) > server.MaxDescriptors {
		return nil, 0, invalid("descriptors", "%d descriptors, more than the %d allowed", len(req.Descriptors), server.MaxDescriptors)
	}
	ds := make([]server.Descriptor, len(req.Descriptors))
	for i, d := range req.Descriptors {
		ds[i].Hits = d.Hits
		ds[i].Entries = make([]config.Entry, len(d.Entries))
		for j, e := range d.Entries {
			ds[i].Entries[j] = config.Entry{Key: e.Key, Value: e.Value}
		}
		if d.Limit != nil {
			lim, err := d.Limit.toLimit(fmt.Sprintf("descriptors[%d].limit", i))
			if err != nil {
				return nil, 0, err
			}
			ds[i].Limit = &lim
		}
	}
	hits := int64(1)
	if req.Hits != nil {
		hits = *req.Hits
	}
	return ds, hits, nil
}

// pick is a if cond, else b.
func pick(cond bool, a, b string) string {
	if cond {
		return a
	}
	return b
}
