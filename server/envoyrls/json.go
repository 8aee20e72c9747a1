package envoyrls

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/ratelimitheader"
	"github.com/floodgate-rl/floodgate/server"
)

// JSONHandler returns the handler of POST /json, envoyproxy/ratelimit's HTTP
// endpoint for clients that cannot speak gRPC, with the default Options. It
// is (*Service).JSONHandler of New(srv, nil); register it by pattern:
//
//	srv.Handler(map[string]http.Handler{"POST /json": envoyrls.JSONHandler(srv)})
//
//	curl -d '{"domain": "edge", "descriptors": [{"entries": [{"key": "remote_address", "value": "10.0.0.1"}]}]}' localhost:8080/json
func JSONHandler(srv *server.Server) http.Handler {
	return New(srv, nil).JSONHandler()
}

// JSONHandler returns the handler of POST /json. As upstream's
// NewJsonHandler (src/server/server_impl.go), it reads the body as the JSON
// form of a RateLimitRequest with protojson (field names as in the proto,
// "hits_addend", or in lowerCamelCase, "hitsAddend"; unknown fields are an
// error), decides it as ShouldRateLimit does, and answers the RateLimitResponse
// marshalled by protojson (lowerCamelCase names, enums by name, durations as
// "45s", fields at their zero value left out) with Content-Type
// application/json and status 200, or 429 Too Many Requests when the overall
// code is OVER_LIMIT:
//
//	{"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"name":"per_ip","requestsPerUnit":3,"unit":"MINUTE"},"limitRemaining":2,"durationUntilReset":"45s"}],"responseHeadersToAdd":[...]}
//
// Like upstream it accepts any Content-Type, since its documented example is
// curl --data, which sends application/x-www-form-urlencoded.
//
// Unlike upstream, which answers every error with a bare 400 "Bad Request",
// errors are RFC 9457 problem details (application/problem+json, the
// server.Problem fields) that name the problem and, where it can be told, the
// field: 400 for JSON that does not parse as a RateLimitRequest and for an
// invalid request (the cases where ShouldRateLimit answers InvalidArgument),
// 413 for a body over server.MaxBodyBytes (upstream reads any size), 405 for a
// method other than POST (upstream answers any method). The response also
// carries, as HTTP fields, RateLimit-Policy, RateLimit and, on a denial,
// Retry-After, unless Options.OmitHeaders is set; Retry-After is 1 when a
// store failure answered fail_closed made the request OVER_LIMIT.
func (s *Service) JSONHandler() http.Handler {
	return http.HandlerFunc(s.serveJSON)
}

func (s *Service) serveJSON(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeProblem(w, http.StatusMethodNotAllowed, "", fmt.Sprintf("%s is not allowed; POST the request", r.Method))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, server.MaxBodyBytes))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			writeProblem(w, http.StatusRequestEntityTooLarge, "body", fmt.Sprintf("body: larger than %d bytes", server.MaxBodyBytes))
			return
		}
		writeProblem(w, http.StatusBadRequest, "body", "body: "+err.Error())
		return
	}
	if len(bytes.TrimSpace(body)) == 0 {
		writeProblem(w, http.StatusBadRequest, "body", "body: empty; want a RateLimitRequest in JSON")
		return
	}
	var req rlsv3.RateLimitRequest
	if err := protojson.Unmarshal(body, &req); err != nil {
		field := jsonField(err)
		writeProblem(w, http.StatusBadRequest, field, "body: not a RateLimitRequest in JSON: "+err.Error())
		return
	}
	resp, statuses, err := s.decide(r.Context(), &req)
	if err != nil {
		fe, invalid := errors.AsType[*floodgate.FieldError](err)
		switch {
		case invalid:
			writeProblem(w, http.StatusBadRequest, fe.Field, fe.Field+": "+fe.Problem)
		case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
			writeProblem(w, http.StatusServiceUnavailable, "", err.Error())
		default:
			writeProblem(w, http.StatusInternalServerError, "", err.Error())
		}
		return
	}
	out, err := protojson.Marshal(resp)
	if err != nil {
		writeProblem(w, http.StatusInternalServerError, "", "marshalling the response: "+err.Error())
		return
	}
	h := w.Header()
	if !s.opts.OmitHeaders && s.opts.UpstreamHeaders == nil {
		server.SetHeaders(h, statuses)
		if h.Get(ratelimitheader.HeaderRetryAfter) == "" && failedClosed(statuses) {
			h.Set(ratelimitheader.HeaderRetryAfter, "1")
		}
	}
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	code := http.StatusOK
	if resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
		code = http.StatusTooManyRequests
	}
	w.WriteHeader(code)
	w.Write(out)
}

func failedClosed(statuses []server.Status) bool {
	for _, st := range statuses {
		if st.Err != nil && st.Code == server.OverLimit {
			return true
		}
	}
	return false
}

// protojson's messages name the field at fault in one of these forms; the
// text is not a stable API (it even varies its spaces on purpose), so the
// field is a best effort and the whole message goes in the detail.
var jsonFieldRE = regexp.MustCompile(`(?:unknown field|field) "?([A-Za-z_][A-Za-z0-9_.]*)"?`)

func jsonField(err error) string {
	if m := jsonFieldRE.FindStringSubmatch(err.Error()); m != nil {
		return m[1]
	}
	return "body"
}

// writeProblem answers an RFC 9457 problem details body.
func writeProblem(w http.ResponseWriter, code int, field, detail string) {
	p := server.Problem{Type: "about:blank", Title: http.StatusText(code), Status: code, Detail: detail, Field: field}
	var buf bytes.Buffer
	json.NewEncoder(&buf).Encode(p)
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	w.Write(buf.Bytes())
}
