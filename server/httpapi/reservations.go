package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/floodgate-rl/floodgate/server/tracing"
	"go.opentelemetry.io/otel/trace"
)

// Reservations over HTTP: POST /v1/reservations holds the upper bound of a
// request's cost (an inline key and limit, or a domain's descriptors, all
// or nothing), and answers an id; POST /v1/reservations/{id}/commit
// settles the actual cost, /cancel gives the hold back. Every step is
// idempotent: the store keeps each hold's answer (see floodgate.Reserver),
// so a retry gets the first answer and another step is a conflict (422).
//
// The id is the service's record of what it holds, signed and bound to
// the caller that reserved (ids.go): the store's reservation ID and, for
// each key, the key, the limit it was reserved under, the units held and,
// for a durable quota, the window its units count in, with the
// reservation's expiry; so that any replica of the service with the same
// id keys settles it without a shared table, and a reload that changes a
// rule's limit changes nothing of a reservation made before. A settle
// still acts only on holds the store has, with the limit and units the
// hold recorded; the signed record serves a durable quota's commit whose
// hold the store lost (floodgate.SettleRequest.Signed), which the answer
// reports (hold_lost). The store's ID is 128 random bits, or with an
// Idempotency-Key header an HMAC of the caller and that key.

// maxTokenLen bounds a reservation token, and so the keys a reservation
// holds (a path segment of a URL).
const maxTokenLen = 4096

// token is what a reservation's id carries.
type token struct {
	ID    string      `json:"i"`
	Items []tokenItem `json:"k"`
	Local bool        `json:"l,omitempty"`
	// Expires is the reservation's expiry, µs since the epoch.
	Expires int64 `json:"e"`
}

type tokenItem struct {
	Key   string    `json:"k"`
	Limit LimitJSON `json:"l"`
	// Units are the units held.
	Units int64 `json:"u"`
	// Durable and Window are a durable quota's: the window its units
	// count in (µs since the epoch), as the reserve answered it.
	Durable bool  `json:"d,omitempty"`
	Window  int64 `json:"w,omitempty"`
}

func (s *API) encodeToken(res *floodgate.Reservation, caller string) (string, error) {
	t := token{ID: res.ID, Local: res.Local, Expires: res.Expires.UnixMicro()}
	for i, it := range res.Items {
		ti := tokenItem{Key: it.Key, Limit: *limitJSON(it.Limit), Units: it.Cost, Durable: it.Limit.Durable}
		if i < len(res.Windows) && !res.Windows[i].IsZero() {
			ti.Window = res.Windows[i].UnixMicro()
		}
		t.Items = append(t.Items, ti)
	}
	return s.ids.seal(reservationPrefix, "reservation", caller, t)
}

// decodeToken opens a reservation's id made for caller into the
// reservation it names, as the service made it (Signed).
func (s *API) decodeToken(id, caller string) (*floodgate.Reservation, error) {
	var t token
	if err := s.ids.open(reservationPrefix, "reservation", caller, id, &t); err != nil {
		return nil, err
	}
	if t.ID == "" || len(t.Items) == 0 {
		return nil, badToken("reservation")
	}
	items := make([]floodgate.Item, len(t.Items))
	windows := make([]time.Time, len(t.Items))
	for i, ti := range t.Items {
		lim, err := ti.Limit.toLimit("limit")
		if err != nil || ti.Key == "" {
			return nil, badToken("reservation")
		}
		lim.Durable = ti.Durable
		items[i] = floodgate.Item{Key: ti.Key, Limit: lim, Cost: ti.Units}
		if ti.Window > 0 {
			windows[i] = time.UnixMicro(ti.Window).UTC()
		}
	}
	res := s.srv.Limiter().Reservation(t.ID, items, t.Local)
	res.Windows, res.Expires, res.Signed = windows, time.UnixMicro(t.Expires).UTC(), true
	return res, nil
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
	// Hold, with max_wait_ms, has the service hold the response until
	// the slot comes (bounded by Options.MaxHold), for a caller that
	// cannot easily sleep: the answer's wait_ms is then 0 and waited_ms
	// says how long it was held. Without it the answer comes at once
	// with wait_ms. AllowRequest.MaxWaitMS asks for the slot (see
	// docs/waiting.md); cancelling the reservation gives it back.
	Hold bool `json:"hold,omitempty"`
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
	// WaitMS, for a reserve with max_wait_ms that was allowed, is how long
	// the caller waits before it proceeds, in milliseconds rounded up: 0
	// when the slot is now.
	WaitMS *int64 `json:"wait_ms,omitempty"`
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
	// Billed is what the ledger holds for this commit of a durable
	// quota's key.
	Billed int64 `json:"billed,omitempty"`
}

// SettleResponse answers commit and cancel: one settlement per key held,
// in the order reserved.
type SettleResponse struct {
	Replayed bool `json:"replayed,omitempty"`
	// HoldLost reports a commit whose hold the store no longer had (it
	// lost it): nothing was settled in the store, and each durable
	// quota's key was billed what the reservation held at most (billed).
	HoldLost    bool             `json:"hold_lost,omitempty"`
	Settlements []SettlementJSON `json:"settlements"`
}

