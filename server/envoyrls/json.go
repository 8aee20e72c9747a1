package envoyrls

import (
	"bytes"
	"context"
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
	"github.com/floodgate-rl/floodgate/server/httpapi"
)

// JSONHandler returns the handler of POST /json, envoyproxy/ratelimit's HTTP
// endpoint for clients that cannot speak gRPC, with the default Options. It
// is (*Service).JSONHandler of New(srv, nil); register it by pattern:
//
//	api.Handler(map[string]http.Handler{"POST /json": envoyrls.JSONHandler(srv)})
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
// httpapi.Problem fields) that name the problem and, where it can be told, the
// field: 400 for JSON that does not parse as a RateLimitRequest and for an
// invalid request (the cases where ShouldRateLimit answers InvalidArgument),
// 413 for a body over httpapi.MaxBodyBytes (upstream reads any size), 405 for a
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
		httpapi.WriteProblem(w, http.StatusMethodNotAllowed, "", fmt.Sprintf("%s is not allowed; POST the request", r.Method))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, httpapi.MaxBodyBytes))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			httpapi.WriteProblem(w, http.StatusRequestEntityTooLarge, "body", fmt.Sprintf("body: larger than %d bytes", httpapi.MaxBodyBytes))
			return
		}
		httpapi.WriteProblem(w, http.StatusBadRequest, "body", "body: "+err.Error())
		return
	}
	if len(bytes.TrimSpace(body)) == 0 {
		httpapi.WriteProblem(w, http.StatusBadRequest, "body", "body: empty; want a RateLimitRequest in JSON")
		return
	}
	var req rlsv3.RateLimitRequest
	if err := protojson.Unmarshal(body, &req); err != nil {
		field := jsonField(err)
		httpapi.WriteProblem(w, http.StatusBadRequest, field, "body: not a RateLimitRequest in JSON: "+err.Error())
		return
	}
	resp, res, err := s.decide(r.Context(), &req)
	if err != nil {
		fe, invalid := errors.AsType[*floodgate.FieldError](err)
		switch {
		case invalid:
			httpapi.WriteProblem(w, http.StatusBadRequest, fe.Field, fe.Field+": "+fe.Problem)
		case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
			httpapi.WriteProblem(w, http.StatusServiceUnavailable, "", err.Error())
		default:
			httpapi.WriteProblem(w, http.StatusInternalServerError, "", err.Error())
		}
		return
	}
	out, err := protojson.Marshal(resp)
	if err != nil {
		httpapi.WriteProblem(w, http.StatusInternalServerError, "", "marshalling the response: "+err.Error())
		return
	}
	statuses := res.Statuses
	h := w.Header()
	for k, v := range answerMarks(res) {
		h.Set(k, v)
	}
	if !s.opts.OmitHeaders && s.opts.UpstreamHeaders == nil {
		httpapi.SetHeaders(h, statuses)
		if h.Get(ratelimitheader.HeaderRetryAfter) == "" && server.FailedClosed(statuses) {
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
