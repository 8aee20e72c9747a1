package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
)

// Override gives one descriptor of a domain limits of its own in place of
// those of the rule it matches: a plan of the domain's config (Plan), or
// explicit Limits. It is how an operator moves a key or a tenant to
// another plan without a config push (the admin API's /v1/overrides; see
// docs/plans.md). The descriptor's counters stay those of the rule's key,
// which holds its state by algorithm and period and not by the number of
// requests: a new limit of the same algorithm and period goes on counting
// what the window used (900 used of 1,000 a month, moved to 10,000: 9,100
// left).
type Override struct {
	// Domain and Entries are the descriptor, exactly as requests send
	// it: the override applies to the requests whose descriptor has the
	// same store key (Subject).
	Domain  string
	Entries []config.Entry
	// Plan names a plan of the domain's config (config.Plan): its
	// limits, as the config in force defines them, apply. Or:
	Plan string
	// Limits are the descriptor's limits, decided all or nothing (see
	// config.CheckLimits).
	Limits []floodgate.Limit
}

// Subject is the override's identity: the store key of its descriptor.
func (o Override) Subject() string { return "d|" + config.Key(o.Domain, o.Entries) }

// overrideSet is the overrides in force, by Subject. It never changes:
// SetOverrides swaps in a new one.
type overrideSet struct {
	byKey map[string]*Override
	list  []Override
}

// SetOverrides replaces the overrides in force: the next decisions use
// them, the ones in progress finish with the old. Each must have passed
// CheckOverride (OverrideSync checks them); an override naming a plan the
// config lacks, or whose descriptor matches no rule, is not applied (the
// rule's limits are), and is logged at each decision, once a second.
func (s *Server) SetOverrides(list []Override) {
	set := &overrideSet{byKey: make(map[string]*Override, len(list)), list: slices.Clone(list)}
	for i := range set.list {
		set.byKey[set.list[i].Subject()] = &set.list[i]
	}
	s.overrides.Store(set)
}

// Overrides returns the overrides in force, as SetOverrides was given
// them. The slice is the caller's; the limits in it are shared.
func (s *Server) Overrides() []Override {
	set := s.overrides.Load()
	if set == nil {
		return nil
	}
	return slices.Clone(set.list)
}

// overrideFor reports whether an override gives descriptor entries of
// domain, which matched m, limits of its own; then it fills st (rule,
// override, plan) and it (key, rule's failure policy), and sets over to
// the limits. A concurrency rule is never overridden, nor a replaced one.
func (s *Server) overrideFor(cfg *config.Config, domain string, m config.Match, entries []config.Entry, st *Status, it *floodgate.Item, over *[]floodgate.Limit) bool {
	set := s.overrides.Load()
	if set == nil || len(set.byKey) == 0 || m.Rule == nil || m.ReplacedBy != nil || m.Rule.Limit.Algorithm == floodgate.Concurrency {
		return false
	}
	// The key on the stack: most descriptors have no override, and a map
	// index by string(b) allocates nothing.
	var buf [128]byte
	kb := m.Rule.AppendKey(append(buf[:0], "d|"...), entries)
	o := set.byKey[string(kb)]
	if o == nil {
		return false
	}
	key := string(kb)
	limits := o.Limits
	if o.Plan != "" {
		pl := cfg.Domain(domain).Plan(o.Plan)
		if pl == nil {
			s.throttle.log(s.log, slog.LevelWarn, "override plan|"+o.Plan, "override names a plan the config lacks; the rule's limits apply", "domain", domain, "rule", m.Rule.ID, "plan", o.Plan)
			return false
		}
		limits = pl.Limits
	}
	st.Rule, st.Limited, st.Override, st.Plan = m.Rule, true, true, o.Plan
	st.Quota = m.Rule.QuotaMode
	st.Limit = limits[0]
	it.Key = key
	*over = limits
	return true
}

// CheckOverride reports what is wrong with o under the config in force,
// as a *floodgate.FieldError of the admin API's body (domain, entries,
// plan, limits[i]): its descriptor must match a rule that is not a
// concurrency limit nor shares one counter among values
// (share_threshold); it names a plan of the domain or gives valid limits
// (config.CheckLimits), not both; a durable limit needs a ledger.
func (s *Server) CheckOverride(o Override) error {
	if err := checkRequest(o.Domain, []Descriptor{{Entries: o.Entries}}); err != nil {
		if fe, ok := errors.AsType[*floodgate.FieldError](err); ok {
			return Invalid(strings.Replace(fe.Field, "descriptors[0].", "", 1), "%s", fe.Problem)
		}
		return err
	}
	cfg := s.cfg.Load()
	d := cfg.Domain(o.Domain)
	if d == nil {
		return Invalid("domain", "the config has no domain %q", o.Domain)
	}
	m := cfg.MatchAll(o.Domain, [][]config.Entry{o.Entries})[0]
	switch {
	case m.Rule == nil:
		return Invalid("entries", "no rule of domain %q matches them: an override replaces the limits of a rule", o.Domain)
	case m.Rule.Limit.Algorithm == floodgate.Concurrency:
		return Invalid("entries", "rule %s is a concurrency limit, which an override cannot replace", m.Rule.ID)
	case "d|"+m.Rule.Key(o.Entries) != o.Subject():
		return Invalid("entries", "rule %s shares one counter among the values of a wildcard (share_threshold): an override of one value would change the limit of all", m.Rule.ID)
	}
	switch {
	case o.Plan != "" && o.Limits != nil:
		return Invalid("plan", "give a plan or limits, not both")
	case o.Plan != "":
		if err := config.CheckPlanName(o.Plan); err != nil {
			return Invalid("plan", "%v", err)
		}
		if d.Plan(o.Plan) == nil {
			names := make([]string, 0)
			for _, p := range d.Plans() {
				names = append(names, p.Name)
			}
			return Invalid("plan", "domain %q has no plan %q (its plans: %s)", o.Domain, o.Plan, strings.Join(names, ", "))
		}
		return nil
	case o.Limits == nil:
		return Invalid("plan", "give a plan of the domain, or limits")
	}
	if err := config.CheckLimits(o.Limits); err != nil {
		if fe, ok := errors.AsType[*floodgate.FieldError](err); ok {
			return Invalid(fe.Field, "%s", fe.Problem)
		}
		return err
	}
	for i, l := range o.Limits {
		if l.Durable && s.ledger == nil {
			return Invalid(fmt.Sprintf("limits[%d].durable", i), "a durable quota needs a ledger (floodgate serve -ledger)")
		}
	}
	return nil
}

