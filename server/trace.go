package server

import (
	"context"
	"errors"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/ledger"
	"github.com/floodgate-rl/floodgate/server/tracing"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Tracer returns the server's Tracer (Options.Tracer), which the edges
// (server/httpapi, server/envoyrls, server/rlqs) make their spans with;
// nil when tracing is off.
func (s *Server) Tracer() *tracing.Tracer { return s.tr }

// decideTraced is Decide in a span of its own.
func (s *Server) decideTraced(ctx context.Context, domain string, ds []Descriptor, hits int64) (Result, error) {
	ctx, span := s.tr.Start(ctx, tracing.SpanDecide)
	res, err := s.decide(ctx, domain, ds, hits)
	s.endDecide(span, domain, ds, hits, &res, err, pick(res.Code == OverLimit, "denied", "allowed"), false)
	return res, err
}

// decideInlineTraced is DecideInline in a span of its own.
func (s *Server) decideInlineTraced(ctx context.Context, key string, limit floodgate.Limit, cost int64, p floodgate.Priority) (Status, error) {
	ctx, span := s.tr.Start(ctx, tracing.SpanDecide)
	st, err := s.decideInline(ctx, key, limit, cost, p)
	s.endInline(span, limit, cost, &st, err, false)
	return st, err
}

// reserveTraced is Reserve in a span of its own.
func (s *Server) reserveTraced(ctx context.Context, domain string, ds []Descriptor, hits int64, o *floodgate.ReserveOptions) (*floodgate.Reservation, Result, error) {
	ctx, span := s.tr.Start(ctx, tracing.SpanReserve)
	r, res, err := s.reserve(ctx, domain, ds, hits, o)
	s.endDecide(span, domain, ds, hits, &res, err, reserveOutcome(r, &res), true)
	return r, res, err
}

// reserveInlineTraced is ReserveInline in a span of its own.
func (s *Server) reserveInlineTraced(ctx context.Context, key string, limit floodgate.Limit, cost int64, o *floodgate.ReserveOptions) (*floodgate.Reservation, Status, error) {
	ctx, span := s.tr.Start(ctx, tracing.SpanReserve)
	r, st, err := s.reserveInline(ctx, key, limit, cost, o)
	s.endInline(span, limit, cost, &st, err, r != nil && r.Held)
	return r, st, err
}

// decideStore is decidePlan, in a span of the store's call when tracing.
func (s *Server) decideStore(ctx context.Context, p *plan) ([]floodgate.Outcome, error) {
	if s.tr == nil {
		return s.decidePlan(ctx, p)
	}
	ctx, span := s.tr.Start(ctx, tracing.SpanStore)
	outs, err := s.decidePlan(ctx, p)
	endStore(span, len(p.items), outs, err)
	return outs, err
}

// decideItems is the Limiter's Decide, in a span of the store's call when
// tracing.
func (s *Server) decideItems(ctx context.Context, items []floodgate.Item) ([]floodgate.Outcome, error) {
	if s.tr == nil {
		return s.lim.Decide(ctx, items)
	}
	ctx, span := s.tr.Start(ctx, tracing.SpanStore)
	outs, err := s.lim.Decide(ctx, items)
	endStore(span, len(items), outs, err)
	return outs, err
}

// reserveItems is the Limiter's ReserveEach, in a span of the store's
// call when tracing.
func (s *Server) reserveItems(ctx context.Context, items []floodgate.Item, o *floodgate.ReserveOptions) (*floodgate.Reservation, []floodgate.Outcome, error) {
	if s.tr == nil {
		r, _, outs, err := s.lim.ReserveEach(ctx, items, o)
		return r, outs, err
	}
	ctx, span := s.tr.Start(ctx, tracing.SpanStore)
	r, _, outs, err := s.lim.ReserveEach(ctx, items, o)
	endStore(span, len(items), outs, err)
	return r, outs, err
}

// endStore ends the span of a store's call of n requests.
func endStore(span trace.Span, n int, outs []floodgate.Outcome, err error) {
	if !span.IsRecording() {
		span.End()
		return
	}
	failures := 0
	for i := range outs {
		if outs[i].Err != nil {
			failures++
		}
	}
	span.SetAttributes(tracing.KeyStoreRequests.Int(n), tracing.KeyStoreFailures.Int(failures))
	if err == nil && failures > 0 {
		span.SetStatus(codes.Error, "")
		for i := range outs {
			if outs[i].Err != nil {
				span.SetAttributes(tracing.KeyErrorType.String(tracing.ErrorType(outs[i].Err)))
				break
			}
		}
	}
	tracing.EndErr(span, err)
}

// reserveOutcome is a reserve's overall outcome.
func reserveOutcome(r *floodgate.Reservation, res *Result) string {
	switch {
	case r != nil && r.Held:
		return "held"
	case r != nil || res.Code == OverLimit:
		return "denied"
	}
	return "allowed" // nothing to hold
}

// endDecide ends the span of a decision or reservation of ds in domain,
// whose overall outcome is outcome (reserve: a reservation), with the attributes of each
// descriptor (never its entries: their values are a user's).
func (s *Server) endDecide(span trace.Span, domain string, ds []Descriptor, hits int64, res *Result, err error, outcome string, reserve bool) {
	defer span.End()
	if !span.IsRecording() {
		return
	}
	attrs := []attribute.KeyValue{tracing.KeyDomain.String(metricDomain(s.cfg.Load(), domain)), tracing.KeyDescriptors.Int(len(ds))}
	if err != nil {
		span.SetAttributes(append(attrs, tracing.KeyOutcome.String("invalid"), tracing.KeyErrorType.String(tracing.ErrorType(err)))...)
		return
	}
	rules, algs, outs := make([]string, len(ds)), make([]string, len(ds)), make([]string, len(ds))
	costs := make([]int64, len(ds))
	for i := range ds {
		costs[i] = hits
		if ds[i].Hits != nil {
			costs[i] = *ds[i].Hits
		}
		if i >= len(res.Statuses) {
			continue
		}
		st := &res.Statuses[i]
		switch {
		case st.Rule != nil:
			rules[i] = st.Rule.ID
		case ds[i].Limit != nil:
			rules[i] = "override"
		}
		if st.Limited {
			algs[i] = algorithm(st.Limit)
		}
		outs[i] = descriptorOutcome(st, reserve)
	}
	attrs = append(attrs, tracing.KeyOutcome.String(outcome), tracing.KeyRule.StringSlice(rules), tracing.KeyAlgorithm.StringSlice(algs),
		tracing.KeyCost.Int64Slice(costs), tracing.KeyDescriptorOutcome.StringSlice(outs))
	if res.GlobalShadow {
		attrs = append(attrs, tracing.KeyGlobalShadow.Bool(true))
	}
	span.SetAttributes(attrs...)
	if FailedClosed(res.Statuses) {
		span.SetStatus(codes.Error, "store failed, denied by the failure mode")
	}
}

// endInline ends the span of an inline decision or reservation (held
// reports a reservation held).
func (s *Server) endInline(span trace.Span, limit floodgate.Limit, cost int64, st *Status, err error, held bool) {
	defer span.End()
	if !span.IsRecording() {
		return
	}
	attrs := []attribute.KeyValue{tracing.KeyDomain.String(""), tracing.KeyDescriptors.Int(1)}
	if err != nil {
		span.SetAttributes(append(attrs, tracing.KeyOutcome.String("invalid"), tracing.KeyErrorType.String(tracing.ErrorType(err)))...)
		return
	}
	outcome := pick(st.Code == OverLimit, "denied", "allowed")
	if held {
		outcome = "held"
	}
	span.SetAttributes(append(attrs, tracing.KeyOutcome.String(outcome), tracing.KeyRule.StringSlice([]string{"inline"}),
		tracing.KeyAlgorithm.StringSlice([]string{algorithm(limit)}), tracing.KeyCost.Int64Slice([]int64{cost}),
		tracing.KeyDescriptorOutcome.StringSlice([]string{descriptorOutcome(st, false)}))...)
	if st.Err != nil && st.Code == OverLimit {
		span.SetStatus(codes.Error, "store failed, denied by the failure mode")
	}
}

// algorithm is the name of l's algorithm, its default for none.
func algorithm(l floodgate.Limit) string {
	if l.Algorithm == "" {
		return string(floodgate.DefaultAlgorithm)
	}
	return string(l.Algorithm)
}

// descriptorOutcome is the outcome of one descriptor, as settle counts it
// in floodgate_decisions_total, or why it was not limited. In a
// reservation (reserve), a rule in shadow mode holds nothing.
func descriptorOutcome(st *Status, reserve bool) string {
	if !st.Limited {
		switch {
		case st.Rule == nil:
			return "no_rule"
		case st.Rule.Unlimited:
			return outcomeUnlimited
		case reserve && st.Rule.ShadowMode:
			return "shadow_not_held"
		}
		return "replaced"
	}
	local := st.FailurePolicy == floodgate.FailLocal
	d := st.Decision
	switch {
	case st.Err != nil && errors.Is(st.Err, ledger.ErrLedger):
		return outcomeLedgerFailed
	case st.Err != nil && st.Code == OverLimit:
		return outcomeFailedClosed
	case st.Err != nil:
		return outcomeFailedOpen
	case !d.Allowed && d.RetryAfter == 0 && !local:
		return outcomeOtherDenied
	case d.Allowed:
		return pick(local, outcomeLocalAllowed, outcomeAllowed)
	case st.Shadow:
		return outcomeShadowDenied
	}
	return pick(local, outcomeLocalDenied, outcomeDenied)
}
