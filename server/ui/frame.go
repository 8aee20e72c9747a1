package ui

import (
	"cmp"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/topk"
	"github.com/floodgate-rl/floodgate/server/httpapi"
	dto "github.com/prometheus/client_model/go"
)

// Metric names the dashboard reads from the server's registry.
const (
	mDecisions   = "floodgate_decisions_total"
	mStoreTime   = "floodgate_store_duration_seconds"
	mStoreErrors = "floodgate_store_errors_total"
	mReloads     = "floodgate_config_reloads_total"
	mReloadTime  = "floodgate_config_last_reload_success_timestamp_seconds"
	mRules       = "floodgate_config_rules"
	mLocal       = "floodgate_local_decisions_total"
)

// maxSeries bounds the decision series of a frame (a detailed_metric rule
// has up to server.MaxDetailedSeries): the busiest are sent, the rest
// summed under "other".
const maxSeries = 40

// maxMetrics bounds the other metrics listed in a frame.
const maxMetrics = 60

// seriesKey is one series of floodgate_decisions_total, algorithms summed.
type seriesKey struct{ domain, rule, outcome string }

// sample is what a frame is computed from: the registry's counters and
// the recorder's, at one time. Rates are the difference of two samples.
type sample struct {
	at        time.Time
	decisions map[seriesKey]float64
	// buckets are the store latency histogram's cumulative counts, by
	// upper bound (seconds), the last one +Inf.
	bounds, buckets []float64
	storeErrors     float64
	local           map[string]float64 // floodgate_local_decisions_total by kind
	reloadOK        float64
	reloadFailed    float64
	reloadTime      float64
	rules           float64
	others          map[string]metricValue
	breakerLocal    int64
	failedToLocal   int64
	leaseAcquired   int64
	leaseDenied     int64
	leaseReleased   int64
}

type metricValue struct {
	v       float64
	counter bool
}

func (d *Dashboard) sample() sample {
	s := sample{at: d.now(), decisions: map[seriesKey]float64{}, local: map[string]float64{}, others: map[string]metricValue{}}
	c := &d.rec.counts
	s.breakerLocal, s.failedToLocal = c.breakerLocal.Load(), c.failedToLocal.Load()
	s.leaseAcquired, s.leaseDenied, s.leaseReleased = c.leaseAcquired.Load(), c.leaseDenied.Load(), c.leaseReleased.Load()
	families, err := d.srv.Registry().Gather()
	if err != nil && len(families) == 0 {
		return s
	}
	for _, f := range families {
		name := f.GetName()
		for _, m := range f.GetMetric() {
			labels := labelMap(m)
			switch name {
			case mDecisions:
				s.decisions[seriesKey{labels["domain"], labels["rule"], labels["outcome"]}] += m.GetCounter().GetValue()
			case mStoreTime:
				h := m.GetHistogram()
				for _, b := range h.GetBucket() {
					s.bounds = append(s.bounds, b.GetUpperBound())
					s.buckets = append(s.buckets, float64(b.GetCumulativeCount()))
				}
				s.bounds = append(s.bounds, math.Inf(1))
				s.buckets = append(s.buckets, float64(h.GetSampleCount()))
			case mStoreErrors:
				s.storeErrors = m.GetCounter().GetValue()
			case mLocal:
				s.local[labels["kind"]] = m.GetCounter().GetValue()
			case mReloads:
				if labels["result"] == "success" {
					s.reloadOK = m.GetCounter().GetValue()
				} else {
					s.reloadFailed += m.GetCounter().GetValue()
				}
			case mReloadTime:
				s.reloadTime = m.GetGauge().GetValue()
			case mRules:
				s.rules = m.GetGauge().GetValue()
			default:
				if !strings.HasPrefix(name, "floodgate_") || name == "floodgate_near_limit_total" {
					continue
				}
				switch f.GetType() {
				case dto.MetricType_COUNTER:
					s.others[seriesName(name, m)] = metricValue{m.GetCounter().GetValue(), true}
				case dto.MetricType_GAUGE:
					s.others[seriesName(name, m)] = metricValue{m.GetGauge().GetValue(), false}
				}
			}
		}
	}
	return s
}

