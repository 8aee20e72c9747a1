package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/loop"
	"github.com/floodgate-rl/floodgate/ledger"
	"github.com/prometheus/client_golang/prometheus"
)

// DefaultOverridePoll is how often OverrideSync.Run reads the overrides'
// version by default: a change made on one instance is in force on every
// other within about this long (plus a read of the overrides).
const DefaultOverridePoll = 250 * time.Millisecond

// OverrideSync keeps a Server's overrides in step with the ledger's
// OverrideStore, and changes them there for the admin API: Set and
// Remove write a change (checked against the config in force) with who
// made it, then Refresh at once, so the instance that took the change
// applies it before answering; every other instance applies it at its
// next poll (Run), which reads one version number and, only when it
// moved, every override. It is safe for concurrent use.
type OverrideSync struct {
	srv   *Server
	store ledger.OverrideStore
	// mu serializes refreshes, so that an older read never replaces a
	// newer one.
	mu      sync.Mutex
	version int64 // of the overrides in force; -1 before the first read
	// now is the clock of the changes' times.
	now func() time.Time

	inForce  prometheus.Gauge
	failures prometheus.Counter
}

// OverrideSyncOptions configure NewOverrideSync; the zero value is every
// default.
type OverrideSyncOptions struct {
	// Now is the clock that stamps changes; nil is time.Now.
	Now func() time.Time
}

// NewOverrideSync returns the sync of srv's overrides with store, its
// metrics in srv's registry. Call Refresh (or Run) to load them.
func NewOverrideSync(srv *Server, store ledger.OverrideStore, o *OverrideSyncOptions) (*OverrideSync, error) {
	s := &OverrideSync{srv: srv, store: store, version: -1, now: time.Now}
	if o != nil && o.Now != nil {
		s.now = o.Now
	}
	s.inForce = prometheus.NewGauge(prometheus.GaugeOpts{Name: "floodgate_overrides",
		Help: "Overrides of limits in force on this instance (the admin API's /v1/overrides, kept in the ledger)."})
	s.failures = prometheus.NewCounter(prometheus.CounterOpts{Name: "floodgate_override_poll_failures_total",
		Help: "Reads of the ledger's overrides that failed; the overrides in force stay until one succeeds."})
	for _, c := range []prometheus.Collector{s.inForce, s.failures} {
		if err := srv.Registry().Register(c); err != nil {
			return nil, fmt.Errorf("server: NewOverrideSync: %w", err)
		}
	}
	return s, nil
}

// Version is the version of the overrides in force: -1 before the first
// successful Refresh.
func (s *OverrideSync) Version() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version
}

// Refresh reads the store's version and, when it is not the one in
// force, every override, and swaps them in (Server.SetOverrides). An
// override whose document does not decode is left out and logged; a
// failed read keeps the overrides in force and is returned.
func (s *OverrideSync) Refresh(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, err := s.store.OverrideVersion(ctx)
	if err != nil {
		s.failures.Inc()
		return err
	}
	if v == s.version {
		return nil
	}
	v, stored, err := s.store.Overrides(ctx)
	if err != nil {
		s.failures.Inc()
		return err
	}
	list := make([]Override, 0, len(stored))
	for _, so := range stored {
		var o Override
		if err := json.Unmarshal(so.Doc, &o); err != nil {
			s.srv.log.Error("override unreadable; left out", "version", so.Version, "error", err)
			continue
		}
		list = append(list, o)
	}
	s.srv.SetOverrides(list)
	s.inForce.Set(float64(len(list)))
	if s.version >= 0 {
		s.srv.log.Info("overrides reloaded", "version", v, "overrides", len(list))
	}
	s.version = v
	return nil
}

// Run refreshes every interval (0: DefaultOverridePoll) until ctx ends,
// logging failures once per run of them.
func (s *OverrideSync) Run(ctx context.Context, every time.Duration) {
	s.run(ctx, every, nil)
}

// run is Run on the ticker newTicker makes (nil: the process clock).
func (s *OverrideSync) run(ctx context.Context, every time.Duration, newTicker func(time.Duration) loop.Ticker) {
	if every <= 0 {
		every = DefaultOverridePoll
	}
	l := loop.Loop{NewTicker: newTicker}
	failing := false
	l.Start(every, func(lctx context.Context) bool {
		err := s.Refresh(lctx)
		switch {
		case err != nil && !failing:
			s.srv.log.Warn("overrides not read; those in force stay", "error", err)
		case err == nil && failing:
			s.srv.log.Info("overrides read again")
		}
		failing = err != nil
		return true
	})
	<-ctx.Done()
	l.Stop()
}

