package server

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/ledger"
	"github.com/floodgate-rl/floodgate/region"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Outcomes of a descriptor, the "outcome" label of
// floodgate_decisions_total.
const (
	outcomeAllowed      = "allowed"
	outcomeDenied       = "denied"
	outcomeShadowDenied = "shadow_denied"
	outcomeUnlimited    = "unlimited"
	outcomeFailedOpen   = "failed_open"
	outcomeFailedClosed = "failed_closed"
	// A durable quota whose ledger failed: denied whatever the failure
	// mode (ledger.ErrLedger).
	outcomeLedgerFailed = "ledger_failed"
	// A descriptor with room in a request that another descriptor denied:
	// all or nothing, so nothing was taken.
	outcomeOtherDenied = "other_denied"
	// A decision of the failure mode local's memory store, made while the
	// store was failing.
	outcomeLocalAllowed = "local_allowed"
	outcomeLocalDenied  = "local_denied"
)

type metrics struct {
	decisions    *prometheus.CounterVec
	nearLimit    *prometheus.CounterVec
	storeLatency prometheus.Histogram
	storeErrors  prometheus.Counter
	reloads      *prometheus.CounterVec
	reloadTime   prometheus.Gauge
	rules        prometheus.Gauge
	globalShadow prometheus.Counter
	reservations *prometheus.CounterVec
	detailed     detailedLabels
	// watchers see every event after the metrics (Server.Watch); nil
	// when there are none, so that the common case is one atomic load.
	watchers atomic.Pointer[[]floodgate.Observer]
	watchMu  sync.Mutex // serializes changes of watchers
}