func (s *API) handleReserve(w http.ResponseWriter, r *http.Request) {
	var req ReserveRequest
	if !decodeJSON(w, r, &req) {
		return
	}
	if err := req.noPriority("reservations"); err != nil {
		writeProblem(w, err)
		return
	}
	caller := s.caller(r)
	o, err := s.reserveOptions(r, &req, caller)
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
	var wait, waited *int64
	var maxWait time.Duration
	var id string
	switch {
	case req.MaxWaitMS != nil:
		maxWait, err = req.maxWait()
	case req.Hold:
		err = invalid("hold", "holds the response until a slot: give max_wait_ms too")
	}
	if err != nil {
		writeProblem(w, err)
		return
	}
	if req.Hold {
		if !s.holds.acquire() {
			writeWaitProblem(w, errHoldFull)
			return
		}
		defer s.holds.release()
		maxWait = min(maxWait, s.holds.max)
	}
	if req.MaxWaitMS != nil {
		var slot *floodgate.Slot
		var result server.Result
		slot, overall, result, err = s.schedule(r.Context(), &req.AllowRequest, inline, maxWait, o)
		statuses = result.Statuses
		if slot != nil {
			res = slot.Reservation
			ms := millisCeil(slot.Delay)
			wait = &ms
		}
		if err == nil && req.Hold && res != nil && res.Held {
			// The id first: no caller waits for an id that cannot be made.
			if id, err = s.encodeToken(res, caller); err != nil {
				_, _ = res.Cancel(r.Context())
				s.holds.done.WithLabelValues("failed").Inc()
				writeProblem(w, err)
				return
			}
			s.reservations.WithLabelValues("reserve", "held").Inc()
			if !s.holds.wait(r.Context(), slot) {
				return
			}
			var now int64
			wait, waited = &now, wait
		}
		if req.Hold {
			s.holds.done.WithLabelValues(pick(err == nil, "served", "failed")).Inc()
		}
	} else if inline {
		res, overall, err = s.reserveInline(r.Context(), &req.AllowRequest, o)
		statuses = []server.Status{overall}
	} else {
		var result server.Result
		res, result, err = s.reserveDescriptors(r.Context(), &req.AllowRequest, o)
		statuses, overall = result.Statuses, Binding(result)
	}
	if err != nil {
		s.reservations.WithLabelValues("reserve", "failed").Inc()
		if req.MaxWaitMS != nil {
			writeWaitProblem(w, err)
			return
		}
		writeProblem(w, err)
		return
	}
	if waited == nil {
		s.reservations.WithLabelValues("reserve", pick(res != nil && res.Held, "held", "denied")).Inc()
	}
	resp := ReserveResponse{AllowResponse: allowResponse(inline, overall, statuses)}
	resp.WaitedMS = waited
	if res != nil && res.Held {
		if resp.ID = id; id == "" {
			resp.ID, err = s.encodeToken(res, caller)
		}
		if err != nil {
			// Nothing should hold what no one can settle.
			_, _ = res.Cancel(r.Context())
			writeProblem(w, err)
			return
		}
		resp.ExpiresAt, resp.Replayed, resp.WaitMS = &res.Expires, res.Replayed, wait
	}
	writeAllow(w, resp, overall, statuses)
}

// reserveOptions reads the TTL and the Idempotency-Key header, whose
// HMAC with caller is the store's reservation ID: one caller's key is
// never another's.
func (s *API) reserveOptions(r *http.Request, req *ReserveRequest, caller string) (*floodgate.ReserveOptions, error) {
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
		o.ID = s.ids.idempotencyID(caller, key)
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

// handleSettle answers commit (cancel false) and cancel. An id that
// does not open for this caller (forged, altered, another caller's, or
// of an earlier version) is a 404 that touches nothing, metrics
// included.
func (s *API) handleSettle(cancel bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		res, err := s.decodeToken(r.PathValue("id"), s.caller(r))
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
		ctx := r.Context()
		var span trace.Span
		if tr := s.srv.Tracer(); tr != nil {
			ctx, span = tr.Start(ctx, pick(cancel, tracing.SpanCancel, tracing.SpanCommit))
		}
		var sts []floodgate.Settlement
		if cancel {
			sts, err = res.Cancel(ctx)
		} else {
			sts, err = res.Commit(ctx, cost)
		}
		if span != nil {
			endSettle(span, cost, sts, err)
		}
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
			resp.HoldLost = resp.HoldLost || st.HoldLost
			resp.Settlements[i] = SettlementJSON{Refunded: st.Refunded, Charged: st.Charged, Short: st.Short,
				Remaining: st.Decision.Remaining, Limit: st.Decision.Limit, Billed: st.Billed}
		}
		result := pick(resp.Replayed, "replayed", "settled")
		if resp.HoldLost {
			result = "billed_lost"
		}
		s.reservations.WithLabelValues(step, result).Inc()
		writeJSON(w, http.StatusOK, resp)
	}
}

// endSettle ends the span of a commit (of cost) or cancel with its
// outcome and the units it moved; nothing of the reservation's id.
func endSettle(span trace.Span, cost int64, sts []floodgate.Settlement, err error) {
	if span.IsRecording() {
		var charged, refunded, billed int64
		outcome := "settled"
		for _, st := range sts {
			charged += st.Charged
			refunded += st.Refunded
			billed += st.Billed
			if st.Replayed {
				outcome = "replayed"
			}
			if st.HoldLost {
				outcome = "billed_lost"
			}
		}
		switch {
		case errors.Is(err, floodgate.ErrExpired):
			outcome, err = "expired", nil // an answer, not a failure
		case errors.Is(err, floodgate.ErrConflict):
			outcome, err = "conflict", nil // the caller's
		case err != nil:
			outcome = "failed"
		}
		span.SetAttributes(tracing.KeyOutcome.String(outcome), tracing.KeyActualCost.Int64(cost),
			tracing.KeyCharged.Int64(charged), tracing.KeyRefunded.Int64(refunded), tracing.KeyBilled.Int64(billed))
	}
	tracing.EndErr(span, err)
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
