package main

import (
	"flag"
	"fmt"
	"strings"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/server/envoyrls"
)

// parityFlags are the settings of envoyproxy/ratelimit that change a
// decision or an answer, as serve's flags (env FLOODGATE_ and the flag's
// name), each off by default as upstream's.
type parityFlags struct {
	quotaMode       bool // QUOTA_MODE
	dynamicMetadata bool // RESPONSE_DYNAMIC_METADATA
	mergeDomains    bool // MERGE_DOMAIN_CONFIG
	// limitHeaders: LIMIT_RESPONSE_HEADERS_ENABLED, with the names of
	// LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER and LIMIT_RESET_HEADER.
	limitHeaders bool
	headerNames  envoyrls.UpstreamHeaders
}

func (p *parityFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&p.quotaMode, "quota-mode", false, "global quota mode, as envoyproxy/ratelimit's QUOTA_MODE: every descriptor (but those of unlimited rules) is a quota, which keeps its OVER_LIMIT status but denies the request only when every quota of the request is over; a rule's quota_mode does the same for that rule (env FLOODGATE_QUOTA_MODE)")
	fs.BoolVar(&p.dynamicMetadata, "response-dynamic-metadata", false, "fill the dynamic_metadata of Envoy's answers (and POST /json's) as envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA: the domain, the descriptors, the hits and the merged metadata of the rules the request passed (env FLOODGATE_RESPONSE_DYNAMIC_METADATA)")
	mergeFlag(fs, &p.mergeDomains)
	fs.BoolVar(&p.limitHeaders, "limit-response-headers", false, "answer Envoy with envoyproxy/ratelimit's three response fields (its LIMIT_RESPONSE_HEADERS_ENABLED, hence the name): the limit, remaining and reset seconds of the descriptor closest to its limit, in fields named by -limit-limit-header, -limit-remaining-header and -limit-reset-header, instead of the IETF fields of -ratelimit-headers (env FLOODGATE_LIMIT_RESPONSE_HEADERS)")
	p.headerNames = envoyrls.UpstreamHeaders{Limit: envoyrls.DefaultLimitHeader, Remaining: envoyrls.DefaultRemainingHeader, Reset: envoyrls.DefaultResetHeader}
	for _, h := range []struct {
		name, upstream string
		to             *string
	}{
		{"limit-limit-header", "LIMIT_LIMIT_HEADER", &p.headerNames.Limit},
		{"limit-remaining-header", "LIMIT_REMAINING_HEADER", &p.headerNames.Remaining},
		{"limit-reset-header", "LIMIT_RESET_HEADER", &p.headerNames.Reset},
	} {
		fs.Var(headerName{h.to}, h.name, fmt.Sprintf("-limit-response-headers: the `name` of the field, as envoyproxy/ratelimit's %s (env FLOODGATE_%s)",
			h.upstream, strings.ToUpper(strings.ReplaceAll(h.name, "-", "_"))))
	}
}

// headerName is a flag holding an HTTP field name; its default is the
// value it points at when registered, which help prints as every flag's,
// after the environment variable.
type headerName struct{ to *string }

func (h headerName) String() string {
	if h.to == nil {
		return ""
	}
	return *h.to
}

func (h headerName) Set(v string) error {
	if !isToken(v) {
		return fmt.Errorf("%q is not a header field name", v)
	}
	*h.to = v
	return nil
}

// isToken reports whether s is an HTTP field name (RFC 9110's token).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// envoyOptions are the options of Envoy's service over srv: headers says
// whether its answers carry response headers (-ratelimit-headers), and p
// which ones and whether dynamic metadata.
func (p parityFlags) envoyOptions(headers bool) *envoyrls.Options {
	o := &envoyrls.Options{OmitHeaders: !headers, DynamicMetadata: p.dynamicMetadata}
	if p.limitHeaders {
		names := p.headerNames
		o.UpstreamHeaders = &names
	}
	return o
}

// mergeFlag is -merge-domain-config, of serve and of config validate.
func mergeFlag(fs *flag.FlagSet, merge *bool) {
	fs.BoolVar(merge, "merge-domain-config", false, "merge the config files that define one domain, as envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG: a later file's top-level descriptors join the domain's, one already there is an error; by default a domain defined twice is an error (env FLOODGATE_MERGE_DOMAIN_CONFIG)")
}

// loader is how serve loads its config files.
func (p parityFlags) loader() config.Loader {
	return config.Loader{MergeDomains: p.mergeDomains}
}
