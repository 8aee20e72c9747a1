package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/floodgate-rl/floodgate/server/envoyrls"
)

// Placeholder in a descriptor entry's key or value is replaced by the
// call's key index (or "hot" for HotKey).
const Placeholder = "{i}"

// Entry is one key/value pair of a descriptor; either may hold
// Placeholder.
type Entry struct {
	Key, Value string
}

// Descriptor is the entries of one descriptor.
type Descriptor []Entry

// ParseDescriptor parses "key=value,key2=value2" (a value may be empty:
// "key=").
func ParseDescriptor(s string) (Descriptor, error) {
	if s == "" {
		return nil, errors.New("empty descriptor: want key=value[,key=value...]")
	}
	var d Descriptor
	for part := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(part, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("descriptor %q: entry %q is not key=value", s, part)
		}
		d = append(d, Entry{k, v})
	}
	return d, nil
}

// String is the form ParseDescriptor reads.
func (d Descriptor) String() string {
	parts := make([]string, len(d))
	for i, e := range d {
		parts[i] = e.Key + "=" + e.Value
	}
	return strings.Join(parts, ",")
}

func keyName(key int) string {
	if key == HotKey {
		return "hot"
	}
	return strconv.Itoa(key)
}

func expand(s string, key int) string {
	if !strings.Contains(s, Placeholder) {
		return s
	}
	return strings.ReplaceAll(s, Placeholder, keyName(key))
}

// GRPC calls Envoy's rate limit service,
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit, as Envoy
// does: one request per call with the domain and descriptors, answered
// OK or OVER_LIMIT. Callers share Conns connections round-robin.
type GRPC struct {
	conns       []*grpc.ClientConn
	clients     []rlsv3.RateLimitServiceClient
	domain      string
	descriptors []Descriptor
	timeout     time.Duration
}

// NewGRPC connects (lazily, as gRPC does) conns connections to addr
// (host:port, no TLS). timeout bounds each call.
func NewGRPC(addr, domain string, descriptors []Descriptor, conns int, timeout time.Duration) (*GRPC, error) {
	switch {
	case addr == "":
		return nil, errors.New("gRPC address is empty")
	case domain == "":
		return nil, errors.New("domain is empty")
	case len(descriptors) == 0:
		return nil, errors.New("no descriptor")
	case conns < 1:
		return nil, fmt.Errorf("connections: %d is below 1", conns)
	case timeout <= 0:
		return nil, fmt.Errorf("timeout: %v must be above zero", timeout)
	}
	g := &GRPC{domain: domain, descriptors: descriptors, timeout: timeout}
	for range conns {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			g.Close()
			return nil, fmt.Errorf("gRPC %s: %w", addr, err)
		}
		g.conns = append(g.conns, cc)
		g.clients = append(g.clients, rlsv3.NewRateLimitServiceClient(cc))
	}
	return g, nil
}

// Close closes the connections.
func (g *GRPC) Close() error {
	for _, cc := range g.conns {
		cc.Close()
	}
	return nil
}

// NewCaller returns a CallFunc with its own request message.
func (g *GRPC) NewCaller(id int) (CallFunc, error) {
	client := g.clients[id%len(g.clients)]
	req := &rlsv3.RateLimitRequest{Domain: g.domain}
	for _, d := range g.descriptors {
		rd := &rlscommon.RateLimitDescriptor{}
		for range d {
			rd.Entries = append(rd.Entries, &rlscommon.RateLimitDescriptor_Entry{})
		}
		req.Descriptors = append(req.Descriptors, rd)
	}
	return func(ctx context.Context, key int) (Outcome, error) {
		for i, d := range g.descriptors {
			for j, e := range d {
				ent := req.Descriptors[i].Entries[j]
				ent.Key, ent.Value = expand(e.Key, key), expand(e.Value, key)
			}
		}
		ctx, cancel := context.WithTimeout(ctx, g.timeout)
		var md metadata.MD
		resp, err := client.ShouldRateLimit(ctx, req, grpc.Header(&md))
		cancel()
		if err != nil {
			return 0, err
		}
		// floodgate serve says in the response header what the message
		// cannot: a store failure answered by the failure mode (upstream
		// answers it as a descriptor without a limit, as if no rule
		// matched), and a domain it does not have.
		if len(md.Get(envoyrls.MetadataStoreError)) > 0 {
			if resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
				return FailedClosed, nil
			}
			return FailedOpen, nil
		}
		switch resp.GetOverallCode() {
		case rlsv3.RateLimitResponse_OK:
			if len(md.Get(envoyrls.MetadataUnknownDomain)) > 0 {
				return UnknownDomain, nil
			}
			// A descriptor a rule limits has its limit in the answer;
			// upstream and floodgate leave it out when none does (or the
			// rule is unlimited).
			for _, st := range resp.GetStatuses() {
				if st.GetCurrentLimit() != nil {
					return OK, nil
				}
			}
			return NoRule, nil
		case rlsv3.RateLimitResponse_OVER_LIMIT:
			return OverLimit, nil
		}
		return 0, fmt.Errorf("overall code %v", resp.GetOverallCode())
	}, nil
}

