package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/ratelimitheader"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/prometheus/client_golang/prometheus"
)

// Waiting over HTTP (docs/waiting.md): max_wait_ms asks for the earliest
// slot within that many milliseconds when none is free now, a slot taken
// in the store's one atomic step (floodgate.Limiter.Schedule), in both
// forms of POST /v1/allow and POST /v1/reservations.
//
// POST /v1/reservations answers at once with wait_ms and the
// reservation's id: the caller sleeps, then proceeds, or cancels the
// reservation to give the slot back. With "hold": true, and on
// POST /v1/allow always (an allow answer means "go now"), the service
// holds the response until the slot comes, for callers that cannot easily
// sleep (a PHP request, a webhook sender): the wait is then bounded by
// Options.MaxHold too, and the held requests by Options.MaxHeld. If the
// client goes away before its slot, the slot is given back, exactly once
// (the reservation's Cancel, idempotent by its ID).

const (
	// DefaultMaxHold is Options.MaxHold's default: the longest the
	// service holds a response for its slot, below
	// transport.DefaultWriteTimeout so that a held answer is written
	// before the connection's write deadline.
	DefaultMaxHold = 20 * time.Second
	// DefaultMaxHeld is Options.MaxHeld's default: how many requests the
	// service holds at once.
	DefaultMaxHeld = 1024
)

// holds bounds and counts the requests the service holds for their
// slots.
type holds struct {
	// max is the longest hold.
	max time.Duration
	// sem has a place per request that may be held at once; nil holds
	// none.
	sem chan struct{}
	// after is the timer of a hold, time.NewTimer's channel and its stop;
	// tests replace it (export_test.go).
	after func(time.Duration) (<-chan time.Time, func() bool)
	// held is the requests held now; done counts holds by result.
	held prometheus.Gauge
	done *prometheus.CounterVec
}

func newHolds(opts *Options, reg *prometheus.Registry) (*holds, error) {
	h := &holds{max: DefaultMaxHold, after: func(d time.Duration) (<-chan time.Time, func() bool) {
		t := time.NewTimer(d)
		return t.C, t.Stop
	}}
	n := DefaultMaxHeld
	if opts != nil {
		if opts.MaxHold > 0 {
			h.max = min(opts.MaxHold, floodgate.MaxWait)
		}
		if opts.MaxHeld != 0 {
			n = opts.MaxHeld
		}
	}
	if n > 0 {
		h.sem = make(chan struct{}, n)
	}
	var err error
	if h.held, err = register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "floodgate_http_held_requests",
		Help: "Requests of the HTTP API held now until their slot (max_wait_ms on POST /v1/allow, or hold on POST /v1/reservations); at most -max-held.",
	})); err != nil {
		return nil, err
	}
	if h.done, err = register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "floodgate_http_holds_total",
		Help: "Requests of the HTTP API that asked to be held until their slot, by result: served (answered when the slot came, or at once when it was now or none was free), gone (the client went away first and its slot was given back), full (refused 503: -max-held requests were held already), failed (refused or the store failed).",
	}, []string{"result"})); err != nil {
		return nil, err
	}
	return h, nil
}

// register registers c in reg, or returns the collector of that name
// already there (the API of one server made twice).
func register[C prometheus.Collector](reg *prometheus.Registry, c C) (C, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err)
	if !ok {
		return c, fmt.Errorf("httpapi: %w", err)
	}
	existing, ok := are.ExistingCollector.(C)
	if !ok {
		return c, fmt.Errorf("httpapi: %w", err)
	}
	return existing, nil
}

// acquire takes a place for a held request, or reports that every place
// is taken; release gives it back.
func (h *holds) acquire() bool {
	select {
	case h.sem <- struct{}{}:
		h.held.Inc()
		return true
	default:
		// A nil sem (MaxHeld negative) never has a place.
		h.done.WithLabelValues("full").Inc()
		return false
	}
}

func (h *holds) release() {
	<-h.sem
	h.held.Dec()
}

// errHoldFull answers a request to be held when MaxHeld are: 503 with
// Retry-After, the service's limit, not the caller's.
var errHoldFull = &httpError{status: http.StatusServiceUnavailable, field: "max_wait_ms",
	msg: "the service holds as many requests as it may (-max-held); retry, or ask for the slot without holding the response (POST /v1/reservations without hold)"}

// writeWaitProblem answers the error of a wait as writeProblem does, a
// 503 (the store failed, or every hold is taken: errHoldFull) with
// Retry-After: 1.
func writeWaitProblem(w http.ResponseWriter, err error) {
	p := problemOf(err)
	if p.Status == http.StatusServiceUnavailable {
		w.Header().Set(ratelimitheader.HeaderRetryAfter, "1")
	}
	WriteProblem(w, p.Status, p.Field, p.Detail)
}

