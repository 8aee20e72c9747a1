package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/ledger"
)

// KeyRef names the state of one key, as POST /v1/reset and POST
// /v1/inspect take it: an inline key and its limit (Key and Limit), or a
// descriptor of a domain (Domain and Entries), whose rule gives the limit,
// or Limit for a descriptor that brings its own (Envoy's descriptor-level
// limit).
type KeyRef struct {
	Key     string
	Domain  string
	Entries []config.Entry
	Limit   *floodgate.Limit
}

// KeyState is the state of a key, as Limiter.Peek reports it.
type KeyState struct {
	// StoreKey is the key the store holds the state under: "i|" and an
	// inline key, or "d|" and the descriptor's key (config.Rule.Key).
	StoreKey string
	// Status is the key's state: Rule, Limit, and the Decision of a
	// request of cost 0 (Remaining, ResetAfter, RetryAfter), with Code
	// OverLimit and Decision.Allowed false when a request of cost 1 would
	// be denied (nothing remains).
	Status Status
}

// resolve is the store key, limit and rule of ref.
func (s *Server) resolve(ref KeyRef) (string, floodgate.Limit, *config.Rule, error) {
	if ref.Domain == "" && ref.Entries == nil {
		if ref.Limit == nil {
			return "", floodgate.Limit{}, nil, Invalid("limit", "required with key")
		}
		if err := checkInlineKey(ref.Key); err != nil {
			return "", floodgate.Limit{}, nil, err
		}
		if ref.Key == "" {
			return "", floodgate.Limit{}, nil, Invalid("key", "empty")
		}
		return inlineKey(ref.Key), *ref.Limit, nil, nil
	}
	if ref.Key != "" {
		return "", floodgate.Limit{}, nil, Invalid("body", "give either key and limit, or domain and entries, not both")
	}
	if err := checkRequest(ref.Domain, []Descriptor{{Entries: ref.Entries}}); err != nil {
		if fe, ok := errors.AsType[*floodgate.FieldError](err); ok {
			return "", floodgate.Limit{}, nil, Invalid(strings.Replace(fe.Field, "descriptors[0].", "", 1), "%s", fe.Problem)
		}
		return "", floodgate.Limit{}, nil, err
	}
	if ref.Limit != nil {
		return "d|" + config.Key(ref.Domain, ref.Entries), *ref.Limit, nil, nil
	}
	m := s.cfg.Load().MatchAll(ref.Domain, [][]config.Entry{ref.Entries})[0]
	switch {
	case m.Rule == nil:
		return "", floodgate.Limit{}, nil, Invalid("entries", "no rule of domain %q matches them", ref.Domain)
	case m.Rule.Unlimited:
		return "", floodgate.Limit{}, nil, Invalid("entries", "rule %s is unlimited: it keeps no state", m.Rule.ID)
	}
	return "d|" + m.Rule.Key(ref.Entries), m.Rule.Limit, m.Rule, nil
}

// ResetKey gives the key of ref its whole budget back, through the
// Limiter (Limiter.Reset).
func (s *Server) ResetKey(ctx context.Context, ref KeyRef) error {
	key, limit, rule, err := s.resolve(ref)
	if err != nil {
		return err
	}
	limits := []floodgate.Limit{limit}
	if rule != nil {
		// Every limit of the rule (rate_limits) or of its override.
		limits = s.limitsOf(ref.Domain, rule, key)
	}
	for _, l := range limits {
		if err := s.lim.Reset(ctx, key, l); err != nil {
			return inlineField(err)
		}
	}
	return nil
}

// InspectKey reports the state of the key of ref without taking anything,
// through the Limiter (Limiter.Peek): an error is the caller's, or the
// store's failure.
func (s *Server) InspectKey(ctx context.Context, ref KeyRef) (KeyState, error) {
	key, limit, rule, err := s.resolve(ref)
	if err != nil {
		return KeyState{}, err
	}
	d, err := s.lim.Peek(ctx, key, limit)
	if err != nil {
		return KeyState{}, inlineField(err)
	}
	if limit.Durable && s.ledger != nil {
		// A counter the store lost reads as empty until the next reserve
		// rebuilds it: what the quota used is what the ledger holds, when
		// that is more.
		at := d.Now
		if at.IsZero() {
			at = time.Now()
		}
		_, units, err := s.ledger.Used(ctx, key, limit, at)
		if err != nil {
			return KeyState{}, fmt.Errorf("the quota's use is unknown: %w: %w", ledger.ErrLedger, err)
		}
		if used := d.Limit - d.Remaining; units > used {
			d.Remaining = max(0, d.Limit-units)
		}
	}
	// A peek takes nothing, so it is admitted even at the limit: the
	// key is over its limit when a request of cost 1 would not be.
	code := OK
	if !d.Allowed || d.Remaining < 1 {
		code, d.Allowed = OverLimit, false
	}
	return KeyState{StoreKey: key, Status: Status{Code: code, Rule: rule, Limited: true, Limit: limit, Decision: d}}, nil
}

// Watch has obs see every decision of the server's Limiter from now on,
// after the server's own metrics and Options.Limiter.Observer, until the
// returned stop is called: the dashboard (server/ui) counts denied keys
// this way. Observe is called on the deciding goroutine, so it must be
// fast and safe for concurrent use.
func (s *Server) Watch(obs floodgate.Observer) (stop func()) {
	s.m.watchMu.Lock()
	defer s.m.watchMu.Unlock()
	var ws []floodgate.Observer
	if old := s.m.watchers.Load(); old != nil {
		ws = append(ws, *old...)
	}
	// A box of its own: the pointer tells this call's entry apart, even
	// when obs is watching twice or is of a type that == cannot compare.
	box := &watcher{obs}
	ws = append(ws, box)
	s.m.watchers.Store(&ws)
	var once sync.Once
	return func() {
		once.Do(func() {
			s.m.watchMu.Lock()
			defer s.m.watchMu.Unlock()
			var rest []floodgate.Observer
			for _, w := range *s.m.watchers.Load() {
				if w != floodgate.Observer(box) {
					rest = append(rest, w)
				}
			}
			if len(rest) == 0 {
				s.m.watchers.Store(nil)
				return
			}
			s.m.watchers.Store(&rest)
		})
	}
}

type watcher struct{ floodgate.Observer }