func newMetrics(reg *prometheus.Registry) (*metrics, error) {
	m := &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_decisions_total",
			Help: "Descriptors decided, by domain, rule (its ID, or its metric key with detailed_metric; empty for no rule or an inline limit), algorithm and outcome (allowed, denied, shadow_denied, unlimited, failed_open, failed_closed, ledger_failed for a durable quota whose ledger failed, and local_allowed and local_denied for decisions of the failure mode local while the store fails, and other_denied for a descriptor with room in a request another descriptor denied, from which nothing was taken).",
		}, []string{"domain", "rule", "algorithm", "outcome"}),
		nearLimit: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_near_limit_total",
			Help: "Admitted descriptors that left their limit at or above the near-limit ratio (default 80%) used.",
		}, []string{"domain", "rule"}),
		storeLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "floodgate_store_duration_seconds",
			Help:    "Time of the store call that decided each descriptor (the descriptors of a request share one round trip, and each is counted); not observed for decisions of the failure mode local made without asking the store.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25},
		}),
		storeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_store_errors_total",
			Help: "Descriptors whose store call failed or timed out, answered by their failure mode (not counting those the failure mode local decided without asking the store, its breaker being open).",
		}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_config_reloads_total",
			Help: "Config reloads, by result (success or failure; a failed reload keeps the old config).",
		}, []string{"result"}),
		reloadTime: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "floodgate_config_last_reload_success_timestamp_seconds",
			Help: "Unix time of the last config load that succeeded.",
		}),
		rules: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "floodgate_config_rules",
			Help: "Rules in the config in force.",
		}),
		globalShadow: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_global_shadow_mode_total",
			Help: "Requests over their limits answered OK because of the global shadow mode (floodgate serve -shadow-mode; upstream's global_shadow_mode stat).",
		}),
		reservations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_reservations_total",
			Help: "Steps of the HTTP API's reservations, by step (reserve, commit, cancel) and result: reserve held, denied or failed; commit and cancel settled, replayed (a retry answered as first), expired, or failed (unknown, conflicting, or the store or ledger failed).",
		}, []string{"step", "result"}),
	}
	for _, c := range []prometheus.Collector{
		m.decisions, m.nearLimit, m.storeLatency, m.storeErrors, m.reloads, m.reloadTime, m.rules, m.globalShadow, m.reservations,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// decision counts one descriptor's outcome.
//
// No label value comes from a request unless the config opts in: the
// domain label is the rule's domain, or for a descriptor that matched no
// rule, the request's domain only when the config has it (otherwise
// unknownDomain); the rule label is the rule's ID, or with
// detailed_metric its metric key, at most MaxDetailedSeries of them per
// rule (then overflowSuffix) and each cut to maxLabelLen bytes.
func (m *metrics) decision(domain string, r *config.Rule, entries []config.Entry, outcome string) {
	rule, alg := "", ""
	if r != nil {
		domain, rule = r.Domain, r.ID
		if r.DetailedMetric {
			rule = m.detailed.label(r, entries)
		}
		if !r.Unlimited {
			alg = string(r.Limit.EffectiveAlgorithm())
		}
	}
	m.decisions.WithLabelValues(domain, rule, alg, outcome).Inc()
}

// unknownDomain is the domain label of a descriptor of a domain the config
// does not have, so that a caller cannot make a series per domain it
// invents.
const unknownDomain = "_unknown"

// MaxDetailedSeries is the most rule label values one detailed_metric rule
// makes; the rest count under "<rule ID>_overflow".
const MaxDetailedSeries = 1000

// maxLabelLen bounds a detailed_metric label value, in bytes.
const maxLabelLen = 256

// detailedLabels caps the label values of detailed_metric rules.
type detailedLabels struct {
	mu   sync.Mutex
	seen map[string]map[string]struct{} // by rule ID
}

// label is the rule label of entries under r, a detailed_metric rule.
func (d *detailedLabels) label(r *config.Rule, entries []config.Entry) string {
	key := r.MetricKey(entries)
	if len(key) > maxLabelLen {
		key = strings.ToValidUTF8(key[:maxLabelLen], "") + "…"
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.seen == nil {
		d.seen = make(map[string]map[string]struct{})
	}
	vals := d.seen[r.ID]
	if vals == nil {
		vals = make(map[string]struct{})
		d.seen[r.ID] = vals
	}
	if _, ok := vals[key]; ok {
		return key
	}
	if len(vals) >= MaxDetailedSeries {
		return r.ID + "_overflow"
	}
	vals[key] = struct{}{}
	return key
}

// storeObserver records the store's side of every decision the server's
// Limiter makes: its latency and its failures. It passes each event on to
// next, the Observer of the server's options, if any.
type storeObserver struct {
	m    *metrics
	next floodgate.Observer
}

func (o storeObserver) Observe(e floodgate.Event) {
	// A local decision without an error was made while the breaker was
	// open: the store was not asked.
	if !e.Decision.Fallback || e.Err != nil {
		o.m.storeLatency.Observe(e.Latency.Seconds())
	}
	if e.Err != nil {
		o.m.storeErrors.Inc()
	}
	if o.next != nil {
		o.next.Observe(e)
	}
	if ws := o.m.watchers.Load(); ws != nil {
		for _, w := range *ws {
			w.Observe(e)
		}
	}
}

// regionCollector exports a region's leases of global limits
// (region.Store.Stats) as floodgate_region_* metrics, read at each scrape.
type regionCollector struct {
	s                                  *region.Store
	calls, keys, failing, share, limit *prometheus.Desc
}

// registerRegion registers the metrics of store, when it is a region's.
func registerRegion(reg prometheus.Registerer, store floodgate.Store) error {
	rs, ok := store.(*region.Store)
	if !ok {
		return nil
	}
	return reg.Register(&regionCollector{s: rs,
		calls: prometheus.NewDesc("floodgate_region_home_calls_total",
			"Calls to home (lease, renew, lower, release of a global key's share), by result: ok, or failed (home unreachable or refusing; the region decides on its lease until it ends, then on the safe share).", []string{"result"}, nil),
		keys: prometheus.NewDesc("floodgate_region_keys",
			"Global keys this region holds a lease entry for.", nil, nil),
		failing: prometheus.NewDesc("floodgate_region_keys_failing",
			"Global keys whose latest call to home failed.", nil, nil),
		share: prometheus.NewDesc("floodgate_region_share_units",
			"Units of the global limits this region decides on now, summed over its keys; divided by floodgate_region_limit_units, the part of the global budget it holds.", nil, nil),
		limit: prometheus.NewDesc("floodgate_region_limit_units",
			"The global limits of this region's keys, summed.", nil, nil),
	})
}

func (c *regionCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.calls, c.keys, c.failing, c.share, c.limit} {
		ch <- d
	}
}

func (c *regionCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.Stats()
	ch <- prometheus.MustNewConstMetric(c.calls, prometheus.CounterValue, float64(st.Calls-st.Failures), "ok")
	ch <- prometheus.MustNewConstMetric(c.calls, prometheus.CounterValue, float64(st.Failures), "failed")
	ch <- prometheus.MustNewConstMetric(c.keys, prometheus.GaugeValue, float64(st.Keys))
	ch <- prometheus.MustNewConstMetric(c.failing, prometheus.GaugeValue, float64(st.Failing))
	ch <- prometheus.MustNewConstMetric(c.share, prometheus.GaugeValue, float64(st.Share))
	ch <- prometheus.MustNewConstMetric(c.limit, prometheus.GaugeValue, float64(st.Limit))
}

// ledgerStats is a ledger that counts what it does: ledger.Accounts.
type ledgerStats interface {
	Stats() ledger.Stats
}

// ledgerCollector exports a ledger's counts (ledger.Accounts.Stats) as
// floodgate_ledger_* metrics, read at each scrape.
type ledgerCollector struct {
	l                                                     ledgerStats
	records, writes, entries, reads, recordTime, readTime *prometheus.Desc
}

// registerLedger registers the metrics of lg, when it counts.
func registerLedger(reg prometheus.Registerer, lg ledger.Ledger) error {
	st, ok := lg.(ledgerStats)
	if !ok {
		return nil
	}
	return reg.Register(&ledgerCollector{l: st,
		records: prometheus.NewDesc("floodgate_ledger_records_total",
			"Commits of durable quotas recorded in the ledger (one per settle of a reservation), by result: ok, or failed (not acknowledged; the ledger was down, busy or late).", []string{"result"}, nil),
		entries: prometheus.NewDesc("floodgate_ledger_entries_total",
			"Ledger entries of commits, by outcome: written, or replayed (the ledger held the commit already: a retry).", []string{"outcome"}, nil),
		reads: prometheus.NewDesc("floodgate_ledger_reads_total",
			"Reads of a window's units from the ledger (a durable counter checked at the start of its window, or rebuilt after the store lost it), by result.", []string{"result"}, nil),
		writes: prometheus.NewDesc("floodgate_ledger_writes_total",
			"Writes to the ledger (one transaction each, holding the commits that waited for it: group commit), by result.", []string{"result"}, nil),
		recordTime: prometheus.NewDesc("floodgate_ledger_record_seconds_total",
			"Time spent writing to the ledger; divided by floodgate_ledger_writes_total (both results), the mean time of a write.", nil, nil),
		readTime: prometheus.NewDesc("floodgate_ledger_read_seconds_total",
			"Time spent reading windows from the ledger.", nil, nil),
	})
}

func (c *ledgerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.records, c.writes, c.entries, c.reads, c.recordTime, c.readTime} {
		ch <- d
	}
}

