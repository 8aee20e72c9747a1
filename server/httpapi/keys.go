package httpapi

import (
	"net/http"
	"time"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/server"
)

// ResetRequest is the body of POST /v1/reset and POST /v1/inspect: key
// and limit for an inline key; or domain and entries for a descriptor of
// the config, with limit only for a descriptor that brings its own.
type ResetRequest struct {
	Key     string      `json:"key,omitempty"`
	Limit   *LimitJSON  `json:"limit,omitempty"`
	Domain  string      `json:"domain,omitempty"`
	Entries []EntryJSON `json:"entries,omitempty"`
}

// keyRef converts the JSON form, naming the field of any problem.
func (req *ResetRequest) keyRef() (server.KeyRef, error) {
	ref := server.KeyRef{Key: req.Key, Domain: req.Domain}
	if req.Entries != nil {
		ref.Entries = make([]config.Entry, len(req.Entries))
		for i, e := range req.Entries {
			ref.Entries[i] = config.Entry{Key: e.Key, Value: e.Value}
		}
	}
	if ref.Domain == "" && ref.Entries != nil {
		return ref, invalid("domain", "required with entries")
	}
	if req.Limit == nil {
		if ref.Domain == "" {
			return ref, invalid("limit", "required with key")
		}
		return ref, nil
	}
	lim, err := req.Limit.toLimit("limit")
	if err != nil {
		return ref, err
	}
	ref.Limit = &lim
	return ref, nil
}

func (s *API) handleReset(w http.ResponseWriter, r *http.Request) {
	var req ResetRequest
	if !decodeJSON(w, r, &req) {
		return
	}
	ref, err := req.keyRef()
	if err == nil {
		err = s.srv.ResetKey(r.Context(), ref)
	}
	if err != nil {
		writeProblem(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// InspectResponse is the answer of POST /v1/inspect: the key's state as a
// decision of cost 0, and the key the store holds it under.
type InspectResponse struct {
	DecisionJSON
	StoreKey string `json:"store_key"`
	// At is when the state was read, RFC 3339.
	At string `json:"at"`
}

func (s *API) handleInspect(w http.ResponseWriter, r *http.Request) {
	var req ResetRequest
	if !decodeJSON(w, r, &req) {
		return
	}
	ref, err := req.keyRef()
	var st server.KeyState
	if err == nil {
		st, err = s.srv.InspectKey(r.Context(), ref)
	}
	if err != nil {
		writeProblem(w, err)
		return
	}
	resp := InspectResponse{DecisionJSON: statusJSON(st.Status), StoreKey: st.StoreKey, At: time.Now().UTC().Format(time.RFC3339Nano)}
	writeJSON(w, http.StatusOK, resp)
}
