package server

import (
	"context"
	"errors"
	"fmt"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
)

// The failure mode local (floodgate.FailLocal) in the server: one
// floodgate.Fallback (a circuit breaker and the local store) serves every
// rule whose failure mode is local. While its breaker is open, those
// rules' descriptors are decided in the local store with the limit divided
// by Options.Instances, at once, without asking the store; the other
// rules' descriptors still go to the store and wait for its deadline as
// before. Once per probe interval one request's local descriptors probe
// the store, and an answer sends every local rule back to it.

// newFallback checks the options of the failure mode local and returns its
// Fallback, or nil when Instances is 0 (local is then not available).
func newFallback(opts Options) (*floodgate.Fallback, error) {
	switch {
	case opts.Instances < 0:
		return nil, fmt.Errorf("server: New: Instances: %d is negative", opts.Instances)
	case opts.Instances == 0 && opts.FailureMode == floodgate.FailLocal:
		return nil, errors.New("server: New: Instances: failure mode local needs the number of instances sharing the store (at least 1)")
	case opts.Instances == 0:
		if opts.Local != nil {
			return nil, errors.New("server: New: Local is set but Instances is 0; failure mode local needs both")
		}
		return nil, nil
	case opts.Local == nil:
		return nil, errors.New("server: New: Local: Instances is set but there is no local store (memstore.New) for failure mode local")
	}
	return floodgate.NewFallback(floodgate.FallbackOptions{
		Local: opts.Local, Instances: opts.Instances, ProbeInterval: opts.ProbeInterval, Clock: opts.Clock,
	})
}

// CheckConfig reports the rules of c that the server cannot serve as
// written: a failure_mode local when the server has no Instances. The
// Reloader rejects such a config; a config set by SetConfig anyway has
// those rules answer store failures as fail_closed.
func (s *Server) CheckConfig(c *config.Config) error {
	if s.fb != nil {
		return nil
	}
	var errs []error
	for _, d := range c.Domains() {
		for _, r := range d.Rules() {
			if r.FailureMode == config.FailLocal {
				errs = append(errs, fmt.Errorf("%s:%d: rule %s: failure_mode local needs the number of instances (floodgate serve -instances)", r.File, r.Line, r.ID))
			}
		}
	}
	return errors.Join(errs...)
}

// failureMode is the failure mode of a rule (nil for an inline limit).
func (s *Server) failureMode(r *config.Rule) floodgate.FailurePolicy {
	if r != nil && r.FailureMode != "" {
		return floodgate.FailurePolicy(r.FailureMode)
	}
	return s.failMode
}

// decide is apply with the failure mode local: the requests of rules whose
// failure mode is local (local[i]) go to the local store while the breaker
// is open, and when the store fails them. It returns, per request, the
// decision, the error (nil for a local decision), and the store's error
// that sent a request to the local store.
func (s *Server) decide(ctx context.Context, reqs []floodgate.Request, local []bool) (ds []floodgate.Decision, errs, storeErrs []error) {
	anyLocal := false
	for _, l := range local {
		anyLocal = anyLocal || l
	}
	if !anyLocal || s.fb == nil {
		ds, errs = s.apply(ctx, reqs)
		return ds, errs, make([]error, len(reqs))
	}
	ds, errs, storeErrs = make([]floodgate.Decision, len(reqs)), make([]error, len(reqs)), make([]error, len(reqs))
	skip := s.fb.UseLocal()
	// The requests that go to the store: all but the local ones when the
	// breaker is open.
	var shared []floodgate.Request
	var which []int
	for i, r := range reqs {
		if skip && local[i] {
			continue
		}
		shared = append(shared, r)
		which = append(which, i)
	}
	if len(shared) > 0 {
		sds, serrs := s.apply(ctx, shared)
		report := !skip
		for j, i := range which {
			ds[i], errs[i] = sds[j], serrs[j]
			if local[i] && report {
				// One report per call, from its first local request: its
				// answer is the store's answer to this call.
				s.fb.Report(serrs[j])
				report = false
			}
		}
	}
	for i, r := range reqs {
		if !local[i] || (!skip && !floodgate.IsStoreFailure(errs[i])) {
			continue
		}
		if !skip {
			storeErrs[i] = errs[i]
		}
		d, err := s.fb.Apply(ctx, r)
		if err != nil {
			errs[i] = errors.Join(storeErrs[i], err)
			continue
		}
		ds[i], errs[i] = d, nil
	}
	return ds, errs, storeErrs
}

// settleLocal records a descriptor decided by the local store.
func (s *Server) settleLocal(domain string, entries []config.Entry, st *Status, d floodgate.Decision, storeErr error) {
	shadow := st.Rule != nil && st.Rule.ShadowMode
	st.Decision = d
	st.FailureMode = floodgate.FailLocal
	st.Limit = floodgate.Share(st.Limit, s.fb.Instances()) // the limit applied
	if storeErr != nil {
		s.m.storeErrors.Inc()
		s.log.Warn("store failed, decided locally", "domain", domain, "rule", ruleID(st.Rule), "failure_mode", string(floodgate.FailLocal), "error", storeErr)
	}
	switch {
	case d.Allowed:
		s.m.decision(domain, st.Rule, entries, outcomeLocalAllowed)
	case shadow:
		st.Shadow = true
		s.m.decision(domain, st.Rule, entries, outcomeShadowDenied)
	default:
		st.Code = OverLimit
		s.m.decision(domain, st.Rule, entries, outcomeLocalDenied)
		s.log.Debug("denied locally", "domain", domain, "rule", ruleID(st.Rule), "limit", st.Limit.String(),
			"remaining", d.Remaining, "retry_after", d.RetryAfter, "reset_after", d.ResetAfter)
	}
}
