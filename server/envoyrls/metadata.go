package envoyrls

import (
	"fmt"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/floodgate-rl/floodgate/server"
)

// DynamicMetadata is the dynamic_metadata of the response to req whose
// descriptors were decided as statuses, as upstream's ratelimitToMetadata
// makes it when RESPONSE_DYNAMIC_METADATA is set (Options.DynamicMetadata):
//
//   - "domain": the request's domain;
//   - "descriptors": one struct per descriptor, in order, with "entries",
//     a list of "key=value" strings; "limit", the descriptor's limit
//     override in protobuf's text format, when it has one; and
//     "hitsAddend", when the descriptor sets one (0 included);
//   - "hitsAddend": the request's hits_addend, unless 0;
//   - "metadata": the metadata of the rules of the descriptors that
//     passed (not over their limit; shadow-mode denials and fail_open
//     answers pass; unlimited rules, replaced rules and descriptors
//     without a rule add nothing), merged in the request's order: a name
//     already there keeps its first value, and two mappings under one
//     name are merged the same way, level by level. Absent when none.
//
// Envoy puts it in the filter's dynamic metadata (namespace
// envoy.filters.http.ratelimit), where access logs and later filters read
// it: with quota_mode rules, it names the quotas a request still has.
// The config's metadata is copied, never shared with the answer.
func DynamicMetadata(req *rlsv3.RateLimitRequest, statuses []server.Status) *structpb.Struct {
	fields := map[string]*structpb.Value{"domain": structpb.NewStringValue(req.GetDomain())}
	ds := make([]*structpb.Value, 0, len(req.GetDescriptors()))
	for _, d := range req.GetDescriptors() {
		entries := make([]*structpb.Value, len(d.GetEntries()))
		for i, e := range d.GetEntries() {
			entries[i] = structpb.NewStringValue(fmt.Sprintf("%s=%s", e.GetKey(), e.GetValue()))
		}
		f := map[string]*structpb.Value{"entries": structpb.NewListValue(&structpb.ListValue{Values: entries})}
		if l := d.GetLimit(); l != nil {
			f["limit"] = structpb.NewStringValue(l.String())
		}
		if h := d.GetHitsAddend(); h != nil {
			f["hitsAddend"] = structpb.NewNumberValue(float64(h.GetValue()))
		}
		ds = append(ds, structpb.NewStructValue(&structpb.Struct{Fields: f}))
	}
	fields["descriptors"] = structpb.NewListValue(&structpb.ListValue{Values: ds})
	if h := req.GetHitsAddend(); h != 0 {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(h))
	}
	var merged map[string]any
	for _, st := range statuses {
		r := st.Rule
		if st.Code == server.OverLimit || r == nil || !st.Limited || r.Metadata == nil {
			continue
		}
		if merged == nil {
			merged = make(map[string]any)
		}
		mergeMetadata(merged, r.Metadata)
	}
	if merged != nil {
		// The config's values are the types structpb takes; an error
		// cannot happen, and would only leave the metadata out.
		if m, err := structpb.NewStruct(merged); err == nil {
			fields["metadata"] = structpb.NewStructValue(m)
		}
	}
	return &structpb.Struct{Fields: fields}
}

// mergeMetadata adds src to dst as upstream's mergeMetadata: a name
// missing from dst takes src's value (a mapping copied, so that dst never
// shares one with the config); two mappings under one name merge the same
// way; any other value already in dst stays.
func mergeMetadata(dst, src map[string]any) {
	for k, v := range src {
		sub, isMap := v.(map[string]any)
		old, ok := dst[k]
		switch {
		case !ok && isMap:
			cp := make(map[string]any, len(sub))
			mergeMetadata(cp, sub)
			dst[k] = cp
		case !ok:
			dst[k] = v
		default:
			if om, oldIsMap := old.(map[string]any); oldIsMap && isMap {
				mergeMetadata(om, sub)
			}
		}
	}
}
