package server

import "net/http"

// Patterns returns the patterns Handler(extra) registers, in order, for the
// OpenAPI test's check that the document names every route the handler
// serves.
func (s *Server) Patterns(extra map[string]http.Handler) []string {
	var ps []string
	for _, r := range s.routes(extra) {
		ps = append(ps, r.pattern)
	}
	return ps
}