// Change is one change of an override, as the admin API answers it and
// its audit lists it.
type Change struct {
	// Version is the overrides' version after the change.
	Version int64
	// Subject is the store key of the override's descriptor.
	Subject string
	// Old and New are the override before and after; nil for none.
	Old, New *Override
	// By is who made it (the admin token's identity); At is when.
	By string
	At time.Time
}

// Set makes o the override of its descriptor, as by, once CheckOverride
// passes, and puts it in force here before returning.
func (s *OverrideSync) Set(ctx context.Context, o Override, by string) (Change, error) {
	if err := s.srv.CheckOverride(o); err != nil {
		return Change{}, err
	}
	doc, err := json.Marshal(o)
	if err != nil {
		return Change{}, err
	}
	c, _, err := s.store.SetOverride(ctx, ledger.OverrideChange{Subject: o.Subject(), New: doc, By: by, At: s.now()})
	if err != nil {
		return Change{}, err
	}
	return s.settled(ctx, c)
}

// Remove removes the override of a domain's descriptor, as by; found is
// false when it had none (then nothing changed).
func (s *OverrideSync) Remove(ctx context.Context, domain string, entries []config.Entry, by string) (Change, bool, error) {
	if err := checkRequest(domain, []Descriptor{{Entries: entries}}); err != nil {
		if fe, ok := errors.AsType[*floodgate.FieldError](err); ok {
			return Change{}, false, Invalid(strings.Replace(fe.Field, "descriptors[0].", "", 1), "%s", fe.Problem)
		}
		return Change{}, false, err
	}
	o := Override{Domain: domain, Entries: entries}
	c, changed, err := s.store.SetOverride(ctx, ledger.OverrideChange{Subject: o.Subject(), By: by, At: s.now()})
	if err != nil || !changed {
		return Change{}, false, err
	}
	out, err := s.settled(ctx, c)
	return out, true, err
}

// settled is the Change of a change the store recorded, once in force
// here. A failed refresh does not undo it: the next poll applies it.
func (s *OverrideSync) settled(ctx context.Context, c ledger.OverrideChange) (Change, error) {
	out, err := change(c)
	if err != nil {
		return Change{}, err
	}
	if err := s.Refresh(ctx); err != nil {
		s.srv.log.Warn("override changed in the ledger, not yet in force here; the next poll applies it", "version", c.Version, "error", err)
	}
	return out, nil
}

// List returns the overrides the store holds (the ones in force once
// every instance polled), with the version they are at.
func (s *OverrideSync) List(ctx context.Context) (int64, []Change, error) {
	v, stored, err := s.store.Overrides(ctx)
	if err != nil {
		return 0, nil, err
	}
	out := make([]Change, 0, len(stored))
	for _, so := range stored {
		c, err := change(ledger.OverrideChange{Version: so.Version, Subject: so.Subject, New: so.Doc, By: so.By, At: so.At})
		if err != nil {
			return 0, nil, err
		}
		out = append(out, c)
	}
	return v, out, nil
}

// Audit returns the changes of q, newest first.
func (s *OverrideSync) Audit(ctx context.Context, q ledger.AuditQuery) ([]Change, error) {
	stored, err := s.store.OverrideAudit(ctx, q)
	if err != nil {
		return nil, err
	}
	out := make([]Change, 0, len(stored))
	for _, sc := range stored {
		c, err := change(sc)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// change decodes a stored change.
func change(c ledger.OverrideChange) (Change, error) {
	out := Change{Version: c.Version, Subject: c.Subject, By: c.By, At: c.At}
	for _, d := range []struct {
		doc []byte
		to  **Override
	}{{c.Old, &out.Old}, {c.New, &out.New}} {
		if d.doc == nil {
			continue
		}
		o := new(Override)
		if err := json.Unmarshal(d.doc, o); err != nil {
			return Change{}, fmt.Errorf("%w: override of version %d: %v", floodgate.ErrUnexpectedReply, c.Version, err)
		}
		*d.to = o
	}
	return out, nil
}