func labelMap(m *dto.Metric) map[string]string {
	out := make(map[string]string, len(m.GetLabel()))
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// seriesName is name{a="x",b="y"}, as the Prometheus text format writes it.
func seriesName(name string, m *dto.Metric) string {
	if len(m.GetLabel()) == 0 {
		return name
	}
	var b strings.Builder
	b.WriteString(name)
	b.WriteByte('{')
	for i, l := range m.GetLabel() {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(l.GetName() + `="` + l.GetValue() + `"`)
	}
	b.WriteByte('}')
	return b.String()
}

// Frame is one update of the feed, GET /ui/events. Rates are per second
// over the interval since the previous frame; the first frame of a
// stream has none (Rates false).
type Frame struct {
	At         string `json:"at"`
	IntervalMS int64  `json:"interval_ms"`
	// Admin: the caller holds an admin token (or the server has none), so
	// the frame has the top keys and the rules; otherwise they are left
	// out (each key is a client's state, and the rules are
	// GET /v1/config's, both of the admin scope).
	Admin bool `json:"admin"`
	Rates bool `json:"rates"`
	// Totals are decisions per second by outcome (the outcome label of
	// floodgate_decisions_total), every domain and rule summed.
	Totals map[string]float64 `json:"totals"`
	// Series are decisions per second by domain, rule and outcome, the
	// busiest maxSeries; the rest are summed under rule "(other)".
	Series    []Series    `json:"series"`
	Store     StoreHealth `json:"store"`
	Leases    Leases      `json:"leases"`
	TopDenied *Top        `json:"top_denied,omitempty"`
	NearLimit *Top        `json:"near_limit,omitempty"`
	Config    ConfigState `json:"config"`
	// Metrics are the server's other floodgate_* counters and gauges
	// (the Redis store's deny cache and local budgets, the memory store's
	// keys, ...), with a rate for counters.
	Metrics []Metric `json:"metrics"`
	// History is in the first frame of a stream only: the Totals of up to
	// the last HistoryLen intervals before it, oldest first, which the
	// feed keeps whether or not anyone watches, so that a page opened
	// during an incident draws the last minute at once.
	History []Point `json:"history,omitempty"`
}

// Point is the Totals of one past interval, ending At.
type Point struct {
	At     string             `json:"at"`
	Totals map[string]float64 `json:"totals"`
}

// HistoryLen is how many intervals the feed keeps for History: a minute
// at the default Interval.
const HistoryLen = 60

// totals is the decisions per second by outcome between two samples.
func totals(prev, cur *sample) map[string]float64 {
	t := map[string]float64{}
	for k, v := range cur.decisions {
		if r := rate(prev.decisions[k], v, prev, cur); r != 0 {
			t[k.outcome] += r
		}
	}
	return t
}

// Series is one domain and rule's decisions per second by outcome.
type Series struct {
	Domain string             `json:"domain"`
	Rule   string             `json:"rule"`
	Rates  map[string]float64 `json:"rates"`
	Total  float64            `json:"total"`
}

// StoreHealth is the store's side of the decisions of the interval.
type StoreHealth struct {
	// Latency percentiles of the store calls of the interval, in
	// milliseconds, interpolated in the buckets of
	// floodgate_store_duration_seconds as Prometheus's
	// histogram_quantile does; absent without calls.
	P50MS *float64 `json:"p50_ms,omitempty"`
	P90MS *float64 `json:"p90_ms,omitempty"`
	P99MS *float64 `json:"p99_ms,omitempty"`
	Calls float64  `json:"calls_per_second"`
	// Errors are store calls per second that failed or timed out.
	Errors float64 `json:"errors_per_second"`
	// FailureModes are the failure modes' answers per second: failed_open,
	// failed_closed, local_allowed, local_denied, and ledger_failed (a
	// durable quota denied because its ledger failed).
	FailureModes map[string]float64 `json:"failure_modes"`
	// Breaker is the failure mode local's circuit breaker as the
	// interval's decisions show it: "open" (decided locally without asking
	// the store), "failing" (the store failed and the local store
	// answered), or "closed".
	Breaker string `json:"breaker"`
	// Local are decisions per second the Redis store made in process:
	// deny_cache and local_budget (absent on the memory store).
	Local map[string]float64 `json:"local,omitempty"`
}

// Leases are concurrency leases per second.
type Leases struct {
	Acquired float64 `json:"acquired_per_second"`
	Denied   float64 `json:"denied_per_second"`
	Released float64 `json:"released_per_second"`
}

// Top is a top list of keys from a heavy-hitters sketch.
type Top struct {
	// WindowMS: the counts cover at most the last WindowMS (between one
	// and two slices, Options.Slice).
	WindowMS int64 `json:"window_ms"`
	// Total is the decisions counted (N); Bound is the most any count is
	// over, and the most a key not listed can have (at most N/Counters).
	Total    int64 `json:"total"`
	Bound    int64 `json:"bound"`
	Counters int   `json:"counters"`
	Keys     []Key `json:"keys"`
}

// Key is one key of a top list.
type Key struct {
	// Key is the key as the store's key names it: a descriptor's
	// "domain|key=value|…" (config.Key), or an inline key.
	Key string `json:"key"`
	// Rule is the rule whose limit the key's decisions applied; empty for
	// an inline key or a descriptor with its own limit.
	Rule   string `json:"rule,omitempty"`
	Shadow bool   `json:"shadow,omitempty"`
	// Count is the decisions counted for the key (denials, or admissions
	// near the limit): the true count is between Count-Err and Count.
	Count int64 `json:"count"`
	Err   int64 `json:"err"`
	// The latest decision: the capacity, what remained, the wait.
	Limit        int64 `json:"limit"`
	Remaining    int64 `json:"remaining"`
	RetryAfterMS int64 `json:"retry_after_ms"`
	Local        bool  `json:"local,omitempty"`
	// Ref is the body of POST /v1/inspect and POST /v1/reset for this key.
	Ref httpapi.ResetRequest `json:"ref"`
}

// ConfigState is the config in force.
type ConfigState struct {
	Rules         int    `json:"rules"`
	LastReload    string `json:"last_reload,omitempty"`
	ReloadsOK     int64  `json:"reloads_ok"`
	ReloadsFailed int64  `json:"reloads_failed"`
	// List is every rule with its source, for admin callers.
	List []Rule `json:"list,omitempty"`
}

// Rule is one rule of the config.
type Rule struct {
	ID          string `json:"id"`
	Domain      string `json:"domain"`
	Limit       string `json:"limit"`
	ShadowMode  bool   `json:"shadow_mode,omitempty"`
	Unlimited   bool   `json:"unlimited,omitempty"`
	FailureMode string `json:"failure_mode,omitempty"`
	Source      string `json:"source"`
}

// Metric is one series of another floodgate_* metric.
type Metric struct {
	Name      string   `json:"name"`
	Value     float64  `json:"value"`
	PerSecond *float64 `json:"per_second,omitempty"`
}

// frame computes the frame of cur, with rates since prev (nil for the
// first frame of a stream).
func (d *Dashboard) frame(prev *sample, cur *sample, admin bool) Frame {
	f := Frame{At: cur.at.UTC().Format(time.RFC3339Nano), IntervalMS: d.opts.Interval.Milliseconds(), Admin: admin,
		Totals: map[string]float64{}, Series: []Series{}, Metrics: []Metric{}}
	f.Store.FailureModes = map[string]float64{}
	f.Store.Breaker = "closed"
	f.Config = ConfigState{Rules: int(cur.rules), ReloadsOK: int64(cur.reloadOK), ReloadsFailed: int64(cur.reloadFailed)}
	if cur.reloadTime > 0 {
		f.Config.LastReload = time.Unix(0, int64(cur.reloadTime*1e9)).UTC().Format(time.RFC3339)
	}
	if prev != nil {
		d.rates(&f, prev, cur)
	}
	for _, name := range slices.Sorted(maps.Keys(cur.others)) {
		if len(f.Metrics) == maxMetrics {
			break
		}
		m := Metric{Name: name, Value: cur.others[name].v}
		if pv, ok := prev.other(name); ok && cur.others[name].counter {
			r := rate(pv, cur.others[name].v, prev, cur)
			m.PerSecond = &r
		}
		f.Metrics = append(f.Metrics, m)
	}
	if admin {
		denied, near := d.rec.top()
		cfg := d.srv.Config()
		f.TopDenied = d.topList(denied, cfg)
		f.NearLimit = d.topList(near, cfg)
		for _, dom := range cfg.Domains() {
			for _, r := range dom.Rules() {
				rj := Rule{ID: r.ID, Domain: r.Domain, ShadowMode: r.ShadowMode, Unlimited: r.Unlimited,
					FailureMode: string(r.FailurePolicy), Source: r.File + ":" + strconv.Itoa(r.Line)}
				if !r.Unlimited {
					rj.Limit = r.Limit.String()
				}
				f.Config.List = append(f.Config.List, rj)
			}
		}
	}
	return f
}

func (p *sample) other(name string) (float64, bool) {
	if p == nil {
		return 0, false
	}
	v, ok := p.others[name]
	return v.v, ok
}

// rate is the increase from a to b per second between the samples; a
// counter that went down (a restart of its source) counts from 0.
func rate(a, b float64, prev, cur *sample) float64 {
	dt := cur.at.Sub(prev.at).Seconds()
	if dt <= 0 {
		return 0
	}
	if b < a {
		a = 0
	}
	return (b - a) / dt
}

func (d *Dashboard) rates(f *Frame, prev, cur *sample) {
	f.Rates = true
	bySeries := map[[2]string]*Series{}
	for k, v := range cur.decisions {
		r := rate(prev.decisions[k], v, prev, cur)
		if r == 0 {
			continue
		}
		f.Totals[k.outcome] += r
		switch k.outcome {
		case "failed_open", "failed_closed", "local_allowed", "local_denied", "ledger_failed":
			f.Store.FailureModes[k.outcome] += r
		}
		s := bySeries[[2]string{k.domain, k.rule}]
		if s == nil {
			s = &Series{Domain: k.domain, Rule: k.rule, Rates: map[string]float64{}}
			bySeries[[2]string{k.domain, k.rule}] = s
		}
		s.Rates[k.outcome] += r
		s.Total += r
	}
	all := make([]Series, 0, len(bySeries))
	for _, s := range bySeries {
		all = append(all, *s)
	}
	slices.SortFunc(all, func(a, b Series) int {
		if c := cmp.Compare(b.Total, a.Total); c != 0 {
			return c
		}
		return cmp.Or(cmp.Compare(a.Domain, b.Domain), cmp.Compare(a.Rule, b.Rule))
	})
	if len(all) > maxSeries {
		other := Series{Rule: "(other)", Rates: map[string]float64{}}
		for _, s := range all[maxSeries-1:] {
			for o, r := range s.Rates {
				other.Rates[o] += r
			}
			other.Total += s.Total
		}
		all = append(all[:maxSeries-1], other)
	}
	f.Series = all

	if n := len(cur.buckets); n > 0 && len(prev.buckets) == n {
		delta := make([]float64, n)
		for i := range delta {
			delta[i] = max(0, cur.buckets[i]-prev.buckets[i])
		}
		dt := cur.at.Sub(prev.at).Seconds()
		if total := delta[n-1]; total > 0 && dt > 0 {
			f.Store.Calls = total / dt
			for q, dst := range map[float64]**float64{0.5: &f.Store.P50MS, 0.9: &f.Store.P90MS, 0.99: &f.Store.P99MS} {
				ms := quantile(q, cur.bounds, delta) * 1000
				*dst = &ms
			}
		}
	}
	f.Store.Errors = rate(prev.storeErrors, cur.storeErrors, prev, cur)
	for kind, v := range cur.local {
		if f.Store.Local == nil {
			f.Store.Local = map[string]float64{}
		}
		f.Store.Local[kind] = rate(prev.local[kind], v, prev, cur)
	}
	switch {
	case cur.breakerLocal > prev.breakerLocal:
		f.Store.Breaker = "open"
	case cur.failedToLocal > prev.failedToLocal:
		f.Store.Breaker = "failing"
	}
	f.Leases = Leases{
		Acquired: rate(float64(prev.leaseAcquired), float64(cur.leaseAcquired), prev, cur),
		Denied:   rate(float64(prev.leaseDenied), float64(cur.leaseDenied), prev, cur),
		Released: rate(float64(prev.leaseReleased), float64(cur.leaseReleased), prev, cur),
	}
}

// quantile is the q-quantile of a histogram of cumulative counts by
// upper bound, interpolated linearly inside its bucket as Prometheus's
// histogram_quantile does (the +Inf bucket answers its lower bound).
func quantile(q float64, bounds, cumulative []float64) float64 {
	n := len(cumulative)
	rank := q * cumulative[n-1]
	i, _ := slices.BinarySearch(cumulative, rank)
	if i >= n {
		i = n - 1
	}
	if math.IsInf(bounds[i], 1) {
		if i == 0 {
			return 0
		}
		return bounds[i-1]
	}
	lo, below := 0.0, 0.0
	if i > 0 {
		lo, below = bounds[i-1], cumulative[i-1]
	}
	in := cumulative[i] - below
	if in <= 0 {
		return bounds[i]
	}
	return lo + (bounds[i]-lo)*(rank-below)/in
}

// topList is the Top of a summary, its keys named for people and for the
// actions.
func (d *Dashboard) topList(sum topk.Summary[last], cfg *config.Config) *Top {
	t := &Top{WindowMS: (2 * d.opts.Slice).Milliseconds(), Total: sum.Total, Bound: sum.Bound, Counters: d.opts.Counters, Keys: []Key{}}
	for _, it := range sum.Items[:min(len(sum.Items), d.opts.Top)] {
		v := it.Value
		k := Key{Count: it.Count, Err: it.Err, Limit: v.capacity, Remaining: v.remaining,
			RetryAfterMS: millis(v.retryAfter), Local: v.localOnly}
		k.Key, k.Ref = describeKey(it.Key, v.limit, cfg)
		if k.Ref.Domain != "" && k.Ref.Limit == nil {
			if r := cfg.Match(k.Ref.Domain, entries(k.Ref.Entries)); r != nil {
				k.Rule, k.Shadow = r.ID, r.ShadowMode
			}
		}
		t.Keys = append(t.Keys, k)
	}
	return t
}

// describeKey reads a store key of the server back: "i|" and an inline
// key, or "d|" and a descriptor's key (config.Key: the domain, then
// "|key=value" for each entry, with '%', '|' and '=' escaped). A
// descriptor whose rule no longer has limit (a reload, or a descriptor
// with its own limit) is referred to with the limit it was decided under.
func describeKey(storeKey string, limit floodgate.Limit, cfg *config.Config) (string, httpapi.ResetRequest) {
	lj := limitJSON(limit)
	if k, ok := strings.CutPrefix(storeKey, "i|"); ok {
		return k, httpapi.ResetRequest{Key: k, Limit: lj}
	}
	k, ok := strings.CutPrefix(storeKey, "d|")
	if !ok {
		return storeKey, httpapi.ResetRequest{Key: storeKey, Limit: lj}
	}
	parts := strings.Split(k, "|")
	ref := httpapi.ResetRequest{Domain: unescape(parts[0]), Entries: []httpapi.EntryJSON{}}
	for _, p := range parts[1:] {
		key, value, _ := strings.Cut(p, "=")
		ref.Entries = append(ref.Entries, httpapi.EntryJSON{Key: unescape(key), Value: unescape(value)})
	}
	if r := cfg.Match(ref.Domain, entries(ref.Entries)); r == nil || r.Limit != limit {
		ref.Limit = lj
	}
	return k, ref
}

func entries(es []httpapi.EntryJSON) []config.Entry {
	out := make([]config.Entry, len(es))
	for i, e := range es {
		out[i] = config.Entry{Key: e.Key, Value: e.Value}
	}
	return out
}

// unescape undoes config.Key's escapes, %25, %7C and %3D.
func unescape(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	return strings.NewReplacer("%25", "%", "%7C", "|", "%3D", "=").Replace(s)
}

func limitJSON(l floodgate.Limit) *httpapi.LimitJSON {
	n := l.Limit
	return &httpapi.LimitJSON{Algorithm: string(l.EffectiveAlgorithm()), Limit: &n, Period: l.Period.String(), Burst: l.Burst,
		Window: string(l.Window), CountRejected: l.CountRejected, Name: l.Name}
}

// millis is d in whole milliseconds, rounded up; -1 for floodgate.Never.
func millis(d time.Duration) int64 {
	if d < 0 {
		return -1
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}
