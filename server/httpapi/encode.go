package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/floodgate-rl/floodgate/server"
)

// The answer of POST /v1/allow, appended by hand: the bytes are exactly
// those of json.NewEncoder(w).Encode(resp) (the same fields in the same
// order, the same omissions, HTML-safe escaping and the trailing newline;
// TestAppendAllowMatchesEncoder compares the two on generated answers,
// and fails if a field is added to these types without being added
// here). It is what answers every decision, and encoding/json's
// reflection and the boxing of the answer into an interface were a
// noticeable part of a decision's CPU.

// writeAllowAnswer is writeAllow for the answer of POST /v1/allow:
// head is allowHead(inline, *overall, statuses, false), which
// appendAllowFrom completes with the policies and the descriptors
// of statuses as allowResponse would, without allocating them.
func writeAllowAnswer(w http.ResponseWriter, head *AllowResponse, inline bool, overall *server.Status, statuses []server.Status) {
	SetHeaders(w.Header(), statuses)
	buf := getBuffer()
	defer putBuffer(buf)
	b := appendAllowFrom(buf.AvailableBuffer(), head, inline, overall, statuses)
	buf.Write(b)
	status := http.StatusOK
	h := w.Header()
	if server.FailedClosed(statuses) {
		status = http.StatusServiceUnavailable
		setFailedClosed(h, *overall)
	}
	h["Content-Type"], h["Cache-Control"] = jsonType, noStore
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

// appendAllowFrom appends the answer whose head is allowHead(inline,
// *overall, statuses, false), byte for byte as appendAllow appends it
// completed by allowResponse: the inline form's policy and the
// descriptors' decisions are built on the stack, one at a time, where
// allowResponse allocates them (TestAppendAllowFromMatches compares the
// two).
func appendAllowFrom(b []byte, head *AllowResponse, inline bool, overall *server.Status, statuses []server.Status) []byte {
	d := head.DecisionJSON
	var lim LimitJSON
	var n int64
	if inline && overall.Limited {
		lim, n = limitValue(overall.Limit), overall.Limit.Limit
		lim.Limit = &n
		d.Policy = &lim
	}
	b = append(b, '{')
	b = appendDecisionFields(b, &d)
	if head.UnknownDomain {
		b = append(b, `,"unknown_domain":true`...)
	}
	if !inline && len(statuses) > 0 {
		b = append(b, `,"descriptors":[`...)
		for i := range statuses {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, '{')
			b = appendStatusFields(b, &statuses[i])
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if head.WaitedMS != nil {
		b = append(b, `,"waited_ms":`...)
		b = strconv.AppendInt(b, *head.WaitedMS, 10)
	}
	return append(b, '}', '\n')
}

// appendStatusFields appends the fields of statusJSON(*st), its policy
// built on the stack.
func appendStatusFields(b []byte, st *server.Status) []byte {
	d := decisionJSON(*st, false)
	var lim LimitJSON
	var n int64
	if st.Limited {
		lim, n = limitValue(st.Limit), st.Limit.Limit
		lim.Limit = &n
		d.Policy = &lim
	}
	return appendDecisionFields(b, &d)
}

// appendAllow appends resp as encoding/json's Encoder writes it.
func appendAllow(b []byte, resp *AllowResponse) []byte {
	b = append(b, '{')
	b = appendDecisionFields(b, &resp.DecisionJSON)
	if resp.UnknownDomain {
		b = append(b, `,"unknown_domain":true`...)
	}
	if len(resp.Descriptors) > 0 {
		b = append(b, `,"descriptors":[`...)
		for i := range resp.Descriptors {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, '{')
			b = appendDecisionFields(b, &resp.Descriptors[i])
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if resp.WaitedMS != nil {
		b = append(b, `,"waited_ms":`...)
		b = strconv.AppendInt(b, *resp.WaitedMS, 10)
	}
	return append(b, '}', '\n')
}

// appendDecisionFields appends the fields of d, without the braces; the
// first field, allowed, is never omitted.
func appendDecisionFields(b []byte, d *DecisionJSON) []byte {
	b = append(b, `"allowed":`...)
	b = strconv.AppendBool(b, d.Allowed)
	if d.Code != "" {
		b = append(b, `,"code":`...)
		b = appendJSONString(b, d.Code)
	}
	b = appendCounts(b, d.Limit, d.Remaining, d.ResetAfterMS, d.RetryAfterMS)
	if d.Rule != "" {
		b = append(b, `,"rule":`...)
		b = appendJSONString(b, d.Rule)
	}
	if d.Policy != nil {
		b = append(b, `,"policy":`...)
		b = appendLimit(b, d.Policy)
	}
	b = appendFlag(b, `,"unlimited":true`, d.Unlimited)
	b = appendFlag(b, `,"shadow_mode":true`, d.ShadowMode)
	b = appendFlag(b, `,"quota_mode":true`, d.QuotaMode)
	b = appendFlag(b, `,"store_error":true`, d.StoreError)
	b = appendFlag(b, `,"store_full":true`, d.StoreFull)
	b = appendFlag(b, `,"ledger_error":true`, d.LedgerError)
	b = appendFlag(b, `,"fallback":true`, d.Fallback)
	b = appendFlag(b, `,"no_rule":true`, d.NoRule)
	if len(d.Limits) > 0 {
		b = append(b, `,"limits":[`...)
		for i := range d.Limits {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendLimitDecision(b, &d.Limits[i])
		}
		b = append(b, ']')
	}
	b = appendFlag(b, `,"override":true`, d.Override)
	if d.Plan != "" {
		b = append(b, `,"plan":`...)
		b = appendJSONString(b, d.Plan)
	}
	return b
}

// appendLimitDecision appends d; none of its fields is omitted.
func appendLimitDecision(b []byte, d *LimitDecisionJSON) []byte {
	b = append(b, `{"allowed":`...)
	b = strconv.AppendBool(b, d.Allowed)
	b = append(b, `,"code":`...)
	b = appendJSONString(b, d.Code)
	b = appendCounts(b, d.Limit, d.Remaining, d.ResetAfterMS, d.RetryAfterMS)
	b = append(b, `,"policy":`...)
	b = appendLimit(b, d.Policy)
	return append(b, '}')
}

// appendCounts appends the numbers that DecisionJSON and
// LimitDecisionJSON both have, never omitted, in the order both declare
// them, each after a comma: limit, remaining, reset_after_ms and
// retry_after_ms.
func appendCounts(b []byte, limit, remaining, resetAfterMS, retryAfterMS int64) []byte {
	b = append(b, `,"limit":`...)
	b = strconv.AppendInt(b, limit, 10)
	b = append(b, `,"remaining":`...)
	b = strconv.AppendInt(b, remaining, 10)
	b = append(b, `,"reset_after_ms":`...)
	b = strconv.AppendInt(b, resetAfterMS, 10)
	b = append(b, `,"retry_after_ms":`...)
	return strconv.AppendInt(b, retryAfterMS, 10)
}

// appendLimit appends l, or null for a nil l as encoding/json writes a
// nil pointer. Its first field may be omitted, so each field after the
// first written is preceded by a comma.
func appendLimit(b []byte, l *LimitJSON) []byte {
	if l == nil {
		return append(b, "null"...)
	}
	b = append(b, '{')
	start := len(b)
	field := func(b []byte, name string) []byte {
		if len(b) > start {
			b = append(b, ',')
		}
		return append(b, name...)
	}
	if l.Algorithm != "" {
		b = field(b, `"algorithm":`)
		b = appendJSONString(b, l.Algorithm)
	}
	b = field(b, `"limit":`)
	if l.Limit == nil {
		b = append(b, "null"...)
	} else {
		b = strconv.AppendInt(b, *l.Limit, 10)
	}
	for _, f := range [...]struct{ name, v string }{
		{`"period":`, l.Period}, {`"unit":`, l.Unit}, {`"time_zone":`, l.TimeZone}, {`"anchor":`, l.Anchor},
	} {
		if f.v != "" {
			b = field(b, f.name)
			b = appendJSONString(b, f.v)
		}
	}
	if l.Burst != 0 {
		b = field(b, `"burst":`)
		b = strconv.AppendInt(b, l.Burst, 10)
	}
	if l.Window != "" {
		b = field(b, `"window":`)
		b = appendJSONString(b, l.Window)
	}
	if l.CountRejected {
		b = field(b, `"count_rejected":true`)
	}
	if l.Name != "" {
		b = field(b, `"name":`)
		b = appendJSONString(b, l.Name)
	}
	return append(b, '}')
}

func appendFlag(b []byte, field string, set bool) []byte {
	if set {
		return append(b, field...)
	}
	return b
}

// appendJSONString appends s as encoding/json quotes it: as it is when
// every byte is printable ASCII that needs no escape (the names, codes
// and durations of an answer), else by encoding/json itself.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			// A copy, so that s does not escape: the answers' strings
			// are appended from values on the handler's stack.
			q, _ := json.Marshal(strings.Clone(s)) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