// HTTP calls floodgate's JSON API, POST /v1/allow with a domain and
// descriptors; a 200 answer is OK or OVER_LIMIT by its "allowed" field,
// any other status an error.
type HTTP struct {
	url         string
	client      *http.Client
	domain      string
	descriptors []Descriptor
}

// NewHTTP calls rawURL: a base URL (http://host:port) gets /v1/allow
// appended; a URL with a path is used as it is. maxConns bounds the
// connections kept open (set it to the number of callers).
func NewHTTP(rawURL, domain string, descriptors []Descriptor, maxConns int, timeout time.Duration) (*HTTP, error) {
	u, err := url.Parse(rawURL)
	switch {
	case err != nil:
		return nil, fmt.Errorf("URL %q: %w", rawURL, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("URL %q: scheme is not http or https", rawURL)
	case u.Host == "":
		return nil, fmt.Errorf("URL %q: no host", rawURL)
	case domain == "":
		return nil, errors.New("domain is empty")
	case len(descriptors) == 0:
		return nil, errors.New("no descriptor")
	case maxConns < 1:
		return nil, fmt.Errorf("connections: %d is below 1", maxConns)
	case timeout <= 0:
		return nil, fmt.Errorf("timeout: %v must be above zero", timeout)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/allow"
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost, tr.MaxConnsPerHost = maxConns, maxConns, maxConns
	return &HTTP{url: u.String(), client: &http.Client{Transport: tr, Timeout: timeout},
		domain: domain, descriptors: descriptors}, nil
}

// Close closes idle connections.
func (h *HTTP) Close() error {
	h.client.CloseIdleConnections()
	return nil
}

type httpEntry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

type httpDescriptor struct {
	Entries []httpEntry `json:"entries"`
}

type httpRequest struct {
	Domain      string           `json:"domain"`
	Descriptors []httpDescriptor `json:"descriptors"`
}

type httpResponse struct {
	Allowed       *bool `json:"allowed"`
	NoRule        bool  `json:"no_rule"`
	StoreError    bool  `json:"store_error"`
	Fallback      bool  `json:"fallback"`
	UnknownDomain bool  `json:"unknown_domain"`
	Descriptors   []struct {
		NoRule     bool `json:"no_rule"`
		StoreError bool `json:"store_error"`
		Fallback   bool `json:"fallback"`
	} `json:"descriptors"`
}

// failed reports whether the failure mode answered some descriptor (or
// the inline key) because the store failed.
func (r *httpResponse) failed() bool {
	if r.StoreError || r.Fallback {
		return true
	}
	for _, d := range r.Descriptors {
		if d.StoreError || d.Fallback {
			return true
		}
	}
	return false
}

// NewCaller returns a CallFunc with its own buffers.
func (h *HTTP) NewCaller(int) (CallFunc, error) {
	req := httpRequest{Domain: h.domain}
	for _, d := range h.descriptors {
		req.Descriptors = append(req.Descriptors, httpDescriptor{Entries: make([]httpEntry, len(d))})
	}
	var body bytes.Buffer
	return func(ctx context.Context, key int) (Outcome, error) {
		for i, d := range h.descriptors {
			for j, e := range d {
				req.Descriptors[i].Entries[j] = httpEntry{expand(e.Key, key), expand(e.Value, key)}
			}
		}
		body.Reset()
		if err := json.NewEncoder(&body).Encode(&req); err != nil {
			return 0, err
		}
		hr, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(body.Bytes()))
		if err != nil {
			return 0, err
		}
		hr.Header.Set("Content-Type", "application/json")
		resp, err := h.client.Do(hr)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if err != nil {
			return 0, err
		}
		var out httpResponse
		if resp.StatusCode == http.StatusServiceUnavailable && json.Unmarshal(b, &out) == nil && out.Allowed != nil && out.failed() {
			// fail_closed's answer: a decision, not a failed call.
			return FailedClosed, nil
		}
		if resp.StatusCode != http.StatusOK {
			return 0, fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(b[:min(len(b), 200)])))
		}
		out = httpResponse{}
		if err := json.Unmarshal(b, &out); err != nil {
			return 0, fmt.Errorf("HTTP answer: %w", err)
		}
		if out.Allowed == nil {
			return 0, errors.New(`HTTP answer has no "allowed" field`)
		}
		switch {
		case out.failed() && *out.Allowed:
			return FailedOpen, nil
		case out.failed():
			return FailedClosed, nil
		case !*out.Allowed:
			return OverLimit, nil
		case out.UnknownDomain:
			return UnknownDomain, nil
		}
		if len(out.Descriptors) == 0 && !out.NoRule {
			return OK, nil
		}
		for _, st := range out.Descriptors {
			if !st.NoRule {
				return OK, nil
			}
		}
		return NoRule, nil
	}, nil
}