// overrideDoc is an Override as the ledger keeps it (ledger.Override.Doc):
// JSON, limits with their periods as Go durations.
type overrideDoc struct {
	Domain  string     `json:"domain"`
	Entries []entryDoc `json:"entries"`
	Plan    string     `json:"plan,omitempty"`
	Limits  []limitDoc `json:"limits,omitempty"`
}

type entryDoc struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

type limitDoc struct {
	Algorithm     string `json:"algorithm,omitempty"`
	Limit         int64  `json:"limit"`
	Period        string `json:"period"`
	Burst         int64  `json:"burst,omitempty"`
	Window        string `json:"window,omitempty"`
	CountRejected bool   `json:"count_rejected,omitempty"`
	LocalBudget   int64  `json:"local_budget,omitempty"`
	Durable       bool   `json:"durable,omitempty"`
	Global        bool   `json:"global,omitempty"`
	Name          string `json:"name,omitempty"`
	// Unit, TimeZone and Anchor are a calendar window's (Limit.Calendar,
	// as floodgate.ParseCalendar reads them); Period is then "0s".
	Unit     string `json:"unit,omitempty"`
	TimeZone string `json:"time_zone,omitempty"`
	Anchor   string `json:"anchor,omitempty"`
}

// MarshalJSON encodes o as the ledger keeps it.
func (o Override) MarshalJSON() ([]byte, error) {
	d := overrideDoc{Domain: o.Domain, Plan: o.Plan, Entries: make([]entryDoc, len(o.Entries))}
	for i, e := range o.Entries {
		d.Entries[i] = entryDoc(e)
	}
	for _, l := range o.Limits {
		ld := limitDoc{Algorithm: string(l.Algorithm), Limit: l.Limit, Period: l.Period.String(), Burst: l.Burst,
			Window: string(l.Window), CountRejected: l.CountRejected, LocalBudget: l.LocalBudget, Durable: l.Durable, Global: l.Global, Name: l.Name}
		if c := l.Calendar; !c.IsZero() {
			ld.Unit, ld.Anchor = string(c.Unit), c.Anchor()
			if c.Location != nil {
				ld.TimeZone = c.Location.String()
			}
		}
		d.Limits = append(d.Limits, ld)
	}
	return json.Marshal(d)
}

// UnmarshalJSON decodes what MarshalJSON encoded.
func (o *Override) UnmarshalJSON(b []byte) error {
	var d overrideDoc
	if err := json.Unmarshal(b, &d); err != nil {
		return err
	}
	out := Override{Domain: d.Domain, Plan: d.Plan}
	for _, e := range d.Entries {
		out.Entries = append(out.Entries, config.Entry(e))
	}
	for i, l := range d.Limits {
		p, err := time.ParseDuration(l.Period)
		if err != nil {
			return fmt.Errorf("limits[%d].period: %w", i, err)
		}
		lim := floodgate.Limit{Algorithm: floodgate.Algorithm(l.Algorithm), Limit: l.Limit, Period: p, Burst: l.Burst,
			Window: floodgate.Window(l.Window), CountRejected: l.CountRejected, LocalBudget: l.LocalBudget, Durable: l.Durable, Global: l.Global, Name: l.Name}
		if l.Unit != "" {
			if lim.Calendar, err = floodgate.ParseCalendar(l.Unit, l.TimeZone, l.Anchor); err != nil {
				return fmt.Errorf("limits[%d]: %w", i, err)
			}
		}
		out.Limits = append(out.Limits, lim)
	}
	*o = out
	return nil
}

// limitsOf is the limits of the descriptor whose store key is key, of
// rule: its override's, if one is in force, else the rule's.
func (s *Server) limitsOf(domain string, rule *config.Rule, key string) []floodgate.Limit {
	if set := s.overrides.Load(); set != nil {
		if o := set.byKey[key]; o != nil {
			if o.Plan == "" {
				return o.Limits
			}
			if pl := s.cfg.Load().Domain(domain).Plan(o.Plan); pl != nil {
				return pl.Limits
			}
		}
	}
	if len(rule.Limits) == 0 {
		return []floodgate.Limit{rule.Limit}
	}
	return rule.Limits
}
