package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/ledger"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/floodgate-rl/floodgate/server/transport"
)

// The admin routes of overrides (docs/plans.md): a key's or a tenant's
// limits set without a config push, kept in the ledger, audited.
func (s *API) overrideRoutes() []route {
	return []route{
		{"GET /v1/overrides", http.HandlerFunc(s.handleListOverrides), transport.ScopeAdmin},
		{"POST /v1/overrides", http.HandlerFunc(s.handleSetOverride), transport.ScopeAdmin},
		{"POST /v1/overrides/remove", http.HandlerFunc(s.handleRemoveOverride), transport.ScopeAdmin},
		{"GET /v1/overrides/audit", http.HandlerFunc(s.handleOverrideAudit), transport.ScopeAdmin},
	}
}

// OverrideRequest is the body of POST /v1/overrides: a domain's
// descriptor and either a plan of the domain or limits.
type OverrideRequest struct {
	Domain  string      `json:"domain"`
	Entries []EntryJSON `json:"entries"`
	Plan    string      `json:"plan,omitempty"`
	Limits  []LimitJSON `json:"limits,omitempty"`
}

// OverrideKeyRequest is the body of POST /v1/overrides/remove.
type OverrideKeyRequest struct {
	Domain  string      `json:"domain"`
	Entries []EntryJSON `json:"entries"`
}

// OverrideJSON is an override in answers.
type OverrideJSON struct {
	Domain  string       `json:"domain"`
	Entries []EntryJSON  `json:"entries"`
	Plan    string       `json:"plan,omitempty"`
	Limits  []*LimitJSON `json:"limits,omitempty"`
}

// ChangeJSON is one change of an override (the audit's rows and the
// answer of a change), or, in GET /v1/overrides, an override in the
// ledger and its last change (old is then absent).
type ChangeJSON struct {
	Version int64         `json:"version"`
	Subject string        `json:"subject"`
	Old     *OverrideJSON `json:"old,omitempty"`
	New     *OverrideJSON `json:"new,omitempty"`
	By      string        `json:"by"`
	At      time.Time     `json:"at"`
}

// errNoOverrides answers the override routes of a server without a
// ledger.
var errNoOverrides = fmt.Errorf("%w: overrides are kept in the ledger: start floodgate serve with -ledger", floodgate.ErrNotSupported)

func overrideJSON(o *server.Override) *OverrideJSON {
	if o == nil {
		return nil
	}
	out := &OverrideJSON{Domain: o.Domain, Plan: o.Plan, Entries: make([]EntryJSON, len(o.Entries))}
	for i, e := range o.Entries {
		out.Entries[i] = EntryJSON(e)
	}
	for _, l := range o.Limits {
		out.Limits = append(out.Limits, limitJSON(l))
	}
	return out
}

func changeJSON(c server.Change) ChangeJSON {
	return ChangeJSON{Version: c.Version, Subject: c.Subject, Old: overrideJSON(c.Old), New: overrideJSON(c.New), By: c.By, At: c.At.UTC()}
}

// actor is who makes a change: the identity of the caller's token
// (transport.Auth.Identity, a digest, never the token), or "anonymous"
// when the server has no token files.
func (s *API) actor(r *http.Request) string {
	if id := s.auth.Identity(r.Header.Get("Authorization")); id != "" {
		return "token:" + id
	}
	return "anonymous"
}

func entries(es []EntryJSON) []config.Entry {
	out := make([]config.Entry, len(es))
	for i, e := range es {
		out[i] = config.Entry(e)
	}
	return out
}

func (s *API) handleSetOverride(w http.ResponseWriter, r *http.Request) {
	if s.overrides == nil {
		writeProblem(w, errNoOverrides)
		return
	}
	var req OverrideRequest
	if !decodeJSON(w, r, &req) {
		return
	}
	o := server.Override{Domain: req.Domain, Entries: entries(req.Entries), Plan: req.Plan}
	if req.Limits != nil {
		o.Limits = make([]floodgate.Limit, len(req.Limits))
		for i := range req.Limits {
			lim, err := req.Limits[i].toLimit(fmt.Sprintf("limits[%d]", i))
			if err != nil {
				writeProblem(w, err)
				return
			}
			o.Limits[i] = lim
		}
	}
	c, err := s.overrides.Set(r.Context(), o, s.actor(r))
	if err != nil {
		writeProblem(w, ledgerError(err))
		return
	}
	writeJSON(w, http.StatusOK, changeJSON(c))
}

func (s *API) handleRemoveOverride(w http.ResponseWriter, r *http.Request) {
	if s.overrides == nil {
		writeProblem(w, errNoOverrides)
		return
	}
	var req OverrideKeyRequest
	if !decodeJSON(w, r, &req) {
		return
	}
	c, found, err := s.overrides.Remove(r.Context(), req.Domain, entries(req.Entries), s.actor(r))
	switch {
	case err != nil:
		writeProblem(w, ledgerError(err))
	case !found:
		writeProblem(w, &httpError{status: http.StatusNotFound, field: "entries", msg: "no override of this descriptor"})
	default:
		writeJSON(w, http.StatusOK, changeJSON(c))
	}
}

func (s *API) handleListOverrides(w http.ResponseWriter, r *http.Request) {
	if s.overrides == nil {
		writeProblem(w, errNoOverrides)
		return
	}
	v, list, err := s.overrides.List(r.Context())
	if err != nil {
		writeProblem(w, ledgerError(err))
		return
	}
	out := struct {
		Version   int64        `json:"version"`
		Overrides []ChangeJSON `json:"overrides"`
	}{Version: v, Overrides: make([]ChangeJSON, len(list))}
	for i, c := range list {
		out.Overrides[i] = changeJSON(c)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *API) handleOverrideAudit(w http.ResponseWriter, r *http.Request) {
	if s.overrides == nil {
		writeProblem(w, errNoOverrides)
		return
	}
	q := ledger.AuditQuery{Subject: r.URL.Query().Get("subject")}
	for _, p := range []struct {
		name string
		to   func(int64)
		min  int64
		max  int64
	}{
		{"before", func(v int64) { q.Before = v }, 1, 1<<63 - 1},
		{"limit", func(v int64) { q.Limit = int(v) }, 1, ledger.MaxAuditPage},
	} {
		s := r.URL.Query().Get(p.name)
		if s == "" {
			continue
		}
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < p.min || v > p.max {
			writeProblem(w, invalid(p.name, "%q is not an integer from %d to %d", s, p.min, p.max))
			return
		}
		p.to(v)
	}
	changes, err := s.overrides.Audit(r.Context(), q)
	if err != nil {
		writeProblem(w, ledgerError(err))
		return
	}
	out := struct {
		Changes []ChangeJSON `json:"changes"`
	}{Changes: make([]ChangeJSON, len(changes))}
	for i, c := range changes {
		out.Changes[i] = changeJSON(c)
	}
	writeJSON(w, http.StatusOK, out)
}

// ledgerError marks a failure of the ledger's database as such (503,
// "ledger failed"), leaving the caller's errors (a FieldError: 400) as
// they are.
func ledgerError(err error) error {
	if _, ok := errors.AsType[*floodgate.FieldError](err); ok || errors.Is(err, ledger.ErrLedger) {
		return err
	}
	return fmt.Errorf("%w: %w", ledger.ErrLedger, err)
}