func (c *ledgerCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.l.Stats()
	ch <- prometheus.MustNewConstMetric(c.records, prometheus.CounterValue, float64(st.Records), "ok")
	ch <- prometheus.MustNewConstMetric(c.records, prometheus.CounterValue, float64(st.RecordFailures), "failed")
	ch <- prometheus.MustNewConstMetric(c.writes, prometheus.CounterValue, float64(st.Writes), "ok")
	ch <- prometheus.MustNewConstMetric(c.writes, prometheus.CounterValue, float64(st.WriteFailures), "failed")
	ch <- prometheus.MustNewConstMetric(c.entries, prometheus.CounterValue, float64(st.Written), "written")
	ch <- prometheus.MustNewConstMetric(c.entries, prometheus.CounterValue, float64(st.Replayed), "replayed")
	ch <- prometheus.MustNewConstMetric(c.reads, prometheus.CounterValue, float64(st.Reads), "ok")
	ch <- prometheus.MustNewConstMetric(c.reads, prometheus.CounterValue, float64(st.ReadFailures), "failed")
	ch <- prometheus.MustNewConstMetric(c.recordTime, prometheus.CounterValue, st.RecordTime.Seconds())
	ch <- prometheus.MustNewConstMetric(c.readTime, prometheus.CounterValue, st.ReadTime.Seconds())
}
