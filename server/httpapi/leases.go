package httpapi

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"

	"github.com/floodgate-rl/floodgate/server"
)

// Leases over HTTP: concurrency limits for callers in other languages.
// POST /v1/leases acquires units of concurrency limits (an inline limit of
// algorithm concurrency, or a domain's descriptors matched to concurrency
// rules, all or nothing) under a new lease, and answers an id;
// POST /v1/leases/{id}/renew holds them for another period (the limit's
// Period is the lease's TTL); POST /v1/leases/{id}/release gives them
// back. The id carries the lease (128 random bits) and the request that
// acquired it, which renew and release decide again (the limits of rules
// come from the config in force), signed and bound to the caller that
// acquired it as a reservation's id is (ids.go): a forged, altered or
// another caller's id is a 404 that touches nothing.

// leaseToken is what a lease's id carries.
type leaseToken struct {
	Lease string       `json:"i"`
	Req   AllowRequest `json:"r"`
}

func (s *API) encodeLease(lease string, req *AllowRequest, caller string) (string, error) {
	return s.ids.seal(leasePrefix, "lease", caller, leaseToken{Lease: lease, Req: *req})
}

func (s *API) decodeLease(id, caller string) (string, AllowRequest, error) {
	var t leaseToken
	if err := s.ids.open(leasePrefix, "lease", caller, id, &t); err != nil {
		return "", AllowRequest{}, err
	}
	if t.Lease == "" {
		return "", AllowRequest{}, badToken("lease")
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

func (s *API) handleAcquire(w http.ResponseWriter, r *http.Request) {
	var req AllowRequest
	if !decodeJSON(w, r, &req) {
		return
	}
	if err := req.noPriority("leases"); err != nil {
		writeProblem(w, err)
		return
	}
	if err := req.noWait("a lease takes no wait: it frees when its holder releases it, at no time known in advance"); err != nil {
		writeProblem(w, err)
		return
	}
	s.acquire(w, r, newLease(), &req, false)
}

// acquire decides req's concurrency limits under lease, all or nothing
// (or with release, gives them back), and answers; an admitted lease gets
// its id.
func (s *API) acquire(w http.ResponseWriter, r *http.Request, lease string, req *AllowRequest, release bool) {
	inline, err := req.form()
	if err != nil {
		writeProblem(w, err)
		return
	}
	if release {
		if err = s.release(r, lease, req, inline); err != nil {
			writeProblem(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
		return
	}
	var res server.Result
	var overall server.Status
	if inline {
		overall, err = s.acquireInline(r, lease, req)
		res = server.Result{Code: overall.Code, Statuses: []server.Status{overall}}
	} else {
		res, err = s.acquireDescriptors(r, lease, req)
		overall = Binding(res)
	}
	if err != nil {
		writeProblem(w, err)
		return
	}
	resp := LeaseResponse{AllowResponse: allowResponse(inline, overall, res.Statuses)}
	if res.Code == server.OK && limited(res.Statuses) && held(res.Statuses) {
		if resp.ID, err = s.encodeLease(lease, req, s.caller(r)); err != nil {
			writeProblem(w, err)
			return
		}
	}
	writeAllow(w, resp, overall, res.Statuses)
}

// acquireInline acquires the inline form under lease.
func (s *API) acquireInline(r *http.Request, lease string, req *AllowRequest) (server.Status, error) {
	lim, cost, err := req.inlineLimit()
	if err != nil {
		return server.Status{}, err
	}
	return s.srv.AcquireInline(r.Context(), lease, req.Key, lim, cost)
}

// acquireDescriptors acquires the descriptor form under lease.
func (s *API) acquireDescriptors(r *http.Request, lease string, req *AllowRequest) (server.Result, error) {
	ds, hits, err := req.descriptors()
	if err != nil {
		return server.Result{}, err
	}
	return s.srv.Acquire(r.Context(), lease, req.Domain, ds, hits)
}

// release gives back what req holds under lease; a store failure is an
// error (a 503), since the release may not have happened (and is safe to
// repeat).
func (s *API) release(r *http.Request, lease string, req *AllowRequest, inline bool) error {
	if inline {
		lim, cost, err := req.inlineLimit()
		if err != nil {
			return err
		}
		return s.srv.ReleaseInline(r.Context(), lease, req.Key, lim, cost)
	}
	ds, hits, err := req.descriptors()
	if err != nil {
		return err
	}
	return s.srv.Release(r.Context(), lease, req.Domain, ds, hits)
}

// limited reports whether a store decided any of statuses: a lease on
// descriptors that match no concurrency rule holds nothing.
func limited(statuses []server.Status) bool {
	for _, st := range statuses {
		if st.Limited {
			return true
		}
	}
	return false
}

// held reports whether the store (or the local store) granted every
// limited status: a fail_open answer holds nothing.
func held(statuses []server.Status) bool {
	for _, st := range statuses {
		if st.Limited && (st.Err != nil || !st.Decision.Allowed) {
			return false
		}
	}
	return true
}

// handleLease answers renew (release false) and release of the lease id:
// the request the id carries is decided again under its lease.
func (s *API) handleLease(release bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		lease, req, err := s.decodeLease(r.PathValue("id"), s.caller(r))
		if err != nil {
			writeProblem(w, err)
			return
		}
		s.acquire(w, r, lease, &req, release)
	}
}