// wait holds until slot comes, or ctx ends (the client went away): then
// the slot is given back, once, on a context of its own, and wait
// reports false.
func (h *holds) wait(ctx context.Context, slot *floodgate.Slot) bool {
	if slot.Delay <= 0 {
		return true
	}
	c, stop := h.after(slot.Delay)
	defer stop()
	select {
	case <-c:
		return true
	case <-ctx.Done():
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		// A failed cancel leaves the slot to expire charged: what a
		// caller that crashed leaves; no one is left to answer.
		_, _ = slot.Cancel(cctx)
		h.done.WithLabelValues("gone").Inc()
		return false
	}
}

// maxWait is req's max_wait_ms, checked (a 400 naming it), as a duration.
func (req *AllowRequest) maxWait() (time.Duration, error) {
	ms := *req.MaxWaitMS
	if ms < 0 || ms > floodgate.MaxWait.Milliseconds() {
		return 0, invalid("max_wait_ms", "%d is not between 0 and %d", ms, floodgate.MaxWait.Milliseconds())
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// noWait refuses max_wait_ms on an endpoint that does not wait.
func (req *AllowRequest) noWait(what string) error {
	if req.MaxWaitMS != nil {
		return invalid("max_wait_ms", "%s", what)
	}
	return nil
}

// schedule takes req's slot within maxWait (inline or descriptors): nil
// when nothing is held (denied, or no descriptor limited), with the
// overall status and the result to answer.
func (s *API) schedule(ctx context.Context, req *AllowRequest, inline bool, maxWait time.Duration, o *floodgate.ReserveOptions) (*floodgate.Slot, server.Status, server.Result, error) {
	if inline {
		lim, cost, err := req.inlineLimit()
		if err != nil {
			return nil, server.Status{}, server.Result{}, err
		}
		slot, st, err := s.srv.ScheduleInline(ctx, req.Key, lim, cost, maxWait, o)
		if fe, ok := errors.AsType[*floodgate.FieldError](err); ok && (fe.Field == "ttl" || fe.Field == "max_wait") {
			// The JSON names of floodgate's fields.
			err = &floodgate.FieldError{Kind: fe.Kind, Field: fe.Field + "_ms", Problem: fe.Problem}
		}
		return slot, st, server.Result{Code: st.Code, Statuses: []server.Status{st}}, err
	}
	ds, hits, err := req.descriptors()
	if err != nil {
		return nil, server.Status{}, server.Result{}, err
	}
	slot, res, err := s.srv.Schedule(ctx, req.Domain, ds, hits, maxWait, o)
	return slot, Binding(res), res, err
}

// allowWait answers POST /v1/allow with max_wait_ms: it takes the slot,
// holds the response until it comes, and answers allowed with waited_ms;
// denied at once when no slot is free within the wait (bounded by
// MaxHold). The slot's reservation is committed when it comes, so the
// store keeps no hold for it.
func (s *API) allowWait(w http.ResponseWriter, r *http.Request, req *AllowRequest, inline bool) {
	if req.Priority != "" {
		writeProblem(w, invalid("priority", "a wait holds the whole limit and takes no priority class"))
		return
	}
	maxWait, err := req.maxWait()
	if err != nil {
		writeProblem(w, err)
		return
	}
	if !s.holds.acquire() {
		writeWaitProblem(w, errHoldFull)
		return
	}
	defer s.holds.release()
	slot, overall, res, err := s.schedule(r.Context(), req, inline, min(maxWait, s.holds.max), nil)
	if err != nil {
		s.holds.done.WithLabelValues("failed").Inc()
		writeWaitProblem(w, err)
		return
	}
	var waited *int64
	if slot != nil && slot.Held {
		if !s.holds.wait(r.Context(), slot) {
			return
		}
		ms := millisCeil(slot.Delay)
		waited = &ms
		cctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 5*time.Second)
		// The slot is used: settle it, so that the store keeps no hold.
		// A failed commit leaves the hold to expire charged, the same.
		_, _ = slot.Commit(cctx, slot.Items[0].Cost)
		cancel()
	}
	s.holds.done.WithLabelValues("served").Inc()
	resp := allowResponse(inline, overall, res.Statuses)
	resp.WaitedMS, resp.UnknownDomain = waited, res.UnknownDomain
	writeAllow(w, resp, overall, res.Statuses)
}
