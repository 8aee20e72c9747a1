package envoyrls

import (
	"math"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-rl/floodgate/server"
)

// UpstreamHeaders asks for envoyproxy/ratelimit's response headers
// (LIMIT_RESPONSE_HEADERS_ENABLED=true) instead of Floodgate's: three
// fields, named by LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER and
// LIMIT_RESET_HEADER, for the one descriptor upstream's
// shouldRateLimitWorker picks.
type UpstreamHeaders struct {
	// Limit, Remaining and Reset name the fields; empty means upstream's
	// default, RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset.
	Limit, Remaining, Reset string
}

// The default names of UpstreamHeaders, upstream's.
const (
	DefaultLimitHeader     = "RateLimit-Limit"
	DefaultRemainingHeader = "RateLimit-Remaining"
	DefaultResetHeader     = "RateLimit-Reset"
)

// upstreamHeaders returns upstream's three fields for the statuses of a
// response: the descriptor with a current limit and the least remaining,
// or the last over its limit that is not a quota (a quota over its limit
// does not force its pick, as upstream). Limit is requests_per_unit,
// Remaining limit_remaining, and Reset upstream's utils.CalculateReset:
// the seconds to the end of the unit's window, unit − now mod unit, from
// the time the store decided at; for a period that is no unit (Floodgate's
// period extension, where upstream has none), duration_until_reset. No
// fields when no descriptor has a current limit.
func upstreamHeaders(names *UpstreamHeaders, res server.Result, sts []*rlsv3.RateLimitResponse_DescriptorStatus) []*corev3.HeaderValue {
	pick, least := -1, uint32(math.MaxUint32)
	for i := range sts {
		ds := sts[i]
		if ds.CurrentLimit != nil && ds.LimitRemaining < least {
			pick, least = i, ds.LimitRemaining
		}
		if ds.Code == rlsv3.RateLimitResponse_OVER_LIMIT && !res.Statuses[i].Quota {
			pick, least = i, 0
		}
	}
	if pick < 0 || sts[pick].CurrentLimit == nil {
		return nil
	}
	ds, st := sts[pick], res.Statuses[pick]
	reset := ds.GetDurationUntilReset().GetSeconds()
	if unit := st.Limit.Period; ds.CurrentLimit.Unit != rlsv3.RateLimitResponse_RateLimit_UNKNOWN && unit >= time.Second {
		now := st.Decision.Now
		if now.IsZero() {
			now = time.Now()
		}
		sec := int64(unit / time.Second)
		reset = sec - now.Unix()%sec
	}
	limit, remaining, resetName := names.Limit, names.Remaining, names.Reset
	if limit == "" {
		limit = DefaultLimitHeader
	}
	if remaining == "" {
		remaining = DefaultRemainingHeader
	}
	if resetName == "" {
		resetName = DefaultResetHeader
	}
	return []*corev3.HeaderValue{
		{Key: limit, Value: strconv.FormatUint(uint64(ds.CurrentLimit.RequestsPerUnit), 10)},
		{Key: remaining, Value: strconv.FormatUint(uint64(ds.LimitRemaining), 10)},
		{Key: resetName, Value: strconv.FormatInt(reset, 10)},
	}
}
