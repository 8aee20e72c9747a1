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
// back. Like a reservation's, the id is a token that names the keys,
// limits and units it holds and the lease, so any replica of the service
// renews or releases it; the lease in it is 128 random bits.

// leaseToken is what a lease's id carries.
type leaseToken struct {
	Lease string      `json:"i"`
	Items []leaseItem `json:"k"`
}

type leaseItem struct {
	Key   string    `json:"k"`
	Limit LimitJSON `json:"l"`
	Cost  int64     `json:"c"`
}

func encodeLease(lease string, items []floodgate.Item) (string, error) {
	t := leaseToken{Lease: lease}
	for _, it := range items {
		t.Items = append(t.Items, leaseItem{Key: it.Key, Limit: *limitJSON(it.Limit), Cost: it.Cost})
	}
	return sealToken("l1.", "lease", t)
}

func decodeLease(s string) (string, []floodgate.Item, error) {
	var t leaseToken
	if err := openToken("l1.", "lease", s, &t); err != nil {
		return "", nil, err
	}
	if t.Lease == "" || len(t.Items) == 0 {
		return "", nil, badToken("lease", "malformed")
	}
	items := make([]floodgate.Item, len(t.Items))
	for i, ti := range t.Items {
		lim, err := ti.Limit.toLimit("limit")
		if err != nil || ti.Key == "" || lim.Algorithm != floodgate.Concurrency {
			return "", nil, badToken("lease", "malformed item")
		}
		items[i] = floodgate.Item{Key: ti.Key, Limit: lim, Cost: ti.Cost, Lease: t.Lease}
	}
	return t.Lease, items, nil
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
	inline, err := req.form()
	if err != nil {
		writeProblem(w, err)
		return
	}
	lease := newLease()
	var res Result
	var p plan
	if inline {
		res, p, err = s.planInlineLease(&req, lease)
	} else {
		res, p, err = s.planDescriptorLease(&req, lease)
	}
	if err == nil && len(p.items) > 0 {
		var outs []floodgate.Outcome
		if outs, err = s.lim.DecideAll(r.Context(), p.items); err != nil {
			err = p.fieldOf(err)
		} else {
			for j, i := range p.which {
				st := &res.Statuses[i]
				s.settle(req.Domain, nil, st, &outs[j])
				if st.Code == OverLimit {
					res.Code = OverLimit
				}
			}
		}
	}
	if err != nil {
		writeProblem(w, err)
		return
	}
	overall := Binding(res)
	if inline {
		overall = res.Statuses[0]
	}
	resp := LeaseResponse{AllowResponse: allowResponse(inline, overall, res.Statuses)}
	if res.Code == OK && len(p.items) > 0 && held(res.Statuses) {
		if resp.ID, err = encodeLease(lease, p.items); err != nil {
			writeProblem(w, err)
			return
		}
	}
	writeAllow(w, resp, overall, res.Statuses)
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

// handleLease answers renew (release false) and release of the lease id.
func (s *Server) handleLease(release bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_, items, err := decodeLease(r.PathValue("id"))
		if err != nil {
			writeProblem(w, err)
			return
		}
		if release {
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
				// The store failed: the release may not have happened,
				// and is safe to repeat.
				writeProblem(w, err)
				return
			}
			w.WriteHeader(http.StatusNoContent)
			return
		}
		outs, err := s.lim.DecideAll(r.Context(), items)
		if err != nil {
			writeProblem(w, err)
			return
		}
		statuses := make([]Status, len(outs))
		res := Result{Code: OK, Statuses: statuses}
		for i := range outs {
			statuses[i] = Status{Code: OK, Limited: true}
			s.settle("", nil, &statuses[i], &outs[i])
			if statuses[i].Code == OverLimit {
				res.Code = OverLimit
			}
		}
		overall := Binding(res)
		resp := LeaseResponse{AllowResponse: allowResponse(len(items) == 1, overall, statuses)}
		if res.Code == OK && held(statuses) {
			resp.ID = r.PathValue("id")
		}
		writeAllow(w, resp, overall, statuses)
	}
}
