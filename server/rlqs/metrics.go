package rlqs

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the service's own, beside the server's: nothing from a
// report becomes a label.
type metrics struct {
	streams, buckets                         prometheus.Gauge
	reports, assignments, abandoned, refused prometheus.Counter
	grants, homeErrors, inexpressible        prometheus.Counter
}

func newMetrics(reg *prometheus.Registry) (*metrics, error) {
	m := &metrics{
		streams:       prometheus.NewGauge(prometheus.GaugeOpts{Name: "floodgate_rlqs_streams", Help: "RLQS streams open (one per Envoy connected to this replica)."}),
		buckets:       prometheus.NewGauge(prometheus.GaugeOpts{Name: "floodgate_rlqs_buckets", Help: "RLQS buckets the open streams subscribe to."}),
		reports:       prometheus.NewCounter(prometheus.CounterOpts{Name: "floodgate_rlqs_bucket_reports_total", Help: "Bucket usage reports read."}),
		assignments:   prometheus.NewCounter(prometheus.CounterOpts{Name: "floodgate_rlqs_assignments_total", Help: "Quota assignments sent."}),
		abandoned:     prometheus.NewCounter(prometheus.CounterOpts{Name: "floodgate_rlqs_abandoned_total", Help: "Buckets abandoned for want of requests (-rlqs-idle)."}),
		refused:       prometheus.NewCounter(prometheus.CounterOpts{Name: "floodgate_rlqs_refused_total", Help: "Streams ended for a malformed report or a bound."}),
		grants:        prometheus.NewCounter(prometheus.CounterOpts{Name: "floodgate_rlqs_leases_total", Help: "Calls to home for a grant of a share (the store's Redis, or memory)."}),
		homeErrors:    prometheus.NewCounter(prometheus.CounterOpts{Name: "floodgate_rlqs_lease_errors_total", Help: "Calls to home for a grant that failed; the bucket's assignment was not renewed."}),
		inexpressible: prometheus.NewCounter(prometheus.CounterOpts{Name: "floodgate_rlqs_inexpressible_total", Help: "Bucket reports of a rule no token bucket expresses (sliding windows, concurrency), answered by its failure mode."}),
	}
	var errs []error
	for _, c := range []prometheus.Collector{m.streams, m.buckets, m.reports, m.assignments, m.abandoned, m.refused, m.grants, m.homeErrors, m.inexpressible} {
		errs = append(errs, reg.Register(c))
	}
	return m, errors.Join(errs...)
}
