package server

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"

	"github.com/floodgate-rl/floodgate"
)

// Leases over HTTP: concurrency limits for callers in other languages.
// POST /v1/leases acquires units of concurrency limits (an inline limit of
// algorithm concurrency, or a domain's descriptors matched to concurrency
// rules, all or nothing) under a new lease, and answers an id;
// POST /v1/leases/{id}/renew holds them for another period (the limit's
// Period is the lease's TTL); POST /v1/leases/{id}/release gives them
// back. The id is a token that carries the lease (128 random bits) and
// the request that acquired it, which renew and release decide again:
// the limits of rules come from the config in force, never from the
// token, and an inline key stays apart from the keys of rules, so a
// forged id can do no more than the request it names could.

// leaseToken is what a lease's id carries.
type leaseToken struct {
	Lease string       `json:"i"`
	Req   AllowRequest `json:"r"`
}

func encodeLease(lease string, req *AllowRequest) (string, error) {
	return sealToken("l1.", "lease", leaseToken{Lease: lease, Req: *req})
}

func decodeLease(s string) (string, AllowRequest, error) {
	var t leaseToken
	if err := openToken("l1.", "lease", s, &t); err != nil {
		return "", AllowRequest{}, err
	}
	if t.Lease == "" {
		return "", AllowRequest{}, badToken("lease", "malformed")
	}
	return t.Lease, t.Req, nil
}

// LeaseResponse answers POST /v1/leases and /renew: the decision, as
// AllowResponse, and the lease's id when it holds units.
type LeaseResponse struct {
	AllowResponse
	// ID renews or releases the lease; absent when nothing is held.
	ID string `json:"id,omitempty"`
}

// newLease is a random lease ID.
func newLease() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+).
	return hex.EncodeToString(b[:])
}

func (s *Server) handleAcquire(w http.ResponseWriter, r *http.Request) {
	var req AllowRequest
	if !decodeJSON(w, r, &req) {
		return
	}
	s.acquire(w, r, newLease(), &req, false)
}

// acquire decides req's concurrency limits under lease, all or nothing
// (or with release, gives them back), and answers; an admitted lease gets
// its id.
func (s *Server) acquire(w http.ResponseWriter, r *http.Request, lease string, req *AllowRequest, release bool) {
	inline, err := req.form()
	if err != nil {
		writeProblem(w, err)
		return
	}
	var res Result
	var p plan
	if inline {
		res, p, err = s.planInlineLease(req, lease)
	} else {
		res, p, err = s.planDescriptorLease(req, lease)
	}
	if err != nil {
		writeProblem(w, err)
		return
	}
	if release {
		s.release(w, r, p.items)
		return
	}
	if len(p.items) > 0 {
		outs, err := s.lim.DecideAll(r.Context(), p.items)
		if err != nil {
			writeProblem(w, p.fieldOf(err))
			return
		}
		s.settleEach(req.Domain, nil, &res, p.which, outs)
	}
	overall := Binding(res)
	if inline {
		overall = res.Statuses[0]
	}
	resp := LeaseResponse{AllowResponse: allowResponse(inline, overall, res.Statuses)}
	if res.Code == OK && len(p.items) > 0 && held(res.Statuses) {
		if resp.ID, err = encodeLease(lease, req); err != nil {
			writeProblem(w, err)
			return
		}
	}
	writeAllow(w, resp, overall, res.Statuses)
}

// release gives back the units of items; a store failure is a 503, since
// the release may not have happened (and is safe to repeat).
func (s *Server) release(w http.ResponseWriter, r *http.Request, items []floodgate.Item) {
	for i := range items {
		items[i].Release = true
	}
	outs, err := s.lim.Decide(r.Context(), items)
	if err == nil {
		for _, o := range outs {
			if o.Err != nil && o.Policy != floodgate.FailLocal {
				err = o.Err
				break
			}
		}
	}
	if err != nil {
		writeProblem(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// held reports whether the store (or the local store) granted every
// limited status: a fail_open answer holds nothing.
func held(statuses []Status) bool {
	for _, st := range statuses {
		if st.Limited && (st.Err != nil || !st.Decision.Allowed) {
			return false
		}
	}
	return true
}

// planInlineLease is the item of an inline lease: its limit must be a
// concurrency limit.
func (s *Server) planInlineLease(req *AllowRequest, lease string) (Result, plan, error) {
	lim, cost, err := req.inlineLimit()
	if err == nil {
		err = s.checkOwnPeriod("limit.period", lim.Period)
	}
	if err != nil {
		return Result{}, plan{}, err
	}
	if lim.Algorithm != floodgate.Concurrency {
		return Result{}, plan{}, invalid("limit.algorithm", "a lease holds units of a concurrency limit, not %s; decide it with POST /v1/allow", lim.EffectiveAlgorithm())
	}
	if err := checkInlineKey(req.Key); err != nil {
		return Result{}, plan{}, err
	}
	res := Result{Code: OK, Statuses: []Status{{Code: OK, Limited: true, Limit: lim}}}
	p := plan{items: []floodgate.Item{{Key: inlineKey(req.Key), Limit: lim, Cost: cost, Lease: lease}}, which: []int{0}, ownHits: []bool{false}, shadow: []bool{false}}
	return res, p, nil
}

// planDescriptorLease is the items of a lease on a domain's concurrency
// rules.
func (s *Server) planDescriptorLease(req *AllowRequest, lease string) (Result, plan, error) {
	ds, hits, err := req.descriptors()
	if err != nil {
		return Result{}, plan{}, err
	}
	for i, d := range ds {
		if d.Limit != nil {
			return Result{}, plan{}, invalid(fmt.Sprintf("descriptors[%d].limit", i), "a lease holds units of the config's concurrency rules or of an inline limit, not of a descriptor's own limit")
		}
	}
	if err := checkRequest(req.Domain, ds); err != nil {
		return Result{}, plan{}, err
	}
	return s.planLease(req.Domain, ds, hits, lease)
}

// handleLease answers renew (release false) and release of the lease id:
// the request the id carries is decided again under its lease.
func (s *Server) handleLease(release bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		lease, req, err := decodeLease(r.PathValue("id"))
		if err != nil {
			writeProblem(w, err)
			return
		}
		s.acquire(w, r, lease, &req, release)
	}
}
